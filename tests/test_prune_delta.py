"""prune(keep_latest) really prunes ordinary threads, and keeps what DeltaChannel needs; delta history."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Annotated, Any
from uuid import uuid4

import pytest
from helpers import BIG, cfg, cid, drive, head_put_of, ids, is_record_key, put, put_plan, tuple_at, ver
from langchain_core.runnables import RunnableConfig
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
    prefix = saver.plans.layout.thread(thread_id)
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
    config: RunnableConfig = {"configurable": {"thread_id": f"t-{uuid4()}"}}
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
    config: RunnableConfig = {"configurable": {"thread_id": f"chat-{uuid4()}"}}
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
    config: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    versions: dict[str, str] = {}
    for step in range(3):
        versions["big"] = saver.get_next_version(versions.get("big"), None)
        cp = empty_checkpoint()
        cp["channel_versions"] = dict(versions)
        cp["channel_values"] = {"big": "x" * 10_000 + str(step)}
        config = saver.put(config, cp, {"step": step}, {"big": versions["big"]})
    layout = saver.plans.layout
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


def test_prune_spares_the_fresh_large_value_of_a_fork_in_flight(make_saver: Callable[[], S3Saver]) -> None:
    """A fork in flight numbers its versions from an older checkpoint, so its freshly written large value has a version
    below the head's: prune keeps an unreferenced value that young, or the fork's checkpoint, once committed, could not
    be read."""
    saver, forker = make_saver(), make_saver()
    for n in (1, 2, 3):
        put(saver, "t", cid(n), cid(n - 1) if n > 1 else None, values={"big": f"{n}" * BIG}, versions={"big": ver(n)})
    forker.get_tuple(cfg("t", "", cid(1)))
    plan = put_plan(
        forker, "t", cid(4), cid(1), values={"big": "f" * BIG}, versions={"big": ver(2, "fork")}, source="fork"
    )
    is_head = head_put_of(forker, "t")
    pruned = []

    def on_batch(step: list[Any]) -> None:
        if any(is_head(r) for r in step) and not pruned:
            saver.prune(["t"])  # the fork's value is written, its head is not yet
            pruned.append(True)

    drive(forker, plan, on_batch)
    assert pruned
    assert tuple_at(make_saver(), cfg("t")).checkpoint["channel_values"]["big"] == "f" * BIG


class _AheadClock(datetime):
    """This machine's clock, 15 minutes fast."""

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return datetime.now(tz) + timedelta(minutes=15)


def test_prune_judges_a_values_age_by_the_servers_clock(
    make_saver: Callable[[], S3Saver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether a value is young enough to belong to a put in flight is judged on the server's clock: a pruner whose
    clock is 15 minutes fast does not delete the value a put has just written, before that put commits."""
    saver, pruner = make_saver(), make_saver()
    put(saver, "t", cid(1), values={"big": "1" * BIG}, versions={"big": ver(1)})
    plan = put_plan(saver, "t", cid(2), cid(1), values={"big": "2" * BIG}, versions={"big": ver(2)})
    is_head = head_put_of(saver, "t")
    pruned = []

    def on_batch(step: list[Any]) -> None:
        if any(is_head(r) for r in step) and not pruned:
            with monkeypatch.context() as m:
                m.setattr(thread_edits, "datetime", _AheadClock)
                pruner.prune(["t"])
            pruned.append(True)

    drive(saver, plan, on_batch)
    assert pruned
    assert tuple_at(make_saver(), cfg("t")).checkpoint["channel_values"]["big"] == "2" * BIG


def test_a_saver_forgets_the_large_values_its_own_prune_deleted(make_saver: Callable[[], S3Saver]) -> None:
    """A saver that read a checkpoint and then pruned it must not remember the checkpoint's large value as stored: a
    fork from that checkpoint writes the value again, and reads back."""
    saver = make_saver()
    put(saver, "t", cid(1), values={"big": "1" * BIG}, versions={"big": ver(1)})
    put(saver, "t", cid(2), cid(1), values={"big": "2" * BIG}, versions={"big": ver(2)})
    assert saver.get_tuple(cfg("t", "", cid(1))) is not None  # how a fork starts
    saver.prune(["t"])
    put(saver, "t", cid(3), cid(1), values={"big": "1" * BIG}, versions={"big": ver(1)}, new={}, source="fork")
    reader = make_saver()
    assert tuple_at(reader, cfg("t")).checkpoint["channel_values"]["big"] == "1" * BIG
    assert ids(reader.list(cfg("t"))) == [cid(3), cid(2)]


def test_prune_keeps_an_older_value_that_a_fork_committed_meanwhile_reuses(
    make_saver: Callable[[], S3Saver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork of an older checkpoint reuses that checkpoint's large value (offered with If-None-Match, found existing,
    not rewritten). If the fork commits while prune runs, prune must not delete the value under the fork's head: prune
    reads the head again before it deletes large values, and keeps what it references."""
    monkeypatch.setattr(thread_edits, "PRUNE_GRACE", timedelta(0))  # stands in for a value written long ago
    writer, pruner, forker = make_saver(), make_saver(), make_saver()
    put(writer, "t", cid(1), values={"big": "1" * BIG}, versions={"big": ver(1)})
    put(writer, "t", cid(2), cid(1), values={"big": "2" * BIG}, versions={"big": ver(2)})
    assert forker.get_tuple(cfg("t", "", cid(1))) is not None  # a fork starts by reading its checkpoint
    original = pruner.plans._prune_scope

    def scope_then_a_fork(thread_id: str, ns: str) -> Any:
        scope = yield from original(thread_id, ns)
        put(forker, "t", cid(3), cid(1), values={"big": "1" * BIG}, versions={"big": ver(1)}, new={}, source="update")
        return scope

    pruner.plans._prune_scope = scope_then_a_fork
    pruner.prune(["t"])
    latest = make_saver().get_tuple(cfg("t"))
    assert latest is not None and latest.checkpoint["id"] == cid(3)
    assert latest.checkpoint["channel_values"]["big"] == "1" * BIG
