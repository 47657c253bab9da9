"""LangGraph-level simulation: real graph runs of one thread, interleaved at every checkpointer call they make.

The plan-level simulation (``tests/sim.py``) interleaves the *requests* of the saver's plans; it never looks
*between* LangGraph's calls, where a run reads the latest checkpoint, rebuilds a ``DeltaChannel`` from the
history, writes its tasks' results and puts its next checkpoint while another run, or a UI, does the same. This
module drives whole LangGraph runs (``graph.invoke``, ``update_state``, ``Command(resume=...)``) against
``S3Saver`` / ``AsyncS3Saver`` on the in-memory bucket and chooses the order of their checkpointer calls.

How a schedule is run (:func:`explore`):

* Each **party** (a run, a rollback) runs in its own call chain, as a real run or request has: a thread of its
  own (sync API) or an asyncio task with a fresh :class:`contextvars.Context` (async API, all parties in one
  event loop, as one Agent Server process serves several runs). :data:`PARTY` names the party in that context,
  so the threads and tasks LangGraph starts for the run (it copies the run's context into them) belong to it.
* Every checkpointer call of a party (``get_tuple``, ``list``, ``get_delta_channel_history``, ``put``,
  ``put_writes``, ``delete_for_runs`` and their async twins) stops at a **gate**. The scheduler waits until the
  system is quiescent (every party is at a gate, blocked waiting on its own calls, or finished: see
  :meth:`Scheduler.settle`), then releases exactly one gated call and waits for it to return. Calls are thus
  atomic and every order of them is reachable; a hang fails loudly with every thread's stack.
* LangGraph's sync loop runs tasks and puts on a thread pool; under the harness that pool is
  :class:`PartyExecutor` (a thread per task, registered with its party), so that the scheduler knows every
  thread a party has and can tell when all of them are blocked.
* Schedules are enumerated depth-first over the choice points (quiescent points with two or more gated calls),
  each one re-run from scratch on a fresh bucket: a gated call is named by its party, method and what it is
  about (:func:`label_of`), never by ids (LangGraph's ids come from the clock, but their order follows the
  schedule), so a schedule replays exactly; a choice that is not offered on replay fails loudly.
* A **reader** (a UI: ``graph.get_state`` and ``graph.get_state_history``, each at every quiescent point, in a
  call chain of its own) observes the thread between any two calls.

The oracles live with the scenarios (``tests/test_lg_interleavings.py``); :class:`Journal` records every call
that returned, for them and for feeding LangGraph's ``InMemorySaver`` what the saver acknowledged.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import contextvars
import copy
import random
import sys
import threading
import time
import traceback
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import langgraph.pregel._executor as lg_executor
from helpers import create_task_in
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple

from langgraph_s3_checkpoint import AsyncS3Saver, S3Saver
from langgraph_s3_checkpoint._protocol.requests import Copy, DeleteIfMatch, DeleteObjects, Get, ListKeys, Put
from langgraph_s3_checkpoint.memory import MemoryBucket

SAMPLE_SEED = 27
"""The seed of :func:`explore`'s random schedules."""

REPLAY_ATTEMPTS = 3
"""Runs of one schedule before a prefix that does not replay fails the exploration."""

SETTLE_TIMEOUT = 20.0
"""Seconds the scheduler waits for quiescence before it fails the schedule (a hang, or a wait it cannot see)."""


class HarnessError(AssertionError):
    """The harness itself could not go on (a hang, a schedule that does not replay): never a finding."""


class ReplayMismatch(HarnessError):
    """A schedule's prefix offered other gated calls than on its first run: a thread reached its gate later than
    quiescence was declared (a wait the scheduler cannot see). :func:`explore` runs the schedule again."""


class RunCancelled(BaseException):
    """Raised into a cancelled party's own calls (the Agent Server cancels a run before rolling it back)."""


# -- parties and calls --------------------------------------------------------------------------------------------
@dataclass(eq=False)
class Party:
    """One call chain: a run of a graph, a rollback, an edit."""

    name: str
    work: Callable[[], Any]
    """What the party does (sync world: called in its thread; async world: returns a coroutine)."""
    threads: list[threading.Thread] = field(default_factory=list)
    starting: int = 0
    """Threads registered but not yet running their target: the party is not quiescent meanwhile."""
    outcome: Outcome | None = None
    cancelled: bool = False
    labels: collections.Counter[str] = field(default_factory=collections.Counter)
    task: asyncio.Task[Any] | None = None
    done: threading.Event = field(default_factory=threading.Event)
    """Set when the party has ended (wait on it, not on a join: the scheduler sees only condition waits)."""


@dataclass(frozen=True)
class Outcome:
    result: Any = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def __repr__(self) -> str:
        return "returned" if self.error is None else f"raised {type(self.error).__name__}: {self.error}"


@dataclass(eq=False)
class Call:
    """A checkpointer call stopped at its gate."""

    party: Party
    label: str
    thread: threading.Thread | None = None
    go: threading.Event = field(default_factory=threading.Event)
    future: asyncio.Future[None] | None = None
    cancelled: bool = False
    footprint: Footprint | None = None


PARTY: contextvars.ContextVar[Party | None] = contextvars.ContextVar("lgsim_party", default=None)
"""The party whose call chain this is; ``None`` outside any party (setup, the reader, the oracles): ungated."""


