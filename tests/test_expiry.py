"""The store's TTL sweep reads only what came due: expiry markers (``expiry.py``).

* What it costs, on both servers: with nothing due a sweep is one LIST whatever the number of live items (100
  and 300 here: the same count at both sizes, so the cost does not grow with the store), and with k items due
  it is a LIST, 2 GETs and a conditional DELETE per item and one DeleteObjects of the markers: the same at both
  sizes again, so it grows with k, not with the items;
* that it never deletes what it must not and never loses an item it must delete, on the in-memory bucket: every
  interleaving of the sweep with a put of the same key and with a refreshing read, a lost answer of its
  conditional DELETE (404 and 412 servers; with a put of the same key landing in between), and a crash or a
  failed request at every step of a sweep over expired, refreshed, rewritten, deleted and damaged items. The
  invariant checked after each: every item with an expiry is named by a marker of a minute no later than the one
  it expires in (so the next sweep that reaches that minute judges it), and no item the sweeper's clock does not
  call expired is gone;
* the migration: items an older release wrote (no marker) are all read once by the first sweep, which deletes
  the expired ones and files the others; ``full=True`` does it again;
* foreign objects in the marker folder, damaged items and markers, long labels, clocks that are off.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any, cast

import pytest
from helpers import RequestCounter
from langgraph.store.base import GetOp, PutOp
from sim import Lost, Op, fault_label, faults_for, interleavings

from langgraph_s3_checkpoint import S3Store
from langgraph_s3_checkpoint._protocol.expiry import LATE_MINUTES, minute_of
from langgraph_s3_checkpoint._protocol.requests import DeleteIfMatch, Get, ListKeys, Put, Written
from langgraph_s3_checkpoint.local import LocalS3Server
from langgraph_s3_checkpoint.memory import MemoryBucket

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
NS = ("users", "u1")


class Clock:
    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, minutes: float) -> None:
        self.now += timedelta(minutes=minutes)


def open_store(bucket: MemoryBucket, clock: Clock, **kwargs: Any) -> S3Store:
    store = S3Store(bucket="b", client=bucket, **kwargs)
    store.plans.now = clock
    return store


def driver(store: S3Store) -> Any:
    """What ``sim.Op`` sends through: the store's own I/O over the in-memory bucket."""
    return SimpleNamespace(bucket_io=store.bucket_io)


def items(bucket: MemoryBucket) -> dict[str, dict[str, Any]]:
    """Every item's frame, by key."""
    codec = S3Store(bucket="b", client=bucket).plans.codec.codec
    out = {}
    for key in bucket.keys("store/ns/"):
        obj = bucket.object(key)
        assert obj is not None
        try:
            out[key] = codec._unframe(key, obj.body)
        except Exception:
            out[key] = {"damaged": True}
    return out


def markers(bucket: MemoryBucket) -> dict[str, list[int]]:
    """Item key -> the minutes of the markers naming it."""
    codec = S3Store(bucket="b", client=bucket).plans.codec.codec
    out: dict[str, list[int]] = {}
    for key in bucket.keys("store/ttl/"):
        obj = bucket.object(key)
        assert obj is not None
        with contextlib.suppress(Exception):
            item = "store/ns/" + codec._unframe(key, obj.body)["item"]
            out.setdefault(item, []).append(int(key.split("/")[2]))
    return out


def uncovered(bucket: MemoryBucket) -> list[str]:
    """Items with an expiry that no marker names at or before the minute they expire in."""
    named = markers(bucket)
    problems = []
    for key, frame in items(bucket).items():
        if frame.get("damaged"):
            if key not in named:
                problems.append(f"damaged {key} named by no marker")
            continue
        if frame.get("expires") is None:
            continue
        due = minute_of(float(frame["expires"]))
        if not any(minute <= due for minute in named.get(key, [])):
            problems.append(f"{key} (expires in minute {due}) named by markers of minutes {named.get(key)}")
    return problems


