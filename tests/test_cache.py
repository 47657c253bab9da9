"""S3Cache, LangGraph's node cache on the bucket: semantics equal to InMemoryCache's (a randomized differential
test), expiry by the server's clock, request counts, concurrent writers, damaged entries, the isolation from
saver and store, the CLI, and a second process served what the first computed. Real servers (SeaweedFS and
moto) unless a test needs to move the server's clock (``MemoryBucket``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import operator
import random
import threading
import time
import types
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, TypedDict

import langgraph.cache.memory
import pytest
from helpers import RequestCounter, cli_env, run_cli
from hypothesis import given
from hypothesis import strategies as st
from langgraph.cache.memory import InMemoryCache
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.graph import START, StateGraph
from langgraph.types import CachePolicy
from workers.common import run, worker_env

from langgraph_s3_checkpoint import (
    InvalidConfigError,
    S3Cache,
    S3Saver,
    S3Store,
    SaverMisuseError,
    SerializationError,
    cli,
)
from langgraph_s3_checkpoint._protocol import cache_plans as cache_module
from langgraph_s3_checkpoint._protocol import operator_plans
from langgraph_s3_checkpoint._protocol.codec import MAGIC
from langgraph_s3_checkpoint._protocol.keys import is_namespace_segment, namespace_of_segment, namespace_segment
from langgraph_s3_checkpoint._protocol.requests import Put, StoredObject
from langgraph_s3_checkpoint.cache import CacheLayout, age_of
from langgraph_s3_checkpoint.gc import gc
from langgraph_s3_checkpoint.local import LocalS3Server
from langgraph_s3_checkpoint.memory import MemoryBucket

ODD_STRINGS = ["", "k", "K", "a/b", "..", ".", "a.b", "%41", "~", "~~", "ü", "\ud800", "x" * 250, "=2E", " "]
ODD_NAMESPACES: list[tuple[str, ...]] = [
    (),
    ("",),
    ("", ""),
    ("a",),
    ("a", "b"),
    ("a.b",),
    ("a", "b.c"),
    ("__pregel_ns_writes", "app.nodes:search", "search"),
    ("ü", "\ud800"),
    ("L" * 300,),
    ("l" * 100, "m" * 100),
    ("threads",),
    ("store", "ns"),
]


@pytest.fixture
def cache(s3_server: LocalS3Server, bucket: str, prefix: str) -> Iterator[S3Cache[Any]]:
    with S3Cache(bucket=bucket, prefix=prefix, client=s3_server.client()) as opened:
        yield opened


def _keys_under(client: Any, bucket: str, prefix: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")
    return sorted(o["Key"] for page in pages for o in page.get("Contents", ()))


class Clock:
    """A clock a test moves: whole quarter seconds from a whole second, so every difference is exact."""

    def __init__(self) -> None:
        self.at = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


def _in_memory_cache_on(clock: Callable[[], datetime], monkeypatch: pytest.MonkeyPatch) -> InMemoryCache[Any]:
    """InMemoryCache reading ``clock`` (it calls ``datetime.datetime.now``)."""
    shim = types.SimpleNamespace(
        datetime=types.SimpleNamespace(now=lambda tz=None: clock()), timedelta=timedelta, timezone=timezone
    )
    monkeypatch.setattr(langgraph.cache.memory, "datetime", shim)
    return InMemoryCache()


# ------------------------------------------------------------------------------------------------
# Semantics
# ------------------------------------------------------------------------------------------------
def test_namespaces_and_keys_of_any_string(cache: S3Cache[Any]) -> None:
    pairs = {(ns, key): (f"{i}:{j}", None) for i, ns in enumerate(ODD_NAMESPACES) for j, key in enumerate(ODD_STRINGS)}
    cache.set(pairs)
    assert cache.get(list(pairs)) == {full: value for full, (value, _) in pairs.items()}
    # namespaces differing only where an escape could confuse them are distinct folders
    folders = {CacheLayout().folder(ns) for ns in ODD_NAMESPACES}
    assert len(folders) == len(ODD_NAMESPACES)


LABELS = st.lists(st.text(st.characters(blacklist_categories=()), max_size=120), max_size=4)


@pytest.mark.memory
@given(LABELS, LABELS)
def test_namespace_segments_are_one_to_one(a: list[str], b: list[str]) -> None:
    """Any two namespaces (empty labels, dots, lone surrogates, long ones digested) get distinct folders, each of
    which the cache's readers take for its own, and a verbatim one reads back as its namespace."""
    first, second = namespace_segment(a), namespace_segment(b)
    assert is_namespace_segment(first) and "/" not in first and ".." not in first
    assert (first == second) == (a == b)
    assert namespace_of_segment(first) in (None, tuple(a))


def test_clear_clears_the_namespaces_it_names_and_nothing_else(cache: S3Cache[Any]) -> None:
    namespaces = [("a",), ("a", "b"), ("a.b",), ("ab",), ("",), ()]
    cache.set({(ns, "k"): (list(ns), None) for ns in namespaces})
    cache.clear([("a",), ("missing",)])
    left = cache.get([(ns, "k") for ns in namespaces])
    assert sorted(left) == sorted((ns, "k") for ns in namespaces if ns != ("a",))
    cache.clear([()])
    assert ((), "k") not in cache.get([((), "k")]) and (("",), "k") in cache.get([(("",), "k")])
    cache.clear([])  # nothing named: nothing cleared
    assert len(cache.get([(ns, "k") for ns in namespaces])) == 4
    cache.clear()
    assert cache.get([(ns, "k") for ns in namespaces]) == {}


