"""Real LangGraph runs of one thread, interleaved at every checkpointer call they make (``tests/lgsim.py``).

Each family is a graph, a base history written before the parties start, and two parties (runs, an edit, a time
travel, a rollback) whose checkpointer calls are released one at a time in every order; a reader (a UI:
``graph.get_state`` and ``graph.get_state_history``, in a call chain of its own, through the first party's saver,
so in the same process as that run) looks at the thread at every point between two calls. After each schedule a
fresh saver (a new process) reads the thread and the family's oracle judges it:

* two parties that both continue from the latest: the history is linear (no checkpoint has two children,
  ``list()`` shows nothing off the chain), each party's committed checkpoints are one block of it (a serial
  order), a party that did not return raised ``CheckpointConflictError``, every put that returned is in the
  history and none that raised, never two successful puts on one parent;
* a party that travels in time (``update_state`` on an older checkpoint, a replay, ``Command(resume=...)``
  addressed at an older checkpoint by id) never raises, and its fork holds exactly what the same time travel
  holds on LangGraph's ``InMemorySaver`` from the same history;
* a rollback (``delete_for_runs`` of a cancelled run, as the Agent Server's ``multitask_strategy="rollback"``
  does): once it returns, the thread reads exactly as before the run began;
* always: LangGraph's ``InMemorySaver`` fed exactly the puts and writes the saver acknowledged, in the order they
  returned, shows the same thread (every checkpoint, its writes, ``get_state_history``); the reader never raised,
  and every checkpoint it saw is still there (unless rolled back).

In CI the small families run every schedule and the larger ones ``CI_SAMPLE`` seeded random schedules;
``LGS3_LG_SIM=full`` runs every schedule of every family and adds the larger families (``docs/testing.md``);
``LGS3_LG_SIM_STATS=path`` writes the counts. ``run_schedule`` replays one schedule by its labels (as a failure
prints them): ``test_a_replay_continues_its_fork_past_a_concurrent_step`` keeps the one that found a defect.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import operator
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import pytest
from helpers import create_task_in, write_stats
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    create_checkpoint,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Durability, interrupt
from lgsim import (
    AsyncGatedSaver,
    AsyncScheduler,
    Call,
    Exploration,
    GatedSaver,
    Journal,
    Point,
    RecordingBucket,
    Scheduler,
    World,
    _run_sync,
    _Search,
    explore,
    inline,
    large_lists,
)
from sim import Oracle
from typing_extensions import TypedDict

from langgraph_s3_checkpoint import CheckpointConflictError, S3Saver

pytestmark = pytest.mark.memory
"""No S3 server: every test of this module runs in memory (``pytest -m memory``)."""

THREAD = "t"
NOT_AS_BEFORE = "[not as before the run] "
"""Marks the rollback oracle's finding that the thread does not read as before the rolled-back run began."""
FORK_REFUSED = "[fork refused] "
"""Marks the finding that a time traveller's run was refused (``CheckpointConflictError``) though it forked."""
EXPLORED: dict[str, Exploration] = {}
FULL = os.environ.get("LGS3_LG_SIM") == "full"
STATS: dict[str, dict[str, Any]] = {}


# -- graphs ------------------------------------------------------------------------------------------------------------
def _extend(state: list[str], batches: Sequence[list[str]]) -> list[str]:
    return [*state, *(m for batch in batches for m in batch)]


class Chat(TypedDict):
    messages: Annotated[list[str], DeltaChannel(_extend)]


class Steps(TypedDict):
    steps: Annotated[list[str], operator.add]


def _node(name: str, asynchronous: bool) -> Callable[..., Any]:
    """A node appending its name (``async def`` for the async world: a sync node runs on a thread of its own)."""

    def step(state: Steps) -> dict[str, Any]:
        return {"steps": [name]}

    async def astep(state: Steps) -> dict[str, Any]:
        return {"steps": [name]}

    return astep if asynchronous else step


def _one_node_graph(
    state: type[Any], name: str, node: Callable[[Any], dict[str, Any]], asynchronous: bool
) -> StateGraph:
    """START -> ``name`` -> END; with ``asynchronous`` the node is an ``async def`` that calls ``node``."""

    async def anode(state: Any) -> dict[str, Any]:
        return node(state)

    builder = StateGraph(state)
    chosen: Callable[..., Any] = anode if asynchronous else node
    builder.add_node(name, chosen)
    builder.add_edge(START, name)
    builder.add_edge(name, END)
    return builder


def delta_graph(asynchronous: bool) -> StateGraph:
    def reply(state: Chat) -> dict[str, Any]:
        return {"messages": [f"reply to {state['messages'][-1]}"]}

    return _one_node_graph(Chat, "reply", reply, asynchronous)


def interrupt_graph(asynchronous: bool) -> StateGraph:
    def ask(state: Steps) -> dict[str, Any]:
        return {"steps": [f"answer {interrupt('approve?')}"]}

    return _one_node_graph(Steps, "ask", ask, asynchronous)


def join_graph(asynchronous: bool) -> StateGraph:
    builder = StateGraph(Steps)
    for name in ("a", "b", "j"):
        builder.add_node(name, _node(name, asynchronous))
    builder.add_edge(START, "a")
    builder.add_edge(START, "b")
    builder.add_edge(["a", "b"], "j")
    builder.add_edge("j", END)
    return builder


