"""Pending writes belong to the run that wrote them, and read in InMemorySaver's order.

* A rollback (``delete_for_runs``) of the run that answered an interrupt leaves the thread exactly as before that
  run began: the interrupted checkpoint keeps only the writes of the runs before it, so the question is open
  again and a new answer is taken (graph level, on SeaweedFS; the plan-level proof, every crash point and
  interleaving, is in ``tests/test_simulation.py``).
* Attributing writes costs nothing on the hot path: a run's writes to its own checkpoint are one PUT.
* A checkpoint's pending writes come back in ``writes_sort_key`` order, each by its own ``task_path``, as
  InMemorySaver returns them.
"""

from __future__ import annotations

import operator
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal
from uuid import uuid4

import pytest
from helpers import RequestCounter, cfg, cid, ids, put, tuple_at
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Interrupt, interrupt
from typing_extensions import TypedDict

from langgraph_s3_checkpoint import S3Saver
from langgraph_s3_checkpoint.gc import gc
from langgraph_s3_checkpoint.local import LocalS3Server
from langgraph_s3_checkpoint.memory import MemoryBucket

Durability = Literal["sync", "async", "exit"]


class Approval(TypedDict, total=False):
    request: str
    answer: str
    log: Annotated[list[str], operator.add]


def _approval_graph(saver: Any, *, review_fails: bool = False) -> Any:
    """draft -> review (asks, with interrupt()) and, beside it, audit -> publish. ``review_fails``: the review
    node raises once it has its answer (a run that dies, or is cancelled, while working on it)."""

    def draft(state: Approval) -> dict[str, Any]:
        return {"log": [f"draft {state['request']}"]}

    def review(state: Approval) -> dict[str, Any]:
        answer = interrupt({"question": f"publish {state['request']}?"})
        if review_fails:
            raise RuntimeError("cancelled while working on the answer")
        return {"answer": answer, "log": [f"review: {answer}"]}

    def audit(state: Approval) -> dict[str, Any]:
        return {"log": ["audit"]}

    def publish(state: Approval) -> dict[str, Any]:
        return {"log": ["published" if state["answer"] == "yes" else "dropped"]}

    builder = StateGraph(Approval)
    for name, node in (("draft", draft), ("review", review), ("audit", audit), ("publish", publish)):
        builder.add_node(name, node)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("draft", "audit")
    builder.add_edge(["review", "audit"], "publish")
    builder.add_edge("publish", END)
    return builder.compile(checkpointer=saver)


def _run(thread_id: str, run_id: str, style: str) -> RunnableConfig:
    """A run's config as LangGraph's API passes it (``metadata``) or as the Agent Server does (``configurable``)."""
    if style == "metadata":
        return {"configurable": {"thread_id": thread_id}, "metadata": {"run_id": run_id}}
    return {"configurable": {"thread_id": thread_id, "run_id": run_id}}


def _view(graph: Any, thread_id: str) -> Any:
    """What a client sees of a thread, without the ids that differ between threads (checkpoint, task, run)."""
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}

    def snapshot(state: Any) -> Any:
        return (
            state.values,
            state.next,
            [(t.name, [i.value for i in t.interrupts], t.result) for t in state.tasks],
            state.metadata.get("step") if state.metadata else None,
            state.metadata.get("source") if state.metadata else None,
        )

    latest = graph.get_state(config)
    pending = graph.checkpointer.get_tuple(config)
    assert pending is not None
    writes = sorted(repr((channel, _without_ids(value))) for _, channel, value in (pending.pending_writes or []))
    return snapshot(latest), writes, [snapshot(s) for s in graph.get_state_history(config)]


def _without_ids(value: Any) -> Any:
    """An interrupt's id is derived from its checkpoint's: two threads differ by it alone."""
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    return ("Interrupt", value.value) if isinstance(value, Interrupt) else value


@pytest.fixture
def seaweed_saver(seaweedfs_server: LocalS3Server, prefix: str) -> Iterator[S3Saver]:
    seaweedfs_server.create_bucket("lgs3-test")
    saver = S3Saver(bucket="lgs3-test", prefix=prefix, client=seaweedfs_server.client())
    saver.setup()
    yield saver
    saver.close()