def stable_ns(ns: str) -> str:
    """A checkpoint namespace without its task ids (``sub:1f0...|inner:...`` -> ``sub|inner``)."""
    return "|".join(part.split(":")[0] for part in ns.split("|")) if ns else ""


def label_of(method: str, config: RunnableConfig | None, **about: Any) -> str:
    """What a call is, without ids: the same call of the same schedule has the same label on every replay."""
    conf = (config or {}).get("configurable", {})
    parts = [f"ns={stable_ns(conf.get('checkpoint_ns', ''))!r}"] if conf.get("checkpoint_ns") else []
    if method in ("get_tuple", "list") and conf.get("checkpoint_id"):
        parts.append("by id")
    parts += [f"{k}={v}" for k, v in about.items() if v is not None]
    return f"{method}({', '.join(parts)})"


# -- the journal: what each call did ------------------------------------------------------------------------------
@dataclass
class Entry:
    party: str | None
    saver: int
    method: str
    args: tuple[Any, ...]
    outcome: Outcome


@dataclass
class Journal:
    """Every checkpointer call that returned or raised, in the order they did (calls are serialized)."""

    entries: list[Entry] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, entry: Entry) -> None:
        with self.lock:
            self.entries.append(entry)

    def puts(self, party: str | None = None) -> list[Entry]:
        return [e for e in self.entries if e.method == "put" and (party is None or e.party == party)]


# -- the sync world --------------------------------------------------------------------------------------------------
_WAIT_CODE = threading.Condition.wait.__code__


def _blocked_on(frame: Any) -> Any:
    """The waiter a thread whose innermost frame is ``frame`` is blocked on, or ``None`` if it may be running.

    Every wait LangGraph's sync loop makes (``Future.result``, ``concurrent.futures.wait``, ``Event.wait``) ends
    in :meth:`threading.Condition.wait` on a fresh waiter lock. Blocked means: still on the line that acquires
    it, the lock locked and still in the condition's waiters (a notify releases it and then removes it)."""
    if frame is None or frame.f_code is not _WAIT_CODE:
        return None
    local = frame.f_locals
    waiter, condition = local.get("waiter"), local.get("self")
    if waiter is None or condition is None or local.get("gotit"):
        return None
    if not waiter.locked() or waiter not in condition._waiters:
        return None
    return waiter


class _Schedule:
    """What both schedulers hold: the parties, the calls gated and the one released and running."""

    def __init__(self, journal: Journal, timeout: float = SETTLE_TIMEOUT) -> None:
        self.journal = journal
        self.timeout = timeout
        self.parties: list[Party] = []
        self.gated: list[Call] = []
        self.running: Call | None = None

    # called from the scheduler's thread
    def add(self, name: str, work: Callable[[], Any]) -> Party:
        party = Party(name, work)
        self.parties.append(party)
        return party


class Scheduler(_Schedule):
    """Gates the sync parties' calls and releases one at a time (see the module docstring)."""

    def __init__(self, journal: Journal, timeout: float = SETTLE_TIMEOUT) -> None:
        super().__init__(journal, timeout)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    # called from the parties' threads
    def gate(self, method: str, label: str) -> Call | None:
        party = PARTY.get()
        if party is None:
            return None
        thread = threading.current_thread()
        with self._lock:
            party.labels[label] += 1
            n = party.labels[label]
            call = Call(party, f"{party.name}:{label}" + (f"#{n}" if n > 1 else ""), thread)
            if party.cancelled and thread is party.threads[0]:
                raise RunCancelled(call.label)
            self.gated.append(call)
            self._changed.notify_all()
        call.go.wait()
        if call.cancelled:
            raise RunCancelled(call.label)
        return call

    def leave(self, call: Call | None) -> None:
        if call is None:
            return
        with self._lock:
            assert self.running is call, (self.running, call)
            self.running = None
            self._changed.notify_all()

    def register(self, party: Party, thread: threading.Thread) -> None:
        with self._lock:
            party.threads.append(thread)
            party.starting += 1

    def started(self, party: Party) -> None:
        with self._lock:
            party.starting -= 1
            self._changed.notify_all()

    # called from the scheduler's thread
    def start(self) -> None:
        for party in self.parties:
            thread = threading.Thread(target=self._main, args=(party,), name=f"party {party.name}", daemon=True)
            self.register(party, thread)
            thread.start()

    def _main(self, party: Party) -> None:
        self.started(party)
        PARTY.set(party)  # this thread's own context: LangGraph copies it into the run's threads
        try:
            party.outcome = Outcome(result=party.work())
        except BaseException as error:
            party.outcome = Outcome(error=error)
        finally:
            party.done.set()
            with self._lock:
                self._changed.notify_all()

    def cancel(self, party: Party) -> None:
        """Cancel a party as asyncio cancels a task: the call its own thread is waiting in raises
        :class:`RunCancelled`, and so does every later call of that thread; calls its background threads
        already made (LangGraph's puts in flight) still run when scheduled."""
        with self._lock:
            party.cancelled = True
            for call in [c for c in self.gated if c.party is party and c.thread is party.threads[0]]:
                self.gated.remove(call)
                call.cancelled = True
                call.go.set()
            self._changed.notify_all()

    def release(self, call: Call) -> None:
        with self._lock:
            assert self.running is None
            self.gated.remove(call)
            self.running = call
            call.go.set()

    def wait_returned(self, call: Call) -> None:
        deadline = time.monotonic() + self.timeout
        with self._lock:
            while self.running is call:
                if time.monotonic() > deadline:
                    raise HarnessError(f"{call.label} did not return within {self.timeout} s:\n{self.dump()}")
                self._changed.wait(0.01)

    def _state(self) -> tuple[Any, ...] | None:
        """What every live party thread is blocked on, or ``None`` if one may be running (lock held)."""
        if self.running is not None:
            return None
        frames = sys._current_frames()
        at_gate = {id(c.thread) for c in self.gated}
        state: list[Any] = [tuple(id(c) for c in self.gated)]
        for party in self.parties:
            if party.starting:
                return None
            for thread in party.threads:
                if not thread.is_alive() or thread.ident not in frames:
                    continue  # finished (or finishing: it can wake nobody any more)
                if id(thread) in at_gate:
                    state.append(("gate", thread))
                    continue
                waiter = _blocked_on(frames[thread.ident])
                if waiter is None:
                    return None
                state.append(("wait", thread, waiter))
        return tuple(state)

    def settle(self) -> list[Call]:
        """Wait for quiescence; the gated calls, by label. Two looks at every thread, the second after the
        others had a chance to run, must find each blocked on the very same waiter (a thread woken in between
        has acquired its waiter, or waits on a new one), and the same calls gated."""
        deadline = time.monotonic() + self.timeout
        while True:
            with self._lock:
                first = self._state()
            if first is not None:
                time.sleep(0.0001)
                with self._lock:
                    second = self._state()
                    if (
                        second is not None
                        and len(first) == len(second)
                        and all(a is b or a == b for a, b in zip(first, second, strict=True))
                    ):
                        return sorted(self.gated, key=lambda c: c.label)
            if time.monotonic() > deadline:
                raise HarnessError(f"no quiescence after {self.timeout} s:\n{self.dump()}")
            with self._lock:
                self._changed.wait(0.0005)

    def finished(self) -> bool:
        return all(p.outcome is not None for p in self.parties)

    def join(self) -> None:
        for party in self.parties:
            for thread in party.threads:
                thread.join(self.timeout)
                if thread.is_alive():
                    raise HarnessError(f"{thread.name} did not end:\n{self.dump()}")

    def dump(self) -> str:
        frames = sys._current_frames()
        lines = [f"gated: {[c.label for c in self.gated]}, running: {self.running and self.running.label}"]
        for party in self.parties:
            for thread in party.threads:
                if thread.ident in frames:
                    stack = "".join(traceback.format_stack(frames[thread.ident])[-12:])
                    lines.append(f"-- {thread.name} ({party.name}):\n{stack}")
        return "\n".join(lines)


