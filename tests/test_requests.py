"""Request counts on the hot paths, counted with botocore event hooks on the real client.

These are the regression guard for cost: a change that adds a request per step fails here. Counts are
HTTP attempts per S3 operation, as S3 bills them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Annotated, Any
from uuid import uuid4

import pytest
from helpers import RequestCounter, Run
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import ChannelVersions, empty_checkpoint
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from langgraph_s3_checkpoint import S3Saver
from langgraph_s3_checkpoint.local import LocalS3Server

Counted = tuple[S3Saver, RequestCounter]


@pytest.fixture
def counted(
    s3_server: LocalS3Server, bucket: str, prefix: str, count_requests: Callable[[Any], RequestCounter]
) -> Iterator[Counted]:
    client = s3_server.client()
    saver = S3Saver(bucket=bucket, prefix=prefix, client=client)
    counter = count_requests(client)
    yield saver, counter
    saver.close()


def _chain(saver: S3Saver, thread_id: str, n: int, channels: int = 1) -> RunnableConfig:
    """Put n checkpoints in a chain, like LangGraph does; returns the last config."""
    config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    versions: ChannelVersions = {}
    for step in range(n):
        cp = empty_checkpoint()
        changed: ChannelVersions = {
            f"ch{step % channels}": saver.get_next_version(versions.get(f"ch{step % channels}"), None)  # type: ignore[arg-type]
        }
        versions.update(changed)
        cp["channel_versions"] = dict(versions)
        cp["channel_values"] = {ch: f"value of {ch} at {v}" for ch, v in versions.items()}
        config = saver.put(config, cp, {"source": "loop", "step": step, "parents": {}}, changed)
    return config


def test_latest_get_tuple_is_constant_in_history_length(counted: Counted) -> None:
    saver, counter = counted
    costs = {}
    for n in (1, 300):
        thread = f"t-{n}-{uuid4().hex}"
        config = _chain(saver, thread, n)
        saver.put_writes(config, [("ch0", "pending")], "task-1")
        counter.reset()
        tup = saver.get_tuple({"configurable": {"thread_id": thread}})
        assert tup is not None and tup.pending_writes == [("task-1", "ch0", "pending")]
        costs[n] = counter.snapshot()
    assert costs[1] == costs[300]
    # GET head, LIST the head checkpoint's writes, GET the one writes object.
    assert costs[1] == {"GetObject": 2, "ListObjectsV2": 1}


def test_put_writes_only_changed_channels(counted: Counted) -> None:
    saver, counter = counted
    thread = f"t-{uuid4().hex}"
    big = "x" * 20_000  # above the inline threshold: stored as a blob
    config: RunnableConfig = Run().of({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
    saver.get_tuple(config)  # observe the (absent) head, as LangGraph's run does before its first put
    versions = {f"c{i}": saver.get_next_version(None, None) for i in range(10)}
    cp = empty_checkpoint()
    cp["channel_versions"] = dict(versions)
    cp["channel_values"] = {ch: f"{big}{ch}" for ch in versions}
    counter.reset()
    config = saver.put(config, cp, {"step": 0}, dict(versions))
    # 10 blobs + record in parallel, then the head
    assert counter.snapshot() == {"PutObject": 12}

    versions["c3"] = saver.get_next_version(versions["c3"], None)
    cp2 = empty_checkpoint()
    cp2["channel_versions"] = dict(versions)
    cp2["channel_values"] = {ch: f"{big}{ch}-{v}" for ch, v in versions.items()}
    counter.reset()
    saver.put(config, cp2, {"step": 1}, {"c3": versions["c3"]})
    # one changed channel: its blob, the record, the head. Nothing is read.
    assert counter.snapshot() == {"PutObject": 3}
    assert counter.calls["PutObject"] == 3


def test_put_of_a_fenced_step_is_two_puts(counted: Counted) -> None:
    saver, counter = counted
    config = _chain(saver, f"t-{uuid4().hex}", 3)
    cp = empty_checkpoint()
    counter.reset()
    saver.put(config, cp, {"step": 9}, {})
    assert counter.snapshot() == {"PutObject": 2}  # record, then head (If-Match)


def _appending(saver: S3Saver, counter: RequestCounter, steps: int) -> list[dict[str, int]]:
    """Puts of a thread whose ``messages`` list of 1 KB elements gets one more at each; the requests each put sent. The
    list read back from a new process is checked to be the last one put."""
    config: RunnableConfig = {"configurable": {"thread_id": f"t-{uuid4().hex}", "checkpoint_ns": ""}}
    log = [f"message {i} " + "x" * 1000 for i in range(8)]
    version = None
    sent = []
    for step in range(steps):
        log.append(f"message {8 + step} " + "y" * 1000)
        version = saver.get_next_version(version, None)
        cp = empty_checkpoint()
        cp["channel_versions"] = {"messages": version}
        cp["channel_values"] = {"messages": list(log)}
        counter.reset()
        config = saver.put(config, cp, {"source": "loop", "step": step, "parents": {}}, {"messages": version})
        sent.append(counter.snapshot())
    fresh = S3Saver(bucket=saver.bucket, prefix=saver.prefix, client=saver.client)
    tup = fresh.get_tuple(config)
    assert tup is not None and tup.checkpoint["channel_values"]["messages"] == log
    return sent


def test_a_put_that_appends_to_a_large_list_is_two_puts(counted: Counted) -> None:
    """The list's base was stored by the first put; the next ones carry what they append in the record and the head
    (codec.Appended), until the tail outgrows its budget."""
    saver, counter = counted
    # the first (a process that never read the thread: it reads the head first) writes the base (its large value),
    # the record and the head; the next ones the record and the head
    assert _appending(saver, counter, 4) == [{"GetObject": 1, "PutObject": 3}, *[{"PutObject": 2}] * 3]


def test_appended_elements_that_outgrow_the_tail_are_one_more_put(counted: Counted) -> None:
    """Once the elements appended since the base outgrow ``appended_tail_bytes`` (8 KiB here: nine of these), the put
    sends them as a part before its record and head (codec.Appended), and the next puts carry a new tail."""
    saver, counter = counted
    saver.plans.appended_tail_bytes = 8 * 1024
    # the base (with the first read of the head), eight tails, the part of nine elements, then tails again
    assert _appending(saver, counter, 12) == [
        {"GetObject": 1, "PutObject": 3},
        *[{"PutObject": 2}] * 8,
        {"PutObject": 3},
        *[{"PutObject": 2}] * 2,
    ]


def test_put_writes_is_one_put_per_call(counted: Counted) -> None:
    saver, counter = counted
    config = _chain(saver, f"t-{uuid4().hex}", 1)
    counter.reset()
    saver.put_writes(config, [("a", 1), ("b", 2), ("c", 3)], "task-x")
    assert counter.snapshot() == {"PutObject": 1}


def test_list_limit_grows_with_k_not_history(counted: Counted) -> None:
    saver, counter = counted
    costs = {}
    for n in (12, 120):
        thread = f"t-{n}-{uuid4().hex}"
        _chain(saver, thread, n)
        counter.reset()
        got = list(saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, limit=10))
        assert len(got) == 10
        costs[n] = counter.snapshot()
    assert costs[12] == costs[120]
    # GET head + 10 records; one LIST returns the records with their writes
    assert costs[12] == {"GetObject": 11, "ListObjectsV2": 1}


class _S(TypedDict):
    n: int


def _concat(state: list[str] | None, writes: Sequence[list[str]]) -> list[str]:
    return [*(state or []), *itertools.chain.from_iterable(writes)]


class _Chat(TypedDict):
    log: Annotated[list[str], DeltaChannel(_concat)]


def test_one_node_superstep_cost(counted: Counted) -> None:
    """A one-node step under durability="sync": the node's writes, then the checkpoint (2 PUTs)."""
    saver, counter = counted
    builder = StateGraph(_S)
    builder.add_node("inc", lambda s: {"n": s["n"] + 1})
    builder.add_edge(START, "inc")
    graph = builder.compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": f"t-{uuid4().hex}"}}
    graph.invoke({"n": 0}, config, durability="sync")
    counter.reset()
    graph.invoke({"n": 5}, config, durability="sync")
    snap = counter.snapshot()
    # get latest (GET head, LIST writes) + input checkpoint (2 PUT) + input writes... measured as a whole run:
    assert snap["GetObject"] == 1
    assert snap["ListObjectsV2"] == 1
    puts_per_run = snap["PutObject"]
    counter.reset()
    graph.invoke({"n": 7}, config, durability="sync")
    assert counter.snapshot()["PutObject"] == puts_per_run  # no growth with history