@pytest.mark.parametrize("style", ["metadata", "configurable"])
@pytest.mark.parametrize("durability", ["sync", "async"])
def test_rollback_of_the_run_that_answered_an_interrupt(
    seaweed_saver: S3Saver, style: str, durability: Durability
) -> None:
    """r0 stops at the question; r1 answers "yes" and the graph completes; ``delete_for_runs([r1])``; r2 answers
    "no". The thread reads, after the rollback and at the end, exactly as a thread where r1 never happened."""
    graph = _approval_graph(seaweed_saver)
    rolled, reference = f"rolled-{uuid4().hex}", f"reference-{uuid4().hex}"
    for thread in (rolled, reference):
        graph.invoke({"request": "post", "log": []}, _run(thread, f"r0-{thread}", style), durability=durability)
    before = _view(graph, rolled)
    assert before[0][1] == ("review",) and before[0][2][0][1] == [{"question": "publish post?"}]

    done = graph.invoke(Command(resume="yes"), _run(rolled, "r1", style), durability=durability)
    assert done["log"][-1] == "published"
    # A new process, as the Agent Server rolls back wherever the run was cancelled.
    S3Saver(bucket=seaweed_saver.bucket, prefix=seaweed_saver.prefix, client=seaweed_saver.client).delete_for_runs(
        ["r1"]
    )
    assert _view(graph, rolled) == before == _view(graph, reference)

    for thread in (rolled, reference):
        final = graph.invoke(Command(resume="no"), _run(thread, f"r2-{thread}", style), durability=durability)
        assert final["answer"] == "no" and final["log"][-1] == "dropped", final
    assert _view(graph, rolled) == _view(graph, reference)


def _answered_and_stopped(saver: S3Saver) -> tuple[Any, str, str, Any]:
    """Run r0 on two threads, ``rolled`` and ``reference``, up to the question; then r1 answers on ``rolled``, and
    its node fails before r1 commits any checkpoint. The graph, the two threads, and ``rolled`` as r0 left it."""
    graph = _approval_graph(saver)
    rolled, reference = f"rolled-{uuid4().hex}", f"reference-{uuid4().hex}"
    for thread in (rolled, reference):
        graph.invoke({"request": "post", "log": []}, _run(thread, f"r0-{thread}", "metadata"))
    before = _view(graph, rolled)
    with pytest.raises(RuntimeError, match="cancelled"):
        _approval_graph(saver, review_fails=True).invoke(
            Command(resume="yes"), _run(rolled, "r1", "metadata"), durability="sync"
        )
    return graph, rolled, reference, before


def test_rollback_of_a_run_that_answered_and_was_stopped_before_its_first_checkpoint(seaweed_saver: S3Saver) -> None:
    """r1 answers, and its node fails before r1 commits any checkpoint: r1 leaves only writes, on r0's checkpoint
    (the resume value, the node's error), and the run index still finds them."""
    graph, rolled, reference, before = _answered_and_stopped(seaweed_saver)
    history = list(seaweed_saver.list({"configurable": {"thread_id": rolled}}))
    assert not [t for t in history if t.metadata.get("run_id") == "r1"], "r1 must not have committed a checkpoint"
    assert _view(graph, rolled) != before, "the scenario must leave r1's writes on r0's checkpoint"
    seaweed_saver.delete_for_runs(["r1"])
    assert _view(graph, rolled) == before == _view(graph, reference)
    for thread in (rolled, reference):
        graph.invoke(Command(resume="no"), _run(thread, f"r2-{thread}", "metadata"))
    assert _view(graph, rolled) == _view(graph, reference)


def test_gc_keeps_the_index_a_rollback_of_a_run_that_only_answered_needs(seaweed_saver: S3Saver) -> None:
    """As above, with gc in between: r1 committed nothing, so no record names it, and its run-index entries name
    r0's checkpoint, where its writes are. gc (reading the records, then again trusting its seal of them) must
    keep those entries, or ``delete_for_runs(["r1"])`` would find nothing and leave r1's answer in place."""
    graph, rolled, reference, before = _answered_and_stopped(seaweed_saver)
    assert _view(graph, rolled) != before, "the scenario must leave r1's writes on r0's checkpoint"
    time.sleep(3)  # a gc seals records older than 2 s (LastModified has whole seconds)
    first, second = gc(seaweed_saver, grace_seconds=0), gc(seaweed_saver, grace_seconds=0)
    assert first.records_read > 0 and second.records_read == 0 and second.records_sealed == first.records_read
    assert first.total == second.total == 0, (first.deleted, second.deleted)
    seaweed_saver.delete_for_runs(["r1"])
    assert _view(graph, rolled) == before == _view(graph, reference)


