"""MemoryBucket: the S3 semantics the plans rely on, checked against moto, and the savers on top of it.

* unit tests of each request's reply (ETags, conditions, listing order, delimiters, tokens, the clock);
* a differential test: random request sequences give the same replies from a ``MemoryBucket`` and from
  an ``BucketIO`` on moto (in process, ``mock_aws``: no server);
* ``S3Saver`` / ``AsyncS3Saver`` with ``client=MemoryBucket()``: a real graph with an interrupt, and
  LangGraph's conformance suite (every capability, sync and async paths, counts asserted).
"""

from __future__ import annotations

import hashlib
import itertools
import operator
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, TypedDict

import pytest
from helpers import tuple_at
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from test_conformance import assert_conformance

from langgraph_s3_checkpoint import (
    AsyncS3Saver,
    BucketNotFoundError,
    S3RequestError,
    S3Saver,
)
from langgraph_s3_checkpoint._protocol.requests import (
    CREATE,
    OVERWRITE,
    PRECONDITION_FAILED,
    BucketExists,
    Copy,
    CreateBucket,
    DeleteIfMatch,
    DeleteObjects,
    EnsureExpiryRule,
    Get,
    ListKeys,
    Page,
    Put,
    RemoveExpiryRule,
    StoredObject,
    Update,
    Written,
)
from langgraph_s3_checkpoint.memory import MemoryBucket


def _put(bucket: MemoryBucket, key: str, body: bytes = b"x", **kw: Any) -> Any:
    return bucket.execute(Put(key, body, **kw))


def _all(bucket: MemoryBucket, prefix: str = "", **kw: Any) -> tuple[list[str], list[str], int]:
    """Keys and prefixes of a whole listing, following tokens; and the number of pages."""
    keys: list[str] = []
    prefixes: list[str] = []
    token = None
    pages = 0
    while True:
        page: Page = bucket.execute(ListKeys(prefix, token=token, **kw))
        pages += 1
        keys += page.keys
        prefixes += page.prefixes
        token = page.token
        if token is None:
            return keys, prefixes, pages


# ------------------------------------------------------------------------------------------------
# Unit tests
# ------------------------------------------------------------------------------------------------
@pytest.mark.memory
def test_etag_is_quoted_md5_and_shared_by_identical_bodies() -> None:
    b = MemoryBucket()
    first = _put(b, "a", b"same")
    second = _put(b, "b", b"same")
    assert first == second == Written('"' + hashlib.md5(b"same").hexdigest() + '"')
    obj = b.execute(Get("a"))
    assert isinstance(obj, StoredObject) and obj.body == b"same" and obj.etag == first.etag
    assert b.execute(Get("missing")) is None


@pytest.mark.memory
def test_conditional_put() -> None:
    b = MemoryBucket()
    stored = _put(b, "k", b"1", mode=CREATE)
    assert isinstance(stored, Written)
    assert _put(b, "k", b"2", mode=CREATE) is PRECONDITION_FAILED
    assert _put(b, "k", b"2", mode=Update('"00000000000000000000000000000000"')) is PRECONDITION_FAILED
    assert isinstance(_put(b, "k", b"2", mode=Update(stored.etag)), Written)
    assert isinstance(_put(b, "k", b"3", mode=Update(stored.etag.strip('"'))), PRECONDITION_FAILED.__class__)
    assert b.execute(Get("k")).body == b"2"


@pytest.mark.memory
@pytest.mark.parametrize("variant", ["404", "412"])
def test_missing_key_under_if_match(variant: str) -> None:
    """Put collapses both server answers to PRECONDITION_FAILED; DeleteIfMatch does not."""
    b = MemoryBucket(missing_if_match=variant)  # type: ignore[arg-type]
    assert _put(b, "nope", mode=Update('"abc"')) is PRECONDITION_FAILED
    assert b.execute(DeleteIfMatch("nope", '"abc"')) is (None if variant == "404" else PRECONDITION_FAILED)
    etag = _put(b, "k").etag
    assert b.execute(DeleteIfMatch("k", '"other"')) is PRECONDITION_FAILED
    assert b.execute(DeleteIfMatch("k", etag)) is None
    assert b.execute(Get("k")) is None


@pytest.mark.memory
def test_listing_order_is_utf8_bytes() -> None:
    b = MemoryBucket()
    names = ["p/b", "p/a", "p/\u00e9", "p/\U0001f600", "p/\uffff", "p/A", "p/~", "p/a/b"]
    for n in names:
        _put(b, n)
    keys, _, _ = _all(b, "p/")
    assert keys == sorted(names, key=lambda k: k.encode())