class PartyExecutor(concurrent.futures.Executor):
    """LangGraph's thread pool, for a party: a thread per task, registered with the party's scheduler."""

    def __init__(self, scheduler: Scheduler, party: Party) -> None:
        self.scheduler = scheduler
        self.party = party
        self.futures: list[concurrent.futures.Future[Any]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        context = contextvars.copy_context()  # as ContextThreadPoolExecutor does

        def run() -> None:
            self.scheduler.started(self.party)
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = context.run(fn, *args, **kwargs)
            except BaseException as error:
                future.set_exception(error)
            else:
                future.set_result(result)

        thread = threading.Thread(target=run, name=f"{self.party.name} task", daemon=True)
        self.scheduler.register(self.party, thread)
        self.futures.append(future)
        thread.start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if wait:
            concurrent.futures.wait(self.futures)


@contextlib.contextmanager
def party_executors(scheduler: Scheduler) -> Iterator[None]:
    """While active, LangGraph's sync loop gets a :class:`PartyExecutor` inside a party, its own pool outside."""
    original = lg_executor.get_executor_for_config  # type: ignore[attr-defined]  # LangGraph's own, replaced here

    @contextlib.contextmanager
    def executor_for(config: RunnableConfig | None) -> Iterator[concurrent.futures.Executor]:
        party = PARTY.get()
        if party is None:
            with original(config) as executor:
                yield executor
            return
        executor = PartyExecutor(scheduler, party)
        try:
            yield executor
        finally:
            executor.shutdown()

    lg_executor.get_executor_for_config = executor_for  # type: ignore[attr-defined]
    try:
        yield
    finally:
        lg_executor.get_executor_for_config = original  # type: ignore[attr-defined]


# -- the async world: every party a task of one event loop -------------------------------------------------------------
class AsyncScheduler(_Schedule):
    """The scheduler for ``AsyncS3Saver`` parties: tasks of one event loop (one Agent Server process).

    Quiescent: no released call is running and the loop has nothing ready to run but the scheduler itself, so
    every party task waits on a gate or on its own tasks. Nodes must be ``async def`` (a sync node runs on a
    thread the loop cannot see)."""

    def gate(self, method: str, label: str) -> Call | None:
        """A blocking call outside any party (a sync saver writing the base history) passes; inside one it would
        block the event loop: refused."""
        if PARTY.get() is not None:
            raise HarnessError(f"a blocking {method} inside an async party")
        return None

    async def agate(self, method: str, label: str) -> Call | None:
        party = PARTY.get()
        if party is None:
            return None
        party.labels[label] += 1
        n = party.labels[label]
        call = Call(party, f"{party.name}:{label}" + (f"#{n}" if n > 1 else ""))
        call.future = asyncio.get_running_loop().create_future()
        self.gated.append(call)
        await call.future
        return call

    def leave(self, call: Call | None) -> None:
        if call is not None:
            assert self.running is call
            self.running = None

    def start(self) -> None:
        for party in self.parties:
            context = contextvars.Context()
            context.run(PARTY.set, party)
            party.task = create_task_in(asyncio.get_running_loop(), self._main(party), context)

    async def _main(self, party: Party) -> None:
        try:
            party.outcome = Outcome(result=await party.work())
        except BaseException as error:
            party.outcome = Outcome(error=error)
        finally:
            party.done.set()

    def release(self, call: Call) -> None:
        assert self.running is None and call.future is not None
        self.gated.remove(call)
        self.running = call
        call.future.set_result(None)

    async def wait_returned(self, call: Call) -> None:
        deadline = time.monotonic() + self.timeout
        while self.running is call:
            if time.monotonic() > deadline:
                raise HarnessError(f"{call.label} did not return within {self.timeout} s")
            await asyncio.sleep(0)

    async def settle(self) -> list[Call]:
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + self.timeout
        idle = 0
        while idle < 2:
            await asyncio.sleep(0 if self.running is None else 0.0002)
            ready = loop._ready  # type: ignore[attr-defined]
            idle = idle + 1 if self.running is None and not ready else 0
            if time.monotonic() > deadline:
                raise HarnessError(f"no quiescence after {self.timeout} s: gated {[c.label for c in self.gated]}")
        return sorted(self.gated, key=lambda c: c.label)

    def finished(self) -> bool:
        return all(p.outcome is not None for p in self.parties)


# -- what a call touched ------------------------------------------------------------------------------------------
@dataclass
class Footprint:
    """What a call read and wrote: keys of the bucket (a LIST reads every key under its prefix) and entries of its
    saver's memory (the head it remembers per namespace), with the value it left in each.

    Two calls whose footprints do not conflict commute: in either order every request gets the same reply, and
    the bucket and the memories are left the same (two calls that leave the same value in a memory entry, and
    do not read it, commute). The partial-order reduction of :func:`explore` rests on this."""

    reads: set[str] = field(default_factory=set)
    prefixes: set[str] = field(default_factory=set)
    writes: set[str] = field(default_factory=set)
    remembered: set[tuple[str, ...]] = field(default_factory=set)
    """Memory entries read: (saver, thread, namespace)."""
    memorized: dict[tuple[str, ...], Any] = field(default_factory=dict)
    """Memory entries written, with the value the call left (namespace ``*``: every namespace of the thread)."""

    def add(self, other: Footprint) -> None:
        self.reads |= other.reads
        self.prefixes |= other.prefixes
        self.writes |= other.writes
        self.remembered |= other.remembered
        for entry, value in other.memorized.items():
            if entry in self.memorized and self.memorized[entry] != value:
                self.memorized[entry] = _Changed()
            else:
                self.memorized[entry] = value

    def _reads(self, key: str) -> bool:
        return key in self.reads or key in self.writes or any(key.startswith(p) for p in self.prefixes)

    def _reads_memory(self, entry: tuple[str, ...], value: Any) -> bool:
        def overlaps(other: tuple[str, ...]) -> bool:
            return (other[:2] == entry[:2] and "*" in (other[2], entry[2])) or other == entry

        if any(overlaps(e) for e in self.remembered):
            return True
        return any(overlaps(e) and (e != entry or v != value) for e, v in self.memorized.items())

    def conflicts(self, other: Footprint) -> bool:
        return (
            any(other._reads(k) for k in self.writes)
            or any(self._reads(k) for k in other.writes)
            or any(other._reads_memory(e, v) for e, v in self.memorized.items())
            or any(self._reads_memory(e, v) for e, v in other.memorized.items())
        )


class _Changed:
    """A memory entry one footprint left with two different values (it conflicts with any other value)."""

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]