def requests_of(bucket: MemoryBucket, start: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    assert bucket.log is not None
    for request, _ in bucket.log[start:]:
        counts[type(request).__name__] = counts.get(type(request).__name__, 0) + 1
    return counts


# ------------------------------------------------------------------------------------------------
# What a sweep costs, on both servers
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("live", [100, 300])
def test_a_sweep_costs_what_came_due_not_what_is_stored(
    s3_server: LocalS3Server, bucket: str, prefix: str, count_requests: Callable[[Any], RequestCounter], live: int
) -> None:
    """The counts below are the same for 100 and for 300 live items: a sweep's cost does not grow with the store.
    With k items due it is a LIST, a GET of each marker and of its item, and per item either a conditional DELETE
    (expired) or a PUT filing it again (refreshed on read), then one DeleteObjects of the markers."""
    client = s3_server.client()
    clock = Clock()
    with contextlib.closing(S3Store(bucket=bucket, prefix=prefix, client=client)) as store:
        store.plans.now = clock
        store.setup()  # an empty store is filed at once: no sweep of it ever reads every item
        counter = count_requests(client)
        store.batch([PutOp(NS, f"live{i}", {"v": i}, ttl=60) for i in range(live)])
        store.batch([PutOp(NS, f"short{i}", {"v": i}, ttl=1) for i in range(20)])
        store.batch([PutOp(NS, f"read{i}", {"v": i}, ttl=5) for i in range(10)])
        assert counter.snapshot() == {"PutObject": 2 * (live + 30)}, "a marker before each item"
        clock.advance(0.5)
        assert store.sweep_ttl() == 0  # the first one records where it swept

        counter.reset()
        assert store.sweep_ttl() == 0
        assert counter.snapshot() == {"ListObjectsV2": 1}, "nothing due: one LIST"
        with contextlib.closing(S3Store(bucket=bucket, prefix=prefix, client=client)) as fresh:
            fresh.plans.now = clock
            counter.reset()
            assert fresh.sweep_ttl() == 0
            assert counter.snapshot() == {"GetObject": 1, "ListObjectsV2": 1}, "a new process reads ttl-filed first"

        clock.advance(3)  # minute 3.5: the short items expired at 1
        for i in range(10):  # refreshed on read: they expire at 8.5 now, their markers say 5
            assert store.get(NS, f"read{i}", refresh_ttl=True) is not None
        counter.reset()
        assert store.sweep_ttl() == 20
        assert counter.snapshot() == {"ListObjectsV2": 1, "GetObject": 40, "DeleteObject": 20, "DeleteObjects": 1}

        clock.advance(3)  # minute 6.5: the read items' markers are due, the items are not
        counter.reset()
        assert store.sweep_ttl() == 0
        assert counter.snapshot() == {"ListObjectsV2": 1, "GetObject": 20, "PutObject": 10, "DeleteObjects": 1}

        clock.advance(3)  # minute 9.5: they expired at 8.5
        counter.reset()
        assert store.sweep_ttl() == 10
        assert counter.snapshot() == {"ListObjectsV2": 1, "GetObject": 20, "DeleteObject": 10, "DeleteObjects": 1}
        assert len(store.search(NS, limit=10_000)) == live


def test_the_first_sweep_of_a_store_an_older_release_wrote_reads_every_item_once(
    s3_server: LocalS3Server, bucket: str, prefix: str, count_requests: Callable[[Any], RequestCounter]
) -> None:
    """Items without markers (written by an older release: here with the marker plan left out) are all read by
    the first sweep, which deletes the expired ones and files the others; the next sweeps cost what came due."""
    client = s3_server.client()
    clock = Clock()
    with contextlib.closing(S3Store(bucket=bucket, prefix=prefix, client=client)) as store:
        store.plans.now = clock
        write_as_an_older_release(store, [PutOp(NS, f"k{i}", {"v": i}, ttl=1 if i < 5 else 10) for i in range(30)])
        store.batch([PutOp(NS, f"forever{i}", {"v": i}) for i in range(5)])
        clock.advance(2)
        counter = count_requests(client)
        assert store.sweep_ttl() == 5
        # GET ttl-filed (none); LIST and GET the 35 items; DELETE If-Match the 5 expired; file the 25 others
        # with a TTL; LIST the markers (none due); PUT ttl-filed.
        assert counter.snapshot() == {
            "GetObject": 1 + 35,
            "ListObjectsV2": 2,
            "DeleteObject": 5,
            "PutObject": 25 + 1,
        }
        clock.advance(10)
        counter.reset()
        assert store.sweep_ttl() == 25
        assert counter.snapshot() == {"ListObjectsV2": 1, "GetObject": 50, "DeleteObject": 25, "DeleteObjects": 1}
        assert [i.key for i in store.search(NS)] == [f"forever{i}" for i in range(5)]


def write_as_an_older_release(store: S3Store, ops: list[PutOp]) -> None:
    """Items as a release before markers wrote them: the same item objects, no marker."""
    core = store.plans
    now = core.now()
    for op in ops:
        body = core.codec.encode_item(op.namespace, op.key, op.value, now, op.ttl, "v")
        store.bucket_io.execute(Put(core.layout.item(op.namespace, op.key), body, expires=False))


# ------------------------------------------------------------------------------------------------
# Interleavings on the in-memory bucket
# ------------------------------------------------------------------------------------------------
def put_plan(store: S3Store, value: int, ttl: float | None) -> Any:
    return store.plans.batch([PutOp(NS, "k", {"v": value}, ttl=ttl)], {}, {})


def judge_common(bucket: MemoryBucket, ops: list[Op]) -> list[str]:
    problems = [f"{op.label} {op.status}: {op.error!r}" for op in ops if op.status != "returned"]
    return problems + uncovered(bucket)


def left_by_a_later_sweep(bucket: MemoryBucket, clock: Clock, minutes: float) -> list[str]:
    """A sweep ``minutes`` later, when every item has expired: a problem if it left items or markers."""
    clock.advance(minutes)
    open_store(bucket, clock).sweep_ttl()
    if bucket.keys("store/ns/") or bucket.keys("store/ttl/"):
        return [f"left after a later sweep: {bucket.keys('store/')}"]
    return []


def every_interleaving(build: Callable[[], tuple[Any, list[Op]]], judge: Callable[..., list[str]]) -> int:
    """Runs every interleaving, fails on the first ten problems found; the number of interleavings."""
    runs, failures = interleavings(build, judge)
    assert failures == [], "\n".join(failures[:10])
    return runs


@pytest.mark.memory
def test_every_interleaving_of_a_sweep_and_a_put_of_the_same_key() -> None:
    """The item expired and its marker is due; a put writes it again (a new value, a TTL of 5 minutes). Whatever
    the order, the new value stays and is filed; the sweep deletes at most the expired version."""

    def build() -> tuple[Any, list[Op]]:
        bucket, clock = MemoryBucket(keep_log=True), Clock()
        writer = open_store(bucket, clock)
        writer.setup()
        writer.put(NS, "k", {"v": 1}, ttl=1)
        clock.advance(2)
        sweeper = open_store(bucket, clock)
        return (bucket, clock), [
            Op("sweep", driver(sweeper), sweeper.plans.sweep()),
            Op("put", driver(writer), put_plan(writer, 2, 5)),
        ]

    def judge(ctx: Any, ops: list[Op], schedule: str) -> list[str]:
        bucket, clock = ctx
        problems = judge_common(bucket, ops)
        values = [frame.get("value") for frame in items(bucket).values()]
        if len(values) != 1:
            problems.append(f"the item written last is gone: {len(values)} item(s) left")
        return problems + left_by_a_later_sweep(bucket, clock, 10)

    assert every_interleaving(build, judge) >= 10


@pytest.mark.memory
@pytest.mark.parametrize("reader_behind", [0.0, 1.5], ids=["same clock", "reader's clock 1.5 min behind"])
def test_every_interleaving_of_a_sweep_and_a_refreshing_read(reader_behind: float) -> None:
    """``refresh_on_read`` moves the expiry without a marker of its own: the old marker comes due and the sweep
    files the item again. With a reader whose clock is behind, the sweeper finds the item expired while the
    reader refreshes it: the refreshed version is never deleted."""

    def build() -> tuple[Any, list[Op]]:
        bucket, clock = MemoryBucket(keep_log=True), Clock()
        writer = open_store(bucket, clock, ttl={"refresh_on_read": True})
        writer.setup()
        if reader_behind:
            writer.put(NS, "k", {"v": 1}, ttl=2)
            clock.advance(3)  # expired by the sweeper's clock, not by the reader's: refreshed to minute 3.5
        else:
            writer.put(NS, "k", {"v": 1}, ttl=10)
            clock.advance(8)
            writer.get(NS, "k")  # refreshed: expires at minute 18, its marker says 10
            clock.advance(3)
        reader = open_store(bucket, Clock(clock.now - timedelta(minutes=reader_behind)), ttl={"refresh_on_read": True})
        sweeper = open_store(bucket, clock)
        return (bucket, clock), [
            Op("sweep", driver(sweeper), sweeper.plans.sweep()),
            Op("read", driver(reader), reader.plans.get(GetOp(NS, "k", refresh_ttl=True))),
        ]

    def judge(ctx: Any, ops: list[Op], schedule: str) -> list[str]:
        bucket, clock = ctx
        problems = judge_common(bucket, ops)
        refreshed = any(isinstance(r, Put) and isinstance(reply, Written) for r, reply in ops[1].applied)
        if refreshed and not bucket.keys("store/ns/"):
            problems.append("the refreshed version was deleted")
        if not reader_behind and not bucket.keys("store/ns/"):
            problems.append("an item that had not expired was deleted")
        return problems + left_by_a_later_sweep(bucket, clock, 30)

    assert every_interleaving(build, judge) >= 5


@pytest.mark.memory
@pytest.mark.parametrize("server", ["404", "412"])
@pytest.mark.parametrize("between", [None, "put"], ids=["retried", "a put lands before the retry"])
def test_a_lost_answer_of_the_conditional_delete(server: str, between: str | None) -> None:
    """The sweep's DELETE If-Match is applied and its answer lost; the retry finds the item missing (AWS and moto
    answer 404, SeaweedFS 412) or, with a put landing in between, a new version. The expired item counts as
    deleted; a new version is never deleted and stays filed."""
    bucket, clock = MemoryBucket(keep_log=True, missing_if_match=server), Clock()  # type: ignore[arg-type]
    writer = open_store(bucket, clock)
    writer.setup()
    writer.put(NS, "k", {"v": 1}, ttl=1)
    clock.advance(2)
    sweeper = open_store(bucket, clock)
    sweep = Op("sweep", driver(sweeper), sweeper.plans.sweep())
    while sweep.running and not any(isinstance(r, DeleteIfMatch) for r in sweep.pending or []):
        sweep.step()
    assert sweep.pending is not None
    index = next(i for i, r in enumerate(sweep.pending) if isinstance(r, DeleteIfMatch))

    def land_a_put() -> None:
        Op("put", driver(writer), put_plan(writer, 2, 5)).finish()

    sweep.finish(Lost(len(sweep.batches) - 1, index, between), land_a_put if between else None)
    assert sweep.status == "returned", sweep.error
    assert uncovered(bucket) == []
    if between:
        assert [f["value"] for f in items(bucket).values()] != [], "the version put in between stays"
        assert sweep.result == 0
    else:
        assert bucket.keys("store/ns/") == [] and bucket.keys("store/ttl/") == []
        assert sweep.result == 1


def mixed_store() -> tuple[MemoryBucket, Clock, S3Store]:
    """Items due in every way at minute 12: two expired, one refreshed, one rewritten without a TTL, one deleted,
    one damaged, and two live ones."""
    bucket, clock = MemoryBucket(keep_log=True), Clock()
    store = open_store(bucket, clock, ttl={"refresh_on_read": True})
    store.setup()
    store.batch(
        [
            PutOp(NS, "expired1", {"v": 1}, ttl=5),
            PutOp(NS, "expired2", {"v": 2}, ttl=10),
            PutOp(NS, "refreshed", {"v": 3}, ttl=10),
            PutOp(NS, "untimed", {"v": 4}, ttl=10),
            PutOp(NS, "deleted", {"v": 5}, ttl=10),
            PutOp(NS, "damaged", {"v": 6}, ttl=10),
            PutOp(NS, "live", {"v": 7}, ttl=60),
            PutOp(NS, "forever", {"v": 8}),
        ]
    )
    clock.advance(6)
    assert store.get(NS, "refreshed") is not None  # now expires at 16
    store.put(NS, "untimed", {"v": 4}, ttl=None)
    store.delete(NS, "deleted")
    damaged = store.plans.layout.item(NS, "damaged")
    bucket.execute(Put(damaged, b"not an item"))
    clock.advance(6)
    return bucket, clock, store


@pytest.mark.memory
def test_a_crash_or_a_failed_request_anywhere_in_a_sweep() -> None:
    """Wherever a sweep stops, no item it must keep is gone and every item with an expiry stays filed; the next
    sweep finishes the work."""
    bucket, clock, store = mixed_store()
    probe = Op("sweep", driver(store), store.plans.sweep()).finish()
    assert probe.status == "returned" and probe.result == 2
    failures = []
    runs = 0
    for fault in faults_for(probe.batches):
        runs += 1
        bucket, clock, store = mixed_store()
        op = Op("sweep", driver(store), store.plans.sweep()).finish(fault)
        label = fault_label(fault, op.batches)
        keys = {k.rsplit("/", 1)[-1] for k in bucket.keys("store/ns/")}
        missing = {"refreshed", "untimed", "damaged", "live", "forever"} - keys
        problems = [f"{k} is gone" for k in sorted(missing)] + uncovered(bucket)
        later = open_store(bucket, clock)
        assert later.sweep_ttl() in (0, 1, 2)
        keys = {k.rsplit("/", 1)[-1] for k in bucket.keys("store/ns/")}
        if keys != {"refreshed", "untimed", "damaged", "live", "forever"}:
            problems.append(f"after the next sweep: {sorted(keys)}")
        failures += [f"{label}: {p}" for p in problems + uncovered(bucket)]
    assert failures == [], "\n".join(failures[:10])
    assert runs > 30


# ------------------------------------------------------------------------------------------------
# Behaviour
# ------------------------------------------------------------------------------------------------
@pytest.mark.memory
def test_markers_are_written_before_their_items() -> None:
    bucket, clock = MemoryBucket(keep_log=True), Clock()
    store = open_store(bucket, clock)
    plan = store.plans.batch([PutOp(NS, "a", {"v": 1}, ttl=5), PutOp(NS, "b", {"v": 2})], {}, {})
    op = Op("put", driver(store), plan).finish()
    first, second = cast(list[list[Put]], op.batches)
    assert [r.key.split("/")[1] for r in first] == ["ttl"], "the marker of the item with a TTL, alone"
    assert [r.key.split("/")[1] for r in second] == ["ns", "ns"], "then the items"


@pytest.mark.memory
def test_the_sweep_after_a_mixed_history() -> None:
    bucket, clock, store = mixed_store()
    with contextlib.closing(store):
        assert store.sweep_ttl() == 2
        assert sorted(k.rsplit("/", 1)[-1] for k in bucket.keys("store/ns/")) == [
            "damaged",
            "forever",
            "live",
            "refreshed",
            "untimed",
        ]
        named = {k.rsplit("/", 1)[-1]: v for k, v in markers(bucket).items()}
        base = minute_of(T0.timestamp())
        assert named == {"refreshed": [base + 16], "damaged": [base + 12 + 24 * 60], "live": [base + 60]}
        clock.advance(5)
        assert store.sweep_ttl() == 1  # refreshed
        clock.advance(60)
        assert store.sweep_ttl() == 1  # live
        assert uncovered(bucket) == []


@pytest.mark.memory
def test_a_damaged_item_is_logged_retried_daily_and_does_not_stop_the_sweep(caplog: pytest.LogCaptureFixture) -> None:
    bucket, clock = MemoryBucket(), Clock()
    store = open_store(bucket, clock)
    store.setup()
    store.put(NS, "damaged", {"v": 1}, ttl=1)
    store.put(NS, "expires", {"v": 2}, ttl=1)
    damaged = store.plans.layout.item(NS, "damaged")
    bucket.execute(Put(damaged, b"damaged"))
    clock.advance(2)
    with caplog.at_level(logging.WARNING, logger="langgraph_s3_checkpoint.store"):
        assert store.sweep_ttl() == 1
    assert damaged in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="langgraph_s3_checkpoint.store"):
        assert store.sweep_ttl() == 0
    assert caplog.text == "", "looked at again a day later, not at every sweep"
    store.put(NS, "damaged", {"v": 3}, ttl=1)  # repaired by a put
    clock.advance(24 * 60 + 1)
    assert store.sweep_ttl() == 1
    assert bucket.keys("store/") == ["store/ttl-filed"]


