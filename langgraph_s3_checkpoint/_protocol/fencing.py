"""How a ``put`` commits, decided from what travels with the put: its parent, its ``source``, and what its own run
(or read chain) read and committed before it, against the head as it is in the bucket. What a saver keeps between
calls only saves requests, never changes that decision.

Why not just the parent. One process serves several runs of a thread while a UI reads its history. A run that read
checkpoint P as the thread's latest and then puts a child of P *continues* the thread: if anyone moved the head
meanwhile it must lose, or the thread forks silently and the latest state drops the other run's step. A run that
asked for P by id (``Command`` addressed at an older checkpoint, a replay) *forks* from P and must never lose. The
two puts look alike (same parent, often the same ``source``); what tells them apart is how *that run* read P.

Whose reads. Only the run's own, carried by something that travels with the run's calls and with nothing else:

* a LangGraph run: the ``Runtime`` object its loop passes in ``config["configurable"]["__pregel_runtime"]`` with
  every ``get_tuple``, ``list``, ``put`` and ``put_writes`` it makes (one per ``stream``/``invoke``; a subgraph's
  loop has its own). :class:`RunReads` keeps, per run and namespace, its first read and then its own commits.
  ``get_state``, ``get_state_history`` and ``update_state`` carry no runtime, and a node calling ``get_state``
  carries its task's copy of it (another object): none of them is the run.
* anything else (``update_state``, a direct call): the checkpoint id it puts on, when it is one this saver returned.
  ``get_tuple`` and ``put`` return their id as a :class:`ReadId` (a ``str`` equal to the plain id) holding a
  :class:`ReadChain`: how it was read, then the commits made on it. ``update_state`` puts on the config it read, so
  its read travels with its put; a direct caller gets the same by passing on the configs it was returned.

Rejected (each was tried): reads recorded per call chain in a :class:`contextvars.ContextVar` (a stream consumer's
loop body runs in the generator's context, which LangGraph copies for the run's puts, and a pool worker reuses one
context for every request, so a UI's read by id turned a straggler's step into a silent fork); marking fork points
process-wide on every read by id (any reader could exempt a straggler); fencing on the head the process last saw (a
fork from a checkpoint the process had seen as the head raised); tagging the returned config with an extra key
(LangGraph copies ``saved.config`` into ``get_state().config``, which users and LangGraph's tests compare: a
:class:`ReadId` compares equal to the plain id). Nothing that travels says "this read was by a stream consumer", so
identity, not intent, is what the saver can know.

The decision, as data (``tests/test_fencing_table.py`` and ``tests/test_commit_table.py`` walk every row;
docs/safety.md shows the tables):

1. :data:`FENCING_TABLE`: (has a parent, how the run read it, the put's source) -> :class:`Rule`.
2. :data:`SETTLE_TABLE` through :func:`settle`: a rule and the head as it is now -> :class:`Step` (what to send, or
   why the put is refused).
3. :data:`COMMIT_TABLE`: what one commit attempt meets (the head it stands on; after a refused head PUT, what
   :func:`settle` made of the head then) -> :data:`CommitOutcome` (move the head, commit detached, done, withdraw
   the record, join again).
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import TYPE_CHECKING, Any

from .lru import LeastRecentlyUsed

if TYPE_CHECKING:
    from .codec import Appended

ABSENT = "<absent>"
"""The "checkpoint id" of a namespace without a head: what a parentless put continues."""
SUPERSEDED = "<superseded>"
"""ETag of a head this saver committed that another writer has already continued: a put fenced on it loses."""


def written_here(modified: datetime | None, served: datetime | None, now: datetime) -> datetime | None:
    """When an object read from the server was written, on this machine's clock (``now``): its age by the server's
    own clock (the reply's ``Date`` minus its ``LastModified``) before ``now``.

    Why not ``LastModified`` itself: lifecycle renewal (``Committing._split_values``) compares the time a value
    was written with this machine's clock, and the lifecycle rule expires objects by the server's. A clock behind
    the server's by more than half the TTL would otherwise never find a value old enough to rewrite, and the rule
    would expire it under a live thread. ``None`` (unknown: rewritten at the next put) without both dates.
    """
    if modified is None or served is None:
        return None
    return now - max(served - modified, timedelta(0))


# -- the decision ----------------------------------------------------------------------------------------------
class ParentRead(Enum):
    """How the run (or read chain) of a ``put`` knows its parent: what travels with the put (:class:`RunReads`,
    :class:`ReadChain`)."""

    LATEST = "read as the latest"
    """``get_tuple`` without a checkpoint id (or by id while it was the head): the caller continues the thread."""
    BY_ID = "read by id"
    """``get_tuple`` by id while it was not the head, or the one checkpoint ``list(before=..., limit=1)``
    returned (LangGraph's replay lookup): the caller forks from it."""
    OWN = "committed by the same run"
    """The run's (or chain's) own last commit in the namespace: its next step continues it."""
    UNREAD = "not read by this run"


class Rule(Enum):
    """How a put commits (:data:`FENCING_TABLE`)."""

    CREATE = "create"
    """Commit only if the namespace still has no head (``If-None-Match: *``)."""
    CONTINUE = "continue"
    """Commit only if the head still holds the parent as the caller read it (``If-Match`` that ETag); otherwise
    refused, also when the namespace has no head any more (the parent was rolled back or deleted)."""
    CONTINUE_UNREAD = "continue, or create"
    """A step on a parent nothing that travels with the put says it read (a direct call, or a run that forgot):
    commit only if the head holds the parent; refused if the thread moved past it or the parent is not committed;
    on a namespace without a head, created (InMemorySaver stores a put whose parent it never saw)."""
    CONTINUE_OWN = "continue its own"
    """A run's step on its own last commit: commit only if the head still holds it; refused if the thread moved past
    it, or if the namespace has no head any more (``delete_thread``, ``expire_threads``: a deletion is final). A
    detached commit of its own (a fork older than the head it met) goes on as a branch."""
    CONTINUE_OR_FORK = "continue, else fork"
    """Commit on the parent if the head still holds it; otherwise fork."""
    FORK = "fork"
    """Commit on top of whatever the head is now (or create the namespace): never refused for a moved head."""


class Source(Enum):
    """What a put's ``metadata["source"]`` says of its intent."""

    STEP = "a run's step"
    """``input`` or ``loop``: the checkpoints a run makes as it goes."""
    FORK = "a fork"
    """``fork``: a replay's first checkpoint, or an ``update_state(as_node="__copy__")``, which puts on top of the
    parent of the checkpoint it read: a new branch by design."""
    UPDATE = "a deliberate write"
    """``update`` (``update_state``) or none (a direct call): InMemorySaver and PostgresSaver store it whatever the
    thread did meanwhile."""


def source_of(source: Any) -> Source:
    if source in ("input", "loop"):
        return Source.STEP
    return Source.FORK if source == "fork" else Source.UPDATE


FENCING_TABLE: Mapping[tuple[bool, ParentRead, Source], Rule] = {
    # (has a parent, how the caller read it, source): rule
    (False, ParentRead.LATEST, Source.STEP): Rule.CREATE,  # it found the namespace empty: a second creator loses
    (False, ParentRead.LATEST, Source.UPDATE): Rule.CREATE,
    (False, ParentRead.LATEST, Source.FORK): Rule.FORK,  # a __copy__ of a thread's first checkpoint
    (False, ParentRead.BY_ID, Source.STEP): Rule.FORK,  # a subgraph starting over in a replay: nothing below the point
    (False, ParentRead.BY_ID, Source.UPDATE): Rule.FORK,
    (False, ParentRead.BY_ID, Source.FORK): Rule.FORK,
    (False, ParentRead.UNREAD, Source.STEP): Rule.FORK,  # stored as InMemorySaver stores it: a new root
    (False, ParentRead.UNREAD, Source.UPDATE): Rule.FORK,
    (False, ParentRead.UNREAD, Source.FORK): Rule.FORK,
    (True, ParentRead.LATEST, Source.STEP): Rule.CONTINUE,  # a run's step: a straggler loses
    (True, ParentRead.LATEST, Source.UPDATE): Rule.CONTINUE,  # update_state on the latest: a second update loses
    (True, ParentRead.LATEST, Source.FORK): Rule.FORK,
    (True, ParentRead.BY_ID, Source.STEP): Rule.FORK,  # Command(resume=...) addressed at an older checkpoint
    (True, ParentRead.BY_ID, Source.UPDATE): Rule.FORK,  # update_state on an older checkpoint
    (True, ParentRead.BY_ID, Source.FORK): Rule.FORK,  # a replay from an older checkpoint
    (True, ParentRead.OWN, Source.STEP): Rule.CONTINUE_OWN,  # a run's next step: a straggler loses, and after a
    (True, ParentRead.OWN, Source.UPDATE): Rule.CONTINUE_OWN,  # delete the thread stays deleted
    (True, ParentRead.OWN, Source.FORK): Rule.FORK,
    (True, ParentRead.UNREAD, Source.STEP): Rule.CONTINUE_UNREAD,  # a direct step: refused if the thread moved past
    (True, ParentRead.UNREAD, Source.UPDATE): Rule.CONTINUE_OR_FORK,  # a direct put: InMemorySaver stores it
    (True, ParentRead.UNREAD, Source.FORK): Rule.FORK,  # __copy__ puts on the parent of what it read
}
"""Every (has a parent, how it was read, source) that can occur: a put with no parent cannot be a run's own commit."""


def rule_for(parent_id: str | None, read: ParentRead, source: Any) -> Rule:
    if parent_id is None and read is ParentRead.OWN:
        read = ParentRead.UNREAD  # cannot happen (a commit has an id): a parentless put read nothing
    return FENCING_TABLE[(parent_id is not None, read, source_of(source))]


class HeadNow(Enum):
    """What the namespace's head holds when a put looks, relative to the put (:func:`settle`)."""

    NONE = "no head"
    PARENT = "the parent"
    THIS = "this checkpoint, or a descendant of it"
    """An earlier attempt of this very put committed (its answer was lost)."""
    OTHER = "another checkpoint"
    """The thread moved past the parent, or the parent is not committed at all (:func:`settle` tells which)."""
    OTHER_BESIDE_A_DETACHED_PARENT = "another checkpoint, and the parent is a fork committed beside it"
    """The parent is a detached record: a fork whose id was older than the head it met, committed without moving
    the head (``committing._commit``). Nothing has continued it, so the thread did not move past it: a run's step on
    top of its own fork (a replay whose fork lost the race for the head to a concurrent step) is the branch going
    on, as on InMemorySaver, not a straggler. Told apart from :attr:`OTHER` only where a rule would refuse."""
    NAMES_THIS_RUN_ROLLED_BACK = "a head that names the put's run as rolled back"
    """``delete_for_runs`` rewrote the head while the run could still move it (``thread_edits._fence_in_flight``): a
    step of that run must not become the thread's state, whatever the rule and whatever checkpoint the head holds."""


class Refusal(Enum):
    """Why a put is refused: each is an error that says what happened (``committing.refusal_error``)."""

    MOVED = "another writer moved the head past the parent"
    CREATED = "another writer created the namespace"
    PARENT_NOT_COMMITTED = "the parent is not a committed checkpoint"
    RUN_ROLLED_BACK = "the put's run was rolled back while it ran"


@dataclass(frozen=True)
class Step:
    """What a put does next: commit on the head as it is (``If-None-Match`` when there is none, ``If-Match``
    otherwise), report success (``done``), or raise (``refused``)."""

    commit: bool = False
    on_parent: bool = False
    """The commit continues the parent (the record's ``previous_head`` is the parent)."""
    done: bool = False
    refused: Refusal | None = None


COMMIT_ON_PARENT = Step(commit=True, on_parent=True)
ON_HEAD = Step(commit=True)
DONE = Step(done=True)

SETTLE_TABLE: Mapping[tuple[Rule, HeadNow], Step] = {
    (Rule.CREATE, HeadNow.NONE): ON_HEAD,
    (Rule.CREATE, HeadNow.THIS): DONE,
    (Rule.CREATE, HeadNow.OTHER): Step(refused=Refusal.CREATED),
    (Rule.CONTINUE, HeadNow.PARENT): COMMIT_ON_PARENT,
    (Rule.CONTINUE, HeadNow.THIS): DONE,
    (Rule.CONTINUE, HeadNow.OTHER): Step(refused=Refusal.MOVED),  # or PARENT_NOT_COMMITTED: see settle
    (Rule.CONTINUE, HeadNow.NONE): Step(refused=Refusal.PARENT_NOT_COMMITTED),
    # a detached record is never the head, so no caller read it as the latest: refused as any moved head would be
    (Rule.CONTINUE, HeadNow.OTHER_BESIDE_A_DETACHED_PARENT): Step(refused=Refusal.MOVED),
    (Rule.CONTINUE_UNREAD, HeadNow.PARENT): COMMIT_ON_PARENT,
    (Rule.CONTINUE_UNREAD, HeadNow.THIS): DONE,
    (Rule.CONTINUE_UNREAD, HeadNow.OTHER): Step(refused=Refusal.MOVED),  # or PARENT_NOT_COMMITTED: see settle
    (Rule.CONTINUE_UNREAD, HeadNow.NONE): ON_HEAD,
    (Rule.CONTINUE_UNREAD, HeadNow.OTHER_BESIDE_A_DETACHED_PARENT): ON_HEAD,  # a branch's next step: it forks on
    (Rule.CONTINUE_OWN, HeadNow.PARENT): COMMIT_ON_PARENT,
    (Rule.CONTINUE_OWN, HeadNow.THIS): DONE,
    (Rule.CONTINUE_OWN, HeadNow.OTHER): Step(refused=Refusal.MOVED),  # or PARENT_NOT_COMMITTED: see settle
    (Rule.CONTINUE_OWN, HeadNow.NONE): Step(refused=Refusal.PARENT_NOT_COMMITTED),  # deleted under the run
    (Rule.CONTINUE_OWN, HeadNow.OTHER_BESIDE_A_DETACHED_PARENT): ON_HEAD,  # its own fork, older than the head: on
    (Rule.CONTINUE_OR_FORK, HeadNow.PARENT): COMMIT_ON_PARENT,
    (Rule.CONTINUE_OR_FORK, HeadNow.THIS): DONE,
    (Rule.CONTINUE_OR_FORK, HeadNow.OTHER): ON_HEAD,
    (Rule.CONTINUE_OR_FORK, HeadNow.NONE): ON_HEAD,
    (Rule.CONTINUE_OR_FORK, HeadNow.OTHER_BESIDE_A_DETACHED_PARENT): ON_HEAD,
    (Rule.FORK, HeadNow.PARENT): ON_HEAD,
    (Rule.FORK, HeadNow.THIS): DONE,
    (Rule.FORK, HeadNow.OTHER): ON_HEAD,
    (Rule.FORK, HeadNow.NONE): ON_HEAD,
    (Rule.FORK, HeadNow.OTHER_BESIDE_A_DETACHED_PARENT): ON_HEAD,
    # a step of a run rolled back while it ran, under any rule
    (Rule.CREATE, HeadNow.NAMES_THIS_RUN_ROLLED_BACK): Step(refused=Refusal.RUN_ROLLED_BACK),
    (Rule.CONTINUE, HeadNow.NAMES_THIS_RUN_ROLLED_BACK): Step(refused=Refusal.RUN_ROLLED_BACK),
    (Rule.CONTINUE_UNREAD, HeadNow.NAMES_THIS_RUN_ROLLED_BACK): Step(refused=Refusal.RUN_ROLLED_BACK),
    (Rule.CONTINUE_OWN, HeadNow.NAMES_THIS_RUN_ROLLED_BACK): Step(refused=Refusal.RUN_ROLLED_BACK),
    (Rule.CONTINUE_OR_FORK, HeadNow.NAMES_THIS_RUN_ROLLED_BACK): Step(refused=Refusal.RUN_ROLLED_BACK),
    (Rule.FORK, HeadNow.NAMES_THIS_RUN_ROLLED_BACK): Step(refused=Refusal.RUN_ROLLED_BACK),
}
"""(rule, what the head holds now) -> what the put does. A ``ON_HEAD`` on a head that holds another checkpoint commits
on top of it (the record names that head as ``previous_head``), or, for an id older than the head's, as a detached
record (``committing._commit``): "latest" is the newest id for every LangGraph saver."""


def settle(rule: Rule, head: HeadNow, parent_committed: bool | None = None) -> Step:
    """What a put under ``rule`` does, given what the head holds now. ``parent_committed`` tells a moved head from
    a parent that never committed (rolled back, deleted, never written) when ``rule`` refuses: ``None`` if not
    looked up (``committing`` looks it up only to word the refusal)."""
    step = SETTLE_TABLE[(rule, head)]
    if step.refused is Refusal.MOVED and parent_committed is False:
        return Step(refused=Refusal.PARENT_NOT_COMMITTED)
    return step


# -- one commit attempt -----------------------------------------------------------------------------------------
class Meets(Enum):
    """What one commit attempt meets (``committing._commit``): the head it stands on when it is built (no I/O), and,
    once its head PUT was refused, what :func:`settle` made of the head read then."""

    HEAD_HOLDS_PARENT = "the head holds the parent, as the put knows it"
    NO_HEAD = "no head"
    OLDER_HEAD = "a head holding a checkpoint older than this one"
    NEWER_HEAD = "a head holding a checkpoint newer than this one"
    NEWER_HEAD_IS_PARENT = "a head holding the parent, whose id is newer than this checkpoint's"
    HEAD_IS_THIS = "a head holding this checkpoint"
    """This very put committed before (a retry through a new saver)."""
    # after the head PUT was refused, the head read again:
    ANSWER_LOST = "the head holds this checkpoint"
    """An earlier attempt landed and only its answer was lost (:func:`settle` said :data:`DONE`)."""
    ANSWER_LOST_AND_CONTINUED = "the head holds a checkpoint on top of this one"
    """As above, and another writer has continued it already (:data:`DONE`)."""
    RULE_REFUSES = "the put's rule refuses it on the head now"
    RULE_COMMITS_ON_HEAD = "the put's rule commits on the head now (:data:`ON_HEAD`)"
    ATTEMPTS_SPENT = "the head moved under each of the put's attempts"


class Swap(Enum):
    """Which head a commit's head PUT replaces, and so which head its record names (``previous_head``)."""

    ON_PARENT = "the head holding the parent (If-Match its ETag)"
    CREATE = "none (If-None-Match: *)"
    ON_HEAD = "the head as read (If-Match its ETag)"
    """Its record is offered create-only with the commit: the head may be a head-only commit (its record PUT was
    lost), whose record would otherwise be lost from history once the head moves on."""


@dataclass(frozen=True)
class MoveHead:
    """Send the record and the head together: the conditional head PUT is the commit, and where a second writer
    loses."""

    swap: Swap


@dataclass(frozen=True)
class CommitDetached:
    """Commit by the record alone, marked ``detached``, leaving the head as it is: an id older than the head's does
    not move it, as "latest" is the newest id for every LangGraph saver."""


@dataclass(frozen=True)
class Committed:
    """This put is committed already: report success, sending nothing more."""

    superseded: bool = False
    """Another writer continued it already: the saver remembers its head as :data:`SUPERSEDED`."""


@dataclass(frozen=True)
class ClockBehindHead:
    """Raise :class:`~.errors.ClockSkewError`, sending nothing: continuing the head with an older id would file the
    checkpoint where no reader looks for the latest."""


@dataclass(frozen=True)
class Withdraw:
    """Delete the record (it never committed, and never can) and raise: the refusal's error, or a conflict once the
    attempts are spent."""


@dataclass(frozen=True)
class AgainOnHead:
    """Build the next attempt on the head as read now (first offering, create-only, the large values the record
    relied on the parent's head for: a prune may have removed them since the thread moved on)."""


CommitOutcome = MoveHead | CommitDetached | Committed | ClockBehindHead | Withdraw | AgainOnHead

COMMIT_TABLE: Mapping[Meets, CommitOutcome] = {
    # building an attempt, on the head it stands on
    Meets.HEAD_HOLDS_PARENT: MoveHead(Swap.ON_PARENT),
    Meets.NO_HEAD: MoveHead(Swap.CREATE),
    Meets.OLDER_HEAD: MoveHead(Swap.ON_HEAD),
    Meets.NEWER_HEAD: CommitDetached(),  # a fork that lost a race with a newer checkpoint
    Meets.NEWER_HEAD_IS_PARENT: ClockBehindHead(),
    Meets.HEAD_IS_THIS: Committed(),
    # after a refused head PUT, on what settle made of the head read then
    Meets.ANSWER_LOST: Committed(),
    Meets.ANSWER_LOST_AND_CONTINUED: Committed(superseded=True),
    Meets.RULE_REFUSES: Withdraw(),
    Meets.RULE_COMMITS_ON_HEAD: AgainOnHead(),
    Meets.ATTEMPTS_SPENT: Withdraw(),
}
"""What one commit attempt meets -> what the put does (``committing._commit``; ``tests/test_commit_table.py``)."""


def attempt_meets(on_parent: bool, head_id: str | None, checkpoint_id: str, parent_id: str | None) -> Meets:
    """What an attempt stands on: the head that holds the parent (``on_parent``), or the head as read (its
    checkpoint id; ``None``: there is none)."""
    if on_parent:
        return Meets.HEAD_HOLDS_PARENT
    if head_id is None:
        return Meets.NO_HEAD
    if head_id == checkpoint_id:
        return Meets.HEAD_IS_THIS
    if checkpoint_id < head_id:
        return Meets.NEWER_HEAD_IS_PARENT if head_id == parent_id else Meets.NEWER_HEAD
    return Meets.OLDER_HEAD


def refused_write_meets(step: Step, head_is_this: bool) -> Meets:
    """What a refused head PUT meets: :func:`settle`'s step on the head read then (``head_is_this``: it holds this
    checkpoint)."""
    if step.done:
        return Meets.ANSWER_LOST if head_is_this else Meets.ANSWER_LOST_AND_CONTINUED
    if step.refused is not None:
        return Meets.RULE_REFUSES
    return Meets.RULE_COMMITS_ON_HEAD


# -- what travels with a run -----------------------------------------------------------------------------
RUNTIME_KEY = "__pregel_runtime"
"""Where LangGraph puts the run's ``Runtime`` in the config of every call its loop makes to the checkpointer."""


def run_of_config(config: Mapping[str, Any] | None) -> object | None:
    """The run a call belongs to: the ``Runtime`` object LangGraph's loop passes with every ``get_tuple``, ``list``,
    ``put`` and ``put_writes`` it makes for one run (``stream``/``invoke`` makes a new one per run, and a subgraph's
    loop its own), or ``None`` for a call made outside a run (``get_state``, ``update_state``, a direct call)."""
    configurable = (config or {}).get("configurable") or {}
    return configurable.get(RUNTIME_KEY)


@dataclass(frozen=True)
class Seen:
    """One namespace as a run (or a read chain) knows it: how it read a checkpoint first, or which checkpoint it
    committed last, with the head's ETag then."""

    read: ParentRead
    checkpoint_id: str
    """The checkpoint id, or :data:`ABSENT` (read as the latest: the namespace had no head; read by id: a replay
    lookup found nothing below its point)."""
    etag: str | None = None

    def of(self, parent_id: str | None) -> tuple[ParentRead, str | None]:
        """How this knowledge makes a put on ``parent_id`` read its parent."""
        if self.checkpoint_id == (parent_id or ABSENT):
            return self.read, self.etag
        return ParentRead.UNREAD, None


class RunReads:
    """What each run read first, and committed last, in each namespace: the input of :data:`FENCING_TABLE` for the
    puts of LangGraph runs.

    Keyed by the run's ``Runtime`` (:func:`run_of_config`): it travels with every call of the run's loop and with
    nothing else. A stream consumer reading between the run's steps, a UI's ``get_state``, a pool worker's next
    request or a node of the run calling ``get_state`` itself (its task's config carries a copy of the runtime,
    another object) are other keys, so no read they make can change how the run's puts are fenced.

    Only the *first* read of a namespace counts: LangGraph's loop reads its checkpoint once, when it starts (the
    latest, the one addressed by id, or a replay's lookup below the replay point); later reads with the run's
    runtime (the check that an addressed checkpoint is superseded, which reads the latest) do not change what the
    run set out from. After that the run's own commits are its knowledge of the namespace.

    The entry holds the runtime itself, so that no other object can take its ``id`` while the entry lives (a
    ``Runtime`` has ``__slots__`` and no weak references). Bounded: the :data:`RUNS` runs that called last, each
    with the :data:`NAMESPACES_PER_RUN` namespaces it used last. A run forgotten this way puts as one that read
    nothing (a step is still refused if the thread moved past its parent; see :data:`FENCING_TABLE`).
    """

    RUNS = 1024
    NAMESPACES_PER_RUN = 64

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: OrderedDict[int, tuple[object, dict[tuple[str, str], Seen]]] = OrderedDict()

    def _namespaces(self, run: object) -> dict[tuple[str, str], Seen]:
        entry = self._runs.get(id(run))
        if entry is None or entry[0] is not run:
            entry = (run, {})
            self._runs[id(run)] = entry
            while len(self._runs) > self.RUNS:
                self._runs.popitem(last=False)
        self._runs.move_to_end(id(run))
        return entry[1]

    def _set(self, namespaces: dict[tuple[str, str], Seen], thread_id: str, ns: str, seen: Seen) -> None:
        namespaces.pop((thread_id, ns), None)
        namespaces[(thread_id, ns)] = seen
        while len(namespaces) > self.NAMESPACES_PER_RUN:
            del namespaces[next(iter(namespaces))]

    def read(self, run: object, thread_id: str, ns: str, seen: Seen) -> None:
        """The run read the namespace: recorded if it is the run's first read there."""
        with self._lock:
            namespaces = self._namespaces(run)
            if (thread_id, ns) not in namespaces:
                self._set(namespaces, thread_id, ns, seen)

    def committed(self, run: object, thread_id: str, ns: str, checkpoint_id: str, etag: str | None) -> None:
        """The run committed ``checkpoint_id`` (``etag``: the head's ETag; ``None`` for a detached commit)."""
        with self._lock:
            self._set(self._namespaces(run), thread_id, ns, Seen(ParentRead.OWN, checkpoint_id, etag))

    def of(self, run: object, thread_id: str, ns: str, parent_id: str | None) -> tuple[ParentRead, str | None]:
        """How the run read ``parent_id`` (``None``: a namespace without a head), and the ETag it knows it by."""
        with self._lock:
            entry = self._runs.get(id(run))
            seen = entry[1].get((thread_id, ns)) if entry is not None and entry[0] is run else None
        return (ParentRead.UNREAD, None) if seen is None else seen.of(parent_id)


class ReadChain:
    """What a caller outside a run knows of one namespace through the ids this saver returned it: the input of
    :data:`FENCING_TABLE` for ``update_state`` and direct calls.

    ``get_tuple`` and ``put`` return their checkpoint id as a :class:`ReadId` holding a chain whose newest knowledge
    is that call's: how it read the checkpoint (the latest, with the head's ETag, or by id), or that it committed it.
    A ``put`` whose parent id is such a :class:`ReadId` is fenced by the chain, and a ``get_tuple`` or ``put`` given
    one adds its own read or commit to the same chain. So what travels is the value the caller passes on
    (``update_state`` puts on the config it just read; a direct caller puts on the config ``get_tuple`` or ``put``
    returned it), never what else was read in the same thread or task. A LangGraph run never consults a chain (its
    puts are fenced by :class:`RunReads`), so a stream consumer or a UI reading with a config the run returned cannot
    change how the run's puts are fenced.
    """

    def __init__(self, recall: object, thread_id: str, ns: str, seen: Seen) -> None:
        self._recall = recall
        self._lock = threading.Lock()
        self._where = (thread_id, ns)
        self._seen = seen

    def belongs_to(self, recall: object, thread_id: str, ns: str) -> bool:
        """Whether this chain speaks of this saver's namespace (a chain is about one namespace of one saver)."""
        return self._recall is recall and self._where == (thread_id, ns)

    def of(self, parent_id: str | None) -> tuple[ParentRead, str | None]:
        with self._lock:
            return self._seen.of(parent_id)

    def note(self, seen: Seen) -> None:
        """The newest read or commit made with an id of this chain."""
        with self._lock:
            self._seen = seen


class ReadId(str):
    """A checkpoint id as this saver returned it: equal to the plain id in every way (``==``, hash, JSON, msgpack,
    ``repr``), and carrying the :class:`ReadChain` it was returned with. Copies keep the chain; a pickle holds the
    plain id (a chain lives in one process)."""

    chain: ReadChain

    def __new__(cls, checkpoint_id: str, chain: ReadChain) -> ReadId:
        made = super().__new__(cls, checkpoint_id)
        made.chain = chain
        return made

    def __reduce__(self) -> tuple[Any, ...]:
        return (str, (str(self),))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str) and type(other) is not str and not isinstance(other, ReadId):
            # Another str subclass with an equality of its own (a test's "any string") decides, as it would against
            # a plain str, which gives a subclass's reflected comparison the first word.
            return NotImplemented
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = str.__hash__

    def __copy__(self) -> ReadId:
        return self

    def __deepcopy__(self, memo: Any) -> ReadId:
        return self


def chain_of(config: Mapping[str, Any] | None, recall: object, thread_id: str, ns: str) -> ReadChain | None:
    """The read chain the config's checkpoint id carries for this saver's namespace, if any."""
    checkpoint_id = ((config or {}).get("configurable") or {}).get("checkpoint_id")
    if isinstance(checkpoint_id, ReadId) and checkpoint_id.chain.belongs_to(recall, thread_id, ns):
        return checkpoint_id.chain
    return None


@dataclass
class Travelling:
    """What travels with one put and says how it knows its parent: its run, else the read chain of its parent's id."""

    run: object | None
    chain: ReadChain | None

    @classmethod
    def with_put(cls, config: Mapping[str, Any], recall: Recall, thread_id: str, ns: str) -> Travelling:
        run = run_of_config(config)
        return cls(run, None if run is not None else chain_of(config, recall, thread_id, ns))

    def parent_read(
        self, recall: Recall, thread_id: str, ns: str, parent_id: str | None
    ) -> tuple[ParentRead, str | None]:
        """How the put's run (or chain) read ``parent_id``, and the head's ETag it knows it by."""
        if self.run is not None:
            return recall.runs.of(self.run, thread_id, ns, parent_id)
        return (ParentRead.UNREAD, None) if self.chain is None else self.chain.of(parent_id)

    def committed(self, recall: Recall, thread_id: str, ns: str, checkpoint_id: str, etag: str | None) -> ReadId:
        """Record the put's commit as its run's (or chain's) newest knowledge of the namespace: the next step
        continues it. The id to return (``etag``: the head's, ``None`` for a detached or superseded commit)."""
        if self.run is not None:
            recall.runs.committed(self.run, thread_id, ns, checkpoint_id, etag)
        own = Seen(ParentRead.OWN, checkpoint_id, etag)
        if self.chain is None:
            self.chain = ReadChain(recall, thread_id, ns, own)
        else:
            self.chain.note(own)
        return ReadId(checkpoint_id, self.chain)


# -- what the saver keeps between calls ---------------------------------------------------------------------
@dataclass(frozen=True)
class HeadSeen:
    """A head this saver read or committed: enough to continue it without reading anything."""

    checkpoint_id: str
    etag: str
    blobs: Mapping[str, str]
    """Large values (channel -> version) the head's record references: they exist while it is the head."""
    run_id: str | None
    """The run that wrote it: a put of the same run needs no new run-index entry."""
    versions: Mapping[str, str] = field(default_factory=dict)
    """The head's channel versions."""
    inline: Mapping[str, list[Any]] | None = None
    """The head's inline values as stored, for a put to carry over the values whose version did not move;
    ``None`` when they were too large to remember (:data:`REMEMBERED_VALUES_BYTES`)."""
    rolled_back: tuple[str, ...] = ()
    """The runs the head names as rolled back while it was the head: a put of one of them is refused
    (:attr:`HeadNow.NAMES_THIS_RUN_ROLLED_BACK`), also when it continues this head without reading it."""
    deleted: Mapping[str, str | None] = field(default_factory=dict)
    """The deleted links the head names (``chain.py``): a record committed on top of it carries them."""
    appended: Mapping[str, Appended] = field(default_factory=dict)
    """The head's lists stored as appended to a large value (:class:`~.codec.Appended`): a put extends them."""

    def size(self) -> int:
        """Bytes this entry keeps alive, roughly: its values, ids and the containers' overhead."""
        values = sum(len(typed[1]) for typed in (self.inline or {}).values() if _bytes_of(typed) is not None)
        values += sum(entry.tail_bytes() + 100 * len(entry.tail) for entry in self.appended.values())
        strings = sum(len(k) + len(v) for k, v in (*self.blobs.items(), *self.versions.items()))
        strings += sum(len(k) + len(v or "") for k, v in self.deleted.items())
        entries = len(self.blobs) + len(self.versions) + len(self.inline or {}) + len(self.deleted)
        return ENTRY_OVERHEAD + values + strings + 200 * entries


def _bytes_of(typed: list[Any]) -> bytes | None:
    return typed[1] if len(typed) > 1 and isinstance(typed[1], bytes) else None


ENTRY_OVERHEAD = 600
"""Bytes of one remembered head besides its values (the entry, its key tuple, ids and ETag), measured with
``sys.getsizeof`` on CPython 3.11 and rounded up."""
REMEMBERED_VALUES_BYTES = 64 * 1024
"""The most bytes of inline values remembered for one head (:func:`head_seen`)."""
DEFAULT_MEMORY_BYTES = 8 * 1024 * 1024
"""What a saver keeps of the heads it saw, at most (the ``memory_bytes`` option)."""


def head_seen(
    checkpoint_id: str,
    etag: str,
    blobs: Mapping[str, str],
    run_id: str | None,
    versions: Mapping[str, Any],
    inline: Mapping[str, list[Any]],
    rolled_back: tuple[str, ...] = (),
    deleted: Mapping[str, str | None] | None = None,
    appended: Mapping[str, Appended] | None = None,
) -> HeadSeen:
    """What to remember of a head just written or read."""
    size = sum(len(b) for typed in inline.values() if (b := _bytes_of(typed)) is not None)
    return HeadSeen(
        checkpoint_id,
        etag,
        dict(blobs),
        run_id,
        {channel: str(version) for channel, version in versions.items()},
        dict(inline) if size <= REMEMBERED_VALUES_BYTES else None,
        rolled_back,
        dict(deleted or {}),
        dict(appended or {}),
    )


class Recall:
    """What a saver keeps between calls, in one byte budget, least recently used first out: the head it last saw
    in each namespace (:class:`HeadSeen`: its ETag, so a put on it needs no GET, and its values, so a put carries
    over the ones whose version did not move), and, with a lifecycle TTL, when it last wrote large values.

    None of it decides how a put commits (that is :data:`FENCING_TABLE` over what travels with the put: its run's
    :class:`RunReads`, or the :class:`ReadChain` of its parent's id): a remembered
    head only spares the GET that would find the same head, and a put whose ``If-Match`` on a remembered ETag is
    refused reads the head and decides again. So forgetting costs requests, never correctness.
    """

    def __init__(self, max_bytes: int = DEFAULT_MEMORY_BYTES, *, track_blob_ages: bool = False) -> None:
        self._lock = threading.Lock()
        self.track_blob_ages = track_blob_ages
        self.runs = RunReads()
        self._kept: LeastRecentlyUsed[tuple[str, str, str], Any] = LeastRecentlyUsed(max_bytes)
        """(table, thread, ns) -> value: one LRU order for every table."""

    @property
    def max_bytes(self) -> int:
        return self._kept.max_bytes

    @property
    def retained_bytes(self) -> int:
        """Bytes the recall accounts for now (at most ``max_bytes``)."""
        return self._kept.retained_bytes

    def saw_head(self, thread_id: str, ns: str, seen: HeadSeen) -> None:
        """A head this saver read or committed."""
        with self._lock:
            self._kept.keep(("head", thread_id, ns), seen, seen.size())

    def head(self, thread_id: str, ns: str, checkpoint_id: str) -> HeadSeen | None:
        """The remembered head of the namespace, if it held ``checkpoint_id``."""
        with self._lock:
            seen: HeadSeen | None = self._kept.get(("head", thread_id, ns))
        return seen if seen is not None and seen.checkpoint_id == checkpoint_id else None

    def sent_index_entry(self, thread_id: str, ns: str, run_id: str, checkpoint_id: str) -> None:
        """A put is about to send the run's entry in the namespace, naming ``checkpoint_id``."""
        with self._lock:
            self._kept.keep(("run entry", thread_id, ns), (run_id, checkpoint_id), ENTRY_OVERHEAD)

    def claim_index_entry(self, thread_id: str, ns: str, run_id: str, checkpoint_id: str) -> bool:
        """Whether ``put_writes`` of the run on ``checkpoint_id`` is to send the run's entry in the namespace: not when
        the saver knows an entry of the run there names this checkpoint or an older one (it sent one, or the head it
        last saw there is the run's and not newer). When it is, it counts as sent from now on (the caller sends it
        at once: check and claim are one step, so two concurrent calls of a run send one entry). A write that a
        ``put_writes`` sends without an entry of its own while its run's put is in flight is on that put's checkpoint
        or a newer one of the run, which commits only once the entry landed (it is the put's prerequisite); one that
        lands after a rollback in another process deleted the entry is on a checkpoint the rollback deleted, or is
        the late write docs/design.md's conflict table leaves unfenced. Forgetting costs a create-only PUT."""
        with self._lock:
            seen: HeadSeen | None = self._kept.get(("head", thread_id, ns))
            sent: tuple[str, str] | None = self._kept.get(("run entry", thread_id, ns))
            for known in (sent, None if seen is None else (seen.run_id, seen.checkpoint_id)):
                if known is not None and known[0] == run_id and known[1] <= checkpoint_id:
                    return False
            self._kept.keep(("run entry", thread_id, ns), (run_id, checkpoint_id), ENTRY_OVERHEAD)
            return True

    def forget_namespace(self, thread_id: str, ns: str) -> None:
        """After a surprise (a conflict, a rollback): the next put reads the head again, and indexes its run."""
        with self._lock:
            for table in ("head", "run entry"):
                self._kept.forget((table, thread_id, ns))

    def forget_thread(self, thread_id: str) -> None:
        with self._lock:
            for key in [k for k in self._kept if k[1] == thread_id]:
                self._kept.forget(key)

    def wrote_blobs(self, thread_id: str, ns: str, refs: Mapping[str, str], when: datetime | None) -> None:
        """Remember when these (channel -> version) values were written, for lifecycle renewal (only with a TTL:
        nothing else needs their age)."""
        if when is None or not refs or not self.track_blob_ages:
            return
        with self._lock:
            key = ("blob ages", thread_id, ns)
            known: dict[tuple[str, str], datetime] = dict(self._kept.get(key) or {})
            for ref in refs.items():
                known.pop(ref, None)
                known[ref] = when  # re-inserted: the most recently referenced values are kept
            while len(known) > BLOB_AGES_PER_NAMESPACE:
                del known[next(iter(known))]
            size = ENTRY_OVERHEAD + sum(200 + len(c) + len(v) for c, v in known) + sys.getsizeof(known)
            self._kept.keep(key, known, size)

    def blob_written(self, thread_id: str, ns: str, channel: str, version: str) -> datetime | None:
        with self._lock:
            known: dict[tuple[str, str], datetime] | None = self._kept.get(("blob ages", thread_id, ns))
        return None if known is None else known.get((channel, version))


BLOB_AGES_PER_NAMESPACE = 256
"""The most large values whose write time a saver remembers per namespace (the most recently referenced)."""