async def test_async_methods_are_the_same_plans(cache: S3Cache[Any]) -> None:
    await cache.aset({(("n",), "k"): ({"v": [1, 2]}, None), (("n",), "gone"): (1, 0)})
    assert await cache.aget([(("n",), "k"), (("n",), "gone"), (("n",), "never")]) == {(("n",), "k"): {"v": [1, 2]}}
    await cache.aclear([("n",)])
    assert await cache.aget([(("n",), "k")]) == {}


def test_a_ttl_of_zero_or_less_expires_at_once_and_none_never(cache: S3Cache[Any]) -> None:
    cache.set({(("t",), "zero"): (1, 0), (("t",), "negative"): (2, -5), (("t",), "none"): (3, None)})
    assert cache.get([(("t",), "zero"), (("t",), "negative"), (("t",), "none")]) == {(("t",), "none"): 3}


# ------------------------------------------------------------------------------------------------
# Differential test against InMemoryCache
# ------------------------------------------------------------------------------------------------
POOL_NAMESPACES = [(), ("",), ("a",), ("a", "b"), ("a.b",), ("__pregel_ns_writes", "m.f", "f"), ("ü", "x" * 200)]
POOL_KEYS = ["", "k", "K", "a/b", "..", "ü", "q" * 250]
POOL_VALUES: list[Any] = [None, 0, "v", [1, "two"], {"nested": {"x": [1.5]}}, "z" * 5000]


class Driver:
    """Runs one operation on both caches and compares what they return."""

    def __init__(self, ours: Sequence[S3Cache[Any]], reference: InMemoryCache[Any], flavour: str) -> None:
        self.ours = ours
        self.reference = reference
        self.flavour = flavour

    def call(self, cache: S3Cache[Any], method: str, *args: Any) -> Any:
        if self.flavour == "async":
            return asyncio.run(getattr(cache, f"a{method}")(*args))
        return getattr(cache, method)(*args)

    def step(self, rng: random.Random, ttls: Sequence[float | None]) -> None:
        cache = rng.choice(self.ours)  # several savers: several workers on one bucket
        full_keys = [(ns, key) for ns in POOL_NAMESPACES for key in POOL_KEYS]
        roll = rng.random()
        if roll < 0.45:
            pairs = {k: (rng.choice(POOL_VALUES), rng.choice(ttls)) for k in rng.sample(full_keys, rng.randint(1, 6))}
            self.reference.set(pairs)  # type: ignore[arg-type]  # InMemoryCache takes float TTLs too
            self.call(cache, "set", pairs)
        elif roll < 0.9:
            wanted = rng.sample(full_keys, rng.randint(1, 10))
            wanted += rng.choices(wanted, k=rng.randint(0, 2))  # a key asked twice
            assert self.call(cache, "get", wanted) == self.reference.get(wanted), wanted
        else:
            namespaces = None if rng.random() < 0.2 else rng.sample([*POOL_NAMESPACES, ("absent",)], 2)
            self.reference.clear(namespaces)
            self.call(cache, "clear", namespaces)

    def final_check(self) -> None:
        everything = [(ns, key) for ns in POOL_NAMESPACES for key in POOL_KEYS]
        for cache in self.ours:
            assert self.call(cache, "get", everything) == self.reference.get(everything)


