"""One location URL serves saver, store, node cache, the Agent Server's factories and the ``langgraph-s3`` command.

Each component uses the URL options it knows and ignores the ones only the others use; an option none of them knows,
or a value that is wrong for its option, is refused by every entry point with a message naming it
(``options.URL_OPTIONS`` is the one table). The components that send requests are built against SeaweedFS.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import run_cli
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import TTLConfig
from typing_extensions import TypedDict

from langgraph_s3_checkpoint import (
    AsyncS3Saver,
    AsyncS3Store,
    InvalidConfigError,
    S3Saver,
    S3Store,
    local,
    server,
)
from langgraph_s3_checkpoint.cache import S3Cache
from langgraph_s3_checkpoint.options import CACHE, SAVER, STORE, URL_OPTIONS, parse_url
from langgraph_s3_checkpoint.server import options_from_env

BUCKET = "lgs3-url-options"
SHARED = "vector_shards=32&inline_threshold=10&read_cache_bytes=0&memory_bytes=0&ttl_days=3&operation_timeout=7"
"""A URL's options for everyone: store-only, saver-only, saver-and-cache and shared ones."""
SHARED_NAMES = [part.split("=")[0] for part in SHARED.split("&")]


class State(TypedDict):
    text: str


def _graph(saver: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("write", lambda state: {"text": "x" * 100})
    builder.add_edge(START, "write")
    builder.add_edge("write", END)
    return builder.compile(checkpointer=saver)


@pytest.fixture
def location(seaweedfs_server: local.LocalS3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    """``s3://bucket/prefix`` on SeaweedFS, with the server's credentials and endpoint in the environment."""
    seaweedfs_server.create_bucket(BUCKET)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", seaweedfs_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", seaweedfs_server.secret_key)
    monkeypatch.setenv("AWS_ENDPOINT_URL", seaweedfs_server.endpoint_url)
    monkeypatch.setenv("AWS_REGION", seaweedfs_server.region)
    return f"s3://{BUCKET}/url-{uuid.uuid4().hex[:10]}"


def _blobs(server: local.LocalS3Server, location: str) -> list[str]:
    prefix = location.removeprefix(f"s3://{BUCKET}/") + "/"
    listed = server.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return [o["Key"] for o in listed if "/b/" in o["Key"]]


def test_a_saver_only_option_reaches_the_saver_and_the_store_ignores_it(
    seaweedfs_server: local.LocalS3Server, location: str
) -> None:
    url = f"{location}?{SHARED}"
    with S3Saver.from_conn_string(url) as saver:
        saver.setup()
        _graph(saver).invoke({"text": ""}, {"configurable": {"thread_id": "t"}})
        assert saver.operation_timeout == 7.0
    # inline_threshold=10: the 100-character value got its own object (the default, 4096, would inline it).
    assert _blobs(seaweedfs_server, location)
    with S3Store.from_conn_string(url) as store:
        store.put(("notes",), "k", {"v": 1})
        assert store.get(("notes",), "k").value == {"v": 1}  # type: ignore[union-attr]
        assert store.plans.vector_shards == 32
        assert store.operation_timeout == 7.0
    with S3Cache.from_conn_string(url) as cache:
        assert cache.ttl_days == 3  # the cache's own option; the saver's and the store's are ignored
        cache.set({(("ns",), "key"): (1, None)})
        assert cache.get([(("ns",), "key")]) == {(("ns",), "key"): 1}


def test_the_agent_servers_checkpointer_and_store_take_one_url(
    seaweedfs_server: local.LocalS3Server, location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(server.ENV_URL, f"{location}?{SHARED}")

    async def serve() -> None:
        async with server.checkpointer() as saver:
            await _graph(saver).ainvoke({"text": ""}, {"configurable": {"thread_id": "t"}})
            assert saver.operation_timeout == 7.0
        async with server.store() as memory:
            await memory.aput(("notes",), "k", {"v": 1})
            assert memory.plans.vector_shards == 32

    asyncio.run(serve())
    assert _blobs(seaweedfs_server, location)  # inline_threshold=10 reached the server's saver


def _cli(location: str, *args: str, query: str = SHARED) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_S3_")}
    environ["LANGGRAPH_S3_URL"] = f"{location}?{query}"
    return run_cli(*args, env=environ)


def test_every_kind_of_cli_command_takes_one_url(seaweedfs_server: local.LocalS3Server, location: str) -> None:
    with S3Saver.from_conn_string(location) as saver:
        _graph(saver).invoke({"text": ""}, {"configurable": {"thread_id": "listed"}})
    commands = [("threads",), ("verify",), ("store", "put", "notes", "k", '{"v": 1}'), ("store", "ls"), ("cache", "ls")]
    for args in commands:
        done = _cli(location, *args)
        assert done.returncode == 0, (args, done.stderr)
        assert done.stderr == ""
    assert "listed" in _cli(location, "threads").stdout
    assert "notes" in _cli(location, "store", "ls").stdout


UNKNOWN = "vector_shard=32"  # one letter short of the store's option

ENTRY_POINTS: dict[str, Callable[[str], Any]] = {
    "parse_url": parse_url,
    "S3Saver": S3Saver.from_conn_string,
    "AsyncS3Saver": AsyncS3Saver.from_conn_string,
    "S3Store": S3Store.from_conn_string,
    "AsyncS3Store": AsyncS3Store.from_conn_string,
    "S3Cache": S3Cache.from_conn_string,
    "server.saver_from_env": lambda url: server.saver_from_env({server.ENV_URL: url}),
    "server.store_from_env": lambda url: server.store_from_env({server.ENV_URL: url}),
}
"""Every way a URL becomes a component in-process (the CLI, tested below, takes its URL from the environment)."""


@pytest.mark.memory
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_an_option_no_component_knows_is_refused_naming_it_and_the_valid_ones(entry: str) -> None:
    with pytest.raises(InvalidConfigError) as raised:
        ENTRY_POINTS[entry](f"s3://b/p?{UNKNOWN}&endpoint_url=http://127.0.0.1:9")
    message = str(raised.value)
    assert "'vector_shard'" in message
    assert all(name in message for name in URL_OPTIONS), message


@pytest.mark.memory
@pytest.mark.parametrize(
    ("query", "users"),
    [
        ("vector_shards=300", (STORE,)),  # at most 256
        ("vector_shards=many", (STORE,)),
        ("inline_threshold=-1", (SAVER,)),
        ("ttl_days=0", (SAVER, CACHE)),
        ("operation_timeout=0", (SAVER, STORE, CACHE)),
        ("max_concurrency=0", (SAVER, STORE, CACHE)),
    ],
)
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_bad_value_is_refused_naming_its_option(entry: str, query: str, users: tuple[str, ...]) -> None:
    name = query.split("=")[0]
    assert set(users) == URL_OPTIONS[name].used_by
    with pytest.raises(InvalidConfigError, match=name):
        ENTRY_POINTS[entry](f"s3://b/p?{query}&endpoint_url=http://127.0.0.1:9")


def test_the_cli_refuses_an_unknown_option_or_a_bad_value_naming_it(location: str) -> None:
    for query, named in ((UNKNOWN, "'vector_shard'"), ("vector_shards=0", "vector_shards")):
        for args in (("threads",), ("store", "ls"), ("cache", "ls")):
            done = _cli(location, *args, query=query)
            assert done.returncode == 2, (query, args, done.stderr)
            assert named in done.stderr and done.stderr.startswith("langgraph-s3: error:"), done.stderr


@pytest.mark.memory
def test_each_component_gets_exactly_its_own_options() -> None:
    _, _, everything = parse_url(f"s3://b/p?{SHARED}&region=eu-west-1")
    assert everything["region_name"] == "eu-west-1"
    for component in (SAVER, STORE, CACHE):
        _, _, options = parse_url(f"s3://b/p?{SHARED}", used_by=component)
        assert set(options) == {name for name in SHARED_NAMES if component in URL_OPTIONS[name].used_by}
        assert all(options[name] == everything[name] for name in options)


@pytest.mark.memory
def test_the_documented_table_is_the_code_table() -> None:
    """docs/operations.md's URL table names every option once, with the components that use it."""
    docs = (Path(__file__).parent.parent / "docs" / "operations.md").read_text(encoding="utf-8")
    section = docs[docs.index("## The location URL") : docs.index("### A missing bucket")]
    rows = dict(re.findall(r"^\| `(\w+)` \|.*\| ([a-z, ]+) \|$", section, flags=re.MULTILINE))
    assert set(rows) == set(URL_OPTIONS)
    for name, option in URL_OPTIONS.items():
        assert set(rows[name].split(", ")) == option.used_by, name


@pytest.mark.memory
def test_a_keyword_argument_of_another_component_is_refused_naming_its_users() -> None:
    """In a URL another component's option is ignored; passed by name to the wrong class, it is a mistake."""
    local = "http://127.0.0.1:9"
    for build, name, users in (
        (lambda: S3Store(bucket="b", endpoint_url=local, inline_threshold=10), "inline_threshold", "saver only"),
        (lambda: S3Store(bucket="b", endpoint_url=local, ttl_days=3), "ttl_days", "cache and saver only"),
        (lambda: S3Saver(bucket="b", endpoint_url=local, vector_shards=3), "vector_shards", "store only"),
        (lambda: S3Cache(bucket="b", endpoint_url=local, memory_bytes=0), "memory_bytes", "saver only"),
    ):
        with pytest.raises(InvalidConfigError, match=f"{name} is an option of the {users}"):
            build()


@pytest.mark.memory
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


@pytest.mark.memory
def test_every_documented_url_option_is_parsed_to_its_type() -> None:
    url = (
        "s3://b/p?endpoint_url=http://127.0.0.1:9&region=eu-west-1&addressing_style=path"
        "&connect_timeout=1.5&read_timeout=2&operation_timeout=30&max_attempts=4&inline_threshold=10"
        "&compress_threshold=20&max_concurrency=3&ttl_days=7&read_cache_bytes=0&memory_bytes=1024&create_bucket=TRUE"
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
        "read_cache_bytes": 0,
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
    # ?read_timeout=2 reaches the client as a float (urllib3 cannot use the string).
    with S3Saver.from_conn_string(
        "s3://b/p?read_timeout=2&connect_timeout=1&max_attempts=2", endpoint_url="http://127.0.0.1:9"
    ) as saver:
        config = saver.client.meta.config
        assert (config.read_timeout, config.connect_timeout) == (2.0, 1.0)
        assert config.retries["total_max_attempts"] == 2


@pytest.mark.memory
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


@pytest.mark.memory
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


@pytest.mark.memory
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


_LOCAL: dict[str, Any] = {
    "endpoint_url": "http://127.0.0.1:9",
    "aws_access_key_id": "AKIA",
    "aws_secret_access_key": "secret",
}


@pytest.mark.memory
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


@pytest.mark.memory
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


@pytest.mark.memory
@pytest.mark.parametrize("kind", [S3Saver, S3Store])
def test_an_untyped_serde_is_wrapped_as_langgraph_does(kind: Any) -> None:
    """LangGraph still accepts a serializer with only dumps/loads (``maybe_add_typed_methods``); so do we."""

    class Untyped:
        def dumps(self, obj: Any) -> bytes:
            return json.dumps(obj).encode()

        def loads(self, data: bytes) -> Any:
            return json.loads(data)

    with contextlib.closing(kind(bucket="b", serde=Untyped(), **_LOCAL)) as made:
        kind_name, data = made.serde.dumps_typed({"a": 1})
        assert made.serde.loads_typed((kind_name, data)) == {"a": 1}


@pytest.mark.memory
def test_good_store_options_are_kept() -> None:
    embed = lambda texts: [[1.0, 0.0] for _ in texts]  # noqa: E731
    ttl: TTLConfig = {"default_ttl": 1.5, "refresh_on_read": False, "omit_expired": True, "sweep_interval_minutes": 1}
    with contextlib.closing(
        S3Store(bucket="b", prefix="/mem/", ttl=ttl, index={"dims": 2, "embed": embed, "fields": ["text"]}, **_LOCAL)
    ) as store:
        assert (store.prefix, store.ttl_config, store.index_config["dims"]) == ("mem", ttl, 2)  # type: ignore[index]
        # PostgresStore's cosine distance and a store's own index_config (with its tokenized fields) are accepted
        assert store.index_config is not None
        with contextlib.closing(
            S3Store(bucket="b", index={**store.index_config, "distance_type": "cosine"}, **_LOCAL)  # type: ignore[arg-type]
        ):
            pass
    for kind in (S3Saver, S3Store):
        with contextlib.closing(kind(bucket="b", prefix=None, **_LOCAL)) as made:  # type: ignore[arg-type]
            assert made.prefix == ""


def test_each_new_client_reads_the_credentials_of_its_time_and_shares_the_parsed_s3_model(
    seaweedfs_server: local.LocalS3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``make_client`` gives each client a session of its own (the environment as it is now: rotated keys are
    picked up) but parses botocore's S3 model once per process, not once per client."""
    from botocore.exceptions import ClientError

    from langgraph_s3_checkpoint import make_client

    seaweedfs_server.create_bucket("lgs3-test")
    endpoint: dict[str, Any] = {"endpoint_url": seaweedfs_server.endpoint_url, "region_name": seaweedfs_server.region}
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", seaweedfs_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", seaweedfs_server.secret_key)
    before = make_client(**endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGKEY00000000")
    after = make_client(**endpoint)

    before.head_bucket(Bucket="lgs3-test")
    with pytest.raises(ClientError):
        after.head_bucket(Bucket="lgs3-test")
    shared = before.meta.service_model._service_description is after.meta.service_model._service_description
    assert shared, "each client parsed the S3 model again"