def subgraph_graph(asynchronous: bool) -> StateGraph:
    inner = StateGraph(Steps)
    inner.add_node("inner", _node("inner", asynchronous))
    inner.add_edge(START, "inner")
    inner.add_edge("inner", END)
    builder = StateGraph(Steps)
    builder.add_node("sub", inner.compile())
    builder.add_edge(START, "sub")
    builder.add_edge("sub", END)
    return builder


def steps_graph(asynchronous: bool) -> StateGraph:
    """one -> two: a run of two steps, so that something can happen between them."""
    builder = StateGraph(Steps)
    for name in ("one", "two"):
        builder.add_node(name, _node(name, asynchronous))
    builder.add_edge(START, "one")
    builder.add_edge("one", "two")
    builder.add_edge("two", END)
    return builder


@dataclass(frozen=True)
class Graph:
    builder: Callable[[bool], StateGraph]
    first_input: dict[str, Any]
    """The base run's input."""
    stop_before: tuple[str, ...] = ()
    """The base run stops before these nodes (``interrupt_before``), so a party's ``invoke(None)`` runs them."""

    def step(self, who: str) -> dict[str, Any]:
        """A party's new input."""
        key = next(iter(self.first_input))
        return {key: [f"from {who}"]}


GRAPHS = {
    "delta": Graph(delta_graph, {"messages": ["hello"]}, ("reply",)),
    "delta, new input": Graph(delta_graph, {"messages": ["hello"]}),
    "interrupt": Graph(interrupt_graph, {"steps": ["start"]}),
    "join": Graph(join_graph, {"steps": ["start"]}, ("j",)),
    "join, fan-out": Graph(join_graph, {"steps": ["start"]}, ("a", "b")),
    "subgraph": Graph(subgraph_graph, {"steps": ["start"]}, ("sub",)),
    "subgraph, new input": Graph(subgraph_graph, {"steps": ["start"]}),
    "two steps": Graph(steps_graph, {"steps": ["start"]}, ("one",)),
}


# -- parties ----------------------------------------------------------------------------------------------------------
CONTINUING = ("run", "input", "answer", "update", "stream", "worker")
"""Acts that continue the thread from its latest checkpoint."""
TIME_TRAVEL = ("update old", "replay", "answer old")
"""Acts addressed at an older checkpoint by id."""


@dataclass(frozen=True)
class PartySpec:
    name: str
    act: str
    """``run``: ``invoke(None)`` (the pending nodes); ``input``: ``invoke`` with new input; ``answer``:
    ``Command(resume=...)`` of the pending interrupt; ``update``: ``update_state`` on the latest; ``update old``,
    ``replay``, ``answer old``: the same addressed at the base run's first checkpoint after its input;
    ``rollback``: cancel the other party, ``delete_for_runs`` it, then answer again (the Agent Server's
    ``multitask_strategy="rollback"``); ``stream``: ``run`` through ``graph.stream``, its consumer showing each
    checkpoint it is told about (``get_state`` by id) in the loop's body, so in the run's thread and context;
    ``worker``: a sync web server's pool worker, one thread serving two requests in turn: a UI's ``get_tuple`` of the
    latest checkpoint by id, then a direct step put on it."""
    saver: int = 0


@dataclass(frozen=True)
class Family:
    name: str
    graph: str
    parties: tuple[PartySpec, ...]
    savers: int = 1
    asynchronous: bool = False
    durability: Durability = "sync"
    reduce: bool = False
    """Explore with the partial-order reduction (``lgsim.explore``) instead of every schedule."""
    sample: int | None = None
    """In CI, run this many random schedules instead of every one (``LGS3_LG_SIM=full`` runs every one)."""

    @property
    def kind(self) -> str:
        acts = {p.act for p in self.parties}
        if "rollback" in acts:
            return "rollback"
        return "time travel" if acts & set(TIME_TRAVEL) else "continue"


# -- views of a thread -------------------------------------------------------------------------------------------
def thread_config(checkpoint_id: str | None = None, **extra: Any) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": THREAD, "checkpoint_ns": "", **extra}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def in_own_chain(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn`` in a call chain of its own (a UI request, an oracle): never gated, never anyone's read."""
    return contextvars.Context().run(fn, *args)


def checkpoint_id_of(config: RunnableConfig | None) -> str | None:
    return None if config is None else config["configurable"].get("checkpoint_id")


def saver_view(saver: Any) -> dict[tuple[str, str], Any]:
    """Every checkpoint ``list()`` returns for the thread, all namespaces, with its writes."""
    return {
        (t.config["configurable"].get("checkpoint_ns", ""), t.checkpoint["id"]): (
            checkpoint_id_of(t.parent_config),
            t.checkpoint["channel_values"],
            t.checkpoint["channel_versions"],
            t.metadata,
            sorted(t.pending_writes or [], key=repr),
        )
        for t in saver.list({"configurable": {"thread_id": THREAD}})
    }


def graph_view(graph: Any) -> list[Any]:
    """The thread as LangGraph shows it: its history, newest first, each state with its tasks."""
    return [snapshot_view(s) for s in graph.get_state_history(thread_config())]


