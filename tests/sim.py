"""Plan-level simulation of the commit protocol over an in-memory bucket: faults, interleavings, an oracle.

Every saver operation is a plan (``_protocol/checkpoint_plans.py``): a generator yielding batches of independent
requests. Here a plan is driven one batch at a time against a :class:`MemoryBucket`, so that

* a **fault** can be injected at batch ``k`` (:class:`Crash` after any subset of the batch landed,
  :class:`Lost` answer: a request applied twice, as botocore's retry does, the plan seeing the second
  reply, optionally with another worker's commit in between, :class:`Transient` error after the request
  was or was not applied, surfacing to the caller as ``S3RequestError``, as the I/O shell's drivers do);
* several plans can be **interleaved** batch by batch (each batch is atomic; every schedule is enumerated);
* after each scenario the bucket is read through a fresh saver (new ``CheckpointPlans``, empty memory) and through the
  savers still alive, and compared with an **oracle**: LangGraph's ``InMemorySaver`` fed only the
  operations that committed (a ``put`` commits iff its head PUT, or its detached record PUT, was applied:
  read from the requests applied for it).

Requests are sent through each saver's own ``BucketIO.execute`` (so its read cache takes part) but
sequentially, in this thread: a run is deterministic and replayable.

Names in reports: checkpoint ``cN`` is id :func:`cid(N) <cid>`; keys are shortened to ``t/ns/~/c/cN/checkpoint``.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata, CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.runtime import Runtime

from langgraph_s3_checkpoint import CheckpointConflictError, S3RequestError, S3Saver
from langgraph_s3_checkpoint._protocol.checkpoint_plans import checkpoint_config
from langgraph_s3_checkpoint._protocol.keys import Layout, revert_id
from langgraph_s3_checkpoint._protocol.requests import (
    PRECONDITION_FAILED,
    Copy,
    Create,
    DeleteIfMatch,
    DeleteObjects,
    Emit,
    Get,
    ListKeys,
    Overwrite,
    Page,
    Put,
    Request,
    StoredObject,
    Update,
    Written,
)
from langgraph_s3_checkpoint.memory import MemoryBucket

BUCKET = "sim"
INLINE = 64
"""inline_threshold of simulated savers: the ``big`` channel (~120 bytes) is a blob, ``count`` is inline."""
TAIL = 70
"""appended_tail_bytes of simulated savers: the ``log`` list (elements of ~30 bytes) carries two appended elements
in its records, and a put that appends a third sends the three as a part (codec.Appended)."""
PARTS = 2
"""parts_merged of simulated savers: every second part merges two parts into one (codec.Appended)."""


# ------------------------------------------------------------------------------------------------
# Names
# ------------------------------------------------------------------------------------------------
def cid(n: int) -> str:
    """Checkpoint id number ``n`` (ordered like uuid6 ids: a larger n is newer)."""
    return f"00000000-0000-6000-8000-{n:012d}"


_CID = re.compile(r"^00000000-0000-6000-8000-(\d{12})$")


def cname(checkpoint_id: str | None) -> str:
    if checkpoint_id is None:
        return "None"
    m = _CID.match(checkpoint_id)
    return f"c{int(m.group(1))}" if m else repr(checkpoint_id)


def cfg(thread_id: str, ns: str | None = "", checkpoint_id: str | None = None) -> RunnableConfig:
    return checkpoint_config(thread_id, ns, checkpoint_id)


def short_key(key: str) -> str:
    """``threads/t/ns/~/c/<inverted>/checkpoint`` -> ``t/~/c/c20/checkpoint``."""
    parts = key.split("/")
    out = []
    for p in parts:
        if p.endswith("~") and len(p) > 1 and re.fullmatch(r"[0-9a-f]+~", p):
            try:
                out.append(cname(revert_id(p)))
                continue
            except ValueError:
                pass
        out.append(p if len(p) <= 16 else p[:8] + "..")
    text = "/".join(out)
    return text.removeprefix("threads/").replace("/ns/", "/")


def shorten(text: str) -> str:
    """Inverted checkpoint ids in a message become their names."""

    def name(m: re.Match[str]) -> str:
        try:
            return cname(revert_id(m.group(0)))
        except ValueError:
            return m.group(0)

    return re.sub(r"[0-9a-f]{20,}~", name, text)


def describe(request: Request) -> str:
    if isinstance(request, Put):
        cond = {Create: " If-None-Match", Update: " If-Match", Overwrite: ""}[type(request.mode)]
        return f"PUT {short_key(request.key)}{cond}"
    if isinstance(request, Get):
        return f"GET {short_key(request.key)}"
    if isinstance(request, ListKeys):
        return f"LIST {short_key(request.prefix)}"
    if isinstance(request, DeleteObjects):
        keys = ", ".join(short_key(k) for k in request.keys[:3]) + (", ..." if len(request.keys) > 3 else "")
        return f"DELETE [{keys}]"
    if isinstance(request, DeleteIfMatch):
        return f"DELETE {short_key(request.key)} If-Match"
    if isinstance(request, Copy):
        return f"COPY {short_key(request.source)} -> {short_key(request.target)}"
    return type(request).__name__


def is_mutation(request: Request) -> bool:
    return isinstance(request, (Put, DeleteObjects, DeleteIfMatch, Copy))


# ------------------------------------------------------------------------------------------------
# Faults
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Crash:
    """The process dies at batch ``batch``: only the requests at ``applied`` (indices) of it landed."""

    batch: int
    applied: tuple[int, ...]


@dataclass(frozen=True)
class Lost:
    """Request ``index`` of batch ``batch`` is applied, its answer lost, and applied again (the retry);
    the plan gets the second reply. ``between``: a named interference run between the two applications."""

    batch: int
    index: int
    between: str | None = None


@dataclass(frozen=True)
class Transient:
    """Request ``index`` of batch ``batch`` fails after retries (applied or not); the caller gets
    ``S3RequestError`` (the I/O shell's drivers raise out of the batch; the plan is abandoned)."""

    batch: int
    index: int
    applied: bool


@dataclass(frozen=True)
class Held:
    """Requests ``held`` of batch ``batch`` are held in the network while other parties run whole operations (the
    scenario's ``between``), then applied; the batch's other requests are sent at once. What the party does
    meanwhile, ``party``: ``waits`` (it gets every reply, the held ones' once they land, and goes on), ``gives up``
    (its call ends at once with ``S3RequestError``, a deadline: the held requests land later all the same) or
    ``dies`` (a crash: the same, and nothing of it runs again)."""

    batch: int
    held: tuple[int, ...]
    party: str = "waits"


Fault = Crash | Lost | Transient | Held


def fault_label(fault: Fault | None, batches: Sequence[Sequence[Request]]) -> str:
    if fault is None:
        return "no fault"
    batch = batches[fault.batch] if fault.batch < len(batches) else []
    where = f"batch {fault.batch + 1}/{len(batches)}"
    if isinstance(fault, Crash):
        if not fault.applied:
            return f"crash before {where} [{'; '.join(describe(r) for r in batch)}]"
        landed = "; ".join(describe(batch[i]) for i in fault.applied)
        rest = "; ".join(describe(r) for i, r in enumerate(batch) if i not in fault.applied)
        return f"crash in {where} after [{landed}] landed" + (f", not [{rest}]" if rest else "")
    if isinstance(fault, Lost):
        extra = f", with {fault.between} in between" if fault.between else ""
        return f"lost answer of {describe(batch[fault.index])} in {where} (applied twice{extra})"
    if isinstance(fault, Held):
        held = "; ".join(describe(batch[i]) for i in fault.held)
        return f"[{held}] of {where} held in the network while others ran, then applied; the party {fault.party}"
    state = "applied" if fault.applied else "not applied"
    return f"transient error on {describe(batch[fault.index])} in {where} ({state})"


def subsets(n: int) -> Iterable[tuple[int, ...]]:
    """Which requests of an n-request parallel batch may have landed before a crash."""
    if n <= 4:
        for r in range(n + 1):
            yield from itertools.combinations(range(n), r)
        return
    yield ()
    yield tuple(range(n))
    for i in range(n):
        yield (i,)
        yield tuple(j for j in range(n) if j != i)


def faults_for(batches: Sequence[Sequence[Request]], betweens: Sequence[str | None] = (None,)) -> list[Fault]:
    """Every fault at every batch of a plan whose fault-free run made ``batches``."""
    out: list[Fault] = []
    for k, batch in enumerate(batches):
        out += [Crash(k, s) for s in subsets(len(batch))]
        for j, request in enumerate(batch):
            if is_mutation(request):
                out += [Lost(k, j, b) for b in betweens]
            out += [Transient(k, j, True), Transient(k, j, False)]
    return out


def held_for(batches: Sequence[Sequence[Request]]) -> list[Held]:
    """Every way of holding a plan's requests in the network: each mutation of each batch alone, and each batch
    whole, with the party waiting, giving up or dying meanwhile (a held read only delays the party)."""
    out: list[Held] = []
    for k, batch in enumerate(batches):
        choices: list[tuple[int, ...]] = [(j,) for j, request in enumerate(batch) if is_mutation(request)]
        if len(batch) > 1 and any(is_mutation(r) for r in batch):
            choices.append(tuple(range(len(batch))))
        for held in choices:
            out += [Held(k, held, party) for party in ("waits", "gives up", "dies")]
    return out


# ------------------------------------------------------------------------------------------------
# Driving one plan
# ------------------------------------------------------------------------------------------------
class Op:
    """One plan, driven a batch at a time. ``applied``: every (request, reply) of the bucket's log it caused."""

    def __init__(self, label: str, saver: S3Saver, plan: Any) -> None:
        self.label = label
        self.saver = saver
        self.plan = plan
        self.batches: list[list[Request]] = []
        self.applied: list[tuple[Request, Any]] = []
        self.emitted: list[Any] = []
        self.status = "running"  # running | returned | raised | crashed
        self.result: Any = None
        self.error: BaseException | None = None
        self.pending: list[Request] | None = None
        self._advance(None)

    @property
    def running(self) -> bool:
        return self.status == "running"

    def _send(self, request: Request) -> Any:
        # Through the saver's own I/O shell (its read cache included); what reached the bucket is read
        # back from the bucket's log (runs are sequential, so the new entries are this request's).
        log = self.saver.bucket_io.backend.log
        start = len(log)
        reply = self.saver.bucket_io.execute(request)
        self.applied.extend(log[start:])
        return reply

    def _advance(self, reply: Any) -> None:
        while True:
            try:
                step = self.plan.send(reply)
            except StopIteration as stop:
                self.status, self.result, self.pending = "returned", stop.value, None
                return
            except Exception as exc:
                self.status, self.error, self.pending = "raised", exc, None
                return
            if isinstance(step, Emit):
                self.emitted.append(step.value)
                reply = None
                continue
            self.pending = list(step)
            self.batches.append(self.pending)
            return

    def step(self, fault: Fault | None = None, between: Callable[[], Any] | None = None) -> None:
        """Send the pending batch (under ``fault`` if given) and advance the plan to its next batch."""
        assert self.running and self.pending is not None
        batch = self.pending
        if isinstance(fault, Crash):
            for i in fault.applied:
                self._send(batch[i])
            self.plan.close()
            self.status, self.pending = "crashed", None
            return
        if isinstance(fault, Held):
            self._held(batch, fault, between)
            return
        if isinstance(fault, Transient):
            for i, request in enumerate(batch):
                if i != fault.index or fault.applied:
                    self._send(request)
            self.plan.close()
            self.status, self.pending = "raised", None
            self.error = S3RequestError(f"injected: {describe(batch[fault.index])} failed after retries")
            return
        replies = []
        for i, request in enumerate(batch):
            reply = self._send(request)
            if isinstance(fault, Lost) and i == fault.index:
                if between is not None:
                    between()
                reply = self._send(request)
            replies.append(reply)
        self._advance(replies)

    def _held(self, batch: list[Request], fault: Held, between: Callable[[], Any] | None) -> None:
        """:class:`Held`: the batch's other requests now, ``between`` (others' whole operations), then the held ones."""
        replies: dict[int, Any] = {i: self._send(r) for i, r in enumerate(batch) if i not in fault.held}
        if fault.party != "waits":
            self.plan.close()
            self.pending = None
            if fault.party == "dies":
                self.status = "crashed"
            else:
                self.status = "raised"
                self.error = S3RequestError(f"injected: {describe(batch[fault.held[0]])} unanswered at the deadline")
        if between is not None:
            between()
        replies.update({i: self._send(batch[i]) for i in fault.held})
        if fault.party == "waits":
            self._advance([replies[i] for i in range(len(batch))])

    def finish(self, fault: Fault | None = None, between: Callable[[], Any] | None = None) -> Op:
        while self.running:
            active = fault if fault is not None and fault.batch == len(self.batches) - 1 else None
            self.step(active, between)
        return self


def run_plan(saver: S3Saver, plan: Any) -> Any:
    """Run a plan to its end (no fault); re-raise its error; returns (result, emitted)."""
    op = Op("read", saver, plan).finish()
    if op.status == "raised":
        assert op.error is not None
        raise op.error
    return op.result, op.emitted


# ------------------------------------------------------------------------------------------------
# What is compared: a plain view of a CheckpointTuple
# ------------------------------------------------------------------------------------------------
@dataclass
class TView:
    id: str
    thread: str
    ns: str
    parent: str | None
    values: dict[str, Any]
    versions: dict[str, Any]
    metadata: dict[str, Any]
    writes: list[tuple[str, str, Any]]

    def __repr__(self) -> str:
        return cname(self.id)

    def diff(self, other: TView) -> str | None:
        for name in ("thread", "ns", "parent", "values", "versions", "metadata", "writes"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine != theirs:
                if name == "parent":
                    mine, theirs = cname(mine), cname(theirs)
                return f"{cname(self.id)}.{name}: expected {_short(mine)} got {_short(theirs)}"
        return None


def _short(value: Any) -> str:
    text = repr(value)
    text = re.sub(r"'B{20,}(\d+)'", r"'B..\1'", text)
    text = re.sub(r"'0{20,}(\d+\.\d+)'", r"'v\1'", text)
    return text if len(text) < 300 else text[:300] + "..."


def tview(tup: CheckpointTuple | None) -> TView | None:
    if tup is None:
        return None
    cp = tup.checkpoint
    conf = tup.config["configurable"]
    return TView(
        id=cp["id"],
        thread=conf["thread_id"],
        ns=conf.get("checkpoint_ns", ""),
        parent=tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None,
        values=dict(cp["channel_values"]),
        versions=dict(cp["channel_versions"]),
        metadata=dict(tup.metadata or {}),
        writes=[tuple(w) for w in tup.pending_writes or []],
    )


@dataclass(frozen=True)
class Raised:
    error: str

    def __repr__(self) -> str:
        return f"raised {self.error}"


# ------------------------------------------------------------------------------------------------
# The oracle
# ------------------------------------------------------------------------------------------------
class Oracle:
    """LangGraph's ``InMemorySaver`` holding exactly the committed operations, plus the maintenance
    operations it lacks (delete_for_runs, prune keep_latest, copy_thread), written on its storage."""

    def __init__(self) -> None:
        self.mem = InMemorySaver()
        self.calls: dict[tuple[str, str, str], list[tuple[str, list[tuple[str, Any]], str, str | None]]] = {}
        """Every put_writes call per checkpoint, with its run, in order: what a rollback replays without the run."""

    def clone(self) -> Oracle:
        """A copy whose containers are its own and whose leaves are shared: InMemorySaver keeps serialized
        tuples (bytes), and ``calls`` holds tuples that are replayed, never changed in place. (A deep copy cost a
        tenth of the interleaving tests' time.)"""
        other = Oracle()
        for thread_id, namespaces in self.mem.storage.items():
            copied = other.mem.storage[thread_id]
            for ns, checkpoints in namespaces.items():
                copied[ns] = dict(checkpoints)
        for where, writes in self.mem.writes.items():
            other.mem.writes[where] = dict(writes)
        other.mem.blobs.update(self.mem.blobs)
        other.calls = {where: list(calls) for where, calls in self.calls.items()}
        return other

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata) -> None:
        # Every channel version is written, so values never depend on which puts were fed.
        self.mem.put(config, checkpoint, metadata, dict(checkpoint["channel_versions"]))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        path: str,
        run: str | None = None,
    ) -> None:
        conf = config["configurable"]
        where = (conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"])
        self.calls.setdefault(where, []).append((task_id, list(writes), path, run))
        self.mem.put_writes(config, writes, task_id, path)

    def delete_thread(self, thread_id: str) -> None:
        self.mem.delete_thread(thread_id)
        self.calls = {k: v for k, v in self.calls.items() if k[0] != thread_id}

    def _drop(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        del self.mem.storage[thread_id][ns][checkpoint_id]
        self.mem.writes.pop((thread_id, ns, checkpoint_id), None)
        self.calls.pop((thread_id, ns, checkpoint_id), None)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """The runs' checkpoints go; every other checkpoint reads as if the runs had never written to it (its
        writes are InMemorySaver's rule replayed over the other runs' calls)."""
        for thread_id, namespaces in list(self.mem.storage.items()):
            for ns, checkpoints in list(namespaces.items()):
                for checkpoint_id, (_, metadata, _) in list(checkpoints.items()):
                    if self.mem.serde.loads_typed(metadata).get("run_id") in run_ids:
                        self._drop(thread_id, ns, checkpoint_id)
        for where, calls in list(self.calls.items()):
            if not any(run in run_ids for *_, run in calls):
                continue
            self.mem.writes.pop(where, None)
            self.calls[where] = []
            config = cfg(*where)
            for task_id, writes, path, run in calls:
                if run not in run_ids:
                    self.put_writes(config, writes, task_id, path, run)

    def prune(self, thread_ids: Sequence[str]) -> None:
        for thread_id in thread_ids:
            for ns, checkpoints in list(self.mem.storage.get(thread_id, {}).items()):
                if checkpoints:
                    latest = max(checkpoints)
                    for checkpoint_id in [c for c in checkpoints if c != latest]:
                        self._drop(thread_id, ns, checkpoint_id)

    def copy_thread(self, source: str, target: str) -> None:
        for ns, checkpoints in list(self.mem.storage.get(source, {}).items()):
            self.mem.storage[target][ns] = dict(checkpoints)
        for (t, ns, c), writes in list(self.mem.writes.items()):
            if t == source:
                self.mem.writes[(target, ns, c)] = dict(writes)
        for (t, ns, c), calls in list(self.calls.items()):
            if t == source:
                self.calls[(target, ns, c)] = list(calls)
        for (t, ns, ch, v), blob in list(self.mem.blobs.items()):
            if t == source:
                self.mem.blobs[(target, ns, ch, v)] = blob

    def threads(self) -> set[str]:
        return {t for t, nss in self.mem.storage.items() if any(nss.values())}

    def committed(self, thread_id: str, ns: str) -> list[str]:
        return sorted(self.mem.storage.get(thread_id, {}).get(ns, {}))


# ------------------------------------------------------------------------------------------------
# Observations: the same queries against the bucket (through a saver) and against the oracle
# ------------------------------------------------------------------------------------------------
Query = tuple[Any, ...]


def _queries(
    pairs: Iterable[tuple[str, str]], ids: dict[tuple[str, str], set[str]], paging: bool = True, light: bool = False
) -> list[Query]:
    pairs = sorted(set(pairs))
    out: list[Query] = [("latest", t, ns) for t, ns in pairs]  # first: a latest read repairs a lone head
    out += [("list", t, ns) for t, ns in pairs]
    if light:
        return out
    threads = [t for t, _ in pairs]
    out += [("list-thread", t) for t in sorted(set(threads)) if threads.count(t) > 1]  # several namespaces
    out.append(("list-all",))
    for t, ns in pairs:
        for i in sorted(ids.get((t, ns), ())):
            out.append(("by-id", t, ns, i))
            if paging:
                out.append(("before", t, ns, i))
    return out


def _answer(q: Query, get: Callable[[RunnableConfig], Any], lst: Callable[..., Any]) -> Any:
    try:
        kind = q[0]
        if kind == "latest":
            return tview(get(cfg(q[1], q[2])))
        if kind == "by-id":
            return tview(get(cfg(q[1], q[2], q[3])))
        if kind == "list":
            return [tview(x) for x in lst(cfg(q[1], q[2]))]
        if kind == "list-thread":
            return sorted((tview(x) for x in lst(cfg(q[1], None))), key=lambda v: v.id, reverse=True)
        if kind == "list-all":
            by_thread: dict[str, list[TView]] = {}
            for x in lst(None):
                v = tview(x)
                assert v is not None
                by_thread.setdefault(v.thread, []).append(v)
            return {t: sorted(vs, key=lambda v: (v.ns, v.id), reverse=True) for t, vs in sorted(by_thread.items())}
        if kind == "before":
            return [tview(x) for x in lst(cfg(q[1], q[2]), before=cfg(q[1], q[2], q[3]))]
        raise AssertionError(q)
    except Exception as exc:  # a read that raises is an observation too
        return Raised(f"{type(exc).__name__}: {shorten(str(exc))[:160]}")


def observe_saver(saver: S3Saver, queries: list[Query]) -> dict[Query, Any]:
    core = saver.plans

    def get(config: RunnableConfig) -> Any:
        return run_plan(saver, core.get_tuple(config))[0]

    def lst(config: Any, before: Any = None) -> Any:
        return run_plan(saver, core.list(config, before=before))[1]

    return {q: _answer(q, get, lst) for q in queries}


FRESH_VIEWS_KEPT = 20_000
_FRESH_VIEWS: dict[tuple[Any, ...], Any] = {}
"""What a fresh saver answered, by the query and the objects under the prefix it reads (:meth:`World.observe_fresh`):
oldest out first."""
_UNSEEN = object()
FRESH_LAYOUT = Layout()
"""The keys of the simulations' savers (no prefix)."""


def observe_oracle(oracle: Oracle, queries: list[Query]) -> dict[Query, Any]:
    mem = oracle.mem

    def get(config: RunnableConfig) -> Any:
        t, ns = config["configurable"]["thread_id"], config["configurable"].get("checkpoint_ns", "")
        if ns not in mem.storage.get(t, {}) or not mem.storage[t][ns]:
            return None
        return mem.get_tuple(config)

    def lst(config: Any, before: Any = None) -> Any:
        if config is not None and config["configurable"]["thread_id"] not in mem.storage:
            return []
        return list(mem.list(config, before=before))

    return {q: _answer(q, get, lst) for q in queries}


def tname(thread: str) -> str:
    return thread if len(thread) <= 16 else f"{thread[:6]}..({len(thread)} chars)"


def _qname(q: Query) -> str:
    q = (q[0], tname(q[1]), *q[2:]) if len(q) > 1 else q
    kind = q[0]
    if kind in ("latest", "list"):
        return f"{kind}({q[1]}/{q[2] or '~'})"
    if kind == "list-thread":
        return f"list({q[1]}, all namespaces)"
    if kind == "list-all":
        return "list(None)"
    if kind == "by-id":
        return f"get_tuple({q[1]}/{q[2] or '~'} id={cname(q[3])})"
    return f"list({q[1]}/{q[2] or '~'}, before={cname(q[3])})"


def _ids(views: Any) -> list[str]:
    return [cname(v.id) for v in views]


def compare(q: Query, expected: Any, got: Any) -> str | None:
    """One readable sentence for the first difference, or None."""
    if expected == got:
        return None
    name = _qname(q)
    if isinstance(got, Raised) or isinstance(expected, Raised):
        return f"{name}: expected {_short(expected)} got {got!r}"
    if q[0] in ("latest", "by-id"):
        if expected is None:
            return f"{name}: uncommitted/deleted checkpoint visible: expected None got {cname(got.id)}"
        if got is None:
            return f"{name}: committed checkpoint lost: expected {cname(expected.id)} got None"
        if expected.id != got.id:
            return f"{name}: expected {cname(expected.id)} got {cname(got.id)}"
        return f"{name}: {expected.diff(got)}"
    if q[0] == "list-all":
        exp_threads, got_threads = sorted(expected), sorted(got)
        if exp_threads != got_threads:
            return f"{name}: threads: expected {[tname(t) for t in exp_threads]} got {[tname(t) for t in got_threads]}"
        for t in exp_threads:
            sub = compare(("list-thread", t), expected[t], got[t])
            if sub:
                return f"{name}: {sub}"
        return None
    exp_ids, got_ids = _ids(expected), _ids(got)
    if exp_ids != got_ids:
        lost = [i for i in exp_ids if i not in got_ids]
        extra = [i for i in got_ids if i not in exp_ids]
        what = []
        if lost:
            what.append(f"committed checkpoint(s) lost {lost}")
        if extra:
            what.append(f"uncommitted/deleted checkpoint(s) visible {extra}")
        if not what:
            what.append("wrong order")
        return f"{name}: {', '.join(what)}: expected {exp_ids} got {got_ids}"
    for e, g in zip(expected, got, strict=True):
        d = e.diff(g)
        if d:
            return f"{name}: {d}"
    return None


def writes_per_task(got: TView, options: Sequence[TView]) -> bool:
    """Whether ``got`` is one of two views of a checkpoint (before and after an operation) except that each
    task's writes are those of either: what an operation shows when it dies while rewriting a checkpoint's
    writes objects one at a time (each object is replaced atomically, so no task is ever half rewritten)."""
    if len(options) != 2 or dataclasses.replace(got, writes=[]) not in [
        dataclasses.replace(o, writes=[]) for o in options
    ]:
        return False

    def by_task(view: TView) -> dict[str, list[Any]]:
        tasks: dict[str, list[Any]] = {}
        for write in view.writes:
            tasks.setdefault(write[0], []).append(write)
        return tasks

    mine, a, b = by_task(got), by_task(options[0]), by_task(options[1])
    return all(mine.get(t, []) in (a.get(t, []), b.get(t, [])) for t in {*mine, *a, *b})


def compare_between(q: Query, before: Any, after: Any, got: Any, per_task: bool = False) -> str | None:
    """A crashed maintenance operation: each answer must be the state before it, after it, or (lists)
    in between: no checkpoint that neither state has, none that both have missing. ``per_task``: a
    checkpoint's writes may also be, task by task, those before or after (:func:`writes_per_task`)."""
    if got in (before, after):
        return None
    if per_task and all(isinstance(x, TView) for x in (before, after, got)) and writes_per_task(got, [before, after]):
        return None
    if before == after:
        d = compare(q, before, got)
        return f"{d} (mid-operation)" if d else None
    name = _qname(q)
    if isinstance(got, Raised):
        return f"{name} (mid-operation): {got!r}"
    if q[0] in ("list", "list-thread", "before") and isinstance(before, list) and isinstance(after, list):
        known = {v.id: v for v in before} | {v.id: v for v in after}
        must = {v.id for v in before} & {v.id for v in after}
        got_ids = {v.id for v in got}
        if must - got_ids:
            return f"{name} (mid-operation): committed checkpoint(s) lost {sorted(cname(i) for i in must - got_ids)}"
        if got_ids - set(known):
            unknown = sorted(cname(i) for i in got_ids - set(known))
            return f"{name} (mid-operation): uncommitted/deleted checkpoint(s) visible {unknown}"
        for v in got:
            options = [x for x in before + after if x.id == v.id]
            if all(x.diff(v) for x in options) and not (per_task and writes_per_task(v, options)):
                return f"{name} (mid-operation): {options[0].diff(v)}"
        if [v.id for v in got] != sorted((v.id for v in got), reverse=True):
            return f"{name} (mid-operation): wrong order"
        return None
    if q[0] == "list-all":
        return None  # covered per thread
    return f"{name} (mid-operation): expected {_short(before)} (before) or {_short(after)} (after) got {_short(got)}"


# ------------------------------------------------------------------------------------------------
# The world of one scenario run
# ------------------------------------------------------------------------------------------------
def big_value(k: int) -> str:
    return "B" * 100 + str(k)


def log_value(k: int) -> list[str]:
    """The ``log`` channel at the big channel's index ``k``: a list that each larger index extends by one element, as
    a chat's messages grow, large from the start, so that a put stores it as appended to its parent's base or as a new
    base, and a fork, a prune or a rollback meets a base that several records share."""
    return ["L" * 24 + f"{i:04d}" for i in range(k // 10 + 3)]


@dataclass
class PutSpec:
    thread: str
    ns: str
    parent: int | None
    n: int
    big: int
    """Index of the big channel's value; it changed iff it differs from the parent's."""
    big_changed: bool
    run: str | None
    source: str = "loop"
    runtime: object | None = None
    """The LangGraph run making the put (its ``Runtime``, as LangGraph passes it with every call of a run); ``None``:
    a direct call."""

    @property
    def id(self) -> str:
        return cid(self.n)

    def config(self) -> RunnableConfig:
        config = cfg(self.thread, self.ns, cid(self.parent) if self.parent is not None else None)
        if self.runtime is not None:
            config["configurable"]["__pregel_runtime"] = self.runtime
        return config

    def checkpoint(self) -> Checkpoint:
        cp = empty_checkpoint()
        cp["id"] = cid(self.n)
        cp["ts"] = f"2025-01-01T00:00:00.{self.n:06d}+00:00"
        cp["channel_values"] = {"count": self.n, "big": big_value(self.big), "log": log_value(self.big)}
        big_version = f"{self.big:032}.0"
        cp["channel_versions"] = {"count": f"{self.n:032}.0", "big": big_version, "log": big_version}
        return cp

    def metadata(self) -> CheckpointMetadata:
        md = cast(CheckpointMetadata, {"source": self.source, "step": self.n, "parents": {}})
        if self.run is not None:
            md["run_id"] = self.run
        return md

    def new_versions(self) -> dict[str, Any]:
        cp = self.checkpoint()
        nv = {"count": cp["channel_versions"]["count"]}
        if self.big_changed:
            nv["big"] = nv["log"] = cp["channel_versions"]["big"]
        return nv


class World:
    """A bucket, an oracle, the savers of one run, and what every put attempted."""

    def __init__(self, missing_if_match: str = "404") -> None:
        self.bucket = MemoryBucket(missing_if_match=missing_if_match, keep_log=True)  # type: ignore[arg-type]
        self.oracle = Oracle()
        self.attempted: dict[tuple[str, str], set[str]] = {}
        self.bigs: dict[tuple[str, str, int], int] = {}
        self.failures: list[str] = []
        self._n = 0
        self.tail_bytes = TAIL

    def fork(self) -> World:
        """A world in the state this one is in (bucket, oracle, what was attempted, the next id), changed apart from
        it. Savers are not carried over: they are processes, and a fork's processes are new."""
        other = World()
        other.bucket = self.bucket.copy()
        other.oracle = self.oracle.clone()
        other.attempted = {pair: set(ids) for pair, ids in self.attempted.items()}
        other.bigs = dict(self.bigs)
        other.failures = list(self.failures)
        other._n = self._n
        other.tail_bytes = self.tail_bytes
        return other

    def saver(self) -> S3Saver:
        """A new saver: a new process, with no memory of heads."""
        saver = S3Saver(bucket=BUCKET, client=self.bucket, inline_threshold=INLINE, read_cache_bytes=1 << 20)
        saver.plans.appended_tail_bytes = self.tail_bytes
        saver.plans.parts_merged = PARTS
        return saver

    def observe_fresh(self, queries: list[Query]) -> dict[Query, Any]:
        """What a fresh saver reads for ``queries``. Its answer to a query is a function of the objects under the
        prefix the query reads (by key and ETag), and thousands of schedules end with the same objects there: each
        answer is computed once (reading the same objects again was two thirds of the simulations' time). Not when
        the read wrote (a read restores a record its head holds): the next fresh saver must meet the same bucket."""
        saver: S3Saver | None = None
        answers: dict[Query, Any] = {}
        contents: dict[str, tuple[tuple[str, str], ...]] = {}  # one tuple for the queries of a prefix
        for q in queries:
            prefix = FRESH_LAYOUT.threads_root if q[0] == "list-all" else FRESH_LAYOUT.thread(q[1])
            if prefix not in contents:
                contents[prefix] = self.bucket_contents(prefix)
            memo_key = (self.tail_bytes, q, contents[prefix])
            got = _FRESH_VIEWS.get(memo_key, _UNSEEN)
            if got is _UNSEEN:
                saver = saver or self.saver()
                got = observe_saver(saver, [q])[q]
                if self.bucket_contents(prefix) == memo_key[2]:
                    if len(_FRESH_VIEWS) >= FRESH_VIEWS_KEPT:
                        _FRESH_VIEWS.pop(next(iter(_FRESH_VIEWS)))
                    _FRESH_VIEWS[memo_key] = got
                else:  # the read wrote under its prefix (which holds or is held by the others): read them anew
                    contents.clear()
            answers[q] = got
        return answers

    def bucket_contents(self, prefix: str) -> tuple[tuple[str, str], ...]:
        """Every object under ``prefix`` by key and ETag, in listing order."""
        bucket = self.bucket
        return tuple((key, obj.etag) for key in bucket.keys(prefix) if (obj := bucket.object(key)) is not None)

    def next_n(self) -> int:
        self._n += 10
        return self._n

    def pairs(self) -> set[tuple[str, str]]:
        return set(self.attempted) | {(t, ns) for t, nss in self.oracle.mem.storage.items() for ns in nss}

    # -- fault-free helpers that keep the oracle in step --------------------------------------------
    def spec(
        self,
        thread: str,
        parent: int | None,
        *,
        ns: str = "",
        n: int | None = None,
        big: bool = False,
        run: str | None = "r1",
        source: str = "loop",
        runtime: object | None = None,
    ) -> PutSpec:
        n = self.next_n() if n is None else n
        inherited = self.bigs.get((thread, ns, parent), 0) if parent is not None else 0
        value = n if big or parent is None else inherited
        spec = PutSpec(thread, ns, parent, n, value, big or parent is None, run, source, runtime)
        self.bigs[(thread, ns, n)] = value
        return spec

    def put_op(self, saver: S3Saver, spec: PutSpec) -> Op:
        self.attempted.setdefault((spec.thread, spec.ns), set()).add(spec.id)
        plan = saver.plans.put(spec.config(), spec.checkpoint(), spec.metadata(), spec.new_versions())
        return Op(f"put {cname(spec.id)}", saver, plan)

    def settle_put(self, op: Op, spec: PutSpec) -> bool:
        """Feed the oracle if the put committed; report an outcome that contradicts the log."""
        committed = put_committed(op, spec)
        if committed:
            self.oracle.put(spec.config(), spec.checkpoint(), spec.metadata())
        if op.status == "returned" and not committed:
            self.failures.append(f"{op.label} returned but neither its head nor a detached record landed")
        if op.status == "raised" and not isinstance(op.error, (CheckpointConflictError, S3RequestError)):
            self.failures.append(f"{op.label} raised {type(op.error).__name__}: {op.error}")
        if op.status == "raised" and isinstance(op.error, CheckpointConflictError) and committed:
            self.failures.append(
                f"{op.label} raised CheckpointConflictError although its head PUT was applied (it committed)"
            )
        return committed

    def put(self, saver: S3Saver, spec: PutSpec, fault: Fault | None = None, between: Any = None) -> Op:
        op = self.put_op(saver, spec).finish(fault, between)
        self.settle_put(op, spec)
        return op

    def crash_before_head(self, saver: S3Saver, spec: PutSpec) -> Op:
        """A put that dies with everything of its commit batch landed except the head PUT."""
        op = self.put_op(saver, spec)
        while op.running:
            assert op.pending is not None
            heads = [i for i, r in enumerate(op.pending) if isinstance(r, Put) and r.key.endswith("/head")]
            if heads:
                op.step(Crash(len(op.batches) - 1, tuple(i for i in range(len(op.pending)) if i not in heads)))
            else:
                op.step()
        self.settle_put(op, spec)
        return op

    def latest(self, saver: S3Saver, thread: str, ns: str = "", runtime: object | None = None) -> int | None:
        """The latest checkpoint's number, read by the run ``runtime`` (``None``: by a caller outside any run)."""
        config = cfg(thread, ns)
        if runtime is not None:
            config["configurable"]["__pregel_runtime"] = runtime
        tup = run_plan(saver, saver.plans.get_tuple(config))[0]
        return None if tup is None else int(tup.checkpoint["id"][-12:])

    def continue_thread(self, saver: S3Saver, thread: str, ns: str = "", run: str = "r9", big: bool = True) -> Op:
        """What a worker does on ``invoke(None, config)``: a run reads the latest checkpoint and puts its child."""
        runtime = Runtime()
        parent = self.latest(saver, thread, ns, runtime)
        return self.put(saver, self.spec(thread, parent, ns=ns, run=run, big=big, runtime=runtime))

    def writes_op(
        self,
        saver: S3Saver,
        thread: str,
        n: int,
        writes: Sequence[tuple[str, Any]],
        task: str,
        ns: str = "",
        run: str | None = None,
        path: str = "",
    ) -> Op:
        plan = saver.plans.put_writes(writes_config(thread, ns, n, run), list(writes), task, path)
        return Op(f"put_writes {cname(cid(n))} {task}" + (f" ({run})" if run else ""), saver, plan)

    def settle_writes(
        self,
        op: Op,
        thread: str,
        n: int,
        writes: Sequence[tuple[str, Any]],
        task: str,
        ns: str = "",
        run: str | None = None,
        path: str = "",
    ) -> None:
        """Feed the oracle the call if it took effect: it returned, or its PUT of the task's writes object
        landed (the object holds all of the call's writes, or none)."""
        config = cfg(thread, ns, cid(n))
        key = op.saver.plans.layout.task_writes(thread, ns, cid(n), task)
        landed = any(isinstance(r, Put) and r.key == key and isinstance(reply, Written) for r, reply in op.applied)
        if op.status == "returned" or landed:
            self.oracle.put_writes(config, writes, task, path, run)

    def put_writes(
        self,
        saver: S3Saver,
        thread: str,
        n: int,
        writes: Sequence[tuple[str, Any]],
        task: str,
        ns: str = "",
        fault: Fault | None = None,
        run: str | None = None,
        path: str = "",
    ) -> Op:
        op = self.writes_op(saver, thread, n, writes, task, ns, run, path).finish(fault)
        self.settle_writes(op, thread, n, writes, task, ns, run, path)
        if op.status == "raised" and not isinstance(op.error, S3RequestError):
            self.failures.append(f"{op.label} raised {type(op.error).__name__}: {op.error}")
        return op

    def maintenance(self, saver: S3Saver, name: str, plan: Any) -> Op:
        return Op(name, saver, plan).finish()

    # -- checks ---------------------------------------------------------------------------------------
    def check(
        self,
        savers: dict[str, S3Saver] | None = None,
        oracle: Oracle | None = None,
        paging: bool = True,
        light: bool = False,
    ) -> list[str]:
        """Differences between what each saver reads and what the oracle holds (``savers``: a fresh saver when
        not given). ``paging``: also ``list(before=X)`` for every checkpoint X ever attempted (quadratic in the
        history); ``light``: only the latest checkpoint and the listing of each namespace."""
        queries = _queries(self.pairs(), self.attempted, paging, light)
        expected = observe_oracle(oracle or self.oracle, queries)
        problems = []
        views = (
            {"fresh saver": self.observe_fresh(queries)}
            if savers is None
            else {who: observe_saver(saver, queries) for who, saver in savers.items()}
        )
        for who, got in views.items():
            for q in queries:
                d = compare(q, expected[q], got[q])
                if d:
                    problems.append(f"{who}: {d}")
        return problems

    def check_between(self, before: Oracle, after: Oracle, per_task: bool = False) -> list[str]:
        """Differences between what a fresh saver reads and both what ``before`` and what ``after`` hold."""
        queries = _queries(self.pairs(), self.attempted)
        b, a = observe_oracle(before, queries), observe_oracle(after, queries)
        got = self.observe_fresh(queries)
        return [f"fresh saver: {d}" for q in queries if (d := compare_between(q, b[q], a[q], got[q], per_task))]


def writes_config(thread: str, ns: str, n: int, run: str | None) -> RunnableConfig:
    """The config LangGraph passes to put_writes: the checkpoint's, with the run's id in its metadata."""
    config = cfg(thread, ns, cid(n))
    if run is not None:
        config["metadata"] = {"run_id": run}
    return config


def put_committed(op: Op, spec: PutSpec) -> bool:
    """Whether the log shows this put's commit: its head PUT landed, or its detached record PUT did."""
    codec = op.saver.plans.codec
    for request, reply in op.applied:
        if not isinstance(request, Put) or not isinstance(reply, Written):
            continue
        if request.key.endswith("/head") and codec.peek_head_id(request.key, request.body) == spec.id:
            return True
        # A record names its id and whether it is detached.
        if (
            request.key.endswith("/checkpoint")
            and codec.peek_head_id(request.key, request.body) == spec.id
            and codec.peek_link(request.key, request.body)[1]
        ):
            return True
    return False


# ------------------------------------------------------------------------------------------------
# Interleavings
# ------------------------------------------------------------------------------------------------
def interleavings(
    build: Callable[[], tuple[Any, list[Op]]],
    judge: Callable[[Any, list[Op], str], list[str]],
    limit: int = 5000,
) -> tuple[int, list[str]]:
    """Run every schedule of the ops ``build()`` returns (each batch atomic), judging each finished run.

    Depth-first over choice points; each execution replays a schedule prefix and completes one whole
    interleaving, pushing the alternatives it passes. Returns (number of schedules, failures).
    """
    todo: list[tuple[int, ...]] = [()]
    runs = 0
    failures: list[str] = []
    while todo and runs < limit:
        prefix = todo.pop()
        ctx, ops = build()
        choices: list[int] = []
        while True:
            live = [i for i, op in enumerate(ops) if op.running]
            if not live:
                break
            if len(live) == 1:
                ops[live[0]].step()
                continue
            depth = len(choices)
            if depth < len(prefix):
                pick = prefix[depth]
            else:
                pick = live[0]
                todo.extend((*choices, alt) for alt in live[1:])
            choices.append(pick)
            ops[pick].step()
        runs += 1
        schedule = "".join("ABCDEFGH"[i] for i in choices)
        failures += [f"schedule {schedule} (batches in this order) => {f}" for f in judge(ctx, ops, schedule)]
    return runs, failures


# ------------------------------------------------------------------------------------------------
# Reports
# ------------------------------------------------------------------------------------------------
def _shape(problem: str) -> str:
    """A failure with its particulars removed (saver, ids, which listing), to group runs that broke alike."""
    text = re.sub(r"^[\w' ]*saver: ", "", problem)
    text = text.replace("list(None): ", "")
    text = re.sub(r"list\([^()]*, all namespaces\)", "list(..)", text)
    text = re.sub(r"list\([^(),]*\)", "list(..)", text)
    text = re.sub(r"\[[^\]]*\]", "[..]", text)
    text = re.sub(r"(expected|: expected) .*?(\(mid-operation\))?$", r"\2", text)
    text = re.sub(r"\bc\d+\b", "cN", text)
    return text


def summarize(title: str, failures: list[str], runs: int, limit: int = 12) -> str:
    """One line per distinct way of failing, with its first run in full."""
    distinct: dict[str, list[str]] = {}
    for f in failures:
        case, _, what = f.partition(" => ")
        distinct.setdefault(_shape(what), []).append(f)
    failed = len({f.partition(" => ")[0] for f in failures})
    lines = [f"{title}: {failed} of {runs} runs failed, {len(distinct)} distinct problem(s):"]
    for cases in list(distinct.values())[:limit]:
        case, _, what = cases[0].partition(" => ")
        lines.append(f"  * {what}")
        lines.append(f"      in: {case}" + (f"  (+{len(cases) - 1} similar)" if len(cases) > 1 else ""))
    if len(distinct) > limit:
        lines.append(f"  ... {len(distinct) - limit} more")
    return "\n".join(lines)


__all__ = [
    "PRECONDITION_FAILED",
    "Crash",
    "Held",
    "Lost",
    "Op",
    "Oracle",
    "Page",
    "PutSpec",
    "StoredObject",
    "Transient",
    "World",
    "cfg",
    "cid",
    "cname",
    "describe",
    "fault_label",
    "faults_for",
    "held_for",
    "interleavings",
    "run_plan",
    "summarize",
]
