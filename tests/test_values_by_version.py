"""A channel's value is the one stored when its version moved, as InMemorySaver and PostgresSaver keep it.

LangGraph hands ``put`` live channel objects, and some change in place: a join barrier's set of the nodes it has
seen. With ``durability="async"`` a put runs after the previous one has finished, so on a real bucket the next
step may already have changed such an object. The saver serialized every channel on every put and so stored the
next step's set under the old version: history showed the joined node due too early, and a replay from there
never ran it. A put now carries over, as stored, the fenced parent's value of every channel whose version did not
move (and no value where the parent had none: a ``DeltaChannel`` snapshot is seen at every checkpoint of its
version, as InMemorySaver shows it).
"""

from __future__ import annotations

import operator
import time
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from langgraph_s3_checkpoint import S3Saver
from langgraph_s3_checkpoint._protocol.requests import Request
from langgraph_s3_checkpoint.memory import MemoryBucket

pytestmark = pytest.mark.memory
"""No S3 server: every test of this module runs in memory (``pytest -m memory``)."""


def config(checkpoint_id: str | None = None) -> RunnableConfig:
    configurable = {"thread_id": "t", "checkpoint_ns": ""}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


@pytest.mark.parametrize("size", [10, 10_000], ids=["inline", "large value"])
def test_a_value_changed_in_place_without_a_new_version_keeps_its_stored_value(size: int) -> None:
    bucket = MemoryBucket()
    saver = S3Saver(bucket="b", client=bucket)
    live = {"seen": ["x" * size]}  # one object, changed in place as a join's set is
    first = empty_checkpoint()
    first["id"] = "1f0" + "0" * 28 + "01"
    first["channel_values"] = {"barrier": live, "n": 1}
    first["channel_versions"] = {"barrier": "1", "n": "1"}
    parent = saver.put(config(), first, {"step": 0}, {"barrier": "1", "n": "1"})

    live["seen"].append("changed in place by the next step")
    second = empty_checkpoint()
    second["id"] = "1f0" + "0" * 28 + "02"
    second["channel_values"] = {"barrier": live, "n": 2}
    second["channel_versions"] = {"barrier": "1", "n": "2"}  # barrier's version did not move
    saver.put(parent, second, {"step": 1}, {"n": "2"})

    for reader in (saver, S3Saver(bucket="b", client=bucket)):
        stored = reader.get_tuple(config(second["id"]))
        assert stored is not None
        assert stored.checkpoint["channel_values"] == {"barrier": {"seen": ["x" * size]}, "n": 2}


def test_the_value_is_carried_over_as_stored_not_serialized_again() -> None:
    """A put continuing a head it read sends the head's bytes for unchanged channels."""

    class CountingSerde:
        def __init__(self) -> None:
            self.inner = S3Saver(bucket="b", client=MemoryBucket()).serde
            self.dumped: list[Any] = []

        def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
            self.dumped.append(obj)
            return self.inner.dumps_typed(obj)

        def loads_typed(self, data: tuple[str, bytes]) -> Any:
            return self.inner.loads_typed(data)

    bucket = MemoryBucket()
    first = empty_checkpoint()
    first["id"] = "1f0" + "0" * 28 + "01"
    first["channel_values"] = {"unchanged": "kept", "n": 1}
    first["channel_versions"] = {"unchanged": "1", "n": "1"}
    S3Saver(bucket="b", client=bucket).put(config(), first, {"step": 0}, {"unchanged": "1", "n": "1"})

    serde = CountingSerde()
    reader = S3Saver(bucket="b", client=bucket, serde=serde)
    latest = reader.get_tuple(config())
    assert latest is not None
    second = empty_checkpoint()
    second["id"] = "1f0" + "0" * 28 + "02"
    second["channel_values"] = {"unchanged": "not what was stored", "n": 2}
    second["channel_versions"] = {"unchanged": "1", "n": "2"}
    serde.dumped.clear()
    reader.put(latest.config, second, {"step": 1}, {"n": "2"})
    assert "not what was stored" not in serde.dumped and 2 in serde.dumped
    stored = reader.get_tuple(config(second["id"]))
    assert stored is not None and stored.checkpoint["channel_values"]["unchanged"] == "kept"


class State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def fan_out_and_join(saver: Any) -> Any:
    builder = StateGraph(State)
    for name in ("a", "b1", "b2", "c"):
        builder.add_node(name, lambda state, name=name: {"log": [name]})
    builder.add_edge(START, "a")
    builder.add_edge("a", "b1")
    builder.add_edge("a", "b2")
    builder.add_edge(["b1", "b2"], "c")  # a join: its barrier channel is a set LangGraph fills in place
    builder.add_edge("c", END)
    return builder.compile(checkpointer=saver)


class SlowBucket(MemoryBucket):
    """20 ms per request, a round trip to S3 in a region: enough for LangGraph to run the next step before a
    ``durability="async"`` put of the previous checkpoint is sent."""

    def execute(self, request: Request) -> Any:
        time.sleep(0.02)
        return super().execute(request)


def test_history_and_replay_across_a_join_match_inmemorysaver_with_async_durability() -> None:
    results = {}
    for name, saver in (("memory", InMemorySaver()), ("s3", S3Saver(bucket="b", client=SlowBucket()))):
        graph = fan_out_and_join(saver)
        cfg = {"configurable": {"thread_id": "t"}}
        graph.invoke({"log": []}, cfg, durability="async")
        graph.invoke({"log": []}, cfg, durability="async")  # the join's barrier channel now exists
        history = list(graph.get_state_history(cfg))
        due = [(s.metadata["step"], s.next) for s in reversed(history)]
        fork = next(s for s in history if s.metadata["step"] == 6)
        replayed = graph.invoke(None, fork.config, durability="sync")["log"]
        results[name] = (due, replayed)
    assert results["s3"] == results["memory"]
    assert results["s3"][1][-4:] == ["a", "b1", "b2", "c"]
