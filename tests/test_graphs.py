"""Real LangGraph graphs on a real S3 server: interrupts, subgraphs, history, forks, partial failures."""

from __future__ import annotations

import itertools
import operator
from collections import Counter
from collections.abc import Iterator
from typing import Annotated, Any, Literal
from uuid import uuid4

import pytest
from helpers import client_options
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, StateSnapshot, interrupt
from typing_extensions import TypedDict

from langgraph_s3_checkpoint import AsyncS3Saver, S3Saver
from langgraph_s3_checkpoint.local import LocalS3Server

Durability = Literal["sync", "async", "exit"]
DURABILITIES: list[Durability] = ["sync", "async", "exit"]


class State(TypedDict):
    log: Annotated[list[str], operator.add]


@pytest.fixture
def saver(s3_server: LocalS3Server, bucket: str, prefix: str) -> Iterator[S3Saver]:
    s = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    s.setup()
    yield s
    s.close()


def _config(thread_id: str | None = None) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id or f"thread-{uuid4()}"}}


def _approval_graph(saver: Any) -> Any:
    def draft(state: State) -> dict[str, Any]:
        return {"log": ["draft"]}

    def review(state: State) -> dict[str, Any]:
        answer = interrupt({"question": "approve?", "log": state["log"]})
        return {"log": [f"review:{answer}"]}

    def publish(state: State) -> dict[str, Any]:
        return {"log": ["publish"]}

    builder = StateGraph(State)
    builder.add_sequence([("draft", draft), ("review", review), ("publish", publish)])
    builder.add_edge(START, "draft")
    builder.add_edge("publish", END)
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("durability", DURABILITIES)
def test_interrupt_and_resume_with_command(saver: S3Saver, durability: Durability) -> None:
    graph = _approval_graph(saver)
    config = _config()
    first = graph.invoke({"log": ["start"]}, config, durability=durability)
    assert first["__interrupt__"][0].value["question"] == "approve?"
    assert graph.get_state(config).next == ("review",)

    # A fresh saver (a new process, in effect) resumes from the bucket alone.
    fresh = S3Saver(bucket=saver.bucket, prefix=saver.prefix, client=saver.client)
    resumed = _approval_graph(fresh).invoke(Command(resume="yes"), config, durability=durability)
    assert resumed["log"] == ["start", "draft", "review:yes", "publish"]
    assert _approval_graph(fresh).get_state(config).next == ()


