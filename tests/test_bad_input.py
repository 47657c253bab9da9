"""Bad input and bad state: huge values, values the serializer refuses, damaged objects, a missing
bucket, wrong credentials, a server that ignores conditional writes, and secrets that must not leak."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import Iterator
from typing import Any, TypedDict

import pytest
from dialectproxy import Dialect, DialectProxy
from helpers import cfg, client_options, is_record_key
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, CheckpointTuple, create_checkpoint, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from langgraph_s3_checkpoint import (
    BucketNotFoundError,
    ConditionalWritesUnsupportedError,
    CorruptObjectError,
    InvalidConfigError,
    S3AccessError,
    S3Saver,
    SerializationError,
)
from langgraph_s3_checkpoint.local import LocalS3Server

MB = 1024 * 1024


@pytest.fixture
def saver(s3_server: LocalS3Server, bucket: str, prefix: str) -> Iterator[S3Saver]:
    s = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    yield s
    s.close()


def put_values(saver: S3Saver, parent: RunnableConfig, values: dict[str, Any]) -> RunnableConfig:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = values
    versions: ChannelVersions = {ch: saver.get_next_version(None, None) for ch in values}
    checkpoint["channel_versions"] = versions
    return saver.put(parent, checkpoint, {"step": 0}, versions)


class Plain:
    """An object the default serializer has no encoding for."""

    def __init__(self) -> None:
        self.x = 1


# -- size ---------------------------------------------------------------------------------------------
def test_multi_megabyte_values_and_writes_round_trip(saver: S3Saver) -> None:
    text = "".join(chr(0x41 + i % 26) for i in range(5 * MB))
    noise = os.urandom(5 * MB)  # incompressible
    stored = put_values(saver, cfg("huge"), {"text": text, "noise": noise})
    saver.put_writes(stored, [("text", text[::-1]), ("noise", noise[::-1])], "task")
    tup = saver.get_tuple(cfg("huge"))
    assert tup is not None
    assert tup.checkpoint["channel_values"]["text"] == text
    assert tup.checkpoint["channel_values"]["noise"] == noise
    assert tup.pending_writes == [("task", "text", text[::-1]), ("task", "noise", noise[::-1])]


class BigState(TypedDict, total=False):
    report: str


def test_graph_state_of_several_megabytes(saver: S3Saver) -> None:
    def write(state: BigState) -> BigState:
        return {"report": "0123456789abcdef" * (6 * MB // 16)}

    builder = StateGraph(BigState)
    builder.add_node("write", write)
    builder.add_edge(START, "write")
    builder.add_edge("write", END)
    graph = builder.compile(checkpointer=saver)
    graph.invoke({"report": ""}, {"configurable": {"thread_id": "big-graph"}})
    fresh = S3Saver(bucket=saver.bucket, prefix=saver.prefix, client=saver.client)
    assert builder.compile(checkpointer=fresh).get_state({"configurable": {"thread_id": "big-graph"}}).values == {
        "report": "0123456789abcdef" * (6 * MB // 16)
    }


# -- values the serializer refuses ---------------------------------------------------------------------
@pytest.mark.parametrize("bad", [Plain(), lambda: 1], ids=["plain-object", "lambda"])
def test_unserializable_channel_value_commits_nothing(saver: S3Saver, bad: Any) -> None:
    first = put_values(saver, cfg("refused"), {"fine": 1})
    saver.get_tuple(cfg("refused"))
    with pytest.raises(SerializationError) as raised:
        put_values(saver, first, {"fine": 2, "troublemaker": bad})
    assert "'troublemaker'" in str(raised.value) and "Nothing was committed" in str(raised.value)
    head = saver.get_tuple(cfg("refused"))
    assert head is not None and head.config == first
    assert [t.config for t in saver.list(cfg("refused"))] == [first]


def test_unserializable_write_names_the_channel(saver: S3Saver) -> None:
    first = put_values(saver, cfg("refused-write"), {"fine": 1})
    with pytest.raises(SerializationError) as raised:
        saver.put_writes(first, [("ok", 1), ("troublemaker", Plain())], "task")
    assert "'troublemaker'" in str(raised.value)
    tup = saver.get_tuple(cfg("refused-write"))
    assert tup is not None and tup.pending_writes == []


@pytest.mark.parametrize(
    ("checkpoint_id", "named"),
    [
        ("", "non-empty string"),
        ("7" * 600, r"a key of \d+ bytes; S3 allows 1024"),  # its record's key: S3 refuses it (KeyTooLongError)
        ("1f0\ud800", "valid Unicode"),  # the serializer cannot store it as it is
    ],
    ids=["empty", "too-long", "lone-surrogate"],
)
def test_a_checkpoint_id_s3_cannot_store_is_refused_before_anything_is_written(
    saver: S3Saver, s3_server: LocalS3Server, bucket: str, prefix: str, checkpoint_id: str, named: str
) -> None:
    """Defect: a checkpoint id too long for its record's key made S3 refuse the record while the head sent with it
    landed, so every later read of the thread failed; an empty id was stored where no reader finds it."""
    first = put_values(saver, cfg("odd-ids"), {"fine": 1})
    before = sorted(o["Key"] for o in s3_server.client().list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"])
    checkpoint = empty_checkpoint()
    checkpoint["id"] = checkpoint_id
    with pytest.raises(InvalidConfigError, match=named):
        saver.put(first, checkpoint, {"step": 1}, {})
    with pytest.raises(InvalidConfigError, match=named if checkpoint_id else "non-empty"):
        saver.put(cfg("odd-ids-new"), checkpoint, {"step": 0}, {})
    if checkpoint_id:
        with pytest.raises(InvalidConfigError, match=named):
            saver.put_writes(cfg("odd-ids", "", checkpoint_id), [("ch", 1)], "task")
    after = sorted(o["Key"] for o in s3_server.client().list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"])
    assert after == before
    fresh = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    latest = fresh.get_tuple(cfg("odd-ids"))
    assert latest is not None and latest.config == first
    fresh.close()


def test_a_task_or_run_id_that_is_not_valid_unicode_is_refused_naming_it(saver: S3Saver) -> None:
    first = put_values(saver, cfg("odd-task"), {"fine": 1})
    with pytest.raises(InvalidConfigError, match="task_id"):
        saver.put_writes(first, [("ch", 1)], "a\ud800b")
    checkpoint = empty_checkpoint()
    with pytest.raises(InvalidConfigError, match="run_id"):
        saver.put(first, checkpoint, {"step": 1, "run_id": "a\ud800b"}, {})
    saver.put_writes(first, [("ch", 1)], "head")  # a word of the layout is a task id like any other
    tup = saver.get_tuple(cfg("odd-task"))
    assert tup is not None and tup.pending_writes == [("head", "ch", 1)]


class RefusingState(TypedDict, total=False):
    steps: list[str]
    troublemaker: Any


def test_graph_node_returning_an_unserializable_value(saver: S3Saver) -> None:
    def ok(state: RefusingState) -> RefusingState:
        return {"steps": ["ok"]}

    def bad(state: RefusingState) -> RefusingState:
        return {"troublemaker": Plain()}

    builder = StateGraph(RefusingState)
    builder.add_sequence([("ok", ok), ("bad", bad)])
    builder.add_edge(START, "ok")
    builder.add_edge("bad", END)
    graph = builder.compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": "refusing-graph"}}
    with pytest.raises(SerializationError) as raised:
        graph.invoke({"steps": []}, config, durability="sync")
    assert "'troublemaker'" in str(raised.value)
    state = graph.get_state(config)
    # The step before the bad node is committed; the bad node's output is not, and it is still next.
    assert state.values == {"steps": ["ok"]} and state.next == ("bad",)


# -- damaged objects -------------------------------------------------------------------------------------
def raw_key(saver: S3Saver, kind: str, thread_id: str, checkpoint_id: str = "") -> str:
    layout = saver.plans.layout
    if kind == "head":
        return layout.head(thread_id, "")
    return layout.record(thread_id, "", checkpoint_id)


def damage(saver: S3Saver, key: str, how: str) -> None:
    body = saver.client.get_object(Bucket=saver.bucket, Key=key)["Body"].read()
    damaged = {"truncated": body[: len(body) // 2], "foreign": b'{"not": "ours"}', "empty": b""}[how]
    saver.client.put_object(Bucket=saver.bucket, Key=key, Body=damaged)


def three_checkpoints(saver: S3Saver, thread_id: str) -> list[RunnableConfig]:
    configs = [put_values(saver, cfg(thread_id), {"n": 0})]
    saver.get_tuple(cfg(thread_id))
    for n in (1, 2):
        configs.append(put_values(saver, configs[-1], {"n": n}))
    return configs


def value(tup: CheckpointTuple | None) -> Any:
    assert tup is not None
    return tup.checkpoint["channel_values"]["n"]


@pytest.mark.parametrize("how", ["truncated", "foreign", "empty"])
def test_damaged_head_names_its_key_and_spares_the_rest(saver: S3Saver, how: str) -> None:
    configs = three_checkpoints(saver, "damaged-head")
    three_checkpoints(saver, "healthy")
    key = raw_key(saver, "head", "damaged-head")
    damage(saver, key, how)
    with pytest.raises(CorruptObjectError) as raised:
        saver.get_tuple(cfg("damaged-head"))
    assert raised.value.key == key and key in str(raised.value)
    # Every checkpoint is still readable by id, and other threads are untouched.
    assert [value(saver.get_tuple(c)) for c in configs] == [0, 1, 2]
    assert value(saver.get_tuple(cfg("healthy"))) == 2
    assert [value(t) for t in saver.list(cfg("healthy"))] == [2, 1, 0]


@pytest.mark.parametrize("how", ["truncated", "foreign"])
def test_damaged_older_record_names_its_key_and_spares_the_rest(saver: S3Saver, how: str) -> None:
    configs = three_checkpoints(saver, "damaged-record")
    middle = configs[1]["configurable"]["checkpoint_id"]
    key = raw_key(saver, "record", "damaged-record", middle)
    damage(saver, key, how)
    with pytest.raises(CorruptObjectError) as raised:
        saver.get_tuple(configs[1])
    assert raised.value.key == key
    assert value(saver.get_tuple(cfg("damaged-record"))) == 2
    assert value(saver.get_tuple(configs[0])) == 0
    assert [value(t) for t in saver.list(cfg("damaged-record"), limit=1)] == [2]


def test_damaged_blob_and_write_name_their_keys(saver: S3Saver) -> None:
    big = "y" * 10_000
    stored = put_values(saver, cfg("damaged-parts"), {"big": big})
    saver.put_writes(stored, [("note", "hello")], "task")
    keys = [o["Key"] for o in saver.client.list_objects_v2(Bucket=saver.bucket, Prefix=saver.prefix)["Contents"]]
    blob = next(k for k in keys if "/b/" in k)
    damage(saver, blob, "truncated")
    with pytest.raises(CorruptObjectError) as raised:
        saver.get_tuple(cfg("damaged-parts"))
    assert raised.value.key == blob
    saver.client.put_object(Bucket=saver.bucket, Key=blob, Body=saver.plans.codec.encode_blob(["json", b'"x"']))
    write = next(k for k in keys if "/c/" in k and not is_record_key(k))
    damage(saver, write, "foreign")
    with pytest.raises(CorruptObjectError) as raised:
        saver.get_tuple(cfg("damaged-parts"))
    assert raised.value.key == write


# -- the bucket and the server ---------------------------------------------------------------------------
def test_missing_bucket(s3_server: LocalS3Server) -> None:
    saver = S3Saver(bucket="lgs3-no-such-bucket", client=s3_server.client())
    with pytest.raises(BucketNotFoundError) as raised:
        saver.setup()
    assert "lgs3-no-such-bucket" in str(raised.value)
    with pytest.raises(BucketNotFoundError):
        saver.get_tuple(cfg("anything"))
    saver.close()


def test_a_missing_bucket_is_refused_by_every_first_write_and_never_created(s3_server: LocalS3Server) -> None:
    """SeaweedFS creates a bucket on the first PutObject to it: a mistyped bucket name would be created by the first
    write that is not preceded by a read (a store put, a cache set, put_writes, the probe's own PUTs). Every first
    write refuses it, as the saver's put and setup() do, and asks again at the next one (operations.md: every call)."""
    from uuid import uuid4

    from langgraph_s3_checkpoint import AsyncS3Store, S3Cache, S3Store

    missing = f"lgs3-typo-{uuid4().hex[:8]}"
    client = s3_server.client()
    config = cfg("t", checkpoint_id="1f0000000-0000-6000-8000-000000000000")
    with (
        S3Store(bucket=missing, client=s3_server.client()) as store,
        AsyncS3Store(bucket=missing, client=s3_server.client()) as astore,
        S3Cache(bucket=missing, client=s3_server.client()) as cache,
        S3Saver(bucket=missing, client=s3_server.client()) as saver,
    ):
        for _ in range(2):
            for name, write in (
                ("S3Store.put", lambda: store.put(("users",), "u-1", {"v": 1})),
                ("AsyncS3Store.aput", lambda: asyncio.run(astore.aput(("users",), "u-1", {"v": 1}))),
                ("S3Store.put with a TTL", lambda: store.put(("users",), "u-1", {"v": 1}, ttl=5)),
                ("S3Cache.set", lambda: cache.set({(("node",), "k"): ({"v": 1}, None)})),
                ("S3Cache.aset", lambda: asyncio.run(cache.aset({(("node",), "k"): ({"v": 1}, 60)}))),
                ("S3Saver.put_writes", lambda: saver.put_writes(config, [("channel", 1)], "task-1")),
                ("S3Saver.put", lambda: saver.put(cfg("t"), empty_checkpoint(), {"step": 0}, {})),
            ):
                with pytest.raises(BucketNotFoundError, match=missing):
                    write()
                assert missing not in [b["Name"] for b in client.list_buckets().get("Buckets", [])], name


@pytest.fixture
def wrong_credentials(seaweedfs_server: LocalS3Server) -> Iterator[tuple[S3Saver, str, str]]:
    """A saver whose secret key is wrong (SeaweedFS checks signatures; moto does not)."""
    seaweedfs_server.create_bucket("lgs3-test")
    secret = "wrong-" + seaweedfs_server.secret_key[::-1]
    with S3Saver.from_conn_string(
        "s3://lgs3-test/creds",
        endpoint_url=seaweedfs_server.endpoint_url,
        region_name=seaweedfs_server.region,
        aws_access_key_id=seaweedfs_server.access_key,
        aws_secret_access_key=secret,
    ) as opened:
        yield opened, seaweedfs_server.access_key, secret


def test_wrong_credentials(wrong_credentials: tuple[S3Saver, str, str]) -> None:
    saver, _, secret = wrong_credentials
    with pytest.raises(S3AccessError) as raised:
        saver.setup()
    assert "lgs3-test" in str(raised.value) and secret not in str(raised.value)
    head = "GetObject 'creds/threads/anything/ns/~/head'"  # named alike by both transports
    for transport in ("auto", "boto3"):
        reader = S3Saver(bucket="lgs3-test", prefix="creds", client=saver.client, transport=transport)
        with pytest.raises(S3AccessError, match=re.escape(head)):
            reader.get_tuple(cfg("anything"))


@pytest.mark.parametrize("transport", ["boto3", "direct"])
def test_a_clock_far_off_is_named_as_the_cause(
    seaweedfs_server: LocalS3Server, prefix: str, transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests are signed with the time; a server refuses them when this machine's clock is off by too much
    (SeaweedFS checks it, as AWS does; moto does not). The error says to fix the clock, not the credentials."""
    from datetime import datetime, timedelta

    import botocore.auth

    from langgraph_s3_checkpoint._transport import direct as direct_module

    class AnHourAhead(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz) + timedelta(hours=1)

    seaweedfs_server.create_bucket("lgs3-test")
    saver = S3Saver(bucket="lgs3-test", prefix=prefix, client=seaweedfs_server.client(), transport=transport)
    saver.setup()
    ahead = botocore.auth.get_current_datetime() + timedelta(hours=1)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *a, **k: ahead)
    monkeypatch.setattr(direct_module, "datetime", AnHourAhead)
    with contextlib.closing(saver), pytest.raises(S3AccessError, match=r"clock .*RequestTimeTooSkewed.*Synchronize"):
        saver.get_tuple(cfg("t"))


def test_no_secrets_in_repr_errors_or_logs(
    wrong_credentials: tuple[S3Saver, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    saver, access_key, secret = wrong_credentials
    caplog.set_level(logging.DEBUG, logger="langgraph_s3_checkpoint")
    messages = [repr(saver), str(saver)]
    for call in (saver.setup, lambda: saver.get_tuple(cfg("x")), lambda: list(saver.list(None))):
        with pytest.raises(S3AccessError) as raised:
            call()
        messages += [str(raised.value), repr(raised.value)]
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("langgraph_s3_checkpoint")]
    for text in messages + ours:
        assert secret not in text and access_key not in text


def test_no_customer_encryption_key_in_reprs(s3_server: LocalS3Server, bucket: str) -> None:
    key = "k" * 32
    saver = S3Saver(bucket=bucket, client=s3_server.client(), sse_customer_key=key)
    assert key not in repr(saver)
    assert key not in repr(saver.bucket_io)
    saver.close()


def test_server_without_conditional_writes_is_refused(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    """A server that ignores If-None-Match / If-Match (the dialect proxy drops them, as GCS's XML API does) is
    refused by setup() as by the first write; opting out is possible (a single writer per thread), and the saver
    then works without sending them. More dialects: test_providers.py."""
    with DialectProxy(s3_server, Dialect(ignores_conditions=True), bucket) as proxy:
        saver = S3Saver(bucket=bucket, prefix=prefix, **client_options(s3_server, proxy.url))
        with pytest.raises(ConditionalWritesUnsupportedError) as raised:
            saver.setup()
        assert bucket in str(raised.value) and proxy.seen["stripped"] >= 2
        saver.close()
        lenient = S3Saver(
            bucket=bucket, prefix=prefix, require_conditional_writes=False, **client_options(s3_server, proxy.url)
        )
        lenient.setup()
        stripped = proxy.seen["stripped"]
        stored = put_values(lenient, cfg("lenient"), {"n": 1})
        assert value(lenient.get_tuple(cfg("lenient"))) == 1 and lenient.get_tuple(stored) is not None
        assert proxy.seen["stripped"] == stripped  # no conditional header was sent
        lenient.close()


def test_unserializable_value_is_a_type_error_like_inmemorysaver(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    class Opaque:
        pass

    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"x": Opaque()}
    checkpoint["channel_versions"] = {"x": "1"}
    with pytest.raises(TypeError):
        InMemorySaver().put(cfg("t"), checkpoint, {}, {"x": "1"})
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())) as saver:
        with pytest.raises(SerializationError) as raised:
            saver.put(cfg("t"), checkpoint, {}, {"x": "1"})
        assert isinstance(raised.value, TypeError)


def test_one_string_for_a_sequence_of_ids_is_a_type_error_and_deletes_nothing(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """``prune("ab")`` must not prune threads "a" and "b" (a str is a sequence of characters); PostgresSaver
    raises a TypeError saying "not a str", and so do we, before any request."""
    with S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client()) as saver:
        for thread_id in ("ab", "a", "b"):
            parent = saver.put(cfg(thread_id), empty_checkpoint(), {"step": 0, "run_id": thread_id}, {})
            saver.put(parent, create_checkpoint(empty_checkpoint(), {}, 1), {"step": 1, "run_id": thread_id}, {})
        before = {t: [c.config for c in saver.list(cfg(t))] for t in ("ab", "a", "b")}
        for strategy in ("keep_latest", "delete"):
            with pytest.raises(TypeError, match=r"prune\(\) takes a sequence of thread ids, not a str.*\['ab'\]"):
                saver.prune("ab", strategy=strategy)
        with pytest.raises(TypeError, match=r"delete_for_runs\(\) takes a sequence of run ids, not a str"):
            saver.delete_for_runs("ab")
        with pytest.raises(TypeError, match="not a str"):
            asyncio.run(saver.aprune("ab"))
        assert {t: [c.config for c in saver.list(cfg(t))] for t in ("ab", "a", "b")} == before
        assert all(len(configs) == 2 for configs in before.values())
