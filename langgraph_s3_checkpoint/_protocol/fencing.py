"""How a ``put`` commits: one table (:data:`FENCING_TABLE`) decides it from what the put says and how *its caller*
read the parent; what a saver keeps between calls only saves requests, never changes that decision.

Why the caller's reads, and not the process's. One process serves several runs of a thread while a UI reads its
history. A run that read checkpoint P as the thread's latest and then puts a child of P *continues* the thread:
if anyone moved the head meanwhile it must lose, or the thread forks silently and the latest state drops the
other run's step. A run that asked for P by id (a replay, ``update_state`` or ``Command`` addressed at an older
checkpoint) *forks* from P and must never lose. The two puts look alike (same parent, often the same ``source``);
what tells them apart is how the caller read P. A record of reads kept for the whole process let one caller's
read decide another caller's put: a UI paging through history, or a run's own ``get_delta_channel_history``
(which reads P by id), turned a straggling run's put into a fork. So reads are recorded per *call chain*, in a
:class:`contextvars.ContextVar` (:class:`CallerReads`): LangGraph makes a run's reads and its puts in one chain
(its puts run on a thread pool or in asyncio tasks with a copy of the run's context), and every other caller
(another run, a UI request, another thread) has a chain of its own. Reads the saver makes for itself (its
look-ups while committing, rolling back or repairing; the DeltaChannel walk; pages of history) record nothing.

The decision, as data (``tests/test_fencing_table.py`` and ``tests/test_commit_table.py`` walk every row;
docs/safety.md shows the tables):

1. :data:`FENCING_TABLE`: (has a parent, how the caller read it, does the put continue a run) -> :class:`Rule`.
2. :func:`settle`: a rule and the head as it is now -> :class:`Step` (what to send, or why the put is refused).
3. :data:`COMMIT_TABLE`: what one commit attempt meets (the head it stands on; after a refused head PUT, what
   :func:`settle` made of the head then) -> :data:`CommitOutcome` (move the head, commit detached, done, withdraw
   the record, join again).

Rejected alternatives, kept here because each was tried: marking fork points process-wide on every read by id
(any reader could exempt a straggler from the straggler rule); fencing on the head the process last saw (a fork
from a checkpoint the process had seen as the head raised); tagging the returned config with a read token
(LangGraph copies ``saved.config`` into ``get_state().config``, which users and LangGraph's tests compare).
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections import OrderedDict
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

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
    """How the caller of a ``put`` last read its parent (:class:`CallerReads`)."""

    LATEST = "read as the latest"
    """``get_tuple`` without a checkpoint id (or by id while it was the head): the caller continues the thread."""
    BY_ID = "read by id"
    """``get_tuple`` by id while it was not the head, or the one checkpoint ``list(before=..., limit=1)``
    returned (LangGraph's replay lookup): the caller forks from it."""
    UNREAD = "not read by this caller"


class Rule(Enum):
    """How a put commits (:data:`FENCING_TABLE`)."""

    CREATE = "create"
    """Commit only if the namespace still has no head (``If-None-Match: *``)."""
    CONTINUE = "continue"
    """Commit only if the head still holds the parent as the caller read it (``If-Match`` that ETag); otherwise
    refused, also when the namespace has no head any more (the parent was rolled back or deleted)."""
    CONTINUE_UNREAD = "continue, or create"
    """A run's step on a parent its caller did not read (its own previous checkpoint, or a direct call): commit
    only if the head holds the parent; refused if the thread moved past it or the parent is not committed; on a
    namespace without a head, created (InMemorySaver stores a put whose parent it never saw)."""
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
    (True, ParentRead.UNREAD, Source.STEP): Rule.CONTINUE_UNREAD,  # a run's next step on its own previous checkpoint
    (True, ParentRead.UNREAD, Source.UPDATE): Rule.CONTINUE_OR_FORK,  # a direct put: InMemorySaver stores it
    (True, ParentRead.UNREAD, Source.FORK): Rule.FORK,  # __copy__ puts on the parent of what it read
}


