"""Failure paths a new user meets (issue 11): one error contract, no hangs, the right diagnosis,
advice that never loses data, repair, CLI manners and parity with LangGraph's built-in savers.

Each test goes through the public API (or the CLI's real entry point, ``python -m
langgraph_s3_checkpoint.cli``) and, where a server is involved, runs on every selected S3 server.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import operator
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import boto3
import pytest
from helpers import Crash, cfg, crash_at, deletes_records, lose_first_answer, silent_server
from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from langgraph_s3_checkpoint import (
    AsyncS3Saver,
    AsyncS3Store,
    CorruptObjectError,
    InvalidConfigError,
    S3AccessError,
    S3CheckpointError,
    S3RequestError,
    S3Saver,
    S3Store,
    SaverMisuseError,
    SerializationError,
)
from langgraph_s3_checkpoint.errors import DamagedHeadError, NotS3EndpointError
from langgraph_s3_checkpoint.gc import gc
from langgraph_s3_checkpoint.keys import Layout, escape, unescape
from langgraph_s3_checkpoint.local import LocalS3Server
from langgraph_s3_checkpoint.ops import Problem, verify_thread
from langgraph_s3_checkpoint.options import URL_OPTIONS, parse_url
from langgraph_s3_checkpoint.requests import Put
from langgraph_s3_checkpoint.server import options_from_env


def _credentials(server: LocalS3Server) -> dict[str, Any]:
    return {
        "endpoint_url": server.endpoint_url,
        "region_name": server.region,
        "aws_access_key_id": server.access_key,
        "aws_secret_access_key": server.secret_key,
    }


def _cli(*args: str, env: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "langgraph_s3_checkpoint.cli", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _cli_env(server: LocalS3Server, url: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LANGGRAPH_S3_"))}
    environ.update(AWS_ACCESS_KEY_ID=server.access_key, AWS_SECRET_ACCESS_KEY=server.secret_key, LANGGRAPH_S3_URL=url)
    return environ


def _assert_one_error_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "error: " in lines[0], done.stderr
    return lines[0]


# ------------------------------------------------------------------------------------------------
# 1. One error contract
# ------------------------------------------------------------------------------------------------
def test_unknown_url_option_names_it_and_the_valid_ones() -> None:
    with pytest.raises(InvalidConfigError) as raised:
        parse_url("s3://b/p?inline_treshold=10")
    message = str(raised.value)
    assert "'inline_treshold'" in message and "inline_threshold" in message and "read_timeout" in message
    with (
        pytest.raises(InvalidConfigError, match="inline_treshold"),
        S3Saver.from_conn_string("s3://b/p?inline_treshold=10"),
    ):
        pass
    # A misspelt keyword argument is the same error, not a TypeError from boto3.
    with pytest.raises(InvalidConfigError, match="inline_treshold"):
        S3Saver(bucket="b", endpoint_url="http://127.0.0.1:9", inline_treshold=10)


def test_every_documented_url_option_is_parsed_to_its_type() -> None:
    url = (
        "s3://b/p?endpoint_url=http://127.0.0.1:9&region=eu-west-1&addressing_style=path"
        "&connect_timeout=1.5&read_timeout=2&operation_timeout=30&max_attempts=4&inline_threshold=10"
        "&compress_threshold=20&max_concurrency=3&ttl_days=7&cache_bytes=0&memory_bytes=1024&create_bucket=TRUE"
        "&require_conditional_writes=off&server_side_encryption=AES256&sse_kms_key_id=k&sse_customer_key=c"
        "&transport=direct&extra_headers=X-Tigris-Consistent:true&request_checksum_calculation=when_supported"
        "&response_checksum_validation=when_required&vector_shards=8"
    )
    bucket, prefix, options = parse_url(url)
    assert (bucket, prefix) == ("b", "p")
    assert options == {
        "endpoint_url": "http://127.0.0.1:9",
        "region_name": "eu-west-1",
        "addressing_style": "path",
        "connect_timeout": 1.5,
        "read_timeout": 2.0,
        "operation_timeout": 30.0,
        "max_attempts": 4,
        "inline_threshold": 10,
        "compress_threshold": 20,
        "max_concurrency": 3,
        "ttl_days": 7,
        "cache_bytes": 0,
        "memory_bytes": 1024,
        "create_bucket": True,
        "require_conditional_writes": False,
        "server_side_encryption": "AES256",
        "sse_kms_key_id": "k",
        "sse_customer_key": "c",
        "transport": "direct",
        "extra_headers": (("X-Tigris-Consistent", "true"),),
        "request_checksum_calculation": "when_supported",
        "response_checksum_validation": "when_required",
        "vector_shards": 8,
    }
    assert set(URL_OPTIONS) == {"region", *(k for k in options if k != "region_name")}
    # The documentation's table names each of them.
    docs = (Path(__file__).parent.parent / "docs" / "operations.md").read_text(encoding="utf-8")
    for name in URL_OPTIONS:
        assert f"| `{name}` |" in docs, name
    # ?read_timeout=2 used to reach urllib3 as a string; now the saver is built with a float.
    with S3Saver.from_conn_string(
        "s3://b/p?read_timeout=2&connect_timeout=1&max_attempts=2", endpoint_url="http://127.0.0.1:9"
    ) as saver:
        config = saver.client.meta.config
        assert (config.read_timeout, config.connect_timeout) == (2.0, 1.0)
        assert config.retries["total_max_attempts"] == 2


@pytest.mark.parametrize(
    "query",
    [
        "create_bucket=ture",
        "create_bucket=",
        "require_conditional_writes=2",
        "read_timeout=soon",
        "read_timeout=-1",
        "max_attempts=0",
        "inline_threshold=lots",
        "transport=http",
        "addressing_style=sideways",
        "request_checksum_calculation=always",
        "extra_headers=X-Tigris-Consistent",
    ],
)
def test_bad_option_values_are_config_errors(query: str) -> None:
    with pytest.raises(InvalidConfigError, match=query.split("=")[0]):
        parse_url(f"s3://b/p?{query}")


def test_url_and_server_environment_share_one_boolean_parser() -> None:
    for value, expected in (("true", True), ("On", True), ("1", True), ("no", False), ("FALSE", False)):
        assert parse_url(f"s3://b?create_bucket={value}")[2]["create_bucket"] is expected
        env = {"LANGGRAPH_S3_URL": "s3://b", "LANGGRAPH_S3_CREATE_BUCKET": value}
        assert options_from_env(env)[1]["create_bucket"] is expected
    for value in ("ture", "maybe", "2"):
        with pytest.raises(InvalidConfigError):
            parse_url(f"s3://b?create_bucket={value}")
        with pytest.raises(InvalidConfigError):
            options_from_env({"LANGGRAPH_S3_URL": "s3://b", "LANGGRAPH_S3_CREATE_BUCKET": value})


def test_keyword_values_of_the_wrong_type_are_config_errors() -> None:
    for kwargs in (
        {"read_timeout": "soon"},
        {"max_attempts": 2.5},
        {"connect_timeout": 0},
        {"create_bucket": "true"},
        {"inline_threshold": "10"},
        {"operation_timeout": -1},
    ):
        with pytest.raises(InvalidConfigError):
            S3Saver(bucket="b", endpoint_url="http://127.0.0.1:9", **kwargs)


_LOCAL = {"endpoint_url": "http://127.0.0.1:9", "aws_access_key_id": "AKIA", "aws_secret_access_key": "secret"}


@pytest.mark.parametrize("kind", [S3Saver, S3Store, AsyncS3Saver, AsyncS3Store])
@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"bucket": 5}, "bucket"),
        ({"bucket": ""}, "bucket"),
        ({"bucket": "agents--usw2-az1--x-s3"}, "directory bucket"),
        ({"prefix": 5}, "prefix"),
        ({"prefix": "prod//agents"}, "'prod//agents'"),  # SeaweedFS stores it as prod/agents: lists would miss
        ({"prefix": "prod\\agents"}, "backslash"),
        ({"prefix": "prod/../agents"}, "'..'"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"max_concurrency": "4"}, "max_concurrency"),
        ({"compress_threshold": -1}, "compress_threshold"),
        ({"compress_threshold": True}, "compress_threshold"),
        ({"create_bucket": "no"}, "create_bucket"),
        ({"require_conditional_writes": 0}, "require_conditional_writes"),
        ({"serde": 42}, "serde"),
        ({"server_side_encryption": "AES-256"}, "server_side_encryption"),
        ({"sse_kms_key_id": "alias/agents"}, "sse_kms_key_id needs server_side_encryption='aws:kms'"),
        ({"sse_customer_key": "too short"}, "sse_customer_key must be a 256-bit AES key"),
        ({"sse_customer_key": "k" * 32, "server_side_encryption": "AES256"}, "exclude each other"),
    ],
)
def test_saver_and_store_refuse_the_same_bad_options(kind: Any, options: dict[str, Any], named: str) -> None:
    """One check for both (options.py): refused at construction, naming the option, before any request."""
    with pytest.raises(InvalidConfigError, match=named) as refused:
        kind(**{"bucket": "b", **options}, **_LOCAL)
    assert "too short" not in str(refused.value)  # a customer key is a secret: its length is named, not the key


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"vector_shards": 0}, "vector_shards"),
        ({"vector_shards": 257}, "vector_shards"),
        ({"vector_shards": "4"}, "vector_shards"),
        ({"ttl": 5}, "ttl must be a TTLConfig"),
        ({"ttl": {"default_tl": 5}}, "default_tl"),
        ({"ttl": {"default_ttl": -1}}, "default_ttl"),
        ({"ttl": {"default_ttl": "10"}}, "default_ttl"),
        ({"ttl": {"sweep_interval_minutes": 0}}, "sweep_interval_minutes"),
        ({"ttl": {"refresh_on_read": "no"}}, "refresh_on_read"),
        ({"ttl": {"omit_expired": 1}}, "omit_expired"),
        ({"index": {"dims": 3}}, "embed"),
        ({"index": {"dims": 3, "embed": 42}}, "embed"),
        ({"index": {"dims": 0, "embed": lambda texts: [[0.0] for _ in texts]}}, "dims"),
        ({"index": {"dims": 1, "embed": lambda texts: [[0.0] for _ in texts], "fields": "text"}}, "fields"),
        ({"index": {"dims": 1, "embed": lambda texts: [[0.0] for _ in texts], "field": ["a"]}}, r"\['field'\]"),
        (
            {"index": {"dims": 1, "embed": lambda texts: [[0.0] for _ in texts], "distance_type": "hamming"}},
            "distance_type",
        ),
        (
            {
                "index": {
                    "dims": 1,
                    "embed": lambda texts: [[0.0] for _ in texts],
                    "fields": ["a"],
                    "text_fields": ["b"],
                }
            },
            "both 'fields'",
        ),
    ],
)
def test_store_refuses_bad_ttl_index_and_shards(options: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidConfigError, match=named):
        S3Store(bucket="b", **options, **_LOCAL)


@pytest.mark.parametrize("kind", [S3Saver, S3Store])
def test_an_untyped_serde_is_wrapped_as_langgraph_does(kind: Any) -> None:
    """LangGraph still accepts a serializer with only dumps/loads (``maybe_add_typed_methods``); so do we."""
    import json

    class Untyped:
        def dumps(self, obj: Any) -> bytes:
            return json.dumps(obj).encode()

        def loads(self, data: bytes) -> Any:
            return json.loads(data)

    with contextlib.closing(kind(bucket="b", serde=Untyped(), **_LOCAL)) as made:
        kind_name, data = made.serde.dumps_typed({"a": 1})
        assert made.serde.loads_typed((kind_name, data)) == {"a": 1}


def test_good_store_options_are_kept() -> None:
    embed = lambda texts: [[1.0, 0.0] for _ in texts]  # noqa: E731
    ttl = {"default_ttl": 1.5, "refresh_on_read": False, "omit_expired": True, "sweep_interval_minutes": 1}
    with contextlib.closing(
        S3Store(bucket="b", prefix="/mem/", ttl=ttl, index={"dims": 2, "embed": embed, "fields": ["text"]}, **_LOCAL)
    ) as store:
        assert (store.prefix, store.ttl_config, store.index_config["dims"]) == ("mem", ttl, 2)  # type: ignore[index]
        # PostgresStore's cosine distance and a store's own index_config (with its tokenized fields) are accepted
        assert store.index_config is not None
        with contextlib.closing(S3Store(bucket="b", index={**store.index_config, "distance_type": "cosine"}, **_LOCAL)):
            pass
    for kind in (S3Saver, S3Store):
        with contextlib.closing(kind(bucket="b", prefix=None, **_LOCAL)) as made:
            assert made.prefix == ""


def test_no_credentials_is_an_access_error(
    s3_server: LocalS3Server, bucket: str, prefix: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with S3Saver.from_conn_string(
        f"s3://{bucket}/{prefix}?max_attempts=1",
        endpoint_url=s3_server.endpoint_url,
        region_name=s3_server.region,
    ) as saver:
        with pytest.raises(S3AccessError, match="No usable AWS credentials"):
            saver.setup()
        with pytest.raises(S3AccessError):
            saver.get_tuple(cfg("t"))


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
                saver.prune("ab", strategy=strategy)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"delete_for_runs\(\) takes a sequence of run ids, not a str"):
            saver.delete_for_runs("ab")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="not a str"):
            asyncio.run(saver.aprune("ab"))  # type: ignore[arg-type]
        assert {t: [c.config for c in saver.list(cfg(t))] for t in ("ab", "a", "b")} == before
        assert all(len(configs) == 2 for configs in before.values())


def test_foreign_keys_under_the_prefix_are_skipped(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        saver.put(cfg("t"), empty_checkpoint(), {"step": 0}, {})
        for key in ("threads/a%zz/x", "threads/%FF/x", "runs/readme", "threads/t/ns/~/c/readme", "readme.txt"):
            client.put_object(Bucket=bucket, Key=f"{prefix}/{key}", Body=b"hello")
        assert [t.config["configurable"]["thread_id"] for t in saver.list(None)] == ["t"]
        assert len(list(saver.list(cfg("t")))) == 1
    environ = _cli_env(
        s3_server, f"s3://{bucket}/{prefix}?endpoint_url={s3_server.endpoint_url}&region={s3_server.region}"
    )
    for args in (
        ("threads",),
        ("history", "t"),
        ("gc", "--dry-run"),
        ("gc", "--grace-seconds", "0", "--yes"),
        ("prune", "--keep-latest", "--all", "--yes"),
        ("expire", "--days", "1", "--yes"),
    ):
        done = _cli(*args, env=environ)
        assert done.returncode == 0, (args, done.stderr)
        assert "Traceback" not in done.stderr
    # verify reports the foreign object inside the thread (exit 1), without failing on the others.
    done = _cli("verify", env=environ)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "threads/t/ns/~/c/readme" in done.stdout and "a%zz" not in done.stdout


# ------------------------------------------------------------------------------------------------
# 2. No hangs
# ------------------------------------------------------------------------------------------------
@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """A TCP server that accepts connections and never answers."""
    with silent_server() as port:
        yield f"http://127.0.0.1:{port}"


_SILENT_OPTIONS = "read_timeout=0.5&connect_timeout=0.5&max_attempts=2"
_SILENT_BOUND = 8.0
"""Seconds: 2 attempts x 0.5 s read timeout, backoff and client creation, with a wide margin."""


def _silent_kwargs(endpoint: str) -> dict[str, Any]:
    return {
        "endpoint_url": endpoint,
        "region_name": "us-east-1",
        "aws_access_key_id": "AKIAEXAMPLE",
        "aws_secret_access_key": "secret",
    }


@pytest.mark.parametrize("transport", ["boto3", "direct"])
def test_a_silent_endpoint_fails_within_the_timeouts(silent_endpoint: str, transport: str) -> None:
    url = f"s3://b/p?{_SILENT_OPTIONS}&transport={transport}"
    with S3Saver.from_conn_string(url, **_silent_kwargs(silent_endpoint)) as saver:
        for call in (
            lambda: saver.get_tuple(cfg("t")),
            lambda: saver.put(cfg("t"), empty_checkpoint(), {"step": 0}, {}),
            lambda: list(saver.list(cfg("t"), limit=2)),
            saver.setup,
        ):
            started = time.monotonic()
            with pytest.raises(S3RequestError):
                call()
            assert time.monotonic() - started < _SILENT_BOUND


@pytest.mark.parametrize("transport", ["boto3", "direct"])
def test_a_silent_endpoint_fails_within_the_timeouts_async(silent_endpoint: str, transport: str) -> None:
    async def main() -> None:
        url = f"s3://b/p?{_SILENT_OPTIONS}&transport={transport}"
        async with AsyncS3Saver.from_conn_string(url, **_silent_kwargs(silent_endpoint)) as saver:
            for call in (
                lambda: saver.aget_tuple(cfg("t")),
                lambda: saver.aput(cfg("t"), empty_checkpoint(), {"step": 0}, {}),
                saver.setup,
            ):
                started = time.monotonic()
                with pytest.raises(S3RequestError):
                    await call()
                assert time.monotonic() - started < _SILENT_BOUND

    asyncio.run(main())


@pytest.mark.parametrize("saver_class", [S3Saver, AsyncS3Saver])
def test_operation_deadline_caps_a_slow_operation(silent_endpoint: str, saver_class: type[Any]) -> None:
    # Each request alone may take up to 3 x 2 s here; the operation's deadline ends the call at 1 s.
    url = "s3://b/p?read_timeout=2&max_attempts=3&operation_timeout=1"
    by_id = cfg("t")
    by_id["configurable"]["checkpoint_id"] = "1f000000-0000-6000-8000-000000000000"
    saver = saver_class._from_url(url, **_silent_kwargs(silent_endpoint))
    started = time.monotonic()
    with pytest.raises(S3RequestError, match="operation_timeout"):
        if saver_class is S3Saver:
            saver.get_tuple(by_id)  # its first step is a parallel batch of three requests
        else:
            asyncio.run(saver.aget_tuple(by_id))
    assert time.monotonic() - started < 4
    saver.close()


def test_default_timeouts_are_bounded() -> None:
    with S3Saver.from_conn_string("s3://b/p", endpoint_url="http://127.0.0.1:9") as saver:
        config = saver.client.meta.config
        worst = config.retries["total_max_attempts"] * (config.connect_timeout + config.read_timeout)
        assert worst <= 60
        assert saver.operation_timeout is not None and saver.operation_timeout <= 120


@pytest.mark.parametrize("transport", ["boto3", "direct"])
def test_a_cancelled_aput_leaves_no_write_in_flight(
    s3_server: LocalS3Server, bucket: str, prefix: str, transport: str
) -> None:
    """Defect: a cancelled ``aput`` abandoned its record and head PUTs in flight (the server applies a request
    already sent; a boto3 request on the thread pool runs on regardless), so its checkpoint could commit after
    the cancelled task had ended, and the next run on the thread, started meanwhile, was refused as another
    writer's. A batch of writes now runs to its end before the cancellation goes on: once the task has ended,
    the head no longer moves. Behind a proxy adding 150 ms each way, so that the PUTs are in flight when the
    task is cancelled."""
    from botocore.config import Config

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from latencyproxy import LatencyProxy

    port = int(s3_server.endpoint_url.rsplit(":", 1)[1])
    reader = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())

    def latest_id() -> str:
        tup = reader.get_tuple(cfg("t"))
        assert tup is not None
        return str(tup.checkpoint["id"])

    with LatencyProxy("127.0.0.1", port, one_way_ms=150, lifetime=60) as proxy, contextlib.closing(reader):
        slow = boto3.session.Session().client(
            "s3",
            endpoint_url=proxy.url,
            region_name=s3_server.region,
            aws_access_key_id=s3_server.access_key,
            aws_secret_access_key=s3_server.secret_key,
            config=Config(s3={"addressing_style": "path"}, retries={"mode": "standard", "total_max_attempts": 1}),
        )
        first, second = empty_checkpoint(), empty_checkpoint()
        assert first["id"] < second["id"]  # uuid6: later is larger

        async def cancel_the_second_put() -> tuple[str, str]:
            saver = AsyncS3Saver(bucket=bucket, prefix=prefix, client=slow, transport=transport)
            try:
                parent = await saver.aput(cfg("t"), first, {"source": "input", "step": -1}, {})
                putting = asyncio.create_task(saver.aput(parent, second, {"source": "loop", "step": 0}, {}))
                await asyncio.sleep(0.1)  # its record and head PUTs are on their way
                putting.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await putting
                when_cancelled = latest_id()
                await asyncio.sleep(0.8)  # more than the PUTs in flight need to land
                return when_cancelled, latest_id()
            finally:
                saver.close()  # (closing waits for the thread pool: the heads are read before)

        when_cancelled, later = asyncio.run(cancel_the_second_put())
        assert later == when_cancelled


def test_a_batch_of_writes_settles_once_and_is_abandoned_on_a_second_cancellation() -> None:
    """The rule behind the test above, without a server: cancelled once, the caller waits for the batch (whose
    error, if any, is retrieved, not reported at exit); cancelled again while waiting, it stops waiting and the
    batch is cancelled too, as every batch was before."""
    from langgraph_s3_checkpoint.shell import _settled_if_cancelled

    finished: list[str] = []

    async def batch(outcome: str) -> str:
        try:
            await asyncio.sleep(0.2)
        except asyncio.CancelledError:
            finished.append(f"{outcome}: cancelled")
            raise
        finished.append(f"{outcome}: done")
        if outcome == "fails":
            raise RuntimeError("the batch failed")
        return outcome

    async def cancel(outcome: str, times: int) -> None:
        caller = asyncio.create_task(_settled_if_cancelled(batch(outcome)))
        for _ in range(times):
            await asyncio.sleep(0.05)
            caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await asyncio.sleep(0.3)  # anything still running would finish now

    async def scenario() -> None:
        await cancel("lands", 1)
        await cancel("fails", 1)
        await cancel("abandoned", 2)

    asyncio.run(scenario())
    assert finished == ["lands: done", "fails: done", "abandoned: cancelled"]


# ------------------------------------------------------------------------------------------------
# 3. The right diagnosis
# ------------------------------------------------------------------------------------------------
class _WebPage(http.server.BaseHTTPRequestHandler):
    """Any web server on the wrong port: HTML for every request."""

    def _page(self, status: int) -> None:
        body = b"<html><body>Welcome to the filer</body></html>"
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        self._page(404 if "missing" in self.path else 200)

    def do_HEAD(self) -> None:
        self._page(404)

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
        self._page(200)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def web_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _WebPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("transport", ["boto3", "direct"])
def test_a_web_server_on_the_endpoint_does_not_answer_like_s3(web_server: str, transport: str) -> None:
    url = f"s3://bucket/p?max_attempts=1&transport={transport}"
    with S3Saver.from_conn_string(url, **_silent_kwargs(web_server)) as saver:
        with pytest.raises(NotS3EndpointError, match="does not answer like S3") as raised:
            saver.setup()
        assert "text/html" in str(raised.value) and "does not exist" not in str(raised.value)
        for call in (
            lambda: saver.get_tuple(cfg("missing")),
            lambda: list(saver.list(cfg("t"))),
            lambda: saver.put(cfg("t"), empty_checkpoint(), {"step": 0}, {}),
        ):
            with pytest.raises(NotS3EndpointError):
                call()
    done = _cli(
        "threads",
        env={
            **os.environ,
            "LANGGRAPH_S3_URL": f"s3://bucket/p?endpoint_url={web_server}",
            "AWS_ACCESS_KEY_ID": "a",
            "AWS_SECRET_ACCESS_KEY": "b",
        },
    )
    assert "does not answer like S3" in _assert_one_error_line(done, 3)


class _BrokenXml(http.server.BaseHTTPRequestHandler):
    """A server that claims XML and sends something botocore cannot parse (ResponseParserError)."""

    def do_GET(self) -> None:
        body = b"<ListBucketResult><Contents><Key>truncated"
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_an_unparsable_reply_is_not_s3() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _BrokenXml)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        url = "s3://bucket/p?max_attempts=1"
        with (
            S3Saver.from_conn_string(url, **_silent_kwargs(endpoint)) as saver,
            pytest.raises(NotS3EndpointError, match="does not answer like S3"),
        ):
            # botocore turns the unparsable listing into a ResponseParserError or (1.44) a synthetic 500
            list(saver.list(None))
    finally:
        server.shutdown()
        server.server_close()


def test_everything_derives_from_the_package_error() -> None:
    import langgraph_s3_checkpoint
    import langgraph_s3_checkpoint.errors as errors

    classes = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, Exception)]
    assert all(issubclass(c, S3CheckpointError) for c in classes)
    # ... and every one can be caught by its name from the package (InvalidArgumentTypeError was not exported).
    assert {c.__name__ for c in classes} <= set(langgraph_s3_checkpoint.__all__)


# ------------------------------------------------------------------------------------------------
# 4. Advice that never loses data, and repair
# ------------------------------------------------------------------------------------------------
class Chat(TypedDict):
    turns: Annotated[list[str], operator.add]


def _chat_graph(saver: Any) -> Any:
    builder = StateGraph(Chat)
    builder.add_node("reply", lambda state: {"turns": [f"reply {len(state['turns'])}"]})
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


def _chat(saver: Any, thread_id: str, turns: int) -> Any:
    graph = _chat_graph(saver)
    for i in range(turns):
        graph.invoke({"turns": [f"user {i}"]}, cfg(thread_id))
    return graph


def _head_key(saver: S3Saver, thread_id: str) -> str:
    return saver._core.layout.head(thread_id, "")


def test_a_damaged_head_names_repair_and_repair_restores_the_thread(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        graph = _chat(saver, "hurt", 4)
        before = graph.get_state(cfg("hurt"))
        history = [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("hurt"))]
        client.put_object(Bucket=bucket, Key=_head_key(saver, "hurt"), Body=b"LGS3\x01\x00garbage")
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        with pytest.raises(DamagedHeadError) as raised:
            saver.get_tuple(cfg("hurt"))
        message = str(raised.value)
        assert "repair_thread('hurt')" in message and "langgraph-s3 repair hurt" in message
        assert "do not delete the head" in message
        assert isinstance(raised.value, CorruptObjectError)

        planned = saver.repair_thread("hurt", dry_run=True)
        assert [(n.status, n.head_id) for n in planned.namespaces] == [("would-repair", history[0])]
        with pytest.raises(DamagedHeadError):
            saver.get_tuple(cfg("hurt"))  # a dry run changes nothing

        done = saver.repair_thread("hurt")
        assert [(n.status, n.head_id) for n in done.namespaces] == [("repaired", history[0])]
        assert "consistent" in done.namespaces[0].reason
        graph = _chat_graph(saver)
        assert graph.get_state(cfg("hurt")).values == before.values
        assert [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("hurt"))] == history
        graph.invoke({"turns": ["user again"]}, cfg("hurt"))  # the conversation goes on where it was
        assert graph.get_state(cfg("hurt")).values["turns"][: len(before.values["turns"])] == before.values["turns"]
        assert saver.repair_thread("hurt").namespaces[0].status == "ok"


def test_repair_whose_head_write_answer_was_lost_reports_repaired(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """Found by the adversarial review: when repair's conditional head PUT landed but its answer was lost, the
    retry was refused and repair reported "the head changed ... nothing written" although it had written the
    head. A refused PUT is now read back: the head holding the repair's bytes is the repair's own."""
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        _chat(saver, "hurt", 2)
        client.put_object(Bucket=bucket, Key=_head_key(saver, "hurt"), Body=b"LGS3\x01\x00garbage")
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        head_key = _head_key(saver, "hurt")
        lost = lose_first_answer(saver, lambda r: isinstance(r, Put) and r.key == head_key)
        done = saver.repair_thread("hurt")
        assert lost and [n.status for n in done.namespaces] == ["repaired"]
        assert saver.get_tuple(cfg("hurt")) is not None


def test_repair_rebuilds_a_deleted_head_async(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        graph = _chat(saver, "lost", 3)
        before = graph.get_state(cfg("lost")).values
        latest = graph.get_state(cfg("lost")).config["configurable"]["checkpoint_id"]
    client.delete_object(Bucket=bucket, Key=Layout(prefix).head("lost", ""))

    async def main() -> None:
        saver = AsyncS3Saver(bucket=bucket, prefix=prefix, client=client)
        try:
            assert await saver.aget_tuple(cfg("lost")) is None  # what deleting the head does: an empty thread
            report = await saver.arepair_thread("lost")
            assert [(n.status, n.head_id) for n in report.namespaces] == [("repaired", latest)]
            assert (await _chat_graph(saver).aget_state(cfg("lost"))).values == before
        finally:
            saver.close()

    asyncio.run(main())


def _a_delete_that_dies(saver: S3Saver, thread_id: str, *, turns: int) -> None:
    """A conversation of ``turns`` turns, then a delete_thread that dies after the heads, at the records."""
    _chat(saver, thread_id, turns)
    crash_at(saver, deletes_records)
    with pytest.raises(Crash):
        saver.delete_thread(thread_id)


def test_repair_does_not_bring_back_a_thread_whose_delete_died_part_way(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """Defect: delete_thread deletes the heads first; when it died before the records, repair_thread took the
    records for a thread whose head was lost and brought the deleted conversation back. delete_thread now
    writes a ``deleting`` marker first and removes it last; repair leaves the records it condemned alone."""
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        _a_delete_that_dies(saver, "gone", turns=3)
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        assert saver.get_tuple(cfg("gone")) is None  # the heads went first: it reads as deleted
        report = saver.repair_thread("gone")
        assert [n.status for n in report.namespaces] == ["deleting"] and not report.ok
        assert "delete_thread again" in report.namespaces[0].reason
        assert saver.get_tuple(cfg("gone")) is None
        found = saver.bucket_io.iterate(verify_thread(saver._core.layout, saver._core.codec, "gone"))
        assert any(isinstance(f, Problem) and "did not finish" in f.problem for f in found)
        saver.delete_thread("gone")  # finishes it, marker included
        assert client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/threads/").get("KeyCount", 0) == 0


def test_a_thread_used_again_after_a_delete_died_is_repaired_from_its_new_records(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """The marker condemns only what was stored before it: a conversation started on the same thread id later
    is repaired as any other (here its head, deleted by hand, is rebuilt from the records written since)."""
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        _a_delete_that_dies(saver, "again", turns=2)
    time.sleep(1.1)  # listings date objects to the second
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        graph = _chat(saver, "again", 3)
        latest = graph.get_state(cfg("again"))
        client.delete_object(Bucket=bucket, Key=_head_key(saver, "again"))
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        report = saver.repair_thread("again")
        assert [(n.status, n.head_id) for n in report.namespaces] == [
            ("repaired", latest.config["configurable"]["checkpoint_id"])
        ]
        assert _chat_graph(saver).get_state(cfg("again")).values == latest.values


def test_gc_removes_the_marker_of_a_delete_that_died_once_nothing_else_is_left(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        _a_delete_that_dies(saver, "gone", turns=2)
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        report = gc(saver, grace_seconds=0)
        assert report.deleted["unfinished_delete"] == 1 and report.deleted["headless_namespace"] > 0
        assert report.foreign == 0
        assert client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/threads/").get("KeyCount", 0) == 0


def test_repair_does_not_promote_the_first_put_of_a_thread_whose_head_never_landed(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """Defect: a new thread's first put that died between its record and its head (or lost the race for the
    head) left a lone record, which repair_thread made the head: a checkpoint whose writer was told it failed
    became the thread's history. Without a head nothing in a namespace is committed (chain.py)."""
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        head_key = _head_key(saver, "new")
        crash_at(saver, lambda r: isinstance(r, Put) and r.key == head_key)
        with pytest.raises(Crash):
            saver.put(cfg("new"), empty_checkpoint(), {"step": -1, "source": "input"}, {})
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        assert client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/threads/").get("KeyCount", 0) >= 1
        report = saver.repair_thread("new")
        [outcome] = report.namespaces
        assert outcome.status == "unrepairable" and "continues no earlier checkpoint" in outcome.reason
        assert saver.get_tuple(cfg("new")) is None


