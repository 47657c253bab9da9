"""S3 providers as they answer: the conditional-write probe at first use, and each provider's dialect.

The probe's checks and its cost are tested on in-memory buckets that misbehave one way each (no server: every
check must name itself). Each provider row of docs/operations.md is then tested through
:class:`dialectproxy.DialectProxy`, a real HTTP proxy in front of SeaweedFS that answers the way that provider's
documentation says it does: the behaviour the row promises, LangGraph's conformance suite where a saver can work
there, and a race of two writers. The outcome is correct, or a clear refusal at first use: never a silent fork,
never a false conflict.

Every test gets its own proxy, hence its own endpoint, so the probe's verdict (kept once per process, endpoint and
bucket) is this dialect's and not another test's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any
from uuid import uuid4

import boto3
import pytest
from botocore.config import Config
from dialectproxy import Dialect, DialectProxy
from helpers import RequestCounter, cfg, client_options, run_plan
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from test_conformance import assert_conformance
from workers.common import fence_graph

from langgraph_s3_checkpoint import (
    AsyncS3Saver,
    AsyncS3Store,
    CheckpointConflictError,
    ConditionalRequestConflictError,
    ConditionalWritesUnsupportedError,
    InvalidConfigError,
    S3Cache,
    S3RequestError,
    S3Saver,
    S3Store,
    make_client,
)
from langgraph_s3_checkpoint._protocol.requests import (
    CREATE,
    OVERWRITE,
    PRECONDITION_FAILED,
    Create,
    DeleteIfMatch,
    DeleteObjects,
    Get,
    ListKeys,
    Overwrite,
    Put,
    Request,
    Update,
    Written,
)
from langgraph_s3_checkpoint._transport.direct import DirectTransport
from langgraph_s3_checkpoint._transport.http1 import Exchange
from langgraph_s3_checkpoint._transport.probe import Failed, probe, without_conditions
from langgraph_s3_checkpoint._transport.retries import CONFLICT_ATTEMPTS, MAX_BACKOFF, Kind, Retries, kind_of
from langgraph_s3_checkpoint.local import LocalS3Server
from langgraph_s3_checkpoint.memory import MemoryBucket
from langgraph_s3_checkpoint.options import parse_url

BUCKET = "lgs3-providers"
PROBE_REQUESTS = 19
"""What the probe costs on a server that passes it: 1 LIST (the bucket must exist before a PUT), 11 PUT, 4 GET,
2 DELETE and 1 DeleteObjects."""


# -- the probe, without a server --------------------------------------------------------------------
def _drive(plan: Any, bucket: MemoryBucket) -> tuple[Any, list[list[Request]]]:
    """Run a plan on an in-memory bucket, one request after the other; its result and its batches."""
    return run_plan(plan, lambda step: [bucket.execute(request) for request in step])


@pytest.mark.memory
def test_the_probe_is_five_round_trips_of_nineteen_requests_and_leaves_nothing() -> None:
    bucket = MemoryBucket()
    found, batches = _drive(probe("p/_setup/probe-x"), bucket)
    assert found is None
    assert [len(batch) for batch in batches] == [1, 8, 7, 2, 1] and sum(map(len, batches)) == PROBE_REQUESTS
    kinds = [type(request).__name__ for batch in batches for request in batch]
    assert {kind: kinds.count(kind) for kind in set(kinds)} == {
        "ListKeys": 1,
        "Put": 11,
        "Get": 4,
        "DeleteIfMatch": 2,
        "DeleteObjects": 1,
    }
    assert batches[0] == [ListKeys("p/_setup/probe-x", max_keys=1)]  # a read first: no PUT meets a missing bucket
    assert all(request.key.startswith("p/_setup/probe-x") for batch in batches[1:-1] for request in batch)  # type: ignore[attr-defined]
    assert bucket.keys() == []


class Misbehaving(MemoryBucket):
    """An in-memory bucket that gets conditional requests wrong in one way (``fault``)."""

    def __init__(self, fault: str) -> None:
        super().__init__()
        self.fault = fault
        self.lost = False

    def execute(self, request: Request) -> Any:
        fault = self.fault
        if isinstance(request, Put):
            mode = request.mode
            if fault == "ignores If-None-Match" and isinstance(mode, Create):
                request = replace(request, mode=OVERWRITE)
            if fault == "ignores If-Match" and isinstance(mode, Update):
                request = replace(request, mode=OVERWRITE)
            missing = self.object(request.key) is None
            if fault == "creates on a missing If-Match" and isinstance(mode, Update) and missing:
                request = replace(request, mode=OVERWRITE)
            if fault == "refuses every conditional PUT" and not isinstance(mode, Overwrite):
                return PRECONDITION_FAILED
            if fault == "refuses the right If-Match" and isinstance(mode, Update):
                return PRECONDITION_FAILED
            if fault == "lets both racers win" and request.key.endswith("-race"):
                request = replace(request, mode=OVERWRITE)
            if fault == "loses the first answer" and not self.lost and isinstance(mode, Create):
                self.lost = True
                super().execute(request)  # applied; the retry is refused by the condition it met
                return PRECONDITION_FAILED
        if isinstance(request, DeleteIfMatch):
            if fault == "ignores conditional DELETE":
                return super().execute(DeleteObjects((request.key,)))
            if fault == "refuses conditional DELETE":
                return PRECONDITION_FAILED
        return super().execute(request)


@pytest.mark.memory
@pytest.mark.parametrize(
    ("fault", "check"),
    [
        ("ignores If-None-Match", "create again"),
        ("ignores If-Match", "wrong If-Match"),
        ("creates on a missing If-Match", "If-Match on a missing key"),
        ("refuses every conditional PUT", "create"),
        ("refuses the right If-Match", "right If-Match"),
        ("lets both racers win", "race"),
        ("ignores conditional DELETE", "stale If-Match DELETE"),
        ("refuses conditional DELETE", "right If-Match DELETE"),
        ("loses the first answer", None),
    ],
)
def test_each_check_of_the_probe_names_itself(fault: str, check: str | None) -> None:
    """Every way of getting conditions wrong fails its own check, with the server's answer; a lost answer (the
    write landed, the retry was refused) is not taken for a refusal. The probe cleans up either way."""
    bucket = Misbehaving(fault)
    found, _ = _drive(probe("p/_setup/probe-x"), bucket)
    assert (found.check if isinstance(found, Failed) else None) == check
    assert found is None or found.answer
    assert bucket.keys() == []


@pytest.mark.memory
def test_without_conditions_keeps_every_reply_and_sends_no_conditional_header() -> None:
    """The single-writer stand-in: a LIST of the key, then the plain request if the condition holds."""
    bucket = MemoryBucket(keep_log=True)
    etag = bucket.execute(Put("a", b"1")).etag
    batch: list[Request] = [
        Put("new", b"n", mode=CREATE),  # holds: written
        Put("a", b"x", mode=CREATE),  # exists: refused
        Put("a", b"2", mode=Update('"0"')),  # wrong ETag: refused
        Put("a", b"3", mode=Update(etag)),  # right ETag: written
        DeleteIfMatch("gone", etag),  # missing: as a deleted object
        Get("a"),  # not conditional: sent as it is
    ]
    assert bucket.log is not None
    bucket.log.clear()
    replies, batches = _drive(without_conditions(batch), bucket)
    assert isinstance(replies[0], Written) and replies[1] is PRECONDITION_FAILED and replies[2] is PRECONDITION_FAILED
    assert isinstance(replies[3], Written) and replies[4] is None and replies[5].body == b"1"
    assert len(batches) == 2 and sum(isinstance(r, ListKeys) for r in batches[0]) == 5
    sent = [request for request, _ in bucket.log]
    assert not any(
        isinstance(r, DeleteIfMatch) or (isinstance(r, Put) and not isinstance(r.mode, Overwrite)) for r in sent
    )
    assert bucket.object("a").body == b"3"  # type: ignore[union-attr]
    deleted, _ = _drive(
        without_conditions([DeleteIfMatch("a", '"0"'), DeleteIfMatch("new", _etag(bucket, "new"))]), bucket
    )
    assert deleted == [PRECONDITION_FAILED, None] and bucket.keys() == ["a"]


def _etag(bucket: MemoryBucket, key: str) -> str:
    found = bucket.object(key)
    assert found is not None
    return found.etag


# -- through the dialect proxy --------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(seaweedfs_server: LocalS3Server) -> LocalS3Server:
    seaweedfs_server.create_bucket(BUCKET)
    return seaweedfs_server


@pytest.fixture
def through(server: LocalS3Server) -> Iterator[Callable[..., DialectProxy]]:
    """``through(**dialect)``: a started proxy answering as that dialect (stopped after the test)."""
    proxies: list[DialectProxy] = []

    def start(**dialect: Any) -> DialectProxy:
        proxy = DialectProxy(server, Dialect(**dialect), BUCKET).start()
        proxies.append(proxy)
        return proxy

    yield start
    for proxy in proxies:
        proxy.stop()


def _options(server: LocalS3Server, proxy: DialectProxy, prefix: str | None = None, **extra: Any) -> dict[str, Any]:
    """A saver's arguments on the proxy, with the client the saver makes itself (``make_client``)."""
    return {
        "bucket": BUCKET,
        "prefix": prefix or f"providers/{uuid4().hex[:12]}",
        **client_options(server, proxy.url),
        **extra,
    }