def test_head_without_record_is_repaired_on_read(counted: Counted, s3_server: LocalS3Server, bucket: str) -> None:
    """Record and head go out in parallel; if only the head landed, the next read restores the record."""
    saver, _ = counted
    thread = f"t-{uuid4().hex}"
    config = _chain(saver, thread, 3)
    record_key = saver.plans.layout.record(thread, "", config["configurable"]["checkpoint_id"])
    s3_server.client().delete_object(Bucket=bucket, Key=record_key)
    latest = saver.get_tuple({"configurable": {"thread_id": thread}})
    assert latest is not None and latest.config == config
    s3_server.client().head_object(Bucket=bucket, Key=record_key)  # restored
    assert [t.config for t in saver.list({"configurable": {"thread_id": thread}}, limit=1)] == [config]


def test_rereading_history_costs_its_listing_only(counted: Counted) -> None:
    """Records and writes are read once; a second walk finds them listed with the same ETag."""
    saver, counter = counted
    thread = f"t-{uuid4().hex}"
    config = _chain(saver, thread, 50)
    saver.put_writes(config, [("ch0", "pending")], "task-1")
    latest: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    counter.reset()
    first = list(saver.list(latest, limit=50))
    assert counter.snapshot() == {"GetObject": 52, "ListObjectsV2": 1}  # head, 50 records, 1 writes object
    counter.reset()
    second = list(saver.list(latest, limit=50))
    assert counter.snapshot() == {"GetObject": 1, "ListObjectsV2": 1}  # the head, the listing
    assert [t.checkpoint for t in second] == [t.checkpoint for t in first]
    assert second[0].pending_writes == [("task-1", "ch0", "pending")]