def test_repair_does_not_restore_a_head_whose_large_values_are_gone(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """A copy or a delete that died part-way can leave records whose large values are not stored: repair
    used to make such a record the head, turning a thread that read as empty into one whose every read
    raised. It now checks that the record's large values exist first."""
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client, inline_threshold=16)) as saver:
        _chat(saver, "big", 3)
        blobs = f"{saver._core.layout.blobs('big', '')}"
        stored = client.list_objects_v2(Bucket=bucket, Prefix=blobs).get("Contents", [])
        assert stored  # the turns are large values
        for obj in stored:
            client.delete_object(Bucket=bucket, Key=obj["Key"])
        client.delete_object(Bucket=bucket, Key=_head_key(saver, "big"))
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        [outcome] = saver.repair_thread("big").namespaces
        assert outcome.status == "unrepairable" and "not stored" in outcome.reason
        assert saver.get_tuple(cfg("big")) is None  # still reads as empty, not as damaged


def test_cli_repair(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        _chat(saver, "cli-hurt", 2)
        latest = saver.get_tuple(cfg("cli-hurt"))
        assert latest is not None
        client.put_object(Bucket=bucket, Key=_head_key(saver, "cli-hurt"), Body=b"not ours")
    environ = _cli_env(
        s3_server, f"s3://{bucket}/{prefix}?endpoint_url={s3_server.endpoint_url}&region={s3_server.region}"
    )
    shown = _cli("show", "cli-hurt", env=environ)
    assert "langgraph-s3 repair cli-hurt" in _assert_one_error_line(shown, 1)
    dry = _cli("repair", "cli-hurt", "--dry-run", env=environ)
    assert dry.returncode == 0, dry.stderr
    assert "would-repair" in dry.stdout and latest.checkpoint["id"] in dry.stdout
    done = _cli("--json", "repair", "cli-hurt", env=environ)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True and report["namespaces"][0]["status"] == "repaired"
    assert _cli("show", "cli-hurt", env=environ).returncode == 0


def test_list_can_skip_and_report_damaged_records(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        _chat(saver, "scarred", 3)
        ids = [t.checkpoint["id"] for t in saver.list(cfg("scarred"))]
        victim = ids[3]  # an older record, in the middle of the chain
        client.put_object(Bucket=bucket, Key=Layout(prefix).record("scarred", "", victim), Body=b"LGS3\x01\x00xx")
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        with pytest.raises(CorruptObjectError):
            list(saver.list(cfg("scarred")))
        damaged: list[CorruptObjectError] = []
        kept = [t.checkpoint["id"] for t in saver.list(cfg("scarred"), skip_damaged=True, on_damaged=damaged.append)]
        assert kept == [i for i in ids if i != victim]
        assert [e.key for e in damaged] == [Layout(prefix).record("scarred", "", victim)]

        async def alist() -> list[str]:
            return [t.checkpoint["id"] async for t in saver.alist(cfg("scarred"), skip_damaged=True)]

        assert asyncio.run(alist()) == kept
    environ = _cli_env(
        s3_server, f"s3://{bucket}/{prefix}?endpoint_url={s3_server.endpoint_url}&region={s3_server.region}"
    )
    stopped = _cli("history", "scarred", env=environ)
    _assert_one_error_line(stopped, 1)
    skipped = _cli("history", "scarred", "--skip-damaged", env=environ)
    assert skipped.returncode == 1 and "Traceback" not in skipped.stderr
    assert f"SKIPPED damaged object {Layout(prefix).record('scarred', '', victim)}" in skipped.stdout
    listed = json.loads(_cli("--json", "history", "scarred", "--skip-damaged", env=environ).stdout)
    assert [c["checkpoint_id"] for c in listed["checkpoints"]] == kept and len(listed["damaged"]) == 1


# ------------------------------------------------------------------------------------------------
# 5. CLI manners
# ------------------------------------------------------------------------------------------------
def _on_a_terminal(args: Sequence[str], env: dict[str, str], answer: str) -> tuple[int, str]:
    """Run the CLI with stdin, stdout and stderr on a pseudo-terminal, answering its question."""
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # the child
        os.execvpe(sys.executable, [sys.executable, "-m", "langgraph_s3_checkpoint.cli", *args], env)
    output = b""
    answered = False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
        if not answered and b"[y/N]" in output:
            os.write(fd, answer.encode() + b"\n")
            answered = True
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")


def test_destructive_commands_ask_on_a_terminal(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        _chat(saver, "asked", 2)
        environ = _cli_env(
            s3_server, f"s3://{bucket}/{prefix}?endpoint_url={s3_server.endpoint_url}&region={s3_server.region}"
        )
        code, output = _on_a_terminal(["delete", "asked"], environ, "n")
        assert code == 1 and "Delete thread 'asked'" in output and "aborted" in output
        assert saver.get_tuple(cfg("asked")) is not None
        code, output = _on_a_terminal(["prune", "--keep-latest", "asked"], environ, "no")
        assert code == 1 and len(list(saver.list(cfg("asked")))) > 1

        dry = _cli("delete", "asked", "--dry-run", env=environ)
        assert dry.returncode == 0 and "would delete" in dry.stdout
        assert saver.get_tuple(cfg("asked")) is not None
        dry = _cli("prune", "--keep-latest", "asked", "--dry-run", env=environ)
        assert dry.returncode == 0 and len(list(saver.list(cfg("asked")))) > 1

        code, output = _on_a_terminal(["delete", "asked", "--yes"], environ, "")
        assert code == 0 and "[y/N]" not in output and "deleted thread 'asked'" in output
        assert saver.get_tuple(cfg("asked")) is None


def test_import_over_an_existing_thread_needs_replace(
    s3_server: LocalS3Server, bucket: str, prefix: str, tmp_path: Path
) -> None:
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())) as saver:
        _chat(saver, "src", 2)
        _chat(saver, "dst", 1)
        environ = _cli_env(
            s3_server, f"s3://{bucket}/{prefix}?endpoint_url={s3_server.endpoint_url}&region={s3_server.region}"
        )
        archive = str(tmp_path / "src.tar")
        assert _cli("export", "src", archive, env=environ).returncode == 0
        refused = _cli("import", archive, "--thread", "dst", env=environ)
        assert "--replace" in _assert_one_error_line(refused, 1)
        dry = _cli("--json", "import", archive, "--thread", "dst", "--replace", "--dry-run", env=environ)
        assert dry.returncode == 0 and json.loads(dry.stdout)["replaces"] is True
        assert len(list(saver.list(cfg("dst")))) == 3  # the dry run changed nothing (one turn: 3 checkpoints)
        done = _cli("import", archive, "--thread", "dst", "--replace", "--yes", env=environ)
        assert done.returncode == 0, done.stderr
        assert [t.checkpoint["id"] for t in saver.list(cfg("dst"))] == [
            t.checkpoint["id"] for t in saver.list(cfg("src"))
        ]


def test_cli_failures_are_one_line_with_the_documented_code(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    base = f"s3://{bucket}/{prefix}?endpoint_url={s3_server.endpoint_url}&region={s3_server.region}"
    environ = _cli_env(s3_server, base)
    assert "unknown URL option 'inline_treshold'" in _assert_one_error_line(
        _cli("threads", "--url", base + "&inline_treshold=3", env=environ), 2
    )
    assert "create_bucket" in _assert_one_error_line(
        _cli("threads", "--url", base + "&create_bucket=ture", env=environ), 2
    )
    _assert_one_error_line(_cli("show", "nobody", env=environ), 1)
    _assert_one_error_line(_cli("prune", "--bogus", env=environ), 2)
    _assert_one_error_line(_cli("no-such-command", env=environ), 2)
    _assert_one_error_line(_cli("prune", "--all", env=environ), 2)
    silent = _cli(
        "threads", "--url", f"s3://{bucket}/{prefix}?endpoint_url=http://127.0.0.1:9&max_attempts=1", env=environ
    )
    _assert_one_error_line(silent, 3)


def test_long_ids_are_shortened_in_tables(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    long_id = "customer-" + "x" * 300 + "-end"
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())) as saver:
        _chat(saver, long_id, 1)
    environ = _cli_env(
        s3_server, f"s3://{bucket}/{prefix}?endpoint_url={s3_server.endpoint_url}&region={s3_server.region}"
    )
    table = _cli("threads", env=environ)
    assert table.returncode == 0, table.stderr
    assert max(len(line) for line in table.stdout.splitlines()) < 140
    assert "customer-xxx" in table.stdout and "\u2026" in table.stdout and "x-end" in table.stdout
    assert [t["thread_id"] for t in json.loads(_cli("--json", "threads", env=environ).stdout)] == [long_id]


# ------------------------------------------------------------------------------------------------
# 6. Parity with LangGraph's savers
# ------------------------------------------------------------------------------------------------
def test_a_closed_saver_refuses_every_call_naming_it(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    with S3Saver.from_conn_string(f"s3://{bucket}/{prefix}", **_credentials(s3_server)) as saver:
        saver.put(cfg("t"), empty_checkpoint(), {"step": 0}, {})
    for name, call in (
        ("get_tuple", lambda: saver.get_tuple(cfg("t"))),
        ("list", lambda: list(saver.list(cfg("t")))),
        ("put", lambda: saver.put(cfg("t"), empty_checkpoint(), {}, {})),
        ("delete_thread", lambda: saver.delete_thread("t")),
    ):
        with pytest.raises(SaverMisuseError, match=rf"{name}\(\) was called on a saver that was closed"):
            call()
    saver.close()  # idempotent

    async def main() -> None:
        async with AsyncS3Saver.from_conn_string(f"s3://{bucket}/{prefix}", **_credentials(s3_server)) as asaver:
            assert await asaver.aget_tuple(cfg("t")) is not None
        with pytest.raises(SaverMisuseError, match=r"aget_tuple\(\)"):
            await asaver.aget_tuple(cfg("t"))

    asyncio.run(main())


@pytest.mark.parametrize("cls", [S3Saver, AsyncS3Saver, S3Store, AsyncS3Store], ids=lambda c: c.__name__)
def test_with_and_async_with_close_the_saver_or_store_at_the_block_end(
    s3_server: LocalS3Server, bucket: str, prefix: str, cls: type[Any]
) -> None:
    """Both block forms work on all four classes, as on InMemorySaver, and close what they opened: later calls
    are refused naming the call, whichever block form was used."""
    kind = "store" if "Store" in cls.__name__ else "saver"

    def refused(target: Any) -> None:
        read = target.aget(("ns",), "k") if kind == "store" else target.aget_tuple(cfg("t"))
        with pytest.raises(SaverMisuseError, match=rf"\(\) was called on a {kind} that was closed"):
            asyncio.run(read)

    opened = cls(bucket=bucket, prefix=prefix, client=s3_server.client())
    with opened as entered:
        assert entered is opened
    refused(opened)

    async def main() -> Any:
        async with cls(bucket=bucket, prefix=prefix, client=s3_server.client()) as entered:
            if kind == "saver":
                assert await entered.aget_tuple(cfg("absent")) is None
            else:
                assert await entered.aget(("ns",), "absent") is None
        return entered

    refused(asyncio.run(main()))
    opened.close()  # idempotent


def test_a_closed_store_refuses_every_call_naming_it(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    with S3Store.from_conn_string(f"s3://{bucket}/{prefix}", **_credentials(s3_server)) as store:
        store.put(("ns",), "k", {"v": 1})
    for name, call in (
        ("batch", lambda: store.get(("ns",), "k")),
        ("sweep_ttl", store.sweep_ttl),
        ("setup", store.setup),
        ("start_ttl_sweeper", store.start_ttl_sweeper),
        ("abatch", lambda: asyncio.run(store.aget(("ns",), "k"))),
    ):
        with pytest.raises(SaverMisuseError, match=rf"{name}\(\) was called on a store that was closed"):
            call()


def test_misuse_errors_name_the_method_the_user_called(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    async def main() -> None:
        saver = AsyncS3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
        try:
            graph = _chat_graph(saver)
            await graph.ainvoke({"turns": ["hi"]}, cfg("loop"))
            with pytest.raises(SaverMisuseError) as raised:
                graph.get_state(cfg("loop"))
            assert "graph.get_state()" in str(raised.value) and "aget_state" in str(raised.value)
            with pytest.raises(SaverMisuseError) as raised:
                saver.get_delta_channel_history(config=cfg("loop"), channels=["turns"])
            message = str(raised.value)
            assert "aget_delta_channel_history" in message and "adelta_history" not in message
            with pytest.raises(SaverMisuseError, match=r"saver\.alist\("):
                saver.list(cfg("loop"))
        finally:
            saver.close()

    asyncio.run(main())


def test_the_empty_thread_id_maps_to_a_key() -> None:
    assert escape("") == "~" and unescape("~") == ""
    assert Layout("p").thread("") == "p/threads/~/"


def test_the_empty_thread_id_is_accepted_like_inmemorysaver(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    memory = InMemorySaver()
    memory.put(cfg(""), empty_checkpoint(), {"step": 0}, {})
    assert memory.get_tuple(cfg("")) is not None
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())) as saver:
        saver.put(cfg(""), empty_checkpoint(), {"step": 0}, {})
        assert saver.get_tuple(cfg("")) is not None
        assert [t.config["configurable"]["thread_id"] for t in saver.list(None)] == [""]