def snapshot_view(s: Any, *, ids: bool = True) -> tuple[Any, ...]:
    head = (s.config["configurable"]["checkpoint_id"], checkpoint_id_of(s.parent_config)) if ids else ()
    metadata = {k: v for k, v in (s.metadata or {}).items() if ids or k not in ("run_id",)}
    tasks = [(t.name, [i.value for i in t.interrupts], t.result) for t in s.tasks]
    return (*head, s.values, s.next, metadata, tasks)


def chains(saver: Any) -> dict[str, list[tuple[str, str | None]]]:
    """Per namespace, (checkpoint id, parent id) as ``list()`` returns them (newest first)."""
    found: dict[str, list[tuple[str, str | None]]] = {}
    for t in saver.list({"configurable": {"thread_id": THREAD}}):
        ns = t.config["configurable"].get("checkpoint_ns", "")
        found.setdefault(ns, []).append((t.checkpoint["id"], checkpoint_id_of(t.parent_config)))
    return found


def linearity_problems(listed: list[tuple[str, str | None]], where: str) -> list[str]:
    """A namespace's listing must be one chain: each checkpoint the parent of the one listed before it."""
    problems = []
    parents = [p for _, p in listed if p is not None]
    twice = sorted({p for p in parents if parents.count(p) > 1})
    if twice:
        problems.append(f"{where}: a checkpoint with two children: {twice}")
    for (newer, parent), (older, _) in itertools.pairwise(listed):
        if parent != older:
            problems.append(f"{where}: {newer} has parent {parent}, but list() shows {older} below it (off the chain)")
            break
    return problems


def fresh_saver(bucket: RecordingBucket) -> S3Saver:
    """A new process on the bucket."""
    return large_lists(inline(S3Saver(bucket="b", client=bucket)))


# -- one run of a family -----------------------------------------------------------------------------------------
@dataclass
class Observation:
    point: int
    latest: str | None
    history: list[tuple[str, str | None]]


@dataclass
class Rollback:
    """What the rollback party saw: the thread before the rolled-back run began and right after the rollback."""

    before: Any = None
    after: Any = None
    run: str = ""


@dataclass
class BaseHistory:
    """The thread before the parties start: the bucket's objects, the base run's journal entries, and views."""

    objects: Any
    entries: list[Any]
    ids: set[str]
    before: Any
    old: RunnableConfig
    latest: RunnableConfig


_BASES: dict[tuple[str, str], BaseHistory] = {}


def _base_history(family: Family) -> BaseHistory:
    """The base run, made once per graph and durability and restored into each schedule's fresh bucket: every
    schedule starts from the very same objects (same ids), and the base run's cost is paid once."""
    key = (family.graph, family.durability)
    if key not in _BASES:
        graph_spec = GRAPHS[family.graph]
        journal = Journal()
        bucket = RecordingBucket()
        base_saver = GatedSaver(scheduler=Scheduler(journal), journal=journal, index=-1, bucket="b", client=bucket)
        base = graph_spec.builder(False).compile(checkpointer=base_saver)
        base.invoke(
            graph_spec.first_input,
            thread_config(run_id="base"),
            interrupt_before=list(graph_spec.stop_before) or None,
            durability=family.durability,
        )
        history = list(base.get_state_history(thread_config()))
        _BASES[key] = BaseHistory(
            objects=bucket.snapshot(),
            entries=list(journal.entries),
            ids={s.config["configurable"]["checkpoint_id"] for s in history},
            before=in_own_chain(thread_view, bucket, graph_spec),
            old=older_checkpoint(history),
            latest=history[0].config,
        )
    return _BASES[key]