@pytest.mark.memory
def test_listing_delimiter_max_keys_tokens_start_after() -> None:
    b = MemoryBucket()
    for k in ["a/1", "a/2/x", "a/2/y", "a/3", "a/4/z", "a/5", "b/1", "a"]:
        _put(b, k)
    page = b.execute(ListKeys("a/", delimiter="/", max_keys=2))
    assert (page.keys, page.prefixes) == (["a/1"], ["a/2/"]) and page.token
    assert len(page.etags) == len(page.modified) == 1
    keys, prefixes, pages = _all(b, "a/", delimiter="/", max_keys=2)
    assert keys == ["a/1", "a/3", "a/5"] and prefixes == ["a/2/", "a/4/"] and pages == 3
    keys, prefixes, pages = _all(b, "a/", max_keys=1)
    assert keys == ["a/1", "a/2/x", "a/2/y", "a/3", "a/4/z", "a/5"] and pages == 6
    assert b.execute(ListKeys("a/", start_after="a/2/x")).keys == ["a/2/y", "a/3", "a/4/z", "a/5"]
    assert b.execute(ListKeys("a/", start_after="a")).keys[0] == "a/1"
    exact = b.execute(ListKeys("a/", max_keys=6))
    assert exact.token is None and len(exact.keys) == 6
    assert b.execute(ListKeys("a/", max_keys=5000)).token is None  # capped at 1000, fewer here


@pytest.mark.memory
def test_delete_copy_bucket_and_lifecycle() -> None:
    clock = [datetime(2025, 1, 1, tzinfo=timezone.utc)]
    b = MemoryBucket(now=lambda: clock[0], exists=False)
    assert b.execute(BucketExists()) is False
    with pytest.raises(BucketNotFoundError):
        b.execute(Get("k"))
    b.execute(CreateBucket())
    assert b.execute(BucketExists()) is True
    _put(b, "k", b"v")
    _put(b, "name", b"n", expires=False)
    assert b.execute(Copy("missing", "t")) is False  # deleted since it was listed: the copy says so
    assert b.execute(Copy("k", "t")) is True and b.execute(Get("t")).body == b"v"
    assert b.execute(DeleteObjects(("k", "never-there"))) is None
    assert b.keys() == ["name", "t"]
    clock[0] += timedelta(days=2)
    _put(b, "fresh")
    page = b.execute(ListKeys(""))
    assert dict(zip(page.keys, page.modified, strict=True))["t"] == datetime(2025, 1, 1, tzinfo=timezone.utc)
    rule = EnsureExpiryRule("rule", "", 1, "langgraph-s3-ttl=1")
    assert b.execute(rule).matches(rule)  # the rule as the bucket keeps it: prefix, tag and days as sent
    assert b.apply_lifecycle() == ["t"]  # tagged and two days old; "name" is exempt, "fresh" is young
    b.execute(RemoveExpiryRule("rule"))
    clock[0] += timedelta(days=2)
    assert b.apply_lifecycle() == [] and b.lifecycle_rules == {}
    with pytest.raises(S3RequestError):
        _put(b, "k" * 1025)


@pytest.mark.memory
def test_a_copy_holds_the_same_objects_and_changes_apart() -> None:
    clock = [datetime(2025, 1, 1, tzinfo=timezone.utc)]
    b = MemoryBucket(missing_if_match="412", now=lambda: clock[0], keep_log=True, name="original")
    _put(b, "k", b"v")
    _put(b, "a/b", b"w", expires=False)
    b.execute(EnsureExpiryRule("rule", "", 1, "langgraph-s3-ttl=1"))
    c = b.copy()
    assert (c.missing_if_match, c.name, c.log) == ("412", "original", [])
    for key in ("k", "a/b"):
        assert c.execute(Get(key)) == b.execute(Get(key))  # body, ETag, LastModified and the clock's reading
    assert c.lifecycle_rules == b.lifecycle_rules
    assert c.execute(DeleteIfMatch("gone", '"x"')) is PRECONDITION_FAILED  # the variant came along
    _put(c, "only-in-copy")
    b.execute(DeleteObjects(("k",)))
    c.execute(RemoveExpiryRule("rule"))
    assert (b.keys(), c.keys()) == (["a/b"], ["a/b", "k", "only-in-copy"])
    assert "rule" in b.lifecycle_rules and c.lifecycle_rules == {}
    clock[0] += timedelta(days=2)
    assert b.apply_lifecycle() == [] and c.apply_lifecycle() == []  # "a/b" is untagged; c has no rule left
    assert len(b.log or []) == 6 and len(c.log or []) == 5  # each logs its own requests only


@pytest.mark.memory
def test_log_records_applied_requests() -> None:
    b = MemoryBucket(keep_log=True)
    _put(b, "k", mode=CREATE)
    _put(b, "k", mode=CREATE)
    assert [reply for _, reply in b.log or []][1] is PRECONDITION_FAILED


# ------------------------------------------------------------------------------------------------
# Differential: MemoryBucket against moto (in process)
# ------------------------------------------------------------------------------------------------
KEYS = ["a", "a/1", "a/2/x", "a/2/y", "a/\u00e9", "b/", "b/c", "c~/w/0"]
BODIES = [b"", b"x", b"y"]