# -- cost ------------------------------------------------------------------------------------------------
@pytest.fixture
def counted(
    s3_server: LocalS3Server, bucket: str, prefix: str, count_requests: Callable[[Any], RequestCounter]
) -> Iterator[tuple[S3Saver, RequestCounter]]:
    client = s3_server.client()
    saver = S3Saver(bucket=bucket, prefix=prefix, client=client)
    yield saver, count_requests(client)
    saver.close()


def test_put_writes_of_a_run_costs_one_put_on_its_own_checkpoint(counted: tuple[S3Saver, RequestCounter]) -> None:
    """The hot path is unchanged by run attribution: writes to the checkpoint the run just put are 1 PUT. Writes
    to another run's checkpoint (resuming it) index the run there first: 1 PUT of its entry (create-only), then 1."""
    saver, counter = counted
    thread = f"t-{uuid4().hex}"
    config = saver.put({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, empty_checkpoint(), {}, {})
    r0 = saver.put(config, _checkpoint(), {"source": "loop", "step": 0, "run_id": "r0"}, {})
    mine: RunnableConfig = {**r0, "metadata": {"run_id": "r0"}}
    counter.reset()
    saver.put_writes(mine, [("a", 1), ("b", 2)], "task-1", "~pull, one")
    assert counter.snapshot() == {"PutObject": 1}

    theirs: RunnableConfig = {**r0, "metadata": {"run_id": "r1"}}
    counter.reset()
    saver.put_writes(theirs, [("__resume__", "yes")], "task-2")
    assert counter.snapshot() == {"PutObject": 2}
    r1 = saver.put(theirs, _checkpoint(), {"source": "loop", "step": 1, "run_id": "r1"}, {})
    counter.reset()
    saver.put_writes({**r1, "metadata": {"run_id": "r1"}}, [("a", 3)], "task-3")
    assert counter.snapshot() == {"PutObject": 1}


def _checkpoint() -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6())
    return checkpoint


# -- order -----------------------------------------------------------------------------------------------
def _same_writes_as_in_memory(saver: Any, calls: list[tuple[list[tuple[str, Any]], str, str]]) -> None:
    reference = InMemorySaver()
    got = []
    for target in (saver, reference):
        config = target.put(
            {"configurable": {"thread_id": f"t-{uuid4().hex}", "checkpoint_ns": ""}}, empty_checkpoint(), {}, {}
        )
        for writes, task, path in calls:
            target.put_writes(config, writes, task, path)
        got.append(tuple_at(target, config).pending_writes)
    assert got[0] == got[1], calls