class ThreadWorld(World):
    """A thread on a fresh in-memory bucket, its base history, and the family's parties (sync or async API)."""

    def __init__(self, scheduler: Scheduler | AsyncScheduler, journal: Journal, family: Family) -> None:
        self.family = family
        self.journal = journal
        self.scheduler = scheduler
        self.bucket = RecordingBucket()
        self.graph = GRAPHS[family.graph]
        kind = AsyncGatedSaver if family.asynchronous else GatedSaver
        self.savers = [
            kind(scheduler=scheduler, journal=journal, index=i, bucket="b", client=self.bucket)  # type: ignore[arg-type]
            for i in range(family.savers)
        ]
        builder = self.graph.builder(family.asynchronous)
        self.graphs = [builder.compile(checkpointer=s) for s in self.savers]
        base = _base_history(family)
        self.bucket.restore(base.objects)
        journal.entries.extend(base.entries)
        self.base_ids, self.before, self.old, self.latest = base.ids, base.before, base.old, base.latest
        self.run_ids = {p.name: f"run-{p.name}" for p in family.parties}
        self.observations: list[Observation] = []
        self.reader_errors: list[str] = []
        self.rollback = Rollback()

    # the parties
    def start(self, scheduler: Any) -> None:
        for spec in self.family.parties:
            scheduler.add(spec.name, self._work(spec))

    def _config(self, spec: PartySpec, checkpoint_id: str | None = None) -> RunnableConfig:
        return thread_config(checkpoint_id, run_id=self.run_ids[spec.name])

    def _work(self, spec: PartySpec) -> Callable[[], Any]:
        graph = self.graphs[spec.saver]
        old = checkpoint_id_of(self.old)
        durability = self.family.durability
        if spec.act == "rollback":
            return self._rollback(spec)
        calls: dict[str, tuple[str, tuple[Any, ...], dict[str, Any]]] = {
            "run": ("invoke", (None, self._config(spec)), {"durability": durability}),
            "input": ("invoke", (self.graph.step(spec.name), self._config(spec)), {"durability": durability}),
            "answer": (
                "invoke",
                (Command(resume=f"{spec.name} says yes"), self._config(spec)),
                {"durability": durability},
            ),
            "update": ("update_state", (self._config(spec), self.graph.step(spec.name)), {}),
            "update old": ("update_state", (self._config(spec, old), self.graph.step(spec.name)), {}),
            "replay": ("invoke", (None, self._config(spec, old)), {"durability": durability}),
            "answer old": (
                "invoke",
                (Command(resume=f"{spec.name} says yes"), self._config(spec, checkpoint_id_of(self.latest))),
                {"durability": durability},
            ),
        }
        if spec.act == "stream":
            return self._streamed(spec, graph)
        if spec.act == "worker":
            return self._pool_worker(spec)
        method, args, kwargs = calls[spec.act]
        if self.family.asynchronous:
            return lambda: getattr(graph, f"a{method}")(*args, **kwargs)
        return lambda: getattr(graph, method)(*args, **kwargs)

    def _streamed(self, spec: PartySpec, graph: Any) -> Callable[[], Any]:
        """``run`` through the stream API, the consumer reading each checkpoint it is told about in the loop body."""
        config, durability = self._config(spec), self.family.durability

        def work() -> Any:
            for event in graph.stream(None, config, stream_mode="checkpoints", durability=durability):
                graph.get_state(event["config"])

        async def awork() -> Any:
            async for event in graph.astream(None, config, stream_mode="checkpoints", durability=durability):
                await graph.aget_state(event["config"])

        return awork if self.family.asynchronous else work

    def _pool_worker(self, spec: PartySpec) -> Callable[[], Any]:
        """One pool thread, two requests in turn: a UI reads the base's latest checkpoint by id; then a direct call
        puts a step on it (a config built from the id, as a request handler builds it)."""
        saver = self.savers[spec.saver]
        latest = checkpoint_id_of(self.latest)

        def step_on(shown: CheckpointTuple | None) -> tuple[Checkpoint, CheckpointMetadata]:
            """The step put on the checkpoint the UI was shown, and its metadata."""
            assert shown is not None
            step = shown.metadata["step"] + 1
            return create_checkpoint(shown.checkpoint, None, step), {
                "source": "loop",
                "step": step,
                "run_id": self.run_ids[spec.name],
            }

        def work() -> Any:
            shown = saver.get_tuple(thread_config(latest))
            return saver.put(thread_config(latest), *step_on(shown), {})

        async def awork() -> Any:
            shown = await saver.aget_tuple(thread_config(latest))
            return await saver.aput(thread_config(latest), *step_on(shown), {})

        return awork if self.family.asynchronous else work

    def _rollback(self, spec: PartySpec) -> Callable[[], Any]:
        """Cancel the other party, wait for it to end, roll it back, look, answer again: in one call chain."""
        victim = next(p for p in self.family.parties if p.name != spec.name)
        graph = self.graphs[spec.saver]
        saver = self.savers[spec.saver]
        self.rollback.run = self.run_ids[victim.name]
        self.waits_for = {victim.name: (spec.name,)}

        def work() -> Any:
            party = next(p for p in self.scheduler.parties if p.name == victim.name)
            self.scheduler.leave(self.scheduler.gate("cancel", f"cancel {victim.name}"))
            party.done.wait()
            saver.delete_for_runs([self.rollback.run])
            self.rollback.after = in_own_chain(thread_view, self.bucket, self.graph)
            return graph.invoke(Command(resume=f"{spec.name} says no"), self._config(spec))

        return work

    def at_release(self, call: Call, scheduler: Any) -> bool:
        if call.label.startswith(f"{call.party.name}:cancel "):
            victim = call.label.split("cancel ")[1].rstrip(")")
            scheduler.cancel(next(p for p in scheduler.parties if p.name == victim))
            scheduler.release(call)  # the rollback party goes on (to wait for the cancelled run to end)
            scheduler.wait_returned(call)
            return False
        return True

    # the reader
    def at_point(self, point: Point) -> None:
        graph = self.graphs[0]
        try:
            state = in_own_chain(graph.get_state, thread_config())
            history = in_own_chain(lambda: list(graph.get_state_history(thread_config())))
        except Exception as error:
            self.reader_errors.append(f"the reader at point {point.index} raised {type(error).__name__}: {error}")
            return
        self._observed(point, state, history)

    async def aat_point(self, point: Point) -> None:
        graph = self.graphs[0]

        async def read() -> tuple[Any, list[Any]]:
            return await graph.aget_state(thread_config()), [s async for s in graph.aget_state_history(thread_config())]

        try:
            state, history = await create_task_in(asyncio.get_running_loop(), read(), contextvars.Context())
        except Exception as error:
            self.reader_errors.append(f"the reader at point {point.index} raised {type(error).__name__}: {error}")
            return
        self._observed(point, state, history)

    def _observed(self, point: Point, state: Any, history: list[Any]) -> None:
        self.observations.append(
            Observation(
                point.index,
                checkpoint_id_of(state.config),
                [(s.config["configurable"]["checkpoint_id"], checkpoint_id_of(s.parent_config)) for s in history],
            )
        )

    # the oracles
    def outcome(self) -> str:
        fresh = fresh_saver(self.bucket)
        names = {v: k for k, v in self.run_ids.items()}
        root = [cid for cid, _ in reversed(in_own_chain(chains, fresh).get("", []))]
        runs = [names.get(self._run_of(fresh, cid), "?") for cid in root if cid not in self.base_ids]
        parties = ", ".join(f"{p.name} {_short(p.outcome)}" for p in self.scheduler.parties)
        return f"{parties}; new on the chain: {runs}"

    def _run_of(self, saver: S3Saver, checkpoint_id: str) -> str:
        tup = in_own_chain(saver.get_tuple, thread_config(checkpoint_id))
        return str(tup.metadata.get("run_id")) if tup is not None else "?"

    def judge(self) -> list[str]:
        fresh = fresh_saver(self.bucket)
        listed = in_own_chain(chains, fresh)
        committed = {(ns, cid) for ns, chain in listed.items() for cid, _ in chain}
        problems = list(self.reader_errors)
        problems += self._outcomes()
        problems += self._acknowledged(committed)
        if self.family.kind == "continue":
            problems += self._linear(fresh, listed)
        elif self.family.kind == "time travel":
            problems += self._forks_as_in_memory()
        else:
            problems += self._rolled_back()
        rolled_back = {
            e.args[1]["id"] for e in self.journal.puts() if self.family.kind == "rollback" and e.party == "A"
        }
        for seen in self.observations:
            lost = [cid for cid, _ in seen.history if ("", cid) not in committed and cid not in rolled_back]
            if lost:
                problems.append(f"the reader saw {lost} at point {seen.point}; it is not in the final history")
            if self.family.kind == "continue":
                problems += linearity_problems(seen.history, f"the reader's history at point {seen.point}")
        problems += self._as_in_memory(fresh)
        return problems

    def _outcomes(self) -> list[str]:
        """Who may raise what: a party continuing from the latest only CheckpointConflictError; a time traveller
        never; a rolled-back run only its cancellation (or a conflict)."""
        problems = []
        for spec in self.family.parties:
            outcome = next(p.outcome for p in self.scheduler.parties if p.name == spec.name)
            assert outcome is not None
            error = outcome.error
            if error is None:
                continue
            if spec.act in TIME_TRAVEL and not (isinstance(error, CheckpointConflictError) and self._continued(spec)):
                tag = FORK_REFUSED if isinstance(error, CheckpointConflictError) else ""
                problems.append(f"{tag}{spec.name} travels in time and {outcome!r}")
            elif not isinstance(error, CheckpointConflictError) and type(error).__name__ != "RunCancelled":
                problems.append(f"{spec.name} {outcome!r}")
        if self.family.kind == "continue" and all(
            p.outcome is not None and not p.outcome.ok for p in self.scheduler.parties
        ):
            problems.append("no party returned normally")
        return problems

    def _continued(self, traveller: PartySpec) -> bool:
        """Whether the time traveller was in fact continuing the thread when it lost: it read the checkpoint it
        addressed while that was still the head (the fencing table counts that as a read of the latest), or
        another party read one of the traveller's checkpoints as the latest and continued it."""
        addressed = next(
            (i for i, e in enumerate(self.journal.entries) if e.party == traveller.name and e.method == "get_tuple"),
            None,
        )
        target = checkpoint_id_of(self.latest)
        if (
            addressed is not None
            and self.journal.entries[addressed].args[0]["configurable"].get("checkpoint_id") == target
        ):
            moved = any(
                e.method == "put"
                and e.outcome.ok
                and e.party is not None
                and not e.args[0]["configurable"].get("checkpoint_ns")
                for e in self.journal.entries[:addressed]
            )
            if not moved:
                return True
        mine = {e.args[1]["id"] for e in self.journal.puts(traveller.name) if e.outcome.ok}
        return any(
            e.party not in (traveller.name, None)
            and e.method == "get_tuple"
            and e.outcome.ok
            and e.outcome.result is not None
            and e.outcome.result.checkpoint["id"] in mine
            for e in self.journal.entries
        )

    def _acknowledged(self, committed: set[tuple[str, str]]) -> list[str]:
        """Nothing acknowledged is missing (unless rolled back), nothing refused is visible, and (but for the one
        put of a time travel that forks) never two successful puts on one parent."""
        problems = []
        successes: dict[tuple[str, str | None], str] = {}
        travellers = {p.name for p in self.family.parties if p.act in TIME_TRAVEL}
        forks = {id(next(e for e in self.journal.puts(name))) for name in travellers if self.journal.puts(name)}
        for entry in self.journal.puts():
            config, checkpoint = entry.args[0], entry.args[1]
            ns, cid = config["configurable"].get("checkpoint_ns", ""), checkpoint["id"]
            parent = config["configurable"].get("checkpoint_id")
            rolled_back = self.family.kind == "rollback" and entry.party == "A"
            if not entry.outcome.ok:
                if (ns, cid) in committed:
                    problems.append(f"{entry.party}'s put of {cid} raised {entry.outcome!r} but is in the history")
                continue
            if (ns, cid) not in committed and not rolled_back:
                problems.append(f"{entry.party}'s put of {cid} (ns={ns!r}) returned but is not in the history")
            fork = id(entry) in forks
            if (ns, parent) in successes and not fork and entry.party is not None:
                problems.append(
                    f"two puts on one parent {parent} returned: {successes[(ns, parent)]} and {entry.party}'s {cid}"
                )
            if not fork and not rolled_back:  # a rolled-back put's parent is free again for the next run
                successes[(ns, parent)] = f"{entry.party}'s {cid}"
        return problems

    def _linear(self, fresh: S3Saver, listed: dict[str, list[tuple[str, str | None]]]) -> list[str]:
        """The history is one chain per namespace, and each party's checkpoints are one block of the root's."""
        problems = []
        for ns, chain in listed.items():
            problems += linearity_problems(chain, f"the final list(ns={ns!r})")
        root = [cid for cid, _ in reversed(listed.get("", []))]
        runs = [self._run_of(fresh, cid) for cid in root if cid not in self.base_ids]
        blocks = [r for i, r in enumerate(runs) if i == 0 or runs[i - 1] != r]
        if len(blocks) != len(set(blocks)):
            problems.append(f"the parties' checkpoints interleave on the chain (not a serial order): {runs}")
        return problems

    def _forks_as_in_memory(self) -> list[str]:
        """The time traveller's checkpoints hold what the same time travel holds on InMemorySaver from the same
        base history (ids aside) in one of the two serial orders: before the other party (or alone), or after
        it (the other party's writes on the checkpoint the traveller addresses are then its pending writes)."""
        traveller = next(p for p in self.family.parties if p.act in TIME_TRAVEL)
        outcome = next(p.outcome for p in self.scheduler.parties if p.name == traveller.name)
        assert outcome is not None
        refused = isinstance(outcome.error, CheckpointConflictError)
        if refused and self._continued(traveller):
            return []  # it was continuing the thread and lost as such (``_outcomes``): no fork to compare
        ours = [e for e in self.journal.puts(traveller.name) if e.outcome.ok]
        other = next(p for p in self.family.parties if p is not traveller)
        serial = [_time_travel_alone(self.family, traveller), _time_travel_alone(self.family, traveller, other)]
        got = [_values_of(e) for e in ours]
        if got not in serial:
            tag = FORK_REFUSED if refused else ""  # a refused fork stores less: the same finding as its error
            return [
                f"{tag}{traveller.name}'s time travel stored {got}; on InMemorySaver it stores {serial[0]} first "
                f"and {serial[1]} after {other.name}"
            ]
        return []

    def _rolled_back(self) -> list[str]:
        if self.rollback.after is None:
            return ["the rollback never ran"]
        if self.rollback.after != self.before:
            return [
                f"{NOT_AS_BEFORE}after delete_for_runs([{self.rollback.run!r}]) the thread reads "
                f"{self.rollback.after}, before the run began it read {self.before}"
            ]
        return []

    def _as_in_memory(self, fresh: S3Saver) -> list[str]:
        """LangGraph's InMemorySaver fed exactly the puts and writes the saver acknowledged (and the rollbacks),
        in the order they returned, must show the same thread: every checkpoint, its writes, and LangGraph's view."""
        oracle = Oracle()
        for entry in self.journal.entries:
            if not entry.outcome.ok:
                continue
            if entry.method == "put":
                config, checkpoint, metadata, _ = entry.args
                oracle.put(config, checkpoint, metadata)
            elif entry.method == "put_writes":
                # the run that wrote them, by LangGraph's rule (the config's run_id, as put records it)
                run = get_checkpoint_metadata(entry.args[0], {}).get("run_id")
                config, writes, task_id, task_path = entry.args
                oracle.put_writes(config, writes, task_id, task_path, None if run is None else str(run))
            elif entry.method == "delete_for_runs":
                oracle.delete_for_runs(*entry.args)
        problems = []
        ours, theirs = in_own_chain(saver_view, fresh), saver_view(oracle.mem)
        for key in sorted(set(ours) | set(theirs)):
            if ours.get(key) != theirs.get(key):
                problems.append(f"list() differs from InMemorySaver's at {key}: {ours.get(key)} vs {theirs.get(key)}")
                break
        builder = self.graph.builder(False)
        ours_g = in_own_chain(graph_view, builder.compile(checkpointer=fresh))
        theirs_g = graph_view(builder.compile(checkpointer=oracle.mem))
        if ours_g != theirs_g:
            problems.append(f"get_state_history differs from InMemorySaver's: {ours_g} vs {theirs_g}")
        return problems


