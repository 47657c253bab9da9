"""Large lists stored as what was appended (``codec.Appended``): a base large value, parts, then tails in the records.

What is checked: a list read back equals what was put, element types included, under the default serializer and
under ``EncryptedSerializer``; a put that only appends sends no large value until the tail outgrows its budget; an
element changed in place, an element removed and a fork are stored anew, never taken for the stored base; a new
process extends what it read; gc, prune and copy_thread keep the base that later records share; with a lifecycle TTL
every large list is stored whole; a long list goes out in parts, merged by size, each element written a bounded number
of times and read back in a bounded number of GETs. The simulation (tests/test_simulation.py) drives the same lists
through every fault point and interleaving (its ``log`` channel); tests/test_requests.py counts the requests on a real
server.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START, MessagesState, StateGraph
from sim import Op

from langgraph_s3_checkpoint import S3Saver
from langgraph_s3_checkpoint._protocol.codec import APPENDED_TAIL_BYTES, Appended, part_name
from langgraph_s3_checkpoint._protocol.requests import DeleteObjects, Get, ListKeys, Put
from langgraph_s3_checkpoint.errors import CorruptObjectError
from langgraph_s3_checkpoint.gc import gc
from langgraph_s3_checkpoint.memory import MemoryBucket

pytestmark = pytest.mark.memory

ELEMENT = "m" * 1000
"""About 1 KB serialized, as a chat message."""


class Thread:
    """One thread's puts by hand, as LangGraph makes them: each checkpoint continues the last, and the ``log`` list
    channel gets a new version whenever its value is given."""

    def __init__(self, saver: S3Saver, thread_id: str = "t") -> None:
        self.saver = saver
        self.thread_id = thread_id
        self.config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        self.versions: dict[str, Any] = {}
        self.values: dict[str, Any] = {}
        self.step = 0

    def put(self, log: list[Any] | None = None) -> RunnableConfig:
        changed: ChannelVersions = {}
        if log is not None:
            changed["log"] = self.saver.get_next_version(self.versions.get("log"), None)
            self.values["log"] = log
        self.versions.update(changed)
        cp = empty_checkpoint()
        cp["channel_versions"] = dict(self.versions)
        cp["channel_values"] = dict(self.values)
        self.config = self.saver.put(self.config, cp, {"source": "loop", "step": self.step, "parents": {}}, changed)
        self.step += 1
        return self.config


def _saver(bucket: MemoryBucket, **options: Any) -> S3Saver:
    return S3Saver(bucket="b", client=bucket, **options)


def _large_value_puts(bucket: MemoryBucket) -> list[Put]:
    assert bucket.log is not None
    return [r for r, _ in bucket.log if isinstance(r, Put) and "/b/" in r.key]


def _read(saver: S3Saver, config: RunnableConfig) -> Any:
    tup = saver.get_tuple(config)
    assert tup is not None
    return tup.checkpoint["channel_values"].get("log")


def _messages(n: int, start: int = 0) -> list[AnyMessage]:
    kinds = (HumanMessage, AIMessage)
    return [kinds[i % 2](content=f"{i} {ELEMENT}", id=f"m{i}") for i in range(start, start + n)]


def test_appending_sends_no_large_value_until_the_tail_outgrows_its_budget() -> None:
    bucket = MemoryBucket(keep_log=True)
    saver = _saver(bucket)
    thread = Thread(saver)
    log: list[Any] = _messages(5)
    configs = [thread.put(list(log))]
    assert len(_large_value_puts(bucket)) == 1  # the first base
    per_tail = APPENDED_TAIL_BYTES // len(ELEMENT)
    for i in range(5, 5 + per_tail + 3):
        log.append(_messages(1, i)[0])
        configs.append(thread.put(list(log)))
    # One part once the tail passed its budget (its elements, not the whole list); every other put appended in its
    # record alone.
    first_base, part = _large_value_puts(bucket)
    codec = saver.plans.codec
    assert part_name("log", 5).replace("\x00", "%00") in part.key
    assert len(codec.decode_blob(first_base.key, first_base.body)) == 5
    appended = codec.decode_blob(part.key, part.body)  # what was appended since the base, not the whole list
    assert appended == log[5 : 5 + len(appended)] and 1 < len(appended) < len(log) - 5
    fresh = _saver(bucket)
    for k, config in enumerate(configs):
        got = _read(fresh, config)
        assert got == log[: 5 + k] and [type(m) for m in got] == [type(m) for m in log[: 5 + k]]


def test_every_element_type_reads_back_as_the_whole_list_would() -> None:
    """Element by element, the serializer sees what a whole list holds: what comes back is what the whole list's
    round trip gives, and equals what was put."""
    bucket = MemoryBucket()
    saver = _saver(bucket, inline_threshold=64)
    thread = Thread(saver)
    head: list[Any] = [
        HumanMessage(content="hi", id="1"),
        AIMessage(content="", tool_calls=[{"name": "f", "args": {"x": 1}, "id": "c1"}], id="2"),
        ToolMessage(content="42", tool_call_id="c1", id="3"),
        {"k": [1, 2.5, None]},
        "text",
        7,
        1.5,
        None,
        b"\x00bytes",
        [1, [2, 3]],
        True,
    ]
    first = thread.put(list(head))
    extended = [*head, "appended", {"nested": {"a": 1}}, None, b"more"]
    second = thread.put(list(extended))
    serde = JsonPlusSerializer()
    for config, value in ((first, head), (second, extended)):
        got = _read(_saver(bucket), config)
        assert got == value
        assert got == serde.loads_typed(serde.dumps_typed(value))
        assert [type(e) for e in got] == [type(e) for e in value]


def test_an_element_changed_in_place_is_stored_as_changed() -> None:
    bucket = MemoryBucket(keep_log=True)
    saver = _saver(bucket)
    thread = Thread(saver)
    log = _messages(6)
    before = thread.put(log)  # the same list object, as LangGraph hands over live values
    log[0].content = "rewritten in place"
    log.append(_messages(1, 6)[0])
    after = thread.put(log)
    assert len(_large_value_puts(bucket)) == 2, "a changed element makes a new base"
    assert _read(_saver(bucket), after)[0].content == "rewritten in place"
    assert _read(_saver(bucket), before)[0].content == f"0 {ELEMENT}"


@pytest.mark.parametrize("change", ["remove the first", "replace the last", "reorder"])
def test_a_list_that_does_not_extend_its_parent_is_stored_whole(change: str) -> None:
    bucket = MemoryBucket(keep_log=True)
    saver = _saver(bucket)
    thread = Thread(saver)
    log = _messages(6)
    thread.put(list(log))
    if change == "remove the first":
        changed = log[1:]
    elif change == "replace the last":
        changed = [*log[:-1], AIMessage(content="other", id="m5")]
    else:
        changed = [log[1], log[0], *log[2:]]
    config = thread.put(changed)
    assert len(_large_value_puts(bucket)) == 2
    assert _read(_saver(bucket), config) == changed


def test_a_new_process_extends_the_list_it_read() -> None:
    bucket = MemoryBucket(keep_log=True)
    log = _messages(6)
    Thread(_saver(bucket)).put(list(log))
    other = _saver(bucket)
    thread = Thread(other)
    latest = other.get_tuple(thread.config)
    assert latest is not None
    thread.config, thread.versions = latest.config, dict(latest.checkpoint["channel_versions"])
    thread.values = dict(latest.checkpoint["channel_values"])
    config = thread.put([*log, *_messages(2, 6)])
    assert len(_large_value_puts(bucket)) == 1, "the second process appended to the base the first wrote"
    assert _read(_saver(bucket), config) == [*log, *_messages(2, 6)]


def test_encrypted_lists_read_back_each_stored_as_a_new_base() -> None:
    """EncryptedSerializer writes new bytes for the same element each time, so no stored base is recognized: every
    large list is stored whole, as before, and reads back equal."""
    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")
    bucket = MemoryBucket(keep_log=True)
    thread = Thread(_saver(bucket, serde=serde, compress_threshold=None))
    log = _messages(6)
    configs = [thread.put(list(log)), thread.put([*log, *_messages(1, 6)])]
    assert len(_large_value_puts(bucket)) == 2
    assert _read(_saver(bucket, serde=serde), configs[1]) == [*log, *_messages(1, 6)]
    # The serializer was seen to write new bytes for one value: lists are stored whole, elements never serialized
    # one by one for a base that could not be recognised.
    saver = _saver(bucket, serde=serde)
    head = next(k for k in bucket.keys("") if k.endswith("/head"))
    stored = bucket.object(head)
    assert stored is not None and saver.plans.codec.decode_record(head, stored.body).appended == {}
    assert all(ELEMENT.encode() not in obj.body for obj in map(bucket.object, bucket.keys("")) if obj is not None)


def test_with_a_lifecycle_ttl_every_large_list_is_stored_whole() -> None:
    """A lifecycle rule expires a base by its own age while the records extending it live on: lists are stored whole."""
    bucket = MemoryBucket(keep_log=True)
    thread = Thread(_saver(bucket, ttl_days=30))
    log = _messages(6)
    thread.put(list(log))
    config = thread.put([*log, *_messages(1, 6)])
    assert len(_large_value_puts(bucket)) == 2
    assert _read(_saver(bucket), config) == [*log, *_messages(1, 6)]


def _history(bucket: MemoryBucket, thread_id: str = "t", appends: int = 4) -> tuple[list[RunnableConfig], list[Any]]:
    thread = Thread(_saver(bucket), thread_id)
    log = _messages(5)
    configs = [thread.put(list(log))]
    for i in range(appends):
        log.append(_messages(1, 5 + i)[0])
        configs.append(thread.put(list(log)))
        configs.append(thread.put())  # a step that leaves the list as it is
    return configs, log


def _read_all(saver: S3Saver, thread_id: str) -> list[tuple[str, Any]]:
    config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    return [(t.checkpoint["id"], t.checkpoint["channel_values"].get("log")) for t in saver.list(config)]


def test_gc_keeps_the_base_that_later_records_extend() -> None:
    bucket = MemoryBucket(keep_log=True)
    configs, log = _history(bucket)
    saver = _saver(bucket)
    before = _read_all(saver, "t")
    assert len(_large_value_puts(bucket)) == 1 and len(before) == len(configs)
    gc(saver, grace_seconds=0)
    assert _read_all(_saver(bucket), "t") == before
    assert before[0][1] == log


def test_prune_keeps_the_base_of_the_latest_and_copy_shares_it() -> None:
    bucket = MemoryBucket(keep_log=True)
    _, log = _history(bucket)
    saver = _saver(bucket)
    saver.copy_thread("t", "copy")
    saver.prune(["t"], strategy="keep_latest")
    gc(saver, grace_seconds=0)
    latest = _read_all(_saver(bucket), "t")
    assert [value for _, value in latest] == [log]
    assert _read_all(_saver(bucket), "copy")[0][1] == log


def test_a_fork_from_an_older_checkpoint_stores_its_list_anew() -> None:
    """A fork continues no head the saver holds: it does not know the base, so its list is a new base of its own."""
    bucket = MemoryBucket(keep_log=True)
    configs, log = _history(bucket)
    saver = _saver(bucket)
    older = saver.get_tuple(configs[2])
    assert older is not None
    fork: Checkpoint = empty_checkpoint()
    versions = dict(older.checkpoint["channel_versions"])
    versions["log"] = saver.get_next_version(str(versions["log"]), None)
    fork["channel_versions"] = versions
    forked = [*older.checkpoint["channel_values"]["log"], "forked"]
    fork["channel_values"] = {"log": forked}
    puts = len(_large_value_puts(bucket))
    config = saver.put(older.config, fork, {"source": "fork", "step": 99, "parents": {}}, {"log": versions["log"]})
    assert len(_large_value_puts(bucket)) == puts + 1
    assert _read(_saver(bucket), config) == forked
    assert _read(_saver(bucket), configs[-1]) == log


def _chat(saver: Any) -> Any:
    def model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"reply {len(state['messages'])} {ELEMENT}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    return builder.compile(checkpointer=saver)


def _contents(messages: Sequence[AnyMessage]) -> list[tuple[type, Any]]:
    return [(type(m), m.content) for m in messages]


def test_a_chat_reads_back_as_in_memory_saver_at_every_checkpoint() -> None:
    bucket = MemoryBucket(keep_log=True)
    mine, theirs = _chat(_saver(bucket)), _chat(InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "chat"}}
    turns = 50
    for turn in range(turns):
        for graph in (mine, theirs):
            graph.invoke({"messages": [HumanMessage(content=f"user {turn} {ELEMENT}")]}, config)
    got = list(_chat(_saver(bucket)).get_state_history(config))
    expected = list(theirs.get_state_history(config))
    assert len(got) == len(expected) == 3 * turns
    for g, e in zip(got, expected, strict=True):
        assert _contents(g.values.get("messages", [])) == _contents(e.values.get("messages", []))
    # The messages' large value is written about once per APPENDED_TAIL_BYTES of messages, not at every step.
    assert len(_large_value_puts(bucket)) <= 2 * turns * (len(ELEMENT) + 100) // APPENDED_TAIL_BYTES + 2


def test_a_listing_reads_a_shared_base_once() -> None:
    """Records that extend one base share it: a page of history GETs it once, and each checkpoint gets its own list
    (no object shared between two checkpoints, as with InMemorySaver)."""
    bucket = MemoryBucket(keep_log=True)
    _history(bucket, appends=6)
    saver = _saver(bucket)
    assert bucket.log is not None
    bucket.log.clear()
    config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    page = list(saver.list(config, limit=8))
    base_reads = [r for r, _ in bucket.log if isinstance(r, Get) and "/b/" in r.key]
    assert len(page) == 8 and len(base_reads) == 1
    first, second = (t.checkpoint["channel_values"]["log"] for t in page[:2])
    assert first == second and first is not second and first[0] is not second[0]


def test_the_chat_goals_benchmark_counts_what_appending_spares() -> None:
    """``benchmarks/chat_goals.py`` at a small size: with lists stored as appended, fewer PUT-class requests per
    superstep and, once the conversation outgrows a tail, fewer bytes stored than with every large list stored whole,
    in the same run (counts, not times). (Below a tail's size each record carries the whole list, as a large value
    per version did, and the two layouts store about the same.)"""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import chat_goals

    appended, whole = chat_goals.measure(turns=40, tail_bytes=None), chat_goals.measure(turns=40, tail_bytes=0)
    assert appended["put_class_per_superstep"] < whole["put_class_per_superstep"]
    assert appended["stored_bytes"] < whole["stored_bytes"]
    # one LIST at each invoke but the thread's first (issue 40's item 2 is not built)
    assert appended["lists_per_invoke"] == whole["lists_per_invoke"] == 39 / 40
    # the head, then its large values (the base and the parts) with the writes' LIST
    assert appended["cold_get_tuple"] == {"GET": 1 + appended["head_large_values"], "LIST": 1}
    assert whole["cold_get_tuple"] == {"GET": 2, "LIST": 1} and whole["head_large_values"] == 1


def test_a_latest_read_takes_two_round_trips_with_large_values_and_no_writes() -> None:
    """The large values the head names are read with the listing of its writes: a run that ended is read back in
    two round trips (the head; its folder's listing with its base), three when it left pending writes."""
    bucket = MemoryBucket(keep_log=True)
    configs, log = _history(bucket)
    saver = _saver(bucket)
    latest = Op("get_tuple", saver, saver.plans.get_tuple(Thread(saver).config)).finish()
    assert latest.status == "returned" and latest.result.checkpoint["channel_values"]["log"] == log
    assert [sorted(type(r).__name__ for r in batch) for batch in latest.batches] == [["Get"], ["Get", "ListKeys"]]
    saver.put_writes(configs[-1], [("log", "pending")], "task-1")
    fresh = _saver(bucket)
    with_writes = Op("get_tuple", fresh, fresh.plans.get_tuple(Thread(fresh).config)).finish()
    assert len(with_writes.batches) == 3 and with_writes.result.pending_writes == [("task-1", "log", "pending")]


@pytest.mark.parametrize("ttl_days", [None, 30])
def test_a_process_reads_a_large_value_once(ttl_days: int | None) -> None:
    """What a large value's key holds never changes (written create-only, offered again only as the same value), so a
    process that read it answers later reads from its read cache: each invoke of a chat reads its head and its
    listing, not its base again. With a lifecycle TTL every read GETs it: renewal dates a value by the reply."""
    bucket = MemoryBucket(keep_log=True)
    configs, log = _history(bucket)
    saver = _saver(bucket, ttl_days=ttl_days) if ttl_days else _saver(bucket)
    assert bucket.log is not None
    reads = []
    for _ in range(3):
        start = len(bucket.log)
        assert _read(saver, Thread(saver).config) == log
        reads.append(sum(1 for r, _ in bucket.log[start:] if isinstance(r, Get) and "/b/" in r.key))
    assert reads == ([1, 1, 1] if ttl_days else [1, 0, 0])
    assert _read(_saver(bucket), configs[0]) == log[:5]  # another process reads it itself


class _Counting(JsonPlusSerializer):
    """Counts what it serializes: a whole list, or one of its elements."""

    def __init__(self) -> None:
        super().__init__()
        self.lists = 0
        self.elements = 0

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if isinstance(obj, list):
            self.lists += 1
        elif isinstance(obj, str) and obj.startswith("item"):
            self.elements += 1
        return super().dumps_typed(obj)


def test_a_small_list_is_serialized_once_a_put() -> None:
    """A list below the inline threshold is inlined on its whole list's bytes, as any value, without each element
    serialized besides; a large one with no base yet is serialized whole once (the base) and element by element once
    (its digest)."""
    serde = _Counting()
    thread = Thread(_saver(MemoryBucket(), serde=serde))
    thread.put([f"item {i}" for i in range(5)])
    assert (serde.lists, serde.elements) == (1, 2)  # the list; its first element twice, once a saver (encodes_alike)
    serde.lists = serde.elements = 0
    thread.put([f"item {i} {ELEMENT}" for i in range(8)])
    assert (serde.lists, serde.elements) == (1, 8)


def _in_parts(bucket: MemoryBucket, tail_bytes: int = 2500, merged: int = 2) -> S3Saver:
    """A saver whose records carry two ~1 KB elements and send the third with them as a part, two parts of a size
    merged into one."""
    saver = _saver(bucket)
    saver.plans.appended_tail_bytes = tail_bytes
    saver.plans.parts_merged = merged
    return saver


def _head_list(bucket: MemoryBucket, thread_id: str = "t") -> tuple[dict[str, str], Appended]:
    """The head's large values (channel or part -> version) and how it stores ``log``."""
    codec = _saver(bucket).plans.codec
    head = _saver(bucket).plans.layout.head(thread_id, "")
    obj = bucket.object(head)
    assert obj is not None
    record = codec.decode_record(head, obj.body)
    return record.blobs, record.appended["log"]


def _long_list(bucket: MemoryBucket, appends: int = 60) -> tuple[list[RunnableConfig], list[Any]]:
    thread = Thread(_in_parts(bucket))
    log: list[Any] = _messages(5)
    configs = [thread.put(list(log))]
    for i in range(5, 5 + appends):
        log.append(_messages(1, i)[0])
        configs.append(thread.put(list(log)))
    return configs, log


def test_a_long_list_goes_out_in_parts_merged_by_size() -> None:
    """Each tail that outgrows its budget goes out as a part of its own elements, and parts of one size merge: every
    checkpoint reads back as it was put, no put uploads the list again, each element is written a bounded number of
    times (once per level) and the latest is read in a bounded number of parallel GETs."""
    bucket = MemoryBucket(keep_log=True)
    configs, log = _long_list(bucket)
    fresh = _saver(bucket)
    for k, config in enumerate(configs):
        got = _read(fresh, config)
        assert got == log[: 5 + k] and [type(m) for m in got] == [type(m) for m in log[: 5 + k]]
    blobs, appended = _head_list(bucket)
    levels = max(part.level for part in appended.parts)
    assert levels >= 3  # 20 parts of 3 elements: merged up to parts of 24 elements
    assert len(appended.parts) <= levels + 1  # two parts of one size are merged: at most one part per size
    assert set(blobs) == {"log", *appended.part_names("log")}
    # After the first base, each large value PUT holds a part: its elements, never the whole list.
    codec = fresh.plans.codec
    first, *parts = _large_value_puts(bucket)
    written = [len(codec.decode_blob(put.key, put.body)) for put in parts]
    assert len(codec.decode_blob(first.key, first.body)) == 5 and max(written) < len(log) - 5
    assert sum(written) <= (len(log) - 5) * (levels + 1)
    # The latest, from a new process: the head, then its base and parts (in parallel) with the writes' LIST.
    assert bucket.log is not None
    start = len(bucket.log)
    assert _read(_saver(bucket), {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}) == log
    sent = [request for request, _ in bucket.log[start:]]
    assert sum(isinstance(r, Get) for r in sent) == 1 + 1 + len(appended.parts)
    assert sum(isinstance(r, ListKeys) for r in sent) == 1


def test_a_missing_part_is_named_when_read() -> None:
    bucket = MemoryBucket(keep_log=True)
    configs, _ = _long_list(bucket, appends=8)
    saver = _saver(bucket)
    blobs, appended = _head_list(bucket)
    name = appended.part_names("log")[-1]
    key = saver.plans.layout.blob("t", "", name, blobs[name])
    bucket.execute(DeleteObjects((key,)))
    with pytest.raises(CorruptObjectError) as raised:
        _saver(bucket).get_tuple(configs[-1])
    assert key in str(raised.value)


def test_prune_copy_and_delete_treat_parts_as_large_values() -> None:
    """prune + gc keep the parts the latest needs and drop the others once nothing references them, copy_thread
    carries them, delete_thread removes them."""
    bucket = MemoryBucket(keep_log=True)
    _, log = _long_list(bucket, appends=20)
    saver = _saver(bucket)
    saver.copy_thread("t", "copy")
    blobs_before = bucket.keys(saver.plans.layout.blobs("t", ""))
    saver.prune(["t"], strategy="keep_latest")
    gc(saver, grace_seconds=0)
    blobs, _ = _head_list(bucket)
    kept = bucket.keys(saver.plans.layout.blobs("t", ""))
    assert kept == sorted(saver.plans.layout.blob("t", "", name, version) for name, version in blobs.items())
    assert len(kept) < len(blobs_before)  # parts merged away went with the records that named them
    assert [value for _, value in _read_all(_saver(bucket), "t")] == [log]
    assert _read_all(_saver(bucket), "copy")[0][1] == log
    saver.delete_thread("copy")
    assert bucket.keys(saver.plans.layout.thread("copy")) == []


@pytest.mark.parametrize(
    "parts",
    [
        [[0, 3, 0]],  # a part where the base is
        [[5, 3, 0], [9, 2, 0]],  # a gap between parts
        [[5, 3, 0], [8, 0, 0]],  # an empty part
        [[5, 3, 0]],  # parts that end before the tail begins (count is 10)
    ],
)
def test_parts_that_do_not_follow_one_another_are_refused(parts: list[list[int]]) -> None:
    with pytest.raises(ValueError):
        Appended.from_frame([10, "digest", [], parts])
    assert Appended.from_frame([10, "digest", [], [[5, 3, 0], [8, 2, 1]]]).base_count == 5


def test_beside_a_channel_named_with_the_part_mark_lists_are_stored_without_parts() -> None:
    """A part's large value is named after its channel with ``codec.PART_MARK`` (NUL): in a checkpoint where a
    channel's name holds it, no list is stored in parts (whole instead), so no part can take that channel's name."""
    bucket = MemoryBucket(keep_log=True)
    saver = _in_parts(bucket)
    config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    odd = part_name("log", 5)  # exactly the name the first part of ``log`` would have
    log: list[Any] = _messages(5)
    versions: dict[str, Any] = {}
    for i in range(5, 12):
        log.append(_messages(1, i)[0])
        versions = {ch: saver.get_next_version(versions.get(ch), None) for ch in ("log", odd)}
        cp = empty_checkpoint()
        cp["channel_versions"] = dict(versions)
        cp["channel_values"] = {"log": list(log), odd: [f"odd {i} {ELEMENT}"] * 6}
        config = saver.put(config, cp, {"source": "loop", "step": i, "parents": {}}, dict(versions))
        got = _saver(bucket).get_tuple(config)
        assert got is not None and got.checkpoint["channel_values"] == cp["channel_values"]
    blobs, appended = _head_list(bucket)
    assert appended.parts == () and odd in blobs