def _stored(server: LocalS3Server, prefix: str) -> list[str]:
    """What the server itself holds under a prefix, past the proxy."""
    listing = server.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix + "/")
    return [o["Key"] for o in listing.get("Contents", ())]


def _race(server: LocalS3Server, proxy: DialectProxy, **options: Any) -> tuple[list[Any], str]:
    """Two writers that both read a thread's head commit a child of it at the same moment: their outcomes (a
    config or the exception), and the prefix."""
    opened = _options(server, proxy, **options)
    first = S3Saver(**opened)
    base = first.put(cfg("race"), empty_checkpoint(), {"source": "loop", "step": 0, "parents": {}}, {})
    writers = [S3Saver(**opened) for _ in range(2)]
    for writer in writers:
        assert writer.get_tuple(cfg("race")) is not None  # each fences on the head it read
    barrier = threading.Barrier(2)

    def commit(writer: S3Saver) -> Any:
        barrier.wait()
        try:
            return writer.put(base, empty_checkpoint(), {"source": "loop", "step": 1, "parents": {}}, {})
        except Exception as error:  # the outcome under test
            return error

    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(commit, writers))
    head = first.get_tuple(cfg("race"))
    winners = [o for o in outcomes if isinstance(o, dict)]
    assert len(winners) == 1 and head is not None and head.config == winners[0], outcomes
    assert [t.config for t in first.list(cfg("race"))] == [winners[0], base]
    for saver in (first, *writers):
        saver.close()
    return outcomes, opened["prefix"]