def _short(outcome: Any) -> str:
    if outcome is None:
        return "unfinished"
    return "returned" if outcome.ok else f"raised {type(outcome.error).__name__}"


def _values_of(entry: Any) -> Any:
    checkpoint, metadata = entry.args[1], entry.args[2]
    return (checkpoint["channel_values"], metadata.get("source"), metadata.get("step"))


def thread_view(bucket: RecordingBucket, spec: Graph) -> tuple[Any, ...]:
    """The thread as a new process shows it: its latest state and its history (LangGraph's view, ids included)."""
    graph = spec.builder(False).compile(checkpointer=fresh_saver(bucket))
    state = graph.get_state(thread_config())
    return (snapshot_view(state), [snapshot_view(s) for s in graph.get_state_history(thread_config())])


def older_checkpoint(history: list[Any]) -> RunnableConfig:
    """Where a time travel goes: the base's checkpoint below the head, or its first when it has only two."""
    return history[-1 if len(history) == 2 else -2].config


_ALONE: dict[tuple[str, str, str | None], Any] = {}


def _time_travel_alone(family: Family, traveller: PartySpec, first: PartySpec | None = None) -> Any:
    """The checkpoints the time travel puts on InMemorySaver from the base history (ids aside): alone, or
    (``first``) after the other party's whole act, the serial order in which the other goes first."""
    key = (family.graph, traveller.act, first.act if first else None)
    if key not in _ALONE:
        graph_spec = GRAPHS[family.graph]
        saver = RecordingSaver()
        graph = graph_spec.builder(False).compile(checkpointer=saver)
        config = thread_config(run_id="base")
        graph.invoke(
            graph_spec.first_input,
            config,
            interrupt_before=list(graph_spec.stop_before) or None,
            durability=family.durability,
        )
        history = list(graph.get_state_history(thread_config()))
        old = thread_config(checkpoint_id_of(older_checkpoint(history)), run_id=f"run-{traveller.name}")
        latest = thread_config(checkpoint_id_of(history[0].config), run_id=f"run-{traveller.name}")
        if first is not None:
            mine = thread_config(run_id=f"run-{first.name}")
            if first.act == "run":
                graph.invoke(None, mine, durability=family.durability)
            elif first.act == "input":
                graph.invoke(graph_spec.step(first.name), mine, durability=family.durability)
            elif first.act == "answer":
                graph.invoke(Command(resume=f"{first.name} says yes"), mine, durability=family.durability)
            else:
                raise AssertionError(f"no serial order with {first.act!r} first")
        saver.puts.clear()
        if traveller.act == "update old":
            graph.update_state(old, graph_spec.step(traveller.name))
        elif traveller.act == "replay":
            graph.invoke(None, old, durability=family.durability)
        else:
            graph.invoke(Command(resume=f"{traveller.name} says yes"), latest, durability=family.durability)
        _ALONE[key] = [(cp["channel_values"], md.get("source"), md.get("step")) for cp, md in saver.puts]
    return _ALONE[key]