def footprint_of(request: Any, into: Footprint) -> None:
    if isinstance(request, Get):
        into.reads.add(request.key)
    elif isinstance(request, ListKeys):
        into.prefixes.add(request.prefix)
    elif isinstance(request, Put | DeleteIfMatch):
        into.writes.add(request.key)  # a conditional write reads the key too: a write conflicts with reads
    elif isinstance(request, DeleteObjects):
        into.writes.update(request.keys)
    elif isinstance(request, Copy):
        into.reads.add(request.source)
        into.writes.add(request.target)
    else:
        into.prefixes.add("")  # anything else: as if it read everything ...
        into.writes.add("")  # ... and wrote


class RecordingBucket(MemoryBucket):
    """The in-memory bucket, recording what each request touches into :attr:`recording` while it is set."""

    recording: Footprint | None = None

    def snapshot(self) -> Any:
        """The bucket's objects, to :meth:`restore` into another (objects are replaced on write, never changed)."""
        with self._lock:
            return dict(self._objects), list(self._sorted)

    def restore(self, snapshot: Any) -> None:
        objects, keys = snapshot
        with self._lock:
            self._objects, self._sorted = dict(objects), list(keys)

    def execute(self, request: Any) -> Any:
        if self.recording is not None:
            footprint_of(request, self.recording)
        return super().execute(request)