@pytest.mark.memory
def test_an_item_of_a_newer_format_is_left_alone_and_does_not_stop_the_sweep(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A newer release's item is sound, not damage: the sweep neither deletes it nor stops at it."""
    bucket, clock = MemoryBucket(), Clock()
    store = open_store(bucket, clock)
    store.setup()
    store.put(NS, "newer", {"v": 1}, ttl=1)
    store.put(NS, "expires", {"v": 2}, ttl=1)
    newer = store.plans.layout.item(NS, "newer")
    body = bucket.execute(Get(newer)).body
    bucket.execute(Put(newer, body[:4] + bytes([body[4] + 1]) + body[5:]))  # the format version after ours
    clock.advance(2)
    with caplog.at_level(logging.WARNING, logger="langgraph_s3_checkpoint.store"):
        assert store.sweep_ttl() == 1
    assert newer in caplog.text
    assert newer in bucket.keys("store/ns/")


@pytest.mark.memory
def test_foreign_objects_in_the_marker_folder_are_left_alone(caplog: pytest.LogCaptureFixture) -> None:
    bucket, clock = MemoryBucket(), Clock()
    store = open_store(bucket, clock)
    store.setup()
    store.put(NS, "k", {"v": 1}, ttl=1)
    minute = f"{minute_of(T0.timestamp()):09d}"
    foreign = [
        "store/ttl/notes.txt",
        f"store/ttl/{minute}/",
        f"store/ttl/{minute}/short",
        f"store/ttl/{minute}/{'0' * 32}/deeper",
        f"store/ttl/{minute}/{'A' * 32}",
    ]
    for key in foreign:
        bucket.execute(Put(key, b"x"))
    ours_in_shape = f"store/ttl/{minute}/{'0' * 32}"
    bucket.execute(Put(ours_in_shape, b"not a marker"))
    clock.advance(2)
    with caplog.at_level(logging.WARNING, logger="langgraph_s3_checkpoint.store"):
        assert store.sweep_ttl() == 1
    assert ours_in_shape in caplog.text
    assert sorted(bucket.keys("store/ttl/")) == sorted([*foreign, ours_in_shape])
    assert bucket.keys("store/ns/") == []


@pytest.mark.memory
@pytest.mark.parametrize(
    "namespace",
    [("L" * 210, "M" * 300), ("n" * 175,) * 5, ("a/b c", "ü" * 80)],
    ids=["labels past the escape limit", "a key near 1,024 bytes", "escaped labels"],
)
def test_long_labels_and_keys(namespace: tuple[str, ...]) -> None:
    """A marker holds its item's key in its body, under a key of fixed length: labels past the escape limit
    (digests) and item keys near S3's 1,024 bytes are filed like any other."""
    bucket, clock = MemoryBucket(), Clock()
    store = open_store(bucket, clock)
    store.setup()
    store.put(namespace, "K" * 40, {"v": 1}, ttl=1)
    store.put(namespace, "k", {"v": 2}, ttl=10)
    clock.advance(2)
    assert store.sweep_ttl() == 1
    assert [i.key for i in store.search(namespace)] == ["k"]
    assert {len(k) for k in bucket.keys("store/ttl/")} == {len("store/ttl/") + 9 + 1 + 32}


@pytest.mark.memory
def test_a_writer_whose_clock_is_behind() -> None:
    """An item that expired on arrival (its writer's clock is behind by more than its TTL) is filed under a minute
    already passed: the next sweep lists from a day before the minute it swept last, so it finds it; one filed
    more than a day before that is found by a full sweep."""
    bucket, clock = MemoryBucket(), Clock()
    store = open_store(bucket, clock)
    store.setup()
    assert store.sweep_ttl() == 0
    clock.advance(10)
    assert store.sweep_ttl() == 0
    behind = open_store(bucket, Clock(clock.now - timedelta(minutes=30)))
    behind.put(NS, "late", {"v": 1}, ttl=1)
    far_behind = open_store(bucket, Clock(clock.now - timedelta(minutes=LATE_MINUTES + 30)))
    far_behind.put(NS, "verylate", {"v": 2}, ttl=1)
    assert store.sweep_ttl() == 1
    assert [k.rsplit("/", 1)[-1] for k in bucket.keys("store/ns/")] == ["verylate"]
    assert store.sweep_ttl(full=True) == 1
    assert bucket.keys("store/ns/") == []


@pytest.mark.memory
def test_a_sweep_lists_from_a_day_before_where_it_swept_last() -> None:
    """Filer-backed servers (SeaweedFS) keep the emptied folder of every minute and walk them in a listing; the
    sweep seeks past them with ``start_after``, and records where it swept at most once an hour."""
    bucket, clock = MemoryBucket(keep_log=True), Clock()
    assert bucket.log is not None
    store = open_store(bucket, clock)
    store.setup()
    assert store.sweep_ttl() == 0
    for _ in range(3):
        clock.advance(25)
        start = len(bucket.log)
        store.sweep_ttl()
        lists = [r for r, _ in bucket.log[start:] if isinstance(r, ListKeys)]
        assert len(lists) == 1 and lists[0].start_after is not None
        assert int(lists[0].start_after.rsplit("/", 1)[-1]) <= minute_of(clock.now.timestamp()) - LATE_MINUTES
    puts = [r for r, _ in bucket.log if isinstance(r, Put) and r.key.endswith("ttl-filed")]
    assert len(puts) == 1 + 1 + 1, "setup, the first sweep, and once after an hour"
    fresh = open_store(bucket, clock)
    start = len(bucket.log)
    fresh.sweep_ttl()
    assert [type(r) for r, _ in bucket.log[start:]] == [Get, ListKeys]


@pytest.mark.memory
def test_full_sweep_files_what_an_older_release_wrote_meanwhile() -> None:
    bucket, clock = MemoryBucket(), Clock()
    store = open_store(bucket, clock)
    store.setup()
    write_as_an_older_release(store, [PutOp(NS, "old", {"v": 1}, ttl=5)])
    clock.advance(6)
    assert store.sweep_ttl() == 0, "not filed: only a full sweep finds it"
    assert store.sweep_ttl(full=True) == 1


@pytest.mark.memory
def test_setup_of_a_store_that_holds_items_does_not_mark_it_filed() -> None:
    bucket, clock = MemoryBucket(), Clock()
    store = open_store(bucket, clock)
    write_as_an_older_release(store, [PutOp(NS, "old", {"v": 1}, ttl=5)])
    store.setup()
    assert bucket.keys("store/ttl") == []
    clock.advance(6)
    assert store.sweep_ttl() == 1


@pytest.mark.memory
def test_requests_summary_on_memory() -> None:
    """The same counts as on the servers, per request type, for a sweep with nothing due over many items."""
    bucket, clock = MemoryBucket(keep_log=True), Clock()
    assert bucket.log is not None
    store = open_store(bucket, clock)
    store.setup()
    store.batch([PutOp(NS, f"k{i}", {"v": i}, ttl=60) for i in range(2000)])
    store.sweep_ttl()
    start = len(bucket.log)
    assert store.sweep_ttl() == 0
    assert requests_of(bucket, start) == {"ListKeys": 1}
    clock.advance(61)
    start = len(bucket.log)
    assert store.sweep_ttl() == 2000
    counts = requests_of(bucket, start)
    assert counts == {"ListKeys": 2, "Get": 4000, "DeleteIfMatch": 2000, "DeleteObjects": 16, "Put": 1}


@pytest.mark.memory
def test_a_crash_or_a_failed_request_anywhere_in_a_put() -> None:
    """A put files its marker before writing its item: wherever it stops, every item with an expiry is filed."""

    def world() -> tuple[MemoryBucket, S3Store]:
        bucket, clock = MemoryBucket(keep_log=True), Clock()
        store = open_store(bucket, clock)
        store.setup()
        store.put(NS, "old", {"v": 0}, ttl=30)
        return bucket, store

    def plan(store: S3Store) -> Any:
        return store.plans.batch([PutOp(NS, "new", {"v": 1}, ttl=5), PutOp(NS, "old", {"v": 2}, ttl=1)], {}, {})

    bucket, store = world()
    probe = Op("put", driver(store), plan(store)).finish()
    assert probe.status == "returned" and len(probe.batches) == 2
    failures = []
    for fault in faults_for(probe.batches):
        bucket, store = world()
        op = Op("put", driver(store), plan(store)).finish(fault)
        failures += [f"{fault_label(fault, op.batches)}: {p}" for p in uncovered(bucket)]
    assert failures == [], "\n".join(failures[:10])