def rule_for(parent_id: str | None, read: ParentRead, source: Any) -> Rule:
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
    """Why a put is refused: each is an error class that says what happened (``committing.refuse``)."""

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
JOIN = Step(commit=True)
DONE = Step(done=True)

SETTLE_TABLE: Mapping[tuple[Rule, HeadNow], Step] = {
    (Rule.CREATE, HeadNow.NONE): JOIN,
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
    (Rule.CONTINUE_UNREAD, HeadNow.NONE): JOIN,
    (Rule.CONTINUE_UNREAD, HeadNow.OTHER_BESIDE_A_DETACHED_PARENT): JOIN,  # a branch's next step: it forks on
    (Rule.CONTINUE_OR_FORK, HeadNow.PARENT): COMMIT_ON_PARENT,
    (Rule.CONTINUE_OR_FORK, HeadNow.THIS): DONE,
    (Rule.CONTINUE_OR_FORK, HeadNow.OTHER): JOIN,
    (Rule.CONTINUE_OR_FORK, HeadNow.NONE): JOIN,
    (Rule.CONTINUE_OR_FORK, HeadNow.OTHER_BESIDE_A_DETACHED_PARENT): JOIN,
    (Rule.FORK, HeadNow.PARENT): JOIN,
    (Rule.FORK, HeadNow.THIS): DONE,
    (Rule.FORK, HeadNow.OTHER): JOIN,
    (Rule.FORK, HeadNow.NONE): JOIN,
    (Rule.FORK, HeadNow.OTHER_BESIDE_A_DETACHED_PARENT): JOIN,
    # a step of a run rolled back while it ran, under any rule
    (Rule.CREATE, HeadNow.NAMES_THIS_RUN_ROLLED_BACK): Step(refused=Refusal.RUN_ROLLED_BACK),
    (Rule.CONTINUE, HeadNow.NAMES_THIS_RUN_ROLLED_BACK): Step(refused=Refusal.RUN_ROLLED_BACK),
    (Rule.CONTINUE_UNREAD, HeadNow.NAMES_THIS_RUN_ROLLED_BACK): Step(refused=Refusal.RUN_ROLLED_BACK),
    (Rule.CONTINUE_OR_FORK, HeadNow.NAMES_THIS_RUN_ROLLED_BACK): Step(refused=Refusal.RUN_ROLLED_BACK),
    (Rule.FORK, HeadNow.NAMES_THIS_RUN_ROLLED_BACK): Step(refused=Refusal.RUN_ROLLED_BACK),
}
"""(rule, what the head holds now) -> what the put does. A ``JOIN`` on a head that holds another checkpoint commits
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
    RULE_JOINS = "the put's rule commits on the head now (:data:`JOIN`)"
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
class JoinAgain:
    """Build the next attempt on the head as read now (first offering, create-only, the large values the record
    relied on the parent's head for: a prune may have removed them since the thread moved on)."""


CommitOutcome = MoveHead | CommitDetached | Committed | ClockBehindHead | Withdraw | JoinAgain

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
    Meets.RULE_JOINS: JoinAgain(),
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
    return Meets.RULE_JOINS


# -- what the caller read ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _NamespaceReads:
    latest: tuple[str, str | None] | None = None
    """(checkpoint id or ABSENT, its head's ETag) of the caller's newest latest read."""
    by_id: tuple[str, ...] = ()
    """Checkpoints the caller read by id (fork points), newest last."""


class CallerReads:
    """How each call chain read the checkpoints of each namespace: the input of :data:`FENCING_TABLE`.

    One :class:`contextvars.ContextVar` holds, per saver's recall, an immutable mapping that every record
    replaces (copy on write): a chain that copies the context (a put sent to the thread pool, an asyncio task)
    sees what was read before the copy and adds nothing to its parent's. Bounded: the newest
    :data:`NAMESPACES_PER_CALLER` namespaces per saver, :data:`FORK_POINTS_PER_NAMESPACE` fork points each, and
    the :data:`SAVERS_PER_CALLER` savers a chain used last.
    """

    NAMESPACES_PER_CALLER = 64
    FORK_POINTS_PER_NAMESPACE = 8
    SAVERS_PER_CALLER = 8
    _var: ContextVar[Mapping[int, Mapping[tuple[str, str], _NamespaceReads]] | None] = ContextVar(
        "langgraph_s3_checkpoint_caller_reads", default=None
    )
    _serials = itertools.count()

    def __init__(self) -> None:
        self._serial = next(self._serials)

    def _get(self) -> Mapping[tuple[str, str], _NamespaceReads]:
        return (self._var.get() or {}).get(self._serial, {})

    def _set(self, thread_id: str, ns: str, reads: _NamespaceReads) -> None:
        savers = dict(self._var.get() or {})
        mine = dict(savers.pop(self._serial, {}))
        mine.pop((thread_id, ns), None)
        mine[(thread_id, ns)] = reads  # newest last
        while len(mine) > self.NAMESPACES_PER_CALLER:
            del mine[next(iter(mine))]
        savers[self._serial] = mine
        while len(savers) > self.SAVERS_PER_CALLER:
            del savers[next(iter(savers))]
        self._var.set(savers)

    def read_latest(self, thread_id: str, ns: str, checkpoint_id: str | None, etag: str | None) -> None:
        """The caller read the namespace's latest checkpoint (``None``: found no head)."""
        found = checkpoint_id or ABSENT
        previous = self._get().get((thread_id, ns), _NamespaceReads())
        self._set(thread_id, ns, _NamespaceReads((found, etag), tuple(c for c in previous.by_id if c != found)))

    def read_by_id(self, thread_id: str, ns: str, checkpoint_id: str | None) -> None:
        """The caller read a checkpoint by id that was not the head (``None``: found nothing below a bound)."""
        point = checkpoint_id or ABSENT
        previous = self._get().get((thread_id, ns), _NamespaceReads())
        latest = None if previous.latest is not None and previous.latest[0] == point else previous.latest
        by_id = (*(c for c in previous.by_id if c != point), point)[-self.FORK_POINTS_PER_NAMESPACE :]
        self._set(thread_id, ns, _NamespaceReads(latest, by_id))

    def saw_a_head(self, thread_id: str, ns: str) -> None:
        """The caller saw that the namespace has a head (reading another checkpoint by id): it is no longer one
        that found the namespace empty."""
        reads = self._get().get((thread_id, ns))
        if reads is not None and reads.latest is not None and reads.latest[0] == ABSENT:
            self._set(thread_id, ns, _NamespaceReads(None, reads.by_id))

    def of(self, thread_id: str, ns: str, parent_id: str | None) -> tuple[ParentRead, str | None]:
        """How the caller last read ``parent_id`` (``None``: the namespace without a head), with the head's ETag
        it saw when it read it as the latest."""
        reads = self._get().get((thread_id, ns))
        point = parent_id or ABSENT
        if reads is None:
            return ParentRead.UNREAD, None
        if point in reads.by_id:
            return ParentRead.BY_ID, None
        if reads.latest is not None and reads.latest[0] == point:
            return ParentRead.LATEST, reads.latest[1]
        return ParentRead.UNREAD, None


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

    def size(self) -> int:
        """Bytes this entry keeps alive, roughly: its values, ids and the containers' overhead."""
        values = sum(len(typed[1]) for typed in (self.inline or {}).values() if _bytes_of(typed) is not None)
        strings = sum(len(k) + len(v) for k, v in (*self.blobs.items(), *self.versions.items()))
        entries = len(self.blobs) + len(self.versions) + len(self.inline or {})
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
    )