# -- the gated savers -------------------------------------------------------------------------------------------------
class InlineExecutor(concurrent.futures.Executor):
    """Runs each submitted request at once, in the caller's thread: the saver's pool, under the harness.

    A call is atomic here anyway (one at a time), and the in-memory bucket applies each request atomically; the
    order of the requests *within* a call is the plan-level simulation's business (``tests/sim.py``). Without
    the hops to a pool, the async world has no thread at all."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:
            future.set_exception(error)
        return future


LIST_INLINE = 8
"""inline_threshold of the simulated savers: a graph's list channel (``steps``, ``messages``) of two elements or more is
a large value, so that it is stored as appended to its base (codec.Appended) at every interleaving."""
LIST_TAIL = 12
"""appended_tail_bytes of the simulated savers: about one appended element, then a part."""
LIST_PARTS = 2
"""parts_merged of the simulated savers: every second part merges two into one."""


def large_lists(saver: Any) -> Any:
    """``saver`` storing the graphs' small lists as large ones (:data:`LIST_INLINE`, :data:`LIST_TAIL`,
    :data:`LIST_PARTS`)."""
    saver.plans.inline_threshold = LIST_INLINE
    saver.plans.appended_tail_bytes = LIST_TAIL
    saver.plans.parts_merged = LIST_PARTS
    return saver


def inline(saver: Any) -> Any:
    """``saver`` with its requests sent in the calling thread (:class:`InlineExecutor`), and its read cache's hits
    recorded as reads of the bucket (a hit answers a GET the footprint must still show)."""
    io = saver.bucket_io
    io._pool = InlineExecutor()
    cached = io._cached

    def recorded(request: Any) -> Any:
        bucket = io.backend
        if isinstance(bucket, RecordingBucket) and bucket.recording is not None and isinstance(request, Get):
            bucket.recording.reads.add(request.key)
        return cached(request)

    io._cached = recorded
    return saver


def record_memory(saver: Any, name: str) -> None:
    """Record, into the bucket's current footprint, the entries of ``saver``'s memory each call reads and writes.

    The memory is one LRU budget; its order matters only when something is evicted, which these small worlds
    never come near (checked at every call)."""
    memory = saver.plans.recall
    bucket = saver.bucket_io.backend

    def recording() -> Footprint | None:
        if memory.retained_bytes > memory.max_bytes // 2:
            raise HarnessError("the saver's memory is half full: the reduction's argument (no eviction) fails")
        return bucket.recording if isinstance(bucket, RecordingBucket) else None

    def wrap(method: str, entry: Callable[..., tuple[str, ...]], value: Callable[..., Any] | None) -> None:
        original = getattr(memory, method)

        def recorded(*args: Any) -> Any:
            footprint = recording()
            if footprint is not None:
                if value is None:
                    footprint.remembered.add(entry(*args))
                else:
                    footprint.memorized[entry(*args)] = value(*args)
            return original(*args)

        setattr(memory, method, recorded)

    wrap("head", lambda thread, ns, _: (name, thread, ns), None)
    wrap("saw_head", lambda thread, ns, _: (name, thread, ns), lambda thread, ns, seen: seen)
    wrap("forget_namespace", lambda thread, ns: (name, thread, ns), lambda *_: None)
    wrap("forget_thread", lambda thread: (name, thread, "*"), lambda *_: None)
    wrap("blob_written", lambda thread, ns, *_: (name, f"blob ages of {thread}", ns), None)
    wrap("wrote_blobs", lambda thread, ns, *_: (name, f"blob ages of {thread}", ns), lambda *a: repr(a))


def recordable(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """A call's arguments as the journal keeps them: configs reduced to what a saver reads of them (LangGraph's
    configs also carry its runtime, which cannot be copied), everything else copied deeply (LangGraph may change
    a channel value it shares with a put in flight)."""

    def keep(arg: Any) -> Any:
        if isinstance(arg, dict) and "configurable" in arg:
            configurable = {
                k: v
                for k, v in arg["configurable"].items()
                if not k.startswith("__") and isinstance(v, str | int | float | bool)
            }
            return {"configurable": configurable, "metadata": copy.deepcopy(dict(arg.get("metadata") or {}))}
        return copy.deepcopy(arg)

    return tuple(keep(a) for a in args)


class _Gating:
    """What the sync and async gated savers share: the journal, and each call's footprint."""

    scheduler: Any
    journal: Journal
    index: int
    client: Any

    def _setup_gating(self, scheduler: Any, journal: Journal, index: int) -> None:
        self.scheduler, self.journal, self.index = scheduler, journal, index
        large_lists(inline(self))
        record_memory(self, str(index))

    def _begin(self, gate: Call | None) -> Footprint | None:
        bucket = self.client
        if gate is None or not isinstance(bucket, RecordingBucket):
            return None
        gate.footprint = bucket.recording = Footprint()
        return gate.footprint

    def _end(self, gate: Call | None, method: str, config: Any, recorded: tuple[Any, ...], outcome: Outcome) -> None:
        party = PARTY.get()
        self.journal.add(Entry(party.name if party else None, self.index, method, recorded, outcome))
        if gate is not None and gate.footprint is not None:
            self.client.recording = None
        self.scheduler.leave(gate)