class RecordingSaver(InMemorySaver):
    """InMemorySaver remembering what each put stored."""

    def __init__(self) -> None:
        super().__init__()
        self.puts: list[tuple[Any, Any]] = []

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> RunnableConfig:
        self.puts.append((checkpoint, metadata))
        return super().put(config, checkpoint, metadata, new_versions)


def run_family(
    family: Family, limit: int | None = None, progress: Any = None, reduce: bool | None = None, full: bool = FULL
) -> Exploration:
    return explore(
        lambda scheduler, journal: ThreadWorld(scheduler, journal, family),
        asynchronous=family.asynchronous,
        reduce=family.reduce if reduce is None else reduce,
        limit=limit,
        sample=None if full else family.sample,
        progress=progress,
    )


def two(act: str, other: str | None = None, savers: int = 1) -> tuple[PartySpec, ...]:
    return (PartySpec("A", act, 0), PartySpec("B", other or act, savers - 1))


CI_SAMPLE = 200
"""Random schedules per family where every schedule would take CI more than a minute."""
CI_FAMILIES = [
    Family("delta: two runs, one saver", "delta", two("run")),
    Family("delta: two runs, two savers", "delta", two("run", savers=2), savers=2),
    Family("interrupt: two answers, one saver", "interrupt", two("answer"), sample=CI_SAMPLE),
    Family("interrupt: two answers, AsyncS3Saver", "interrupt", two("answer"), asynchronous=True, sample=CI_SAMPLE),
    Family("join: two runs, one saver", "join", two("run")),
    Family("subgraph: a run and an update_state", "subgraph", two("run", "update"), sample=CI_SAMPLE),
    Family("time travel: update_state on an older checkpoint", "delta", two("run", "update old")),
    Family(
        "time travel: replay from an older checkpoint",
        "join",
        two("run", "replay"),
        sample=CI_SAMPLE,
    ),
    Family("time travel: Command(resume) addressed by id", "interrupt", two("answer", "answer old"), sample=CI_SAMPLE),
    Family(
        "rollback: cancel and roll back an answer, answer again",
        "interrupt",
        (PartySpec("A", "answer"), PartySpec("R", "rollback")),
    ),
    Family(
        "stream: a run whose consumer reads each checkpoint, and a run",
        "two steps",
        two("stream", "run"),
        sample=CI_SAMPLE,
    ),
    Family("pool worker: a UI's read by id, then a step on it; and a run", "two steps", two("worker", "run")),
    Family("pool worker, AsyncS3Saver", "two steps", two("worker", "run"), asynchronous=True),
]
FULL_FAMILIES = [
    Family("delta: two runs with new input, one saver", "delta, new input", two("input"), durability="async"),
    Family("delta: two runs with new input, two savers", "delta, new input", two("input", savers=2), savers=2),
    Family("interrupt: two answers, two savers", "interrupt", two("answer", savers=2), savers=2, durability="async"),
    Family("join: two fan-outs, one saver", "join, fan-out", two("run")),
    Family("join: two fan-outs, AsyncS3Saver", "join, fan-out", two("run"), asynchronous=True),
    Family("subgraph: two runs, one saver", "subgraph", two("run")),
    Family(
        "subgraph: two runs with new input, two savers",
        "subgraph, new input",
        two("input", savers=2),
        savers=2,
        reduce=True,
    ),
    Family(
        "time travel: replay, two savers",
        "join",
        two("run", "replay", savers=2),
        savers=2,
    ),
    Family("time travel: update_state, AsyncS3Saver", "delta", two("run", "update old"), asynchronous=True),
]
FAMILIES = CI_FAMILIES + (FULL_FAMILIES if FULL else [])