class Recall:
    """What a saver keeps between calls, in one byte budget, least recently used first out: the head it last saw
    in each namespace (:class:`HeadSeen`: its ETag, so a put on it needs no GET, and its values, so a put carries
    over the ones whose version did not move), and, with a lifecycle TTL, when it last wrote large values.

    None of it decides how a put commits (that is :data:`FENCING_TABLE` over :class:`CallerReads`): a remembered
    head only spares the GET that would find the same head, and a put whose ``If-Match`` on a remembered ETag is
    refused reads the head and decides again. So forgetting costs requests, never correctness.
    """

    def __init__(self, max_bytes: int = DEFAULT_MEMORY_BYTES, *, track_blob_ages: bool = False) -> None:
        self._lock = threading.Lock()
        self.max_bytes = max_bytes
        self.track_blob_ages = track_blob_ages
        self.callers = CallerReads()
        self._entries: OrderedDict[tuple[str, str, str], tuple[Any, int]] = OrderedDict()
        """(table, thread, ns) -> (value, size): one LRU order for every table."""
        self._bytes = 0

    @property
    def retained_bytes(self) -> int:
        """Bytes the recall accounts for now (at most ``max_bytes``)."""
        return self._bytes

    def _store(self, key: tuple[str, str, str], value: Any, size: int) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old[1]
        if size > self.max_bytes:
            return
        self._entries[key] = (value, size)
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, (_, evicted) = self._entries.popitem(last=False)
            self._bytes -= evicted

    def _lookup(self, key: tuple[str, str, str]) -> Any:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def saw_head(self, thread_id: str, ns: str, seen: HeadSeen) -> None:
        """A head this saver read or committed."""
        with self._lock:
            self._store(("head", thread_id, ns), seen, seen.size())

    def head(self, thread_id: str, ns: str, checkpoint_id: str) -> HeadSeen | None:
        """The remembered head of the namespace, if it held ``checkpoint_id``."""
        with self._lock:
            seen: HeadSeen | None = self._lookup(("head", thread_id, ns))
        return seen if seen is not None and seen.checkpoint_id == checkpoint_id else None

    def head_written_by(self, thread_id: str, ns: str) -> tuple[str, str | None] | None:
        """The checkpoint id of the head this saver last saw in the namespace and the run that wrote it
        (``None``: it remembers no head there). Only asked, never changed, by ``put_writes``, and only to spare
        the run-index entries of writes: forgetting costs two create-only PUTs, never correctness."""
        with self._lock:
            seen: HeadSeen | None = self._lookup(("head", thread_id, ns))
        return None if seen is None else (seen.checkpoint_id, seen.run_id)

    def forget_namespace(self, thread_id: str, ns: str) -> None:
        """After a surprise (a conflict, a rollback): the next put reads the head again."""
        with self._lock:
            old = self._entries.pop(("head", thread_id, ns), None)
            if old is not None:
                self._bytes -= old[1]

    def forget_thread(self, thread_id: str) -> None:
        with self._lock:
            for key in [k for k in self._entries if k[1] == thread_id]:
                self._bytes -= self._entries.pop(key)[1]

    def wrote_blobs(self, thread_id: str, ns: str, refs: Mapping[str, str], when: datetime | None) -> None:
        """Remember when these (channel -> version) values were written, for lifecycle renewal (only with a TTL:
        nothing else needs their age)."""
        if when is None or not refs or not self.track_blob_ages:
            return
        with self._lock:
            key = ("blob ages", thread_id, ns)
            known: dict[tuple[str, str], datetime] = dict(self._lookup(key) or {})
            for ref in refs.items():
                known.pop(ref, None)
                known[ref] = when  # re-inserted: the most recently referenced values are kept
            while len(known) > BLOB_AGES_PER_NAMESPACE:
                del known[next(iter(known))]
            size = ENTRY_OVERHEAD + sum(200 + len(c) + len(v) for c, v in known) + sys.getsizeof(known)
            self._store(key, known, size)

    def blob_written(self, thread_id: str, ns: str, channel: str, version: str) -> datetime | None:
        with self._lock:
            known: dict[tuple[str, str], datetime] | None = self._lookup(("blob ages", thread_id, ns))
        return None if known is None else known.get((channel, version))


BLOB_AGES_PER_NAMESPACE = 256
"""The most large values whose write time a saver remembers per namespace (the most recently referenced)."""