def test_a_special_write_written_again_keeps_its_place(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    """Task B's interrupt is written again under another path than B's first call: InMemorySaver orders each
    write by the path it was written with, and so does the saver (it used to order all of B's writes by B's
    latest path, which put task A's resume value last)."""
    saver = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    _same_writes_as_in_memory(
        saver,
        [
            ([("__resume__", "yes")], "A", "~pull, b"),
            ([("__interrupt__", "first"), ("x", 13)], "B", "~pull, b"),
            ([("__interrupt__", "again")], "B", "~pull, a"),
        ],
    )
    saver.close()


@pytest.mark.memory
def test_writes_order_matches_in_memory_saver_randomized() -> None:
    """Random sequences of put_writes calls (tasks written under several paths, special channels written
    again, duplicates in a call) read back exactly as InMemorySaver returns them (on the in-memory bucket)."""
    channels = ["x", "y", "__resume__", "__interrupt__", "__error__"]
    for seed in range(400):
        rng = random.Random(seed)
        calls = [
            (
                [(rng.choice(channels), rng.randrange(100)) for _ in range(rng.randint(1, 3))],
                rng.choice(["A", "B", "00000000-0000-0000-0000-000000000000"]),
                rng.choice(["", "~pull, a", "~pull, b"]),
            )
            for _ in range(rng.randint(1, 5))
        ]
        _same_writes_as_in_memory(S3Saver(bucket="b", client=MemoryBucket()), calls)


WRITE_CALLS: list[tuple[str, list[tuple[str, Any]]]] = [
    ("task-a", [("__interrupt__", "first question")]),
    ("task-a", [("__resume__", "first answer"), ("x", 1), ("y", 2)]),
    ("task-a", [("__interrupt__", "second question")]),
    ("task-a", [("__resume__", "second answer"), ("x", 10)]),
    ("task-a", [("x", 100), ("z", 3)]),
    ("task-b", [("y", "b1")]),
    ("task-b", [("y", "b2"), ("w", "b3")]),
    ("task-b", [("__error__", "boom")]),
    ("task-b", [("__error__", "boom again")]),
]


def test_writes_of_a_tasks_many_put_writes_calls_merge_as_in_memory_saver(make_saver: Callable[[], S3Saver]) -> None:
    """Writes are kept per (task, index), as InMemorySaver keeps them, whatever put_writes call they came in: a task's
    later calls (a second resume value, a special write in a combined call, regular writes after a resume) are each kept
    at their index, not dropped nor written over another index, and a fresh saver reads them back the same way."""
    saver, fresh, memory = make_saver(), make_saver(), InMemorySaver()
    for target in (saver, memory):
        config = put(target, "t", cid(1))
        for task, writes in WRITE_CALLS:
            target.put_writes(config, writes, task)
    expected = tuple_at(memory, cfg("t")).pending_writes
    assert tuple_at(saver, cfg("t")).pending_writes == expected
    assert tuple_at(fresh, cfg("t", "", cid(1))).pending_writes == expected
    assert next(iter(fresh.list(cfg("t")))).pending_writes == expected


class TwoNodes(TypedDict):
    log: Annotated[list[str], operator.add]


def two_parallel_nodes(checkpointer: Any) -> tuple[Any, dict[str, int]]:
    """``asks_twice`` interrupts twice, then completes; ``flaky`` (parallel) fails its first three runs, so
    the step that ``asks_twice`` completes in does not finish: its writes must be read back from storage."""
    calls = {"flaky": 0, "asks_twice": 0}
    asked = threading.Event()

    def asks_twice(state: TwoNodes) -> dict[str, Any]:
        calls["asks_twice"] += 1
        try:
            first = interrupt("first?")
            second = interrupt("second?")
            return {"log": [f"asked:{first}:{second}"]}
        finally:
            asked.set()

    def flaky(state: TwoNodes) -> dict[str, Any]:
        calls["flaky"] += 1
        if calls["flaky"] < 4:
            # Fail only once the other node has ended and its writes are stored (a failure first would
            # cancel it, and which one wins would be a race).
            asked.wait(10)
            asked.clear()
            time.sleep(0.5)
            raise RuntimeError(f"flaky failure {calls['flaky']}")
        return {"log": ["flaky"]}

    builder = StateGraph(TwoNodes)
    builder.add_node("asks_twice", asks_twice)
    builder.add_node("flaky", flaky)
    builder.add_edge(START, "asks_twice")
    builder.add_edge(START, "flaky")
    builder.add_edge("asks_twice", END)
    builder.add_edge("flaky", END)
    return builder.compile(checkpointer=checkpointer), calls


def test_a_node_interrupting_twice_beside_a_failing_node_runs_as_with_in_memory_saver(
    make_saver: Callable[[], S3Saver],
) -> None:
    """A node interrupts twice and completes beside a parallel node that keeps failing: its completing call
    ``put_writes([resume, resume, log])`` is stored (a stored batch of the same task must not refuse it), so the
    completed node does not run a fourth time on the last resume. The graph runs and ends exactly as with
    InMemorySaver."""
    results = []
    for checkpointer in (InMemorySaver(), make_saver()):
        graph, calls = two_parallel_nodes(checkpointer)
        config: RunnableConfig = {"configurable": {"thread_id": "g"}}
        outputs: list[Any] = []
        for command in ({"log": []}, Command(resume="one"), Command(resume="two"), None):
            try:
                out = graph.invoke(command, config)
            except RuntimeError as exc:
                outputs.append(str(exc))
                continue
            # Interrupt ids derive from random task ids: compare the questions asked.
            outputs.append({k: [i.value for i in v] if k == "__interrupt__" else v for k, v in out.items()})
        state = graph.get_state(config)
        results.append((outputs, state.values, state.next, calls))
    assert results[1] == results[0]
    assert sorted(results[1][1]["log"]) == ["asked:one:two", "flaky"]
    assert results[1][3] == {"flaky": 4, "asks_twice": 3}  # its completed run's writes were kept


def test_writes_for_a_checkpoint_without_a_record_belong_to_no_checkpoint(make_saver: Callable[[], S3Saver]) -> None:
    """Writes stored for a checkpoint id that has no record (here: never put) belong to no checkpoint: list() and
    get_tuple() do not attribute them to the next newer record."""
    saver = make_saver()
    put(saver, "t", cid(1))
    put(saver, "t", cid(3), cid(1))
    saver.put_writes(cfg("t", "", cid(2)), [("x", "stray")], "task")
    listed = list(saver.list(cfg("t")))
    assert ids(listed) == [cid(3), cid(1)]
    assert [t.pending_writes for t in listed] == [[], []]
    assert tuple_at(saver, cfg("t")).pending_writes == []