def _refused_race(server: LocalS3Server, proxy: DialectProxy, **options: Any) -> ConditionalWritesUnsupportedError:
    """Two writers start the same thread at the same moment, as the first writes of the process: both are
    refused, and nothing is stored. Returns one of the errors."""
    opened = _options(server, proxy, **options)
    writers = [S3Saver(**opened) for _ in range(2)]
    barrier = threading.Barrier(2)

    def commit(writer: S3Saver) -> Any:
        barrier.wait()
        try:
            return writer.put(cfg("race"), empty_checkpoint(), {"source": "input", "step": -1, "parents": {}}, {})
        except Exception as error:  # the outcome under test
            return error

    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(commit, writers))
    for writer in writers:
        writer.close()
    assert all(isinstance(o, ConditionalWritesUnsupportedError) for o in outcomes), outcomes
    assert _stored(server, opened["prefix"]) == []
    refused: ConditionalWritesUnsupportedError = outcomes[0]
    return refused


PROBE_REQUESTS_BY_KEY = PROBE_REQUESTS - 2
"""The probe's requests that name one of its keys: not its first LIST (of the bucket, with a prefix) nor its final
DeleteObjects."""


def _probe_requests(proxy: DialectProxy) -> int:
    """Requests the proxy saw for the probe's keys (:data:`PROBE_REQUESTS_BY_KEY` per probe)."""
    return sum("/_setup/probe-" in key for _, key, _ in proxy.log)


# -- the probe at first use -------------------------------------------------------------------------
def test_the_probe_runs_before_the_first_write_once_per_process_and_endpoint(
    server: LocalS3Server, through: Callable[..., DialectProxy]
) -> None:
    proxy = through()
    saver = S3Saver(**_options(server, proxy))
    assert saver.get_tuple(cfg("t")) is None and _probe_requests(proxy) == 0  # reads do not probe
    before = proxy.requests
    saver.put(cfg("t"), empty_checkpoint(), {}, {})
    first_put = proxy.requests - before
    assert _probe_requests(proxy) == PROBE_REQUESTS_BY_KEY and not _stored(server, saver.prefix + "/_setup")
    other = S3Saver(**_options(server, proxy))  # a second saver, its own client: the verdict is the process's
    assert other.get_tuple(cfg("t")) is None
    before = proxy.requests
    other.put(cfg("t"), empty_checkpoint(), {}, {})
    assert proxy.requests - before == first_put - PROBE_REQUESTS
    store = S3Store(**_options(server, proxy))  # and the store's
    before = proxy.requests
    store.put(("users",), "u", {"v": 1})
    assert proxy.requests - before == 1 and _probe_requests(proxy) == PROBE_REQUESTS_BY_KEY
    for opened in (saver, other, store):
        opened.close()


def test_concurrent_first_writes_wait_for_one_probe(
    server: LocalS3Server, through: Callable[..., DialectProxy]
) -> None:
    proxy = through()
    saver = S3Saver(**_options(server, proxy))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: saver.put(cfg(f"t{i}"), empty_checkpoint(), {}, {}), range(8)))
    assert _probe_requests(proxy) == PROBE_REQUESTS_BY_KEY
    saver.close()

    async_proxy = through()

    async def first_writes() -> None:
        async with AsyncS3Saver.from_conn_string(
            f"s3://{BUCKET}/async", **client_options(server, async_proxy.url)
        ) as a:
            assert a.bucket_io.native is not None  # the probe runs on the event loop's sender too
            await asyncio.gather(*(a.aput(cfg(f"t{i}"), empty_checkpoint(), {}, {}) for i in range(8)))

    asyncio.run(first_writes())
    assert _probe_requests(async_proxy) == PROBE_REQUESTS_BY_KEY


def test_a_blocking_store_call_on_the_loop_does_not_wait_for_the_loops_own_probe(
    server: LocalS3Server, through: Callable[..., DialectProxy]
) -> None:
    """AsyncS3Store's blocking methods work on the event loop's thread (as InMemoryStore's). One made while that
    loop's own first write is probing cannot wait for that probe (the loop is blocked): it probes by itself."""
    proxy = through(conflicts=2)  # each conditional request waits for two 409s: the async probe is slow

    async def scenario() -> None:
        store = AsyncS3Store(bucket=BUCKET, prefix=f"providers/{uuid4().hex[:12]}", **client_options(server, proxy.url))
        first = asyncio.ensure_future(store.aput(("a",), "k", {"v": 1}))
        while not _probe_requests(proxy):
            await asyncio.sleep(0.005)  # until the loop's probe is under way
        assert not first.done()
        store.put(("b",), "k", {"v": 2})  # blocking, on the loop's thread
        await first
        assert (await store.aget(("a",), "k")) is not None and store.get(("b",), "k") is not None
        store.close()

    finished = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(scenario())
        except BaseException as error:  # reported below
            errors.append(error)
        finally:
            finished.set()

    threading.Thread(target=run, daemon=True).start()
    assert finished.wait(60), "the blocking call waited for the probe of the loop it blocks"
    assert not errors, errors


def test_the_probe_cost_counted_by_botocore(server: LocalS3Server, through: Callable[..., DialectProxy]) -> None:
    """The same count seen from the client's own hooks (transport auto then sends through boto3)."""
    proxy = through()
    client = make_client(**client_options(server, proxy.url))
    counter = RequestCounter(client)
    saver = S3Saver(bucket=BUCKET, prefix=f"providers/{uuid4().hex[:12]}", client=client)
    saver.setup()
    assert counter.snapshot() == {
        "HeadBucket": 1,
        "ListObjectsV2": 1,
        "PutObject": 11,
        "GetObject": 4,
        "DeleteObject": 2,
        "DeleteObjects": 1,
    }
    counter.reset()
    saver.setup()  # the verdict is known: setup costs its HeadBucket only
    assert counter.snapshot() == {"HeadBucket": 1}
    counter.detach()
    saver.close()