@pytest.fixture(scope="module", autouse=True)
def _report_stats() -> Iterator[None]:
    """With LGS3_LG_SIM_STATS=path, write the counts (schedules, points, outcomes, seconds) there as JSON."""
    yield
    write_stats("LGS3_LG_SIM_STATS", STATS)


def explored(family: Family) -> Exploration:
    """The family's exploration, run once per session (the rollback's two tests share it)."""
    if family.name not in EXPLORED:
        found = EXPLORED[family.name] = run_family(family)
        STATS[family.name] = {
            "schedules": found.schedules,
            "points": found.points,
            "seconds": round(found.seconds, 1),
            "reduced": family.reduce,
            "sampled": None if FULL else family.sample,
            "distinct": len(found.distinct),
            "replays_retried": found.replays_retried,
            "outcomes": dict(found.outcomes),
        }
        print(
            f"\n{family.name}: {found.schedules} schedules ({len(found.distinct)} distinct), {found.points} points, "
            f"{found.seconds:.1f} s, {found.replays_retried} run again"
        )
        for outcome, n in sorted(found.outcomes.items()):
            print(f"  {n:5} x {outcome}")
    return EXPLORED[family.name]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_interleaving_of_two_parties(family: Family) -> None:
    found = explored(family)
    assert found.schedules > 1
    assert not found.failures, f"{len(found.failures)} failing schedule(s):\n" + "\n".join(found.failures[:5])


