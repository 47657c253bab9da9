"""The run identity fencing relies on: the ``Runtime`` that LangGraph passes in
``config["configurable"]["__pregel_runtime"]``.

``_protocol/fencing.py`` keys what a run read and committed by that object. For that to be sound, every call one
run's loop makes must carry the same object, and no two runs may share one. These tests watch every checkpointer call
of real graphs (a subgraph, a ``Send`` fan-out, a retried node, ``durability="exit"``, the functional API, two runs at
once, a replay) and check both, and that reads made outside the run (``get_state``, ``get_state_history``,
``update_state``, a node's own ``get_state``) carry none of the run's.
"""

from __future__ import annotations

import operator
import threading
from collections import defaultdict
from typing import Annotated, Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy, Send
from typing_extensions import TypedDict

from langgraph_s3_checkpoint import S3Saver
from langgraph_s3_checkpoint._protocol.fencing import RUNTIME_KEY
from langgraph_s3_checkpoint.memory import MemoryBucket

pytestmark = pytest.mark.memory
"""No S3 server: every test of this module runs in memory (``pytest -m memory``)."""


class Watching(S3Saver):
    """An S3Saver that notes, for every call, the namespace and the runtime object it carries."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls: list[tuple[str, str, object | None]] = []
        self.lock = threading.Lock()

    def _note(self, method: str, config: RunnableConfig | None) -> None:
        configurable = (config or {}).get("configurable") or {}
        with self.lock:
            self.calls.append((method, configurable.get("checkpoint_ns", ""), configurable.get(RUNTIME_KEY)))

    def get_tuple(self, config: RunnableConfig) -> Any:
        self._note("get_tuple", config)
        return super().get_tuple(config)

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> Any:
        self._note("list", config)
        return super().list(config, **kwargs)

    def put(self, config: RunnableConfig, *args: Any) -> Any:
        self._note("put", config)
        return super().put(config, *args)

    def put_writes(self, config: RunnableConfig, *args: Any, **kwargs: Any) -> Any:
        self._note("put_writes", config)
        return super().put_writes(config, *args, **kwargs)

    def runtimes_by_namespace(self, methods: tuple[str, ...] = ("get_tuple", "list", "put", "put_writes")) -> Any:
        """Per stable namespace (task ids dropped), the distinct runtime objects its calls carried."""
        found: dict[str, set[int]] = defaultdict(set)
        for method, ns, runtime in self.calls:
            if method in methods:
                found["|".join(p.split(":")[0] for p in ns.split("|")) if ns else ""].add(id(runtime))
        return found


@pytest.fixture
def saver() -> Watching:
    return Watching(bucket="b", client=MemoryBucket())


class Steps(TypedDict):
    steps: Annotated[list[str], operator.add]


def _node(name: str) -> Any:
    return lambda state: {"steps": [name]}


def _steps(saver: Watching, *names: str) -> Any:
    """START -> each of ``names`` in turn, each appending its name (the last one ends the run)."""
    builder = StateGraph(Steps)
    builder.add_sequence([(name, _node(name)) for name in names])
    builder.add_edge(START, names[0])
    return builder.compile(checkpointer=saver)


def test_every_call_of_one_run_carries_one_runtime_and_runs_do_not_share_it(saver: Watching) -> None:
    """A graph with a subgraph, a Send fan-out and a node retried once: each loop (the root's, the subgraph's) carries
    one runtime in all its calls, the subgraph's is not the root's, and a second run carries new ones."""
    attempts = {"n": 0}

    def flaky(state: Steps) -> dict[str, list[str]]:
        attempts["n"] += 1
        if attempts["n"] % 2 == 1:
            raise ValueError("once")
        return {"steps": ["flaky"]}

    inner = StateGraph(Steps)
    inner.add_node("inner", _node("inner"))
    inner.add_edge(START, "inner")
    builder = StateGraph(Steps)
    builder.add_node("sub", inner.compile())
    builder.add_node(
        "flaky",
        flaky,
        retry_policy=RetryPolicy(max_attempts=2, initial_interval=0.0, jitter=False, retry_on=ValueError),
    )
    builder.add_node("fan", _node("fan"))
    builder.add_edge(START, "sub")
    builder.add_edge("sub", "flaky")
    builder.add_conditional_edges("flaky", lambda s: [Send("fan", s), Send("fan", s)])
    builder.add_edge("fan", END)
    graph = builder.compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}

    graph.invoke({"steps": []}, config, durability="sync")
    first = saver.runtimes_by_namespace()
    assert set(first) == {"", "sub"}
    assert all(len(ids) == 1 and None not in ids for ids in first.values()), first
    assert first[""] != first["sub"]
    assert attempts["n"] == 2  # the retry happened inside the run

    saver.calls.clear()
    graph.invoke({"steps": []}, config, durability="sync")
    second = saver.runtimes_by_namespace()
    # The saver holds the runtimes it remembers (RunReads), so the first run's cannot be freed and its id reused.
    assert second[""].isdisjoint(first[""]) and second["sub"].isdisjoint(first["sub"])


def test_two_runs_at_once_carry_two_runtimes(saver: Watching) -> None:
    """Two runs of one thread at the same time, in one process: two runtime objects, alive at once."""
    graph = _steps(saver, "one", "two")
    gate = threading.Barrier(2, timeout=30)
    original = saver.get_tuple

    def get_tuple(config: RunnableConfig) -> Any:
        found = original(config)
        gate.wait()  # both runs have read before either goes on: both runtimes are alive
        return found

    saver.get_tuple = get_tuple
    errors: list[BaseException] = []

    def run() -> None:
        try:
            graph.invoke({"steps": []}, {"configurable": {"thread_id": "both"}}, durability="sync")
        except Exception as error:  # one of them loses the race for the thread
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    runtimes = {runtime for method, _, runtime in saver.calls if method == "get_tuple"}
    assert len(runtimes) == 2 and None not in runtimes


@pytest.mark.parametrize("durability", ["exit", "async"])
def test_durability_modes_keep_one_runtime_per_run(saver: Watching, durability: str) -> None:
    graph = _steps(saver, "one", "two", "three")
    graph.invoke({"steps": []}, {"configurable": {"thread_id": "t"}}, durability=durability)
    by_ns = saver.runtimes_by_namespace()
    assert list(by_ns) == [""] and len(by_ns[""]) == 1 and None not in by_ns[""]
    assert [m for m, _, _ in saver.calls if m == "put"], "the run put its checkpoint"


def test_the_functional_api_carries_one_runtime(saver: Watching) -> None:
    @task
    def double(x: int) -> int:
        return 2 * x

    @entrypoint(checkpointer=saver)
    def workflow(x: int) -> int:
        return sum(f.result() for f in [double(x), double(x + 1)])

    assert workflow.invoke(3, {"configurable": {"thread_id": "f"}}) == 14
    by_ns = saver.runtimes_by_namespace()
    assert len(by_ns[""]) == 1 and None not in by_ns[""]


def test_reads_outside_a_run_carry_none_of_its_runtime(saver: Watching) -> None:
    """``get_state``, ``get_state_history``, ``update_state`` and a node's own ``get_state`` (through its task's
    config) carry no runtime, or another object than the run's: none of them can speak for the run."""
    seen_inside: list[Any] = []

    def look(state: Steps, config: RunnableConfig) -> dict[str, list[str]]:
        seen_inside.append(graph.get_state({"configurable": {**config["configurable"], "checkpoint_id": None}}))
        return {"steps": ["look"]}

    builder = StateGraph(Steps)
    builder.add_node("look", look)
    builder.add_edge(START, "look")
    graph = builder.compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    graph.invoke({"steps": []}, config, durability="sync")
    run_runtimes = {runtime for method, _, runtime in saver.calls if method == "put"}
    assert len(run_runtimes) == 1
    inside = [runtime for method, _, runtime in saver.calls if method == "get_tuple"][1:]
    assert inside and all(runtime not in run_runtimes for runtime in inside)
    saver.calls.clear()
    graph.get_state(config)
    list(graph.get_state_history(config))
    graph.update_state(config, {"steps": ["edited"]})
    assert all(runtime is None for _, _, runtime in saver.calls), saver.calls


def test_a_replay_reads_and_puts_with_one_runtime(saver: Watching) -> None:
    """A replay from an older checkpoint: its read by id, its check of the latest, its fork and its steps, one run."""
    graph = _steps(saver, "one", "two")
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    graph.invoke({"steps": []}, config, durability="sync")
    old = list(graph.get_state_history(config))[-2].config
    saver.calls.clear()
    graph.invoke(None, old, durability="sync")
    runtimes = {runtime for method, _, runtime in saver.calls if method in ("get_tuple", "put")}
    assert len(runtimes) == 1 and None not in runtimes
    assert [m for m, _, _ in saver.calls][:2] == ["get_tuple", "get_tuple"]  # by id, then the latest