class GatedSaver(_Gating, S3Saver):
    """``S3Saver`` whose every checkpointer call waits at the scheduler's gate inside a party."""

    def __init__(self, *, scheduler: Scheduler, journal: Journal, index: int = 0, **kwargs: Any) -> None:
        S3Saver.__init__(self, **kwargs)
        self._setup_gating(scheduler, journal, index)

    def _gated(self, method: str, label: str, config: Any, args: tuple[Any, ...], call: Callable[[], Any]) -> Any:
        gate = self.scheduler.gate(method, label)
        outcome = Outcome(error=HarnessError("the call did not end"))
        recorded = args
        try:
            recorded = recordable(args)  # LangGraph may change shared channel values after the call
            self._begin(gate)
            result = call()
            outcome = Outcome(result=result)
            return result
        except BaseException as error:
            outcome = Outcome(error=error)
            raise
        finally:
            self._end(gate, method, config, recorded, outcome)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._gated(
            "get_tuple", label_of("get_tuple", config), config, (config,), lambda: S3Saver.get_tuple(self, config)
        )

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> Iterator[CheckpointTuple]:
        label = label_of("list", config, before="yes" if kwargs.get("before") else None, limit=kwargs.get("limit"))
        items = self._gated("list", label, config, (config, kwargs), lambda: [*S3Saver.list(self, config, **kwargs)])
        return iter(items)

    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Any:
        return self._gated(
            "get_delta_channel_history",
            label_of("get_delta_channel_history", config),
            config,
            (config, channels),
            lambda: S3Saver.get_delta_channel_history(self, config=config, channels=channels),
        )

    def put(self, config: RunnableConfig, checkpoint: Any, metadata: Any, new_versions: Any) -> RunnableConfig:
        return self._gated(
            "put",
            label_of("put", config, source=metadata.get("source"), step=metadata.get("step")),
            config,
            (config, checkpoint, metadata, new_versions),
            lambda: S3Saver.put(self, config, checkpoint, metadata, new_versions),
        )

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._gated(
            "put_writes",
            label_of("put_writes", config, task=task_path or None, channels="+".join(c for c, _ in writes)),
            config,
            (config, writes, task_id, task_path),
            lambda: S3Saver.put_writes(self, config, writes, task_id, task_path),
        )

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._gated(
            "delete_for_runs",
            "delete_for_runs()",
            None,
            (list(run_ids),),
            lambda: S3Saver.delete_for_runs(self, run_ids),
        )


class AsyncGatedSaver(_Gating, AsyncS3Saver):
    """``AsyncS3Saver`` whose every async checkpointer call waits at the async scheduler's gate in a party."""

    def __init__(self, *, scheduler: AsyncScheduler, journal: Journal, index: int = 0, **kwargs: Any) -> None:
        AsyncS3Saver.__init__(self, **kwargs)
        self._setup_gating(scheduler, journal, index)

    async def _agated(
        self, method: str, label: str, config: Any, args: tuple[Any, ...], call: Callable[[], Any]
    ) -> Any:
        gate = await self.scheduler.agate(method, label)
        outcome = Outcome(error=HarnessError("the call did not end"))
        recorded = args
        try:
            recorded = recordable(args)
            self._begin(gate)
            result = await call()
            outcome = Outcome(result=result)
            return result
        except BaseException as error:
            outcome = Outcome(error=error)
            raise
        finally:
            self._end(gate, method, config, recorded, outcome)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._agated(
            "get_tuple", label_of("get_tuple", config), config, (config,), lambda: AsyncS3Saver.aget_tuple(self, config)
        )

    async def alist(self, config: RunnableConfig | None, **kwargs: Any) -> AsyncIterator[CheckpointTuple]:
        label = label_of("list", config, before="yes" if kwargs.get("before") else None, limit=kwargs.get("limit"))

        async def read() -> list[CheckpointTuple]:
            return [t async for t in AsyncS3Saver.alist(self, config, **kwargs)]

        for item in await self._agated("list", label, config, (config, kwargs), read):
            yield item

    async def aget_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Any:
        return await self._agated(
            "get_delta_channel_history",
            label_of("get_delta_channel_history", config),
            config,
            (config, channels),
            lambda: AsyncS3Saver.aget_delta_channel_history(self, config=config, channels=channels),
        )

    async def aput(self, config: RunnableConfig, checkpoint: Any, metadata: Any, new_versions: Any) -> RunnableConfig:
        return await self._agated(
            "put",
            label_of("put", config, source=metadata.get("source"), step=metadata.get("step")),
            config,
            (config, checkpoint, metadata, new_versions),
            lambda: AsyncS3Saver.aput(self, config, checkpoint, metadata, new_versions),
        )

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await self._agated(
            "put_writes",
            label_of("put_writes", config, task=task_path or None, channels="+".join(c for c, _ in writes)),
            config,
            (config, writes, task_id, task_path),
            lambda: AsyncS3Saver.aput_writes(self, config, writes, task_id, task_path),
        )

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._agated(
            "delete_for_runs",
            "delete_for_runs()",
            None,
            (list(run_ids),),
            lambda: AsyncS3Saver.adelete_for_runs(self, run_ids),
        )


# -- exploring the schedules --------------------------------------------------------------------------------------
@dataclass
class Point:
    """A quiescent point of a schedule: where the reader looks."""

    index: int
    schedule: tuple[str, ...]
    """The calls released before it, in order."""
    gated: tuple[str, ...]


@dataclass
class Exploration:
    schedules: int = 0
    """Complete schedules run (each from scratch)."""
    points: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    distinct: set[tuple[str, ...]] = field(default_factory=set)
    """The different schedules run (a sample may draw one twice)."""
    replays_retried: int = 0
    """Schedules run again because their prefix did not replay (:class:`ReplayMismatch`)."""
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    """How often each distinct outcome (:meth:`World.outcome`) was seen."""