@pytest.mark.memory
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_differential_against_in_memory_cache_with_a_clock_the_test_moves(
    flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Server and clients on one clock the test moves (a real server's clock cannot be moved): the entries'
    TTLs run out exactly when InMemoryCache's do, boundaries included."""
    clock = Clock()
    bucket = MemoryBucket(now=clock)
    workers = [S3Cache(bucket="b", prefix="p", client=bucket, now=clock) for _ in range(2)]
    driver = Driver(workers, _in_memory_cache_on(clock, monkeypatch), flavour)
    rng = random.Random(29)
    with contextlib.ExitStack() as stack:
        for worker in workers:
            stack.enter_context(worker)
        for _ in range(400):
            driver.step(rng, ttls=[None, None, 0, -1, 0.5, 1, 2, 5])
            clock.advance(rng.choice([0, 0, 0.25, 0.5, 1, 2]))
        driver.final_check()


def test_differential_against_in_memory_cache_on_the_server_with_skewed_clocks(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """Two workers whose clocks are off by hours (and change at every step) agree with InMemoryCache on the
    true clock: expiry goes by the server's dates. TTLs are those a second of date resolution cannot change."""
    offsets = [timedelta(0), timedelta(0)]

    def skewed(i: int) -> Callable[[], datetime]:
        return lambda: datetime.now(timezone.utc) + offsets[i]

    workers = [
        S3Cache(bucket=bucket, prefix=prefix, client=s3_server.client(), now=skewed(i)) for i in range(len(offsets))
    ]
    driver = Driver(workers, InMemoryCache(), "sync")
    rng = random.Random(2929)
    with contextlib.ExitStack() as stack:
        for worker in workers:
            stack.enter_context(worker)
        for _ in range(150):
            offsets[:] = [timedelta(hours=rng.uniform(-3, 3)) for _ in offsets]
            driver.step(rng, ttls=[None, 0, -1, 3600])
        driver.final_check()


# ------------------------------------------------------------------------------------------------
# Expiry by the server's clock
# ------------------------------------------------------------------------------------------------
@pytest.mark.memory
def test_expiry_follows_the_servers_clock_whatever_the_clients_clocks_say() -> None:
    server_clock = Clock()
    ahead, behind = Clock(), Clock()
    ahead.advance(3600)
    behind.advance(-3600)
    bucket = MemoryBucket(now=server_clock)
    writer_ahead = S3Cache(bucket="b", client=bucket, now=ahead)
    writer_behind = S3Cache(bucket="b", client=bucket, now=behind)
    reader = S3Cache(bucket="b", client=bucket, now=server_clock)
    writer_ahead.set({(("n",), "ahead"): ("a", 60)})
    writer_behind.set({(("n",), "behind"): ("b", 60)})
    keys = [(("n",), "ahead"), (("n",), "behind")]
    # By the clients' clocks "behind" is an hour old and "ahead" an hour from being written; both are new.
    assert reader.get(keys) == {(("n",), "ahead"): "a", (("n",), "behind"): "b"}
    # Skewed clocks can tip the verdict within a second of the TTL (the server's dates have whole seconds), never
    # further: 58.75 s by the server's clock is a hit for everyone, 61 s a miss.
    for clock in (server_clock, ahead, behind):
        clock.advance(58.75)
    assert len(reader.get(keys)) == 2
    for clock in (server_clock, ahead, behind):
        clock.advance(2.25)
    assert reader.get(keys) == {}
    assert writer_ahead.get(keys) == {} and writer_behind.get(keys) == {}


@pytest.mark.memory
def test_age_is_the_servers_within_its_one_second_dates() -> None:
    written = datetime(2026, 1, 1, tzinfo=timezone.utc)
    dated = StoredObject(b"", '"e"', modified=written, served=written + timedelta(seconds=10))
    now = written + timedelta(seconds=10.4)
    assert age_of(dated, written.timestamp(), now) == pytest.approx(10.4)  # clients agree with the server: theirs
    assert age_of(dated, written.timestamp() - 7200, now) == 11  # a writer two hours behind: at most a second off
    assert age_of(dated, written.timestamp() + 7200, now) == 9  # two hours ahead: likewise
    fresh = StoredObject(b"", '"e"', modified=written, served=written)
    assert age_of(fresh, written.timestamp() + 7200, written) == 0  # never younger than written
    undated = StoredObject(b"", '"e"')
    assert age_of(undated, written.timestamp(), now) == pytest.approx(10.4)  # no dates: the clients' clocks


def test_real_servers_date_entries_for_expiry(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    """The dates come from the real replies (both transports read ``Last-Modified`` and ``Date``): a writer an
    hour behind or ahead does not expire an entry early nor keep it late."""

    def cache_at(offset: timedelta) -> S3Cache[Any]:
        return S3Cache(
            bucket=bucket, prefix=prefix, client=s3_server.client(), now=lambda: datetime.now(timezone.utc) + offset
        )

    with cache_at(timedelta(hours=-1)) as behind, cache_at(timedelta(hours=1)) as ahead, cache_at(timedelta(0)) as on:
        behind.set({(("n",), "behind"): ("b", 60)})
        ahead.set({(("n",), "ahead"): ("a", 1)})
        assert on.get([(("n",), "behind")]) == {(("n",), "behind"): "b"}  # the clients' clocks say an hour old
        time.sleep(2.2)  # over a second more than the TTL, as the server's whole-second dates can tell
        assert on.get([(("n",), "ahead")]) == {}  # the clients' clocks say it was not written yet


# ------------------------------------------------------------------------------------------------
# What it costs
# ------------------------------------------------------------------------------------------------
class RoundTrips:
    """Counts the batches a cache sends: each is one round trip of parallel requests."""

    def __init__(self, cache: S3Cache[Any], monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        io = cache.bucket_io
        batch, abatch = io._batch, io._abatch

        def counted(requests: Any, started: Any) -> Any:
            self.count += 1
            return batch(requests, started)

        async def acounted(requests: Any, started: Any) -> Any:
            self.count += 1
            return await abatch(requests, started)

        monkeypatch.setattr(io, "_batch", counted)
        monkeypatch.setattr(io, "_abatch", acounted)

    def take(self) -> int:
        count, self.count = self.count, 0
        return count


@pytest.fixture
def counted(
    s3_server: LocalS3Server,
    bucket: str,
    prefix: str,
    count_requests: Callable[[Any], RequestCounter],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[S3Cache[Any], RequestCounter, RoundTrips]]:
    client = s3_server.client()
    with S3Cache(bucket=bucket, prefix=prefix, client=client) as opened:
        yield opened, count_requests(client), RoundTrips(opened, monkeypatch)


def test_requests_get_set_clear(counted: tuple[S3Cache[Any], RequestCounter, RoundTrips]) -> None:
    cache, counter, trips = counted
    superstep = [(("__pregel_ns_writes", f"m.node{i}", f"node{i}"), f"{i:032x}") for i in range(8)]
    cache.set({full: ([("out", i)], None) for i, full in enumerate(superstep)})
    assert (counter.snapshot(), trips.take()) == ({"PutObject": 8}, 1)
    counter.reset()
    assert len(cache.get([*superstep, (("absent",), "k")])) == 8
    assert (counter.snapshot(), trips.take()) == ({"GetObject": 9}, 1)  # a miss costs its GET, never a LIST
    counter.reset()
    cache.clear([superstep[0][0], superstep[1][0], ("absent",)])  # their LISTs together, then one delete of both
    assert (counter.snapshot(), trips.take()) == ({"ListObjectsV2": 3, "DeleteObjects": 1}, 2)
    counter.reset()
    cache.clear()
    assert (counter.snapshot(), trips.take()) == ({"ListObjectsV2": 1, "DeleteObjects": 1}, 2)
    counter.reset()
    cache.clear()  # nothing left: the LIST only
    assert (counter.snapshot(), trips.take()) == ({"ListObjectsV2": 1}, 1)


async def test_requests_async(counted: tuple[S3Cache[Any], RequestCounter, RoundTrips]) -> None:
    cache, counter, trips = counted
    keys = [(("n",), str(i)) for i in range(5)]
    await cache.aset({k: (1, None) for k in keys})
    assert (counter.snapshot(), trips.take()) == ({"PutObject": 5}, 1)
    counter.reset()
    assert len(await cache.aget(keys)) == 5
    assert (counter.snapshot(), trips.take()) == ({"GetObject": 5}, 1)


def test_requests_sweep(counted: tuple[S3Cache[Any], RequestCounter, RoundTrips]) -> None:
    """A cache never set up (written by a release before expiry markers, say) is read in full by its first sweep,
    once: it deletes what expired and files the rest; the sweeps after it read what came due."""
    cache, counter, trips = counted
    cache.set({(("n",), f"old{i}"): (i, -1) for i in range(3)})
    cache.set({(("n",), f"new{i}"): (i, 3600) for i in range(2)})
    cache.set({(("m",), "forever"): (0, None)})
    counter.reset()
    trips.take()
    report = cache.sweep(dry_run=True)
    assert (report.scanned, report.expired, report.deleted) == (6, 3, 0)
    # cache-ttl-filed (missing), then a LIST and a GET of every entry; a dry run writes nothing
    assert (counter.snapshot(), trips.take()) == ({"GetObject": 1 + 6, "ListObjectsV2": 1}, 3)
    counter.reset()
    report = cache.sweep()
    assert (report.scanned, report.expired, report.deleted) == (6, 3, 3)
    # The same reads; the 3 expired deleted If-Match, the 2 live ones with a TTL filed (together); then the markers
    # listed from the first, the 3 due ones read and their entries (gone), and removed; cache-ttl-filed written.
    assert (counter.snapshot(), trips.take()) == (
        {"GetObject": 1 + 6 + 3 + 3, "ListObjectsV2": 2, "DeleteObject": 3, "PutObject": 2 + 1, "DeleteObjects": 1},
        9,
    )
    counter.reset()
    assert cache.sweep().scanned == 0
    assert (counter.snapshot(), trips.take()) == ({"ListObjectsV2": 1}, 1)
    assert len(cache.get([(("n",), f"new{i}") for i in range(2)] + [(("m",), "forever")])) == 3


@pytest.mark.parametrize("live", [100, 300])
def test_a_sweep_costs_what_expired_not_what_is_cached(
    s3_server: LocalS3Server, bucket: str, prefix: str, count_requests: Callable[[Any], RequestCounter], live: int
) -> None:
    """The counts are the same for 100 and for 300 live entries: with nothing expired a sweep is one LIST (the
    expiry markers, up to the minute under way); with k expired it is that LIST, a GET of each marker and of its
    entry, a conditional DELETE of each entry and one DeleteObjects of the markers."""
    client = s3_server.client()
    with S3Cache(bucket=bucket, prefix=prefix, client=client) as cache:
        cache.setup()  # an empty cache is filed at once: no sweep of it reads every entry
        counter = count_requests(client)
        cache.set({(("live",), f"k{i}"): (i, 3600) for i in range(live)})
        cache.set({(("forever",), f"k{i}"): (i, None) for i in range(20)})
        assert counter.snapshot() == {"PutObject": 2 * live + 20}, "a marker before each entry with a TTL"
        counter.reset()
        assert cache.sweep().scanned == 0
        assert counter.snapshot() == {"ListObjectsV2": 1, "PutObject": 1}, "the first records where it swept"
        counter.reset()
        assert cache.sweep().scanned == 0
        assert counter.snapshot() == {"ListObjectsV2": 1}, "nothing expired: one LIST"
        with S3Cache(bucket=bucket, prefix=prefix, client=client) as fresh:
            counter.reset()
            assert fresh.sweep().scanned == 0
            assert counter.snapshot() == {"GetObject": 1, "ListObjectsV2": 1}, "a new process reads the filed object"
        for k in (5, 15):
            cache.set({(("short",), f"{k}.{i}"): (i, -1) for i in range(k)})  # expired at once
            counter.reset()
            report = cache.sweep()
            assert (report.scanned, report.expired, report.deleted, report.unreadable) == (k, k, k, [])
            assert counter.snapshot() == {"ListObjectsV2": 1, "GetObject": 2 * k, "DeleteObject": k, "DeleteObjects": 1}
        counter.reset()
        assert cache.sweep().scanned == 0
        assert counter.snapshot() == {"ListObjectsV2": 1}
        assert len(cache.get([(("live",), f"k{i}") for i in range(live)])) == live


@pytest.mark.memory
def test_a_marker_is_written_before_its_entry_and_a_set_that_died_between_leaves_nothing() -> None:
    """Every entry with a TTL exists only after its expiry marker (so no sweep misses it); a ``set`` that died
    after its markers leaves markers naming nothing, which the sweep removes once they come due."""
    clock = Clock()
    bucket = MemoryBucket(now=clock, keep_log=True)
    with S3Cache(bucket="b", prefix="p", client=bucket, now=clock) as cache:
        cache.setup()
        cache.set({(("n",), "k"): (1, 60), (("n",), "forever"): (2, None)})
        assert bucket.log is not None
        puts = [request.key for request, _ in bucket.log if isinstance(request, Put) and "/_setup/" not in request.key]
        assert puts[0] == "p/cache-ttl-filed"  # setup filed the empty cache
        assert puts[1].startswith("p/cache-ttl/") and sorted(puts[2:]) == ["p/cache/n/forever", "p/cache/n/k"]

        died = cache.plans.set({(("n",), "died"): (3, 30)})
        cache.bucket_io.run(_one_batch(next(died)))  # its marker, then nothing more
        died.close()
        clock.advance(61)
        report = cache.sweep()
        assert (report.scanned, report.expired, report.deleted) == (1, 1, 1)  # k; the marker of "died" named nothing
        assert bucket.keys("p/cache-ttl/") == [] and bucket.keys("p/cache/") == ["p/cache/n/forever"]


def _set_as_an_older_release(cache: S3Cache[Any], pairs: dict[Any, tuple[Any, float | None]]) -> None:
    """Entries as a release before expiry markers wrote them: the same objects, no marker."""
    core = cache.plans
    written = core.now().timestamp()
    for (namespace, key), (value, ttl) in pairs.items():
        body = core.codec.encode(namespace, key, value, ttl, written)
        cache.bucket_io.execute(Put(core.layout.entry(namespace, key), body))


def test_entries_of_an_older_release_are_swept(cache: S3Cache[Any]) -> None:
    """Entries without markers: the first sweep of a cache that was never filed reads them all; those written by an
    older release after that are found by ``full=True`` (and only by it: a sweep reads what its markers name)."""
    _set_as_an_older_release(cache, {(("old",), f"k{i}"): (i, -1 if i < 3 else 3600) for i in range(6)})
    report = cache.sweep()
    assert (report.scanned, report.expired, report.deleted) == (6, 3, 3)
    _set_as_an_older_release(cache, {(("old",), "late"): (0, -1)})
    assert cache.sweep().scanned == 0  # filed: no marker names the late entry
    report = cache.sweep(full=True)
    assert (report.scanned, report.expired, report.deleted) == (4, 1, 1)
    assert sorted(k for _, k in cache.get([(("old",), f"k{i}") for i in range(6)] + [(("old",), "late")])) == [
        f"k{i}" for i in range(3, 6)
    ]


def test_a_damaged_entry_is_left_logged_and_does_not_stop_the_sweep(
    cache: S3Cache[Any], s3_server: LocalS3Server, bucket: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    cache.setup()
    cache.set({(("n",), f"k{i}"): (i, -1) for i in range(4)})
    damaged = cache.plans.layout.entry(("n",), "k1")
    s3_server.client().put_object(Bucket=bucket, Key=damaged, Body=b"not an entry")
    with caplog.at_level(logging.WARNING):
        report = cache.sweep()
    assert (report.scanned, report.expired, report.deleted, report.unreadable) == (4, 3, 3, [damaged])
    assert damaged in caplog.text
    assert damaged in _keys_under(s3_server.client(), bucket, prefix)  # left alone
    assert cache.sweep().scanned == 0  # looked at again a day later, not by every sweep


def test_an_entry_set_again_while_the_sweep_runs_stays(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    """Its marker came due and it expired; a ``set`` writes it again between any two round trips of the sweep.
    The new entry stays: the conditional delete names the expired version, and the new one is judged again."""
    key = (("n",), "k")
    stop = 0
    while True:
        with S3Cache(bucket=bucket, prefix=f"{prefix}/{stop}", client=s3_server.client()) as cache:
            cache.setup()
            cache.set({key: ("old", -1)})
            plan, reply, steps = cache.plans.sweep(), None, 0
            with contextlib.suppress(StopIteration):
                while True:
                    batch = plan.send(reply)
                    if steps == stop:
                        cache.set({key: ("new", 3600)})
                    reply = cache.bucket_io.run(_one_batch(batch))
                    steps += 1
            if stop == steps:
                assert cache.get([key]) == {}  # not set again: the sweep deleted the expired entry
                break
            assert cache.get([key]) == {key: "new"}, f"set again before round trip {stop} of {steps}"
            stop += 1
    assert stop >= 5  # LIST the markers, GET them, GET the entry, delete it, remove the marker, record the sweep


def _one_batch(requests: Any) -> Any:
    return (yield requests)


class Step(TypedDict, total=False):
    text: str
    answers: Annotated[list[str], operator.add]


def _fan_out_graph(cache: S3Cache[Any], runs: list[str], width: int, **compile_args: Any) -> Any:
    """``width`` cached nodes in one superstep, each answering the same input its own way."""
    builder = StateGraph(Step)
    for i in range(width):

        def node(state: Step, i: int = i) -> Step:
            runs.append(f"n{i}")
            return {"answers": [f"{i}:{state['text']}"]}

        builder.add_node(f"n{i}", node, cache_policy=CachePolicy(ttl=600))
        builder.add_edge(START, f"n{i}")
    return builder.compile(cache=cache, **compile_args)


def test_requests_of_a_graph_superstep(counted: tuple[S3Cache[Any], RequestCounter, RoundTrips]) -> None:
    """The N cached nodes of a superstep cost one round trip of N GETs, then each node that ran its expiry marker
    and, after it, its PUT (LangGraph sends these in the background, beside the next steps)."""
    cache, counter, trips = counted
    runs: list[str] = []
    graph = _fan_out_graph(cache, runs, 4)
    first = graph.invoke({"text": "q"})
    assert len(runs) == 4
    assert counter.snapshot() == {"GetObject": 4, "PutObject": 4 + 4}
    assert trips.take() == 1 + 2 * 4  # the superstep's GETs together; each node's marker, then its writes
    counter.reset()
    assert graph.invoke({"text": "q"}) == first
    assert len(runs) == 4  # served from the bucket
    assert (counter.snapshot(), trips.take()) == ({"GetObject": 4}, 1)


# ------------------------------------------------------------------------------------------------
# Concurrency and damaged entries
# ------------------------------------------------------------------------------------------------
def _big_value(worker: int, i: int) -> dict[str, Any]:
    return {"worker": worker, "i": i, "payload": f"{worker}-{i}:".encode() * 40_000}


def test_two_workers_setting_one_key_both_succeed_and_readers_see_whole_values(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """Last writer wins, as S3 replaces an object at once: every read is one worker's whole value."""
    key = (("n",), "contended")
    rounds = 12
    caches = [S3Cache(bucket=bucket, prefix=prefix, client=s3_server.client()) for _ in range(3)]
    errors: list[BaseException] = []
    seen: list[dict[str, Any]] = []
    writing = threading.Event()
    writing.set()

    def write(worker: int) -> None:
        try:
            for i in range(rounds):
                caches[worker].set({key: (_big_value(worker, i), None)})
        except BaseException as exc:
            errors.append(exc)

    def read() -> None:
        try:
            while writing.is_set():
                seen.extend(caches[2].get([key]).values())
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(w,)) for w in range(2)]
    reader = threading.Thread(target=read)
    with contextlib.ExitStack() as stack:
        for opened in caches:
            stack.enter_context(opened)
        reader.start()
        for thread in writers:
            thread.start()
        for thread in writers:
            thread.join()
        writing.clear()
        reader.join()
        assert not errors, errors
        assert seen, "the reader never saw a value"
        for value in seen:
            assert value == _big_value(value["worker"], value["i"])
        final = caches[2].get([key])[key]
        assert final["i"] == rounds - 1 and final == _big_value(final["worker"], final["i"])


def test_a_damaged_or_foreign_entry_is_a_miss_and_a_warning(
    cache: S3Cache[Any], s3_server: LocalS3Server, bucket: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = s3_server.client()
    layout = CacheLayout(prefix)
    cache.set({(("n",), "good"): ("value", None), (("n",), "other"): ("theirs", None)})
    good = client.get_object(Bucket=bucket, Key=layout.entry(("n",), "good"))["Body"].read()
    keyed = S3Cache(
        bucket=bucket, prefix=prefix, client=client, serde=EncryptedSerializer.from_pycryptodome_aes(key=b"k" * 16)
    )
    with keyed:
        keyed.set({(("n",), "encrypted"): ("secret", None)})
    bodies = {
        "not ours": b"a file someone put here",
        "truncated": good[:-3],
        "newer format": MAGIC + bytes((9, 0)) + good[6:],
        "no entry inside": cache.plans.codec.codec._frame({"something": "else"}),
    }
    for name, body in bodies.items():
        client.put_object(Bucket=bucket, Key=layout.entry(("bad",), name), Body=body)
    client.copy_object(  # another key's entry, filed under this one
        Bucket=bucket,
        Key=layout.entry(("bad",), "misfiled"),
        CopySource={"Bucket": bucket, "Key": layout.entry(("n",), "other")},
    )
    wanted = [(("bad",), name) for name in [*bodies, "misfiled"]] + [(("n",), "encrypted"), (("n",), "good")]
    with caplog.at_level(logging.WARNING, logger="langgraph_s3_checkpoint.cache"):
        assert cache.get(wanted) == {(("n",), "good"): "value"}
    warned = " ".join(record.getMessage() for record in caplog.records)
    for name in [*bodies, "misfiled", "encrypted"]:
        assert layout.entry(("bad",) if name != "encrypted" else ("n",), name) in warned, name


def test_a_graph_over_a_damaged_entry_runs_the_node_again_and_heals_it(
    cache: S3Cache[Any], s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    client = s3_server.client()
    runs: list[str] = []
    graph = _fan_out_graph(cache, runs, 1)
    expected = graph.invoke({"text": "q"})
    (entry,) = [k for k in _keys_under(client, bucket, prefix) if k.startswith(CacheLayout(prefix).root)]
    client.put_object(Bucket=bucket, Key=entry, Body=b"LGS3\x01\x00torn")
    assert graph.invoke({"text": "q"}) == expected
    assert runs == ["n0", "n0"]
    assert graph.invoke({"text": "q"}) == expected
    assert runs == ["n0", "n0"]  # the second run wrote a whole entry again


# ------------------------------------------------------------------------------------------------
# Values, errors, options
# ------------------------------------------------------------------------------------------------
def test_values_go_through_serde_and_encrypted_ones_stay_secret(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")
    with S3Cache(bucket=bucket, prefix=prefix, client=s3_server.client(), serde=serde) as cache:
        cache.set({(("n",), "k"): ({"card": "4111-1111"}, None)})
        assert cache.get([(("n",), "k")]) == {(("n",), "k"): {"card": "4111-1111"}}
    body = s3_server.client().get_object(Bucket=bucket, Key=CacheLayout(prefix).entry(("n",), "k"))["Body"].read()
    assert b"4111" not in body


def test_errors(cache: S3Cache[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SerializationError, match="cache value"):
        cache.set({(("n",), "k"): (threading.Lock(), None)})
    assert cache.get([(("n",), "k")]) == {}  # nothing was written
    monkeypatch.setattr(cache_module, "MAX_ENTRY_BYTES", 1000)
    with pytest.raises(InvalidConfigError, match="at most 1000 bytes"):
        cache.set({(("n",), "small"): ("s", None), (("n",), "big"): ("b" * 2000, None)})
    assert cache.get([(("n",), "small")]) == {}  # refused before anything was sent
    with pytest.raises(TypeError, match="tuple of strings"):
        cache.get([("abc", "k")])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="a string"):
        cache.set({(("n",), 5): (1, None)})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="seconds or None"):
        cache.set({(("n",), "k"): (1, "60")})  # type: ignore[dict-item]
    cache.close()
    with pytest.raises(SaverMisuseError, match=r"aclear\(\) was called on a cache that was closed"):
        asyncio.run(cache.aclear())


def test_options_are_the_savers(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    url = (
        f"s3://{bucket}/{prefix}?inline_threshold=10&read_cache_bytes=0&operation_timeout=5&ttl_days=3&transport=boto3"
    )
    with S3Cache.from_conn_string(url, client=s3_server.client()) as cache:
        assert (cache.prefix, cache.ttl_days, cache.bucket_io.deadline, cache.bucket_io.direct) == (prefix, 3, 5, None)
        cache.set({(("n",), "k"): (1, None)})
        tags = s3_server.client().get_object_tagging(Bucket=bucket, Key=CacheLayout(prefix).entry(("n",), "k"))
        assert tags["TagSet"] == [{"Key": "langgraph-s3-ttl", "Value": "1"}]  # for the lifecycle rule
    with pytest.raises(InvalidConfigError, match="unknown URL option 'ttl'"):
        S3Cache.from_conn_string(f"s3://{bucket}/p?ttl=3")
    with pytest.raises(InvalidConfigError, match="only apply when the cache creates the client"):
        S3Cache(bucket=bucket, client=s3_server.client(), connect_timeout=1)
    with pytest.raises(InvalidConfigError, match="too long for the node cache"):
        S3Cache(bucket=bucket, prefix="p" * 700, client=s3_server.client())


@pytest.mark.memory
def test_the_lifecycle_rule_expires_entries_with_ttl_days() -> None:
    clock = Clock()
    bucket = MemoryBucket(now=clock)
    with S3Cache(bucket="b", prefix="p", client=bucket, ttl_days=1) as cache:
        cache.setup()
        cache.set({(("n",), "k"): (1, None)})
        clock.advance(86400)
        assert bucket.apply_lifecycle() == [CacheLayout("p").entry(("n",), "k")]
        assert cache.get([(("n",), "k")]) == {}


# ------------------------------------------------------------------------------------------------
# Saver, store and cache on one prefix
# ------------------------------------------------------------------------------------------------
def test_saver_store_and_cache_share_a_prefix_without_seeing_each_other(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    client = s3_server.client()
    lookalikes = [(("threads",), "head"), (("runs",), "r"), (("store", "ns"), "k"), (("_setup",), "probe-x")]
    with (
        S3Saver(bucket=bucket, prefix=prefix, client=client) as saver,
        S3Store(bucket=bucket, prefix=prefix, client=client) as store,
        S3Cache(bucket=bucket, prefix=prefix, client=client) as cache,
    ):
        runs: list[str] = []
        graph = _fan_out_graph(cache, runs, 2, checkpointer=saver, store=store)
        graph.invoke({"text": "q"}, {"configurable": {"thread_id": "t"}})
        store.put(("memories",), "m", {"v": 1})
        cache.set({full: ("x", None) for full in lookalikes})

        report = gc(saver, grace_seconds=0)
        assert (report.total, report.foreign, report.unreadable) == (0, 0, [])
        io = saver.bucket_io
        assert [s.thread_id for s in io.iterate(operator_plans.all_thread_stats(saver.plans.layout))] == ["t"]
        assert not [
            p
            for p in io.iterate(operator_plans.verify_thread(saver.plans.layout, saver.plans.codec, "t"))
            if isinstance(p, operator_plans.Problem)
        ]
        exported = [
            e.relative for e in io.iterate(operator_plans.export_thread(saver.plans.layout, saver.plans.codec, "t"))
        ]
        assert exported and not any("cache" in key for key in exported)
        assert saver.repair_thread("t").ok
        assert store.list_namespaces() == [("memories",)]
        assert len(cache.get(lookalikes)) == 4

        # gc's seal of the thread is among them: gc seals a thread it found settled, even one too young to seal.
        outside_cache = [k for k in _keys_under(client, bucket, prefix) if not k.startswith(cache.plans.layout.root)]
        cache.clear()
        assert _keys_under(client, bucket, prefix) == outside_cache  # the cache's objects, and only them
        assert graph.get_state({"configurable": {"thread_id": "t"}}).values["answers"]
        cache.set({lookalikes[0]: ("x", None)})
        saver.delete_thread("t")
        store.delete(("memories",), "m")
        assert len(cache.get(lookalikes)) == 1


# ------------------------------------------------------------------------------------------------
# A second process
# ------------------------------------------------------------------------------------------------
def test_a_second_process_is_served_what_the_first_computed(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    env = worker_env(s3_server, bucket, prefix)
    first = run("cache_worker.py", ["what is S3?"], env)
    second = run("cache_worker.py", ["what is S3?"], env)
    other = run("cache_worker.py", ["another question"], env)
    assert first["output"] == second["output"] == {"text": "what is S3?", "answer": "WHAT IS S3?"}
    assert (first["runs"], second["runs"], other["runs"]) == (1, 0, 1)
    assert first["requests"] == {"Get": 1, "Put": 2}  # the miss, then the writes' expiry marker and the writes
    assert second["requests"] == {"Get": 1}  # served from the bucket: one GET, no LIST, nothing written


# ------------------------------------------------------------------------------------------------
# The CLI
# ------------------------------------------------------------------------------------------------
def _cli(s3_server: LocalS3Server, bucket: str, prefix: str, *args: str) -> tuple[int, str]:
    url = f"s3://{bucket}/{prefix}?endpoint_url={s3_server.endpoint_url}&region={s3_server.region}"
    done = run_cli("--url", url, *args, env=cli_env(s3_server, url))
    return done.returncode, done.stdout


def test_cli_ls_clear_and_sweep(cache: S3Cache[Any], s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    node = ("__pregel_ns_writes", "app.nodes:search", "search")
    cache.set({(node, str(i)): (i, None) for i in range(3)})
    cache.set({(("L" * 300,), "k"): (1, None), (("tmp",), "old"): (1, -1)})
    s3_server.client().put_object(Bucket=bucket, Key=f"{prefix}/cache/notes.txt", Body=b"someone's")

    def cli_json(*args: str) -> Any:
        code, out = _cli(s3_server, bucket, prefix, "--json", "cache", *args)
        assert code == 0, out
        return json.loads(out)

    listed = cli_json("ls")
    assert [(n["namespace"], n["entries"]) for n in listed["namespaces"]] == [
        (["L" * 300], 1),
        (list(node), 3),
        (["tmp"], 1),
    ]
    assert listed["foreign"] == 1
    code, text = _cli(s3_server, bucket, prefix, "cache", "ls")
    assert code == 0 and "app.nodes:search" in text and "5 entries in 3 namespace(s)" in text

    assert cli_json("sweep", "--dry-run") == {
        "ok": True,
        "dry_run": True,
        "scanned": 5,
        "expired": 1,
        "deleted": 0,
        "foreign": 1,
        "unreadable": [],
    }
    assert cli_json("sweep", "--yes")["deleted"] == 1
    assert cli_json("clear", json.dumps(list(node)), "--dry-run") == {"ok": True, "dry_run": True, "entries": 3}
    assert len(cache.get([(node, str(i)) for i in range(3)])) == 3
    assert cli_json("clear", json.dumps(list(node)), "--yes")["entries"] == 3
    assert cache.get([(node, "0")]) == {}
    assert cli_json("clear", "--yes") == {"ok": True, "dry_run": False, "entries": 1}
    assert cli_json("ls") == {"namespaces": [], "foreign": 1}  # someone's notes stay

    code, _ = _cli(s3_server, bucket, prefix, "cache", "clear", "search")
    assert code == cli.EXIT_USAGE  # a namespace is a JSON list of labels