def test_a_scan_of_the_whole_history_bypasses_the_read_cache(counted: Counted) -> None:
    """list() without a limit is a scan: it must not fill the cache (its memory would grow with the
    history, and it would evict what bounded reads keep)."""
    saver, counter = counted
    thread = f"t-{uuid4().hex}"
    _chain(saver, thread, 20)
    latest: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    for _ in range(2):
        counter.reset()
        assert len(list(saver.list(latest))) == 20
        assert counter.snapshot() == {"GetObject": 21, "ListObjectsV2": 1}
    counter.reset()
    assert len(list(saver.list(latest, limit=20))) == 20
    assert counter.snapshot() == {"GetObject": 21, "ListObjectsV2": 1}  # nothing was kept by the scans


def test_the_read_cache_never_serves_a_replaced_object(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    """An interrupt write is replaced in place (same key, new ETag): readers must see the new one."""
    from langgraph.checkpoint.base import INTERRUPT  # type: ignore[attr-defined]

    saver = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    thread = f"t-{uuid4().hex}"
    config = _chain(saver, thread, 2)
    saver.put_writes(config, [(INTERRUPT, "first")], "task-1")
    assert next(saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, limit=1)).pending_writes == [
        ("task-1", INTERRUPT, "first")
    ]
    saver.put_writes(config, [(INTERRUPT, "second")], "task-1")
    listed = next(saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, limit=1))
    assert listed.pending_writes == [("task-1", INTERRUPT, "second")]
    saver.delete_thread(thread)
    assert list(saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})) == []
    saver.close()


def test_read_cache_can_be_disabled(
    s3_server: LocalS3Server, bucket: str, prefix: str, count_requests: Callable[[Any], RequestCounter]
) -> None:
    client = s3_server.client()
    saver = S3Saver(bucket=bucket, prefix=prefix, client=client, read_cache_bytes=0)
    thread = f"t-{uuid4().hex}"
    _chain(saver, thread, 5)
    counter = count_requests(client)
    for _ in range(2):
        counter.reset()
        assert len(list(saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, limit=5))) == 5
        assert counter.snapshot() == {"GetObject": 6, "ListObjectsV2": 1}
    saver.close()


def test_delta_channel_load_reads_only_new_ancestors(counted: Counted) -> None:
    """Loading a DeltaChannel thread replays the writes since its last snapshot; ancestors read by an
    earlier load are not fetched again, so the GETs per turn do not grow with the thread."""
    saver, counter = counted
    builder = StateGraph(_Chat)
    builder.add_node("reply", lambda s: {"log": [f"reply {len(s['log'])}"]})
    builder.add_edge(START, "reply")
    graph = builder.compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": f"t-{uuid4().hex}"}}
    gets = {}
    for turn in range(1, 31):
        counter.reset()
        state = graph.invoke({"log": [f"turn {turn}"]}, config)
        gets[turn] = counter.snapshot().get("GetObject", 0)
    assert len(state["log"]) == 60
    assert gets[30] == gets[10], gets