requests = st.one_of(
    st.builds(Get, st.sampled_from(KEYS)),
    st.builds(
        Put,
        st.sampled_from(KEYS),
        st.sampled_from(BODIES),
        mode=st.one_of(
            st.just(OVERWRITE),
            st.just(CREATE),
            st.sampled_from(["etag-of:x", "etag-of:y", '"00000000000000000000000000000000"']).map(Update),
        ),
    ),
    st.builds(DeleteObjects, st.lists(st.sampled_from(KEYS), max_size=3).map(tuple)),
    st.builds(DeleteIfMatch, st.sampled_from(KEYS), st.sampled_from(["etag-of:x", "etag-of:"])),
    st.builds(Copy, st.sampled_from(KEYS), st.sampled_from(KEYS)),
    st.builds(
        ListKeys,
        st.sampled_from(["", "a", "a/", "b/", "c"]),
        start_after=st.one_of(st.none(), st.sampled_from(KEYS)),
        max_keys=st.integers(1, 4),
        delimiter=st.one_of(st.none(), st.just("/")),
    ),
)


def _etag_placeholders(request: Any) -> Any:
    def real(text: str) -> str:
        if text.startswith("etag-of:"):
            return '"' + hashlib.md5(text[len("etag-of:") :].encode()).hexdigest() + '"'
        return text

    if isinstance(request, Put) and isinstance(request.mode, Update):
        return Put(request.key, request.body, mode=Update(real(request.mode.etag)))
    if isinstance(request, DeleteIfMatch):
        return DeleteIfMatch(request.key, real(request.etag))
    return request


def _normal(execute: Any, request: Any) -> Any:
    """A reply in comparable form; a listing is followed to its end (tokens are opaque)."""
    reply = execute(request)
    if isinstance(reply, StoredObject):
        return ("obj", reply.body, reply.etag.strip('"'))
    if isinstance(reply, Written):
        return ("stored", reply.etag.strip('"'))
    if isinstance(reply, Page):
        pages = [(reply.keys, reply.prefixes, [e.strip('"') for e in reply.etags])]
        while reply.token is not None:
            reply = execute(
                ListKeys(request.prefix, max_keys=request.max_keys, delimiter=request.delimiter, token=reply.token)
            )
            pages.append((reply.keys, reply.prefixes, [e.strip('"') for e in reply.etags]))
        return ("pages", pages)
    return reply


@pytest.fixture(scope="module")
def moto_store() -> Any:
    boto3 = pytest.importorskip("boto3")
    moto = pytest.importorskip("moto")
    from langgraph_s3_checkpoint._transport.bucket_io import BucketIO

    with moto.mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="differential")
        yield BucketIO(client, "differential")


@settings(
    max_examples=60,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.lists(requests, min_size=1, max_size=12))
def test_same_replies_as_moto(moto_store: Any, sequence: list[Any]) -> None:
    keys = [o["Key"] for o in moto_store.client.list_objects_v2(Bucket="differential").get("Contents", ())]
    if keys:
        moto_store.client.delete_objects(Bucket="differential", Delete={"Objects": [{"Key": k} for k in keys]})
    memory = MemoryBucket()
    for request in sequence:
        request = _etag_placeholders(request)
        if isinstance(request, Copy) and request.source == request.target:
            continue  # S3 refuses an in-place copy without metadata changes; plans never ask for one
        assert _normal(memory.execute, request) == _normal(moto_store.execute, request), request


# ------------------------------------------------------------------------------------------------
# The savers on a MemoryBucket
# ------------------------------------------------------------------------------------------------
class State(TypedDict):
    log: Annotated[list[str], operator.add]


def _graph() -> StateGraph:
    def ask(state: State) -> dict[str, Any]:
        return {"log": [str(interrupt("name?"))]}

    g = StateGraph(State)
    g.add_node("start", lambda s: {"log": ["start"]})
    g.add_node("ask", ask)
    g.add_edge(START, "start")
    g.add_edge("start", "ask")
    g.add_edge("ask", END)
    return g


@pytest.mark.memory
def test_graph_on_memory_bucket_sync() -> None:
    bucket = MemoryBucket()
    saver = S3Saver(bucket="b", client=bucket, transport="direct")
    saver.setup()
    app = _graph().compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    app.invoke({"log": []}, config)
    assert app.invoke(Command(resume="ada"), config)["log"] == ["start", "ada"]
    # Another "process" on the same bucket sees the same thread.
    other = S3Saver(bucket="b", client=bucket)
    assert tuple_at(other, config).checkpoint["channel_values"]["log"] == ["start", "ada"]
    assert len(list(other.list(config))) == len(list(saver.list(config))) >= 3


@pytest.mark.memory
async def test_graph_on_memory_bucket_async() -> None:
    saver = AsyncS3Saver(bucket="b", client=MemoryBucket())
    await saver.setup()
    app = _graph().compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    await app.ainvoke({"log": []}, config)
    assert (await app.ainvoke(Command(resume="bob"), config))["log"] == ["start", "bob"]
    saver.close()


@pytest.mark.memory
@pytest.mark.parametrize("path", ["async", "sync"])
async def test_conformance_on_memory_bucket(path: str) -> None:
    bucket = MemoryBucket()
    counter = itertools.count()

    def saver_kwargs() -> dict[str, Any]:
        return {"bucket": "b", "prefix": f"conformance/{next(counter)}", "client": bucket}  # a fresh prefix per suite

    await assert_conformance(f"S3Saver-{path}-memory", path, saver_kwargs)