class World:
    """One run of a scenario: what :func:`explore` needs from it."""

    journal: Journal
    bucket: RecordingBucket
    waits_for: Mapping[str, tuple[str, ...]] = MappingProxyType({})
    """Party -> the parties that wait for it to end (their next call may appear right after its last one)."""

    def start(self, scheduler: Any) -> None:
        """Add the parties to ``scheduler`` (sync: ``Scheduler``; async: ``AsyncScheduler``)."""
        raise NotImplementedError

    def at_point(self, point: Point) -> None:
        """Called at every quiescent point, sync world (the reader reads here)."""

    async def aat_point(self, point: Point) -> None:
        """Called at every quiescent point, async world."""

    def at_release(self, call: Call, scheduler: Any) -> bool:
        """Called before ``call`` is released; ``False``: the world handled it (a pseudo call, e.g. a cancel)."""
        return True

    def judge(self) -> list[str]:
        """The oracle's findings for the finished schedule."""
        raise NotImplementedError

    def outcome(self) -> str:
        """What the schedule ended with, in a few words (to count distinct outcomes)."""
        return ""


@dataclass
class Event:
    """A released call, as the reduction sees it."""

    label: str
    party: str
    thread: Any
    footprint: Footprint
    enabled_before: tuple[str, ...]
    appeared: tuple[str, ...] = ()
    """Calls first gated at the point right after it, of its party or of a party waiting for its party to end
    (:attr:`World.waits_for`): it may have enabled them."""


@dataclass
class _Node:
    enabled: tuple[str, ...]
    backtrack: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)


class _Search:
    """Depth-first over schedules (a schedule: the labels of the released calls, in order), either every one
    (exhaustive) or with dynamic partial-order reduction (Flanagan and Godefroid, POPL 2005).

    The reduction explores at least one schedule of every class of schedules that differ only in the order of
    adjacent *independent* calls (calls whose footprints do not conflict: see :class:`Footprint`). After each
    schedule it finds, for every call, the last earlier call of another thread that it conflicts with and
    that does not happen before it by any other chain (program order of a thread, a call that let its party
    issue it, a conflict in between); where the two could have been released in the other order, the later one
    (or, if it was not gated yet, every call that was) is added to the choices to try at the earlier one's point.
    """

    def __init__(self, reduce: bool, sample: random.Random | None = None) -> None:
        self.reduce = reduce
        self.sample = sample
        self.path: list[_Node] = []
        self.next_prefix: tuple[str, ...] | None = ()

    def choose(self, depth: int, gated: list[Call], prefix: tuple[str, ...], schedule: list[str]) -> Call:
        labels = tuple(c.label for c in gated)
        if self.sample is not None:  # a random schedule: no prefix, no tree
            return gated[labels.index(self.sample.choice(labels))]
        if depth < len(prefix):
            if prefix[depth] not in labels:
                raise ReplayMismatch(
                    f"schedule {_text(prefix)} does not replay: at call {depth} the gated are {labels}"
                )
            pick = prefix[depth]
            if depth < len(self.path) and self.path[depth].enabled != labels:
                raise ReplayMismatch(
                    f"at call {depth} of {_text(prefix)}: gated {labels}, before {self.path[depth].enabled}"
                )
        else:
            pick = labels[0]
        if depth >= len(self.path):
            node = _Node(labels, backtrack={pick} if self.reduce else set(labels))
            self.path.append(node)
        self.path[depth].done.add(pick)
        return gated[labels.index(pick)]

    def finished(self, events: list[Event]) -> None:
        """After a complete schedule: add the races' alternatives, then pick the next schedule (or none)."""
        if self.sample is not None:
            return  # next_prefix stays (): another random schedule
        del self.path[len(events) :]
        if self.reduce:
            self._add_races(events)
        while self.path:
            node = self.path[-1]
            left = sorted(node.backtrack - node.done)
            if left:
                self.next_prefix = (*(e.label for e in events[: len(self.path) - 1]), left[0])
                return
            self.path.pop()
        self.next_prefix = None

    def _add_races(self, events: list[Event]) -> None:
        before: list[set[int]] = []  # before[j]: the events that happen before event j
        for j, e in enumerate(events):
            direct = {
                i
                for i in range(j)
                if events[i].thread is e.thread
                or e.label in events[i].appeared
                or events[i].footprint.conflicts(e.footprint)
            }
            before.append(set().union(*(before[i] | {i} for i in direct)) if direct else set())
            races = [
                i
                for i in direct
                if events[i].thread is not e.thread
                and e.label not in events[i].appeared
                and events[i].footprint.conflicts(e.footprint)
                and not any(i in before[k] for k in direct if k != i)
            ]
            if not races:
                continue
            i = max(races)
            node = self.path[i]
            same_thread = [f.label for f in events[i : j + 1] if f.thread is e.thread and f.label in node.enabled]
            node.backtrack |= {same_thread[0]} if same_thread else set(node.enabled)


def _text(schedule: Sequence[str]) -> str:
    return " > ".join(schedule) if schedule else "(no call)"