async def test_async_interrupt_resume_and_history(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    async with AsyncS3Saver.from_conn_string(f"s3://{bucket}/{prefix}", **client_options(s3_server)) as saver:
        await saver.setup()
        graph = _approval_graph(saver)
        config = _config()
        await graph.ainvoke({"log": []}, config)
        out = await graph.ainvoke(Command(resume="ok"), config)
        assert out["log"] == ["draft", "review:ok", "publish"]
        history = [s async for s in graph.aget_state_history(config)]
        assert [s.metadata["step"] for s in history] == sorted((s.metadata["step"] for s in history), reverse=True)
        assert history[-1].metadata["source"] == "input"
        assert history[0].values["log"] == ["draft", "review:ok", "publish"]
        # parent links are stored, not derived: every snapshot but the first points at its predecessor
        for newer, older in itertools.pairwise(history):
            assert newer.parent_config is not None
            assert newer.parent_config["configurable"]["checkpoint_id"] == older.config["configurable"]["checkpoint_id"]


def test_sync_method_of_async_saver_inside_event_loop_raises(s3_server: LocalS3Server, bucket: str) -> None:
    import asyncio

    from langgraph_s3_checkpoint import SaverMisuseError

    saver = AsyncS3Saver(bucket=bucket, prefix=f"misuse/{uuid4().hex}", client=s3_server.client())

    async def call_sync() -> None:
        saver.get_tuple(_config())

    with pytest.raises(SaverMisuseError, match=r"aget_tuple|async method"):
        asyncio.run(call_sync())
    # From a plain thread without a running loop the blocking call works.
    assert saver.get_tuple(_config()) is None
    saver.close()


def test_history_update_state_and_fork(saver: S3Saver) -> None:
    class Counter_(TypedDict):
        n: int
        trail: Annotated[list[int], operator.add]

    def inc(state: Counter_) -> dict[str, Any]:
        return {"n": state["n"] + 1, "trail": [state["n"] + 1]}

    builder = StateGraph(Counter_)
    builder.add_node("inc", inc)
    builder.add_edge(START, "inc")
    builder.add_edge("inc", END)
    graph = builder.compile(checkpointer=saver)
    config = _config()
    for _ in range(3):
        graph.invoke({"n": graph.get_state(config).values.get("n", 0), "trail": []}, config)
    assert graph.get_state(config).values["n"] == 3

    history = list(graph.get_state_history(config))
    # the snapshot right after the first run finished
    first_done = next(s for s in reversed(history) if s.values.get("n") == 1 and not s.next)
    fork_config = graph.update_state(first_done.config, {"n": 100})
    forked = graph.get_state(fork_config)
    assert forked.values["n"] == 100
    assert forked.parent_config is not None
    assert forked.parent_config["configurable"]["checkpoint_id"] == first_done.config["configurable"]["checkpoint_id"]
    # The fork is now the thread's latest state, and continuing runs from it.
    assert graph.get_state(config).values["n"] == 100
    graph.invoke({"n": 100, "trail": []}, config)
    assert graph.get_state(config).values["n"] == 101
    # The branch before the fork is still readable.
    assert next(iter(graph.get_state_history(first_done.config))).values["n"] == 1

    # Replaying from an old checkpoint re-runs from there without touching other branches.
    replay = graph.invoke(None, first_done.config)
    assert replay["n"] == 1


@pytest.mark.parametrize("durability", DURABILITIES)
def test_failed_sibling_is_rerun_alone_on_resume(saver: S3Saver, durability: Durability) -> None:
    runs: Counter[str] = Counter()
    fail = {"c": True}

    def a(state: State) -> dict[str, Any]:
        runs["a"] += 1
        return {"log": ["a"]}

    def b(state: State) -> dict[str, Any]:
        runs["b"] += 1
        return {"log": ["b"]}

    def c(state: State) -> dict[str, Any]:
        runs["c"] += 1
        if fail["c"]:
            raise RuntimeError("c crashed")
        return {"log": ["c"]}

    builder = StateGraph(State)
    for name, fn in (("a", a), ("b", b), ("c", c)):
        builder.add_node(name, fn)
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("a", "c")
    graph = builder.compile(checkpointer=saver)
    config = _config()
    with pytest.raises(RuntimeError, match="c crashed"):
        graph.invoke({"log": []}, config, durability=durability)
    fail["c"] = False
    out = graph.invoke(None, config, durability=durability)
    assert sorted(out["log"]) == ["a", "b", "c"]
    if durability == "exit":
        # Nothing is saved until the run ends, so a crash mid-run means starting over from the input.
        assert runs["a"] >= 1
    else:
        assert runs == Counter({"a": 1, "b": 1, "c": 2})


def test_nested_subgraphs_with_interrupt(saver: S3Saver) -> None:
    def inner_ask(state: State) -> dict[str, Any]:
        return {"log": [f"inner:{interrupt('inner?')}"]}

    inner_builder = StateGraph(State)
    inner_builder.add_node("ask", inner_ask)
    inner_builder.add_edge(START, "ask")
    inner = inner_builder.compile()

    middle_builder = StateGraph(State)
    middle_builder.add_node("inner", inner)
    middle_builder.add_edge(START, "inner")
    middle = middle_builder.compile()

    outer_builder = StateGraph(State)
    outer_builder.add_node("middle", middle)
    outer_builder.add_node("done", lambda s: {"log": ["done"]})
    outer_builder.add_edge(START, "middle")
    outer_builder.add_edge("middle", "done")
    graph = outer_builder.compile(checkpointer=saver)

    config = _config()
    graph.invoke({"log": []}, config)
    state = graph.get_state(config, subgraphs=True)
    assert state.next == ("middle",)
    # nested namespaces ("middle:<id>|inner:<id>") are stored under escaped keys and read back
    sub = state.tasks[0].state
    assert isinstance(sub, StateSnapshot) and isinstance(sub.tasks[0].state, StateSnapshot)
    assert "|" in sub.tasks[0].state.config["configurable"]["checkpoint_ns"]
    out = graph.invoke(Command(resume="yes"), config)
    assert out["log"] == ["inner:yes", "done"]


def test_list_filters_and_before(saver: S3Saver) -> None:
    graph = _approval_graph(saver)
    config = _config()
    graph.invoke({"log": []}, config)
    graph.invoke(Command(resume="x"), config)
    everything = list(saver.list(config))
    ids = [t.config["configurable"]["checkpoint_id"] for t in everything]
    assert ids == sorted(ids, reverse=True)
    assert [t.metadata["source"] for t in saver.list(config, filter={"source": "input"})] == ["input"]
    older = list(saver.list(config, before=everything[1].config, limit=2))
    assert [t.config["configurable"]["checkpoint_id"] for t in older] == ids[2:4]
    # list(None) covers every thread under the prefix
    other = _config()
    graph.invoke({"log": []}, other)
    threads = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
    assert threads == {config["configurable"]["thread_id"], other["configurable"]["thread_id"]}