def run_schedule(family: Family, schedule: Sequence[str]) -> list[str]:
    """One schedule of the family (the labels of the released calls, as a failure names them): its findings."""
    search = _Search(reduce=False)
    search.next_prefix = tuple(schedule)
    found = Exploration()
    world: list[ThreadWorld] = []

    def build(scheduler: Any, journal: Journal) -> ThreadWorld:
        world.append(ThreadWorld(scheduler, journal, family))
        return world[0]

    _run_sync(build, tuple(schedule), search, found)
    return found.failures


REPLAY_FAMILY = next(f for f in CI_FAMILIES if f.name == "time travel: replay from an older checkpoint")


def test_a_replay_continues_its_fork_past_a_concurrent_step() -> None:
    """The replay (B) reads the base's older checkpoint by id and makes its fork's id; run A reads the head,
    puts its step (an id newer than the fork's) and commits; B's fork lands behind it (a detached record, as
    the table says); B's next step, on its own fork, commits as on InMemorySaver (it raised before the table's
    row for a head beside a detached parent)."""
    schedule = [
        "B:get_tuple(by id)",
        "B:get_tuple()",
        "B:put_writes(task=~__pregel_pull, a, channels=steps+join:a+b:j)",
        "A:get_tuple()",
        "A:put(source=loop, step=2)",
        "A:put_writes(task=~__pregel_pull, j, channels=steps)",
        "B:put_writes(task=~__pregel_pull, b, channels=steps+join:a+b:j)",
        "B:put(source=fork, step=1)",
        "B:put(source=loop, step=2)",
    ]
    assert run_schedule(REPLAY_FAMILY, schedule) == []


STREAM_FAMILY = next(f for f in CI_FAMILIES if f.name.startswith("stream:"))


def test_a_stream_consumers_read_between_steps_leaves_the_run_fenced() -> None:
    """Run A streams; B runs both its steps first; A's consumer then shows the checkpoint A was told about (by id,
    no longer the head) before A puts its step on it. A's step must be refused: the consumer's read is not the run's.
    On cfeae32 the read was recorded in the generator's context, which LangGraph copies for the run's puts, and A's
    step committed as a fork beside B's (two children of one checkpoint)."""
    schedule = [
        "A:get_tuple()",
        "B:get_tuple()",
        "B:put(source=loop, step=1)",
        "B:put(source=loop, step=2)",
        "B:put_writes(task=~__pregel_pull, two, channels=steps)",
        "B:put_writes(task=~__pregel_pull, one, channels=steps+branch:to:two)",
        "A:get_tuple(by id)",
        "A:put(source=loop, step=1)",
    ]
    assert run_schedule(STREAM_FAMILY, schedule) == []
