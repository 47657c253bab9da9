"""prune(keep_latest) really prunes ordinary threads, and keeps what DeltaChannel needs; delta history."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Annotated, Any
from uuid import uuid4

import pytest
from helpers import is_record_key
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_s3_checkpoint import S3Saver
from langgraph_s3_checkpoint._protocol import thread_edits
from langgraph_s3_checkpoint.local import LocalS3Server


def _extend(state: list[str], batches: Sequence[list[str]]) -> list[str]:
    out = list(state)
    for batch in batches:
        out.extend(batch)
    return out


class Plain(TypedDict):
    steps: int


class Chat(TypedDict):
    messages: Annotated[list[str], DeltaChannel(_extend, snapshot_frequency=4)]
    turns: int


@pytest.fixture
def saver(s3_server: LocalS3Server, bucket: str, prefix: str) -> Iterator[S3Saver]:
    s = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    yield s
    s.close()


def _objects(saver: S3Saver, thread_id: str) -> list[str]:
    paginator = saver.client.get_paginator("list_objects_v2")
    prefix = saver._core.layout.thread(thread_id)
    return [
        o["Key"] for page in paginator.paginate(Bucket=saver.bucket, Prefix=prefix) for o in page.get("Contents", [])
    ]


def _loop_graph(saver: S3Saver) -> Any:
    builder = StateGraph(Plain)
    builder.add_node("agent", lambda s: {"steps": s["steps"] + 1})
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", lambda s: END if s["steps"] >= 5 else "agent")
    return builder.compile(checkpointer=saver)


def test_keep_latest_prunes_an_ordinary_thread(saver: S3Saver) -> None:
    graph = _loop_graph(saver)
    config = {"configurable": {"thread_id": f"t-{uuid4()}"}}
    graph.invoke({"steps": 0}, config)
    before = _objects(saver, config["configurable"]["thread_id"])
    saver.prune([config["configurable"]["thread_id"]])
    after = _objects(saver, config["configurable"]["thread_id"])
    assert len(after) < len(before)
    assert len(list(saver.list(config))) == 1
    assert graph.get_state(config).values == {"steps": 5}
    # The kept checkpoint still names its parent (documented in the README); the parent reads as absent.
    kept = saver.get_tuple(config)
    assert kept is not None and kept.parent_config is not None
    assert saver.get_tuple(kept.parent_config) is None


def _chat_graph(saver: S3Saver) -> Any:
    def turn(state: Chat) -> dict[str, Any]:
        n = state.get("turns", 0) + 1
        return {"messages": [f"user {n}", f"bot {n}"], "turns": n}

    builder = StateGraph(Chat)
    builder.add_node("turn", turn)
    builder.add_edge(START, "turn")
    builder.add_edge("turn", END)
    return builder.compile(checkpointer=saver)


def test_delta_channel_survives_keep_latest_and_uses_the_override(saver: S3Saver) -> None:
    graph = _chat_graph(saver)
    config = {"configurable": {"thread_id": f"chat-{uuid4()}"}}
    for _ in range(7):
        graph.invoke({"messages": []}, config)
    expected = graph.get_state(config).values
    assert len(expected["messages"]) == 14
    latest = saver.get_tuple(config)
    assert latest is not None
    ours = saver.get_delta_channel_history(config=latest.config, channels=["messages", "turns"])
    # the base class walks get_tuple + parent_config one ancestor at a time: same answer, more requests
    reference = BaseCheckpointSaver.get_delta_channel_history(
        saver, config=latest.config, channels=["messages", "turns"]
    )
    assert ours == reference
    assert ours["messages"]["writes"] or "seed" in ours["messages"]

    saver.prune([config["configurable"]["thread_id"]])
    fresh = S3Saver(bucket=saver.bucket, prefix=saver.prefix, client=saver.client)
    assert _chat_graph(fresh).get_state(config).values == expected
    graph.invoke({"messages": []}, config)
    assert len(graph.get_state(config).values["messages"]) == 16


def test_keep_latest_spares_a_put_in_flight(saver: S3Saver, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blobs and a record newer than the head (a put between its first batch and its head) survive prune,
    and so does every young large value the head does not reference: a fork numbers its versions from an
    older checkpoint, so a version below the head's may be a put in flight too."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    thread = f"flight-{uuid4()}"
    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    versions: dict[str, str] = {}
    for step in range(3):
        versions["big"] = saver.get_next_version(versions.get("big"), None)
        cp = empty_checkpoint()
        cp["channel_versions"] = dict(versions)
        cp["channel_values"] = {"big": "x" * 10_000 + str(step)}
        config = saver.put(config, cp, {"step": step}, {"big": versions["big"]})
    layout = saver._core.layout
    next_version = saver.get_next_version(versions["big"], None)
    in_flight = [
        layout.blob(thread, "", "big", next_version),
        layout.record(thread, "", str(uuid6(clock_seq=99))),
    ]
    for key in in_flight:
        saver.client.put_object(Bucket=saver.bucket, Key=key, Body=b"in flight")
    saver.prune([thread])
    remaining = set(_objects(saver, thread))
    assert set(in_flight) <= remaining
    # superseded records went (they can never be committed again); young values all stay
    assert len([k for k in remaining if "/b/" in k]) == 4
    assert len([k for k in remaining if is_record_key(k)]) == 2
    assert saver.get_tuple(config) is not None
    assert len(list(saver.list({"configurable": {"thread_id": thread}}))) == 1
    # once older than the grace period (by the server's clock), unreferenced objects go
    monkeypatch.setattr(thread_edits, "PRUNE_GRACE", timedelta(0))
    saver.prune([thread])
    remaining = set(_objects(saver, thread))
    assert len([k for k in remaining if "/b/" in k]) == 1
    assert len([k for k in remaining if is_record_key(k)]) == 1
    latest = saver.get_tuple(config)
    assert latest is not None and latest.checkpoint["channel_values"]["big"] == "x" * 10_000 + "2"