def explore(
    build: Callable[[Any, Journal], World],
    *,
    asynchronous: bool = False,
    reduce: bool = False,
    limit: int | None = None,
    sample: int | None = None,
    progress: Callable[[Exploration], None] | None = None,
) -> Exploration:
    """Run the schedules of the world ``build(scheduler, journal)`` makes, each from scratch, depth-first:
    every one, or (``reduce``) one of each class of schedules that differ only in the order of independent calls.
    ``limit`` stops after that many schedules (for a quick look: the counts say how many ran). ``sample`` runs
    that many random schedules instead (each choice uniform among the gated calls, seeded: the same schedules on
    every run); :attr:`Exploration.distinct` counts the different ones."""
    found = Exploration()
    started = time.monotonic()
    search = _Search(reduce, random.Random(SAMPLE_SEED) if sample is not None else None)
    if sample is not None:
        limit = sample
    while search.next_prefix is not None and (limit is None or found.schedules < limit):
        prefix = search.next_prefix
        for attempt in range(REPLAY_ATTEMPTS):
            try:
                if asynchronous:
                    asyncio.run(_run_async(build, prefix, search, found))
                else:
                    _run_sync(build, prefix, search, found)
                break
            except ReplayMismatch:
                # The search state is untouched up to the mismatch (choose raises before it records anything), so
                # the same schedule runs again from scratch; the threads of the abandoned run stay parked at
                # their gates (daemons, never released).
                found.replays_retried += 1
                if attempt == REPLAY_ATTEMPTS - 1:
                    raise
        found.schedules += 1
        if progress is not None and found.schedules % 100 == 0:
            progress(found)
    found.seconds = time.monotonic() - started
    return found


class _Recorder:
    """Turns one schedule's released calls into :class:`Event` s, with the reader's footprint folded in."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.events: list[Event] = []
        self.schedule: list[str] = []
        self.previous: tuple[str, ...] = ()

    def point(self, gated: list[Call]) -> tuple[Point, Footprint]:
        labels = tuple(c.label for c in gated)
        if self.events:
            last = self.events[-1]
            new = [c for c in gated if c.label not in self.previous]
            waiting = self.world.waits_for.get(last.party, ())
            strangers = [c.label for c in new if c.party.name != last.party and c.party.name not in waiting]
            if strangers:
                raise HarnessError(f"{strangers} appeared after {last.label} was released: quiescence was not real")
            last.appeared = tuple(c.label for c in new)
        self.previous = labels
        reader = Footprint()
        self.world.bucket.recording = reader
        return Point(len(self.schedule), tuple(self.schedule), labels), reader

    def after_point(self, reader: Footprint) -> None:
        self.world.bucket.recording = None
        if self.events:
            # The reader's effect on what comes next: what it left in its saver's memory. Its reads of the bucket
            # change nothing, and what it checks (which checkpoints are committed, their chains) changes only
            # with puts, which conflict with each other: every order of them is explored.
            self.events[-1].footprint.add(Footprint(memorized=reader.memorized, remembered=reader.remembered))

    def released(self, call: Call, enabled: tuple[str, ...]) -> None:
        self.schedule.append(call.label)
        self.events.append(Event(call.label, call.party.name, call.thread or call, Footprint(), enabled))

    def returned(self, call: Call) -> None:
        if call.footprint is not None:
            self.events[-1].footprint.add(call.footprint)


def _finish(world: World, recorder: _Recorder, search: _Search, found: Exploration) -> None:
    found.failures += [f"schedule {_text(recorder.schedule)} => {f}" for f in world.judge()]
    found.outcomes[world.outcome()] += 1
    found.distinct.add(tuple(recorder.schedule))
    search.finished(recorder.events)


def _run_sync(
    build: Callable[[Any, Journal], World], prefix: tuple[str, ...], search: _Search, found: Exploration
) -> None:
    journal = Journal()
    scheduler = Scheduler(journal)
    with party_executors(scheduler):
        world = build(scheduler, journal)
        recorder = _Recorder(world)
        world.start(scheduler)
        scheduler.start()
        while True:
            gated = scheduler.settle()
            point, reader = recorder.point(gated)
            world.at_point(point)
            recorder.after_point(reader)
            found.points += 1
            if not gated:
                if not scheduler.finished():
                    raise HarnessError(f"nothing gated and parties still running:\n{scheduler.dump()}")
                break
            try:
                pick = search.choose(len(recorder.schedule), gated, prefix, recorder.schedule)
            except ReplayMismatch as error:
                raise ReplayMismatch(f"{error}\n{scheduler.dump()}") from None
            recorder.released(pick, point.gated)
            if world.at_release(pick, scheduler):
                scheduler.release(pick)
                scheduler.wait_returned(pick)
                recorder.returned(pick)
        scheduler.join()
    _finish(world, recorder, search, found)


async def _run_async(
    build: Callable[[Any, Journal], World], prefix: tuple[str, ...], search: _Search, found: Exploration
) -> None:
    journal = Journal()
    scheduler = AsyncScheduler(journal)
    world = build(scheduler, journal)
    recorder = _Recorder(world)
    world.start(scheduler)
    scheduler.start()
    while True:
        gated = await scheduler.settle()
        point, reader = recorder.point(gated)
        await world.aat_point(point)
        recorder.after_point(reader)
        found.points += 1
        if not gated:
            if not scheduler.finished():
                raise HarnessError(
                    f"nothing gated, parties still running: {[p.name for p in scheduler.parties if p.outcome is None]}"
                )
            break
        pick = search.choose(len(recorder.schedule), gated, prefix, recorder.schedule)
        recorder.released(pick, point.gated)
        if world.at_release(pick, scheduler):
            scheduler.release(pick)
            await scheduler.wait_returned(pick)
            recorder.returned(pick)
    await asyncio.gather(*(p.task for p in scheduler.parties if p.task is not None))
    _finish(world, recorder, search, found)