# -- servers that ignore conditions: GCS's XML API, Garage, OCI ---------------------------------------
def test_ignored_conditions_are_refused_at_the_first_write_before_anything_is_stored(
    server: LocalS3Server, through: Callable[..., DialectProxy]
) -> None:
    proxy = through(ignores_conditions=True)
    refused = _refused_race(server, proxy)  # two first writers, no setup(): both refused, no fork
    assert refused.check == "create again" and "replaced" in refused.answer
    assert BUCKET in str(refused) and "require_conditional_writes=False" in str(refused)
    options = _options(server, proxy)
    saver = S3Saver(**options)
    with pytest.raises(ConditionalWritesUnsupportedError):
        saver.put(cfg("t"), empty_checkpoint(), {}, {})
    assert _stored(server, options["prefix"]) == []
    with pytest.raises(ConditionalWritesUnsupportedError):
        saver.setup()  # the verdict is kept: refused again, without probing again
    probed = _probe_requests(proxy)
    with pytest.raises(ConditionalWritesUnsupportedError):
        saver.put_writes(cfg("t", checkpoint_id="1"), [("c", 1)], "task")
    assert _probe_requests(proxy) == probed
    store = S3Store(**_options(server, proxy))
    with pytest.raises(ConditionalWritesUnsupportedError):
        store.put(("users",), "u", {"v": 1})

    async def first_async_write() -> None:
        async with AsyncS3Saver.from_conn_string(
            f"s3://{BUCKET}/{options['prefix']}", **client_options(server, proxy.url)
        ) as a:
            await a.aput(cfg("t"), empty_checkpoint(), {}, {})

    with pytest.raises(ConditionalWritesUnsupportedError):
        asyncio.run(first_async_write())
    assert _stored(server, options["prefix"]) == []
    saver.close()
    store.close()


def test_ignored_conditions_with_setup_refuse_before_the_lifecycle_rule(
    server: LocalS3Server, through: Callable[..., DialectProxy]
) -> None:
    proxy = through(ignores_conditions=True)
    lifecycle = server.client()
    saver = S3Saver(**_options(server, proxy, ttl_days=30))
    with pytest.raises(ConditionalWritesUnsupportedError):
        saver.setup()
    rules = (
        lifecycle.get_bucket_lifecycle_configuration(Bucket=BUCKET).get("Rules", []) if _has_rules(lifecycle) else []
    )
    assert not [r for r in rules if saver.prefix in r.get("ID", "")]
    saver.close()


def _has_rules(client: Any) -> bool:
    try:
        client.get_bucket_lifecycle_configuration(Bucket=BUCKET)
    except Exception:  # NoSuchLifecycleConfiguration
        return False
    return True


def test_single_writer_without_conditions_passes_the_conformance_suite(
    server: LocalS3Server, through: Callable[..., DialectProxy]
) -> None:
    """require_conditional_writes=False on a server that ignores them: every condition is checked by a LIST
    first, so put_writes still merges, a create-only write still finds an existing object; no conditional header
    is sent after the probe's."""
    proxy = through(ignores_conditions=True)
    client = make_client(**client_options(server, proxy.url))
    kwargs = {"bucket": BUCKET, "client": client, "require_conditional_writes": False}
    asyncio.run(
        assert_conformance("ignored-conditions", "sync", lambda: {**kwargs, "prefix": f"providers/{uuid4().hex[:12]}"})
    )
    assert proxy.seen["stripped"] == 13  # the probe's conditional PUTs and DELETEs, and nothing since


# -- servers that refuse conditions with 501: Backblaze B2 -------------------------------------------
def test_refused_conditions_are_named_at_the_first_write(
    server: LocalS3Server, through: Callable[..., DialectProxy]
) -> None:
    proxy = through(refuses_conditions=True)
    refused = _refused_race(server, proxy, transport="boto3")
    assert refused.check == "conditional requests" and "501" in refused.answer


def test_require_conditional_writes_false_works_where_they_are_refused(
    server: LocalS3Server, through: Callable[..., DialectProxy]
) -> None:
    """The async saver (its event-loop sender) and the store on a server that answers 501 to every conditional
    request: no conditional header is sent after the probe's first batch."""
    proxy = through(refuses_conditions=True)
    client = make_client(**client_options(server, proxy.url))
    kwargs = {"bucket": BUCKET, "client": client, "require_conditional_writes": False}
    asyncio.run(assert_conformance("b2", "async", lambda: {**kwargs, "prefix": f"providers/{uuid4().hex[:12]}"}))
    refused = proxy.seen["501"]
    assert 1 <= refused <= 8  # the probe's first batch
    with S3Store(prefix=f"providers/{uuid4().hex[:12]}", **kwargs) as store:
        store.put(("users",), "u", {"v": 1})
        assert store.get(("users",), "u").value == {"v": 1}  # type: ignore[union-attr]
        store.delete(("users",), "u")
        assert store.get(("users",), "u") is None
    assert proxy.seen["501"] == refused


@pytest.mark.parametrize("dialect", ["ignores_conditions", "refuses_conditions"])
def test_the_node_cache_works_without_conditional_writes(
    server: LocalS3Server, through: Callable[..., DialectProxy], dialect: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The node cache needs no conditional writes: its entries are unconditional PUTs (the last writer wins), and
    only its sweep deletes conditionally (an entry rewritten since the sweep read it stays). On a server that
    ignores the headers (GCS's XML API, Garage) or refuses them (B2: 501) it works by default, sending none (the
    sweep checks each delete's ETag with a LIST first), with a warning; the saver there is still refused, and so is
    a cache told ``require_conditional_writes=True``."""
    proxy = through(**{dialect: True})
    options = _options(server, proxy)
    with caplog.at_level(logging.WARNING, logger="langgraph_s3_checkpoint"), S3Cache(**options) as cache:
        cache.setup()
        cache.set({(("node",), "kept"): ({"v": 1}, None), (("node",), "gone"): ({"v": 2}, -1)})
        assert cache.get([(("node",), "kept"), (("node",), "gone")]) == {(("node",), "kept"): {"v": 1}}
        swept = cache.sweep()
        assert (swept.expired, swept.deleted) == (1, 1)
        assert asyncio.run(cache.aget([(("node",), "kept")])) == {(("node",), "kept"): {"v": 1}}
        cache.clear()
        assert cache.get([(("node",), "kept")]) == {}
    assert any("node cache writes without conditional headers" in r.getMessage() for r in caplog.records)
    before = proxy.seen["stripped"] + proxy.seen["501"]
    with S3Cache(**{**options, "prefix": f"providers/{uuid4().hex[:12]}"}) as again:
        again.set({(("node",), "k"): (1, 60)})
        again.sweep(full=True)
    assert proxy.seen["stripped"] + proxy.seen["501"] == before  # the verdict is known: no conditional header sent
    with (
        S3Cache(**options, require_conditional_writes=True) as strict,
        pytest.raises(ConditionalWritesUnsupportedError),
    ):
        strict.set({(("node",), "k"): (1, None)})
    with S3Saver(**options) as saver, pytest.raises(ConditionalWritesUnsupportedError):
        saver.put(cfg("t"), empty_checkpoint(), {}, {})


# -- 409 ConditionalRequestConflict bursts: AWS -------------------------------------------------------
@pytest.mark.parametrize("transport", ["boto3", "direct"])
def test_conflict_bursts_are_retried_never_a_conflict(
    server: LocalS3Server, through: Callable[..., DialectProxy], transport: str
) -> None:
    proxy = through(conflicts=2)
    saver = S3Saver(**_options(server, proxy, transport=transport))
    graph = fence_graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": "bursts"}}
    graph.invoke({"pending": "one"}, config, durability="sync")
    assert graph.get_state(config).values["steps"] == ["one"]
    assert proxy.seen["409"] > 2 * 13  # two for each conditional request: the probe's 13, and the graph's
    outcomes, _ = _race(server, proxy, transport=transport)
    assert sum(isinstance(o, CheckpointConflictError) for o in outcomes) == 1
    saver.close()


def test_conflict_bursts_pass_the_conformance_suite(
    server: LocalS3Server, through: Callable[..., DialectProxy]
) -> None:
    proxy = through(conflicts=1)
    client = make_client(**client_options(server, proxy.url))
    asyncio.run(
        assert_conformance(
            "aws-409", "async", lambda: {"bucket": BUCKET, "client": client, "prefix": f"p/{uuid4().hex[:12]}"}
        )
    )
    assert proxy.seen["409"] > 100


def test_a_409_that_never_stops_fails_the_probe_by_name(
    server: LocalS3Server, through: Callable[..., DialectProxy]
) -> None:
    proxy = through(conflicts=1000)
    options = _options(server, proxy)
    saver = S3Saver(**options)
    with pytest.raises(ConditionalWritesUnsupportedError) as raised:
        saver.put(cfg("t"), empty_checkpoint(), {}, {})
    assert "409" in raised.value.answer and _stored(server, options["prefix"]) == []
    saver.close()


# -- one write per second per key: R2, GCS ------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "code", "transport"), [(429, "TooManyRequests", "direct"), (503, "SlowDown", "boto3")]
)
def test_a_per_key_write_limit_slows_a_fast_graph_down_without_failing_it(
    server: LocalS3Server, through: Callable[..., DialectProxy], status: int, code: str, transport: str
) -> None:
    """R2 answers 429 and GCS 503 SlowDown to a second write of one key within a second (scaled down to 0.2 s
    here): the head is rewritten at every step, so a fast graph meets it at every step, and waits instead of
    failing; two writers racing still end with one winner and one conflict."""
    proxy = through(write_interval=0.2, throttle_status=status, throttle_code=code)
    saver = S3Saver(**_options(server, proxy, transport=transport))
    graph = fence_graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": "fast"}}
    graph.invoke({"pending": "one"}, config, durability="sync")  # two heads at once: the second is throttled
    assert graph.get_state(config).values["steps"] == ["one"]
    throttled = proxy.seen[str(status)]
    assert throttled >= 1
    outcomes, _ = _race(server, proxy, transport=transport)
    assert sum(isinstance(o, CheckpointConflictError) for o in outcomes) == 1
    assert proxy.seen[str(status)] > throttled
    saver.close()


def test_throttling_beyond_the_operation_timeout_is_a_request_error(
    server: LocalS3Server, through: Callable[..., DialectProxy]
) -> None:
    """The longer budget stays within operation_timeout: then S3RequestError naming the throttling (never a
    conflict), and the thread is as it was."""
    proxy = through()
    saver = S3Saver(**_options(server, proxy, operation_timeout=3, max_attempts=2))
    base = saver.put(cfg("t"), empty_checkpoint(), {"source": "loop", "step": 0, "parents": {}}, {})
    proxy.dialect = Dialect(write_interval=3600)  # from now on: one write per key per hour
    with pytest.raises(S3RequestError, match="TooManyRequests") as raised:
        saver.put(base, empty_checkpoint(), {"source": "loop", "step": 1, "parents": {}}, {})
    assert not isinstance(raised.value, CheckpointConflictError) and proxy.seen["429"] >= 2
    assert saver.get_tuple(cfg("t")).config == base  # type: ignore[union-attr]
    saver.close()


# -- If-Match on a missing key creates it: MinIO before August 2025 -----------------------------------
def test_if_match_creating_a_missing_key_is_refused_at_first_use(
    server: LocalS3Server, through: Callable[..., DialectProxy]
) -> None:
    proxy = through(if_match_creates=True)
    assert _refused_race(server, proxy).check == "If-Match on a missing key"
    options = _options(server, proxy)
    saver = S3Saver(**options)
    with pytest.raises(ConditionalWritesUnsupportedError) as raised:
        saver.setup()
    assert raised.value.check == "If-Match on a missing key" and proxy.seen["created on a missing If-Match"] == 1
    assert "the object was created" in raised.value.answer
    with pytest.raises(ConditionalWritesUnsupportedError):
        saver.put(cfg("t"), empty_checkpoint(), {}, {})
    assert _stored(server, options["prefix"]) == []
    saver.close()


# -- flexible checksums rejected, Content-MD5 required: B2, older MinIO, GCS -----------------------------
def test_the_savers_own_client_sends_what_strict_servers_accept(
    server: LocalS3Server, through: Callable[..., DialectProxy], caplog: pytest.LogCaptureFixture
) -> None:
    """The client the saver makes sends checksums only where S3 requires them (Content-MD5 on DeleteObjects).
    Here transport auto goes through boto3 for everything (a tracing hook on the client), and says why, once."""
    proxy = through(strict_integrity=True)
    client = make_client(**client_options(server, proxy.url))
    client.meta.events.register("before-send.s3", _tracing_hook, unique_id="a-tracing-hook")
    kwargs = {"bucket": BUCKET, "client": client}
    with caplog.at_level(logging.WARNING, logger="langgraph_s3_checkpoint"):
        asyncio.run(assert_conformance("strict", "sync", lambda: {**kwargs, "prefix": f"providers/{uuid4().hex[:12]}"}))
    assert proxy.seen["rejected checksum"] == 0 and proxy.seen["rejected no Content-MD5"] == 0
    explained = [r.getMessage() for r in caplog.records if "through boto3" in r.getMessage()]
    assert len(explained) == 1 and "_tracing_hook" in explained[0], explained


def _tracing_hook(**_: Any) -> None:
    """What an instrumentation registers on a client (it only looks)."""


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")  # the proxy's own certificate
def test_botocores_default_checksums_are_what_strict_servers_reject(
    server: LocalS3Server, through: Callable[..., DialectProxy]
) -> None:
    """The dialect is real, over https as providers serve: with request_checksum_calculation='when_supported'
    (botocore's default) boto3 sends PutObject aws-chunked with a CRC32 trailer and the direct transport a CRC32
    header (it does what the client's setting says), and the server refuses both; with the saver's default both
    transports get through, and two writers still race to one winner."""
    proxy = through(strict_integrity=True, tls=True)
    for transport in ("boto3", "direct"):
        options = _options(server, proxy, transport=transport, verify=False)
        refused = S3Saver(**options, request_checksum_calculation="when_supported")
        with contextlib.closing(refused), pytest.raises(S3RequestError, match="InvalidArgument"):
            refused.put(cfg("t"), empty_checkpoint(), {}, {})
        with S3Saver(**options) as saver:
            stored = saver.put(cfg("t"), empty_checkpoint(), {}, {})
            assert saver.get_tuple(cfg("t")).config == stored  # type: ignore[union-attr]
            saver.delete_thread("t")  # DeleteObjects, with Content-MD5
            assert saver.get_tuple(cfg("t")) is None
    outcomes, _ = _race(server, proxy, verify=False)
    assert sum(isinstance(o, CheckpointConflictError) for o in outcomes) == 1
    assert proxy.seen["rejected aws-chunked"] >= 1 and proxy.seen["rejected checksum"] >= 1
    assert proxy.seen["rejected no Content-MD5"] == 0


# -- lifecycle tag filters dropped: Garage --------------------------------------------------------------
def test_ttl_days_is_refused_and_the_rule_removed_when_the_tag_filter_does_not_survive(
    server: LocalS3Server, through: Callable[..., DialectProxy]
) -> None:
    proxy = through(drops_lifecycle_tags=True)
    direct = server.client()
    other = {"ID": "someone-elses", "Status": "Enabled", "Filter": {"Prefix": "elsewhere/"}, "Expiration": {"Days": 9}}
    direct.put_bucket_lifecycle_configuration(Bucket=BUCKET, LifecycleConfiguration={"Rules": [other]})
    saver = S3Saver(**_options(server, proxy, ttl_days=30))
    with pytest.raises(InvalidConfigError, match="ttl_days=30") as raised:
        saver.setup()
    assert "Filter" in str(raised.value) and "expire_threads" in str(raised.value)
    rules = direct.get_bucket_lifecycle_configuration(Bucket=BUCKET)["Rules"]
    assert [r["ID"] for r in rules] == ["someone-elses"]  # ours removed, the other kept
    assert proxy.seen["lifecycle tags dropped"] >= 1
    saver.close()


# -- Tigris: conditions checked only with X-Tigris-Consistent: true --------------------------------------
@pytest.mark.parametrize("transport", ["boto3", "direct"])
def test_extra_headers_reach_every_request_of_both_transports(
    server: LocalS3Server, through: Callable[..., DialectProxy], transport: str
) -> None:
    proxy = through(consistent_header="X-Tigris-Consistent")
    _refused_race(server, proxy, transport=transport)  # without the header: refused, never a fork
    seen = proxy.seen["without consistent header"]
    headers = {"X-Tigris-Consistent": "true"}
    outcomes, prefix = _race(server, proxy, transport=transport, extra_headers=headers)
    assert sum(isinstance(o, CheckpointConflictError) for o in outcomes) == 1
    saver = S3Saver(**_options(server, proxy, prefix=prefix, transport=transport, extra_headers=headers))
    saver.delete_thread("race")  # DeleteObjects, through boto3 whatever the transport
    assert proxy.seen["without consistent header"] == seen and _stored(server, prefix) == []
    saver.close()


# -- the retry budget, without a server ---------------------------------------------------------------
@pytest.mark.memory
def test_throttling_gets_more_attempts_while_its_waits_fit_in_the_time_budget() -> None:
    clock = [0.0]
    retries = Retries(3, 60.0, clock=lambda: clock[0])
    waits = []
    while (wait := retries.wait_after(Kind.THROTTLED)) is not None:
        waits.append(wait)
        clock[0] += wait + 0.01  # the wait, and an answer
    assert len(waits) > 3 and clock[0] <= 60.0 + 0.01 * len(waits)
    assert all(wait <= MAX_BACKOFF for wait in waits)
    transient = Retries(3, 60.0, clock=lambda: 0.0)
    assert [transient.wait_after(Kind.TRANSIENT) is not None for _ in range(3)] == [True, True, False]
    assert Retries(3, 60.0).wait_after(None) is None  # not worth another attempt (a 403, a 400)


@pytest.mark.memory
def test_a_conflict_is_sent_again_a_bounded_number_of_times() -> None:
    retries = Retries(3, 60.0, clock=lambda: 0.0)
    attempts = 1
    while retries.wait_after(Kind.CONFLICT) is not None:
        attempts += 1
    assert attempts == CONFLICT_ATTEMPTS
    over_time = Retries(3, 1.0, clock=iter([0.0, 5.0, 5.0, 5.0]).__next__)
    assert [over_time.wait_after(Kind.CONFLICT) is not None for _ in range(3)] == [True, True, False]


@pytest.mark.memory
def test_botocores_attempts_count_toward_the_budget() -> None:
    """The boto3 path: botocore made its own attempts (3 for a throttled call) before the saver asks."""
    retries = Retries(3, 0.0, clock=lambda: 0.0)
    assert retries.wait_after(Kind.THROTTLED, attempts=3) is None  # out of time and of the ordinary attempts


@pytest.mark.memory
@pytest.mark.parametrize(
    ("status", "code", "kind"),
    [
        (409, "ConditionalRequestConflict", Kind.CONFLICT),
        (409, "OperationAborted", None),
        (429, "TooManyRequests", Kind.THROTTLED),
        (503, "SlowDown", Kind.THROTTLED),
        (503, "ServiceUnavailable", Kind.TRANSIENT),
        (500, "InternalError", Kind.TRANSIENT),
        (501, "NotImplemented", None),
        (412, "PreconditionFailed", None),
    ],
)
def test_what_each_answer_is_for_the_retry_budget(status: int, code: str, kind: Kind | None) -> None:
    assert kind_of(status, code) is kind


# -- what the direct transport does with an answer, without a server ---------------------------------------
def _direct(**config: Any) -> DirectTransport:
    client = boto3.session.Session().client(
        "s3",
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        aws_access_key_id="AKIA",
        aws_secret_access_key="secret",
        config=Config(s3={"addressing_style": "path"}, **config),
    )
    return DirectTransport(client, "agents", extra_headers={"X-Tigris-Consistent": "true"})


def _answered(direct: DirectTransport, request: Any, *answers: Any) -> Any:
    """Run one request's conversation with canned answers; returns its reply and the exchanges sent."""
    steps = direct.exchanges(request)
    sent = [next(steps)]
    for answer in answers:
        try:
            step = steps.send(answer)
            while not isinstance(step, Exchange):  # a backoff: no sleeping here
                step = steps.send(None)
            sent.append(step)
        except StopIteration as done:
            return done.value, sent
    raise AssertionError("the conversation did not end")


@pytest.mark.memory
def test_a_409_conflict_is_sent_again_and_a_501_to_a_condition_is_unsupported() -> None:
    direct = _direct()
    put = Put("k", b"v", mode=CREATE)
    conflict = (409, {"x-amz-request-id": "1"}, b"<Error><Code>ConditionalRequestConflict</Code></Error>")
    reply, sent = _answered(direct, put, conflict, conflict, (200, {"etag": '"e"'}, b""))
    assert isinstance(reply, Written) and len(sent) == 3 and sent[0].body == sent[2].body
    assert all(exchange.headers["x-tigris-consistent"] == "true" for exchange in sent)  # extra headers, signed
    assert all("x-tigris-consistent" in exchange.headers["authorization"] for exchange in sent)
    refused = (501, {"x-amz-request-id": "1"}, b"<Error><Code>NotImplemented</Code></Error>")
    with pytest.raises(ConditionalWritesUnsupportedError, match="501"):
        _answered(direct, put, refused)
    with pytest.raises(S3RequestError, match="501") as raised:
        _answered(direct, Put("k", b"v"), refused)  # not a conditional request: an ordinary failure
    assert not isinstance(raised.value, ConditionalWritesUnsupportedError)
    with pytest.raises(ConditionalRequestConflictError):
        _answered(direct, put, *[conflict] * CONFLICT_ATTEMPTS)
    direct.close()


@pytest.mark.memory
@pytest.mark.parametrize(("encoding", "listed"), [("<EncodingType>url</EncodingType>", "a b/c+d"), ("", "a+b/c%2Bd")])
def test_listed_keys_are_decoded_only_when_the_server_says_it_encoded_them(encoding: str, listed: str) -> None:
    direct = _direct()
    body = (
        f"<ListBucketResult>{encoding}<IsTruncated>false</IsTruncated><Contents><Key>a+b/c%2Bd</Key>"
        '<LastModified>2026-12-01T00:00:00.000Z</LastModified><ETag>"e"</ETag><Size>1</Size></Contents>'
        "</ListBucketResult>"
    ).encode()
    page, _ = _answered(direct, ListKeys("a"), (200, {"x-amz-request-id": "1"}, body))
    assert page.keys == [listed]
    direct.close()


@pytest.mark.memory
def test_the_direct_transport_sends_the_checksums_the_clients_setting_asks_for() -> None:
    """botocore's when_supported: a CRC32 on PUT, checksum mode on GET (and a body that does not match the
    checksum it came with is a failed attempt); when_required, as the saver's own clients: neither."""
    checked = _direct(request_checksum_calculation="when_supported", response_checksum_validation="when_supported")
    put = next(checked.exchanges(Put("k", b"hello")))
    assert isinstance(put, Exchange)
    assert put.headers["x-amz-checksum-crc32"] == "NhCmhg==" and put.headers["x-amz-sdk-checksum-algorithm"] == "CRC32"
    good = (200, {"etag": '"e"', "x-amz-checksum-crc32": "NhCmhg=="}, b"hello")
    damaged = (200, {"etag": '"e"', "x-amz-checksum-crc32": "NhCmhg=="}, b"hellO")
    reply, sent = _answered(checked, Get("k"), damaged, good)
    assert reply.body == b"hello" and len(sent) == 2 and sent[0].headers["x-amz-checksum-mode"] == "ENABLED"
    plain = _direct(request_checksum_calculation="when_required", response_checksum_validation="when_required")
    for request in (Put("k", b"hello"), Get("k")):
        sent = next(plain.exchanges(request))
        assert isinstance(sent, Exchange) and not any("checksum" in name for name in sent.headers)
    checked.close()
    plain.close()


# -- configuration -------------------------------------------------------------------------------------
@pytest.mark.memory
def test_aws_region_alone_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    assert make_client(aws_access_key_id="a", aws_secret_access_key="b").meta.region_name == "eu-west-3"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")  # AWS_REGION wins, as in the AWS CLI and other SDKs
    assert make_client(aws_access_key_id="a", aws_secret_access_key="b").meta.region_name == "eu-west-3"
    assert (
        make_client(region_name="ap-south-1", aws_access_key_id="a", aws_secret_access_key="b").meta.region_name
        == "ap-south-1"
    )


@pytest.mark.memory
def test_the_clients_the_saver_makes_send_checksums_only_where_required() -> None:
    config = make_client(
        endpoint_url="http://127.0.0.1:9", aws_access_key_id="a", aws_secret_access_key="b"
    ).meta.config
    assert (config.request_checksum_calculation, config.response_checksum_validation) == ("when_required",) * 2
    with S3Saver.from_conn_string(
        "s3://agents/p?request_checksum_calculation=when_supported", endpoint_url="http://127.0.0.1:9"
    ) as saver:
        assert saver.client.meta.config.request_checksum_calculation == "when_supported"
    with pytest.raises(InvalidConfigError, match="client"):
        S3Saver(
            bucket="agents",
            client=make_client(endpoint_url="http://127.0.0.1:9"),
            request_checksum_calculation="when_supported",
        )


@pytest.mark.memory
@pytest.mark.parametrize("kind", [S3Saver, S3Store])
@pytest.mark.parametrize(
    "name", ["my bucket", "agents/prod", "-agents", "agents.", "a..b", "192.168.1.1", "x" * 256, "agents?"]
)
def test_an_invalid_bucket_name_is_refused_at_construction(kind: Any, name: str) -> None:
    with pytest.raises(InvalidConfigError, match="not a valid S3 bucket name") as raised:
        kind(bucket=name, endpoint_url="http://127.0.0.1:9")
    assert "letters, digits" in str(raised.value)


@pytest.mark.memory
@pytest.mark.parametrize(
    ("headers", "problem"),
    [
        ({"X Bad": "1"}, "not an HTTP header name"),
        ({"X-Ok": "two\r\nlines"}, "one line"),
        ({"If-Match": "*"}, "set by the saver"),
        ({"x-amz-checksum-crc32": "x"}, "set by the saver"),
        ("X-Tigris-Consistent", "Name:value"),
    ],
)
def test_extra_headers_are_checked_at_construction(headers: Any, problem: str) -> None:
    with pytest.raises(InvalidConfigError, match=problem):
        S3Saver(bucket="agents", endpoint_url="http://127.0.0.1:9", extra_headers=headers)


@pytest.mark.memory
def test_extra_headers_in_the_location_url() -> None:
    _, _, options = parse_url("s3://agents/p?extra_headers=X-Tigris-Consistent:true,X-Other:1")
    assert options["extra_headers"] == (("X-Tigris-Consistent", "true"), ("X-Other", "1"))
