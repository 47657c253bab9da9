"""Maintenance costs what changed (issue 40, item 6): ``gc``, ``expire_threads`` and ``langgraph-s3 threads`` over a
bucket where nothing changed send O(objects / 1,000) LISTs and no request per thread; where something changed,
requests for those threads only. Counted by kind on the in-memory bucket (never timed).

A flat listing of ``threads/`` (no delimiter, 1,000 keys a page) shows every object's key, ETag and LastModified,
thread after thread. ``expire_threads`` and the statistics need nothing else. gc compares each thread's keys and
ETags with what its seal's key says the thread's listing showed once gc was done with it (``seals.Summary``), and
scans only a thread that differs, as before (seals.py, garbage_collection.py).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointMetadata, empty_checkpoint

from langgraph_s3_checkpoint import S3Saver
from langgraph_s3_checkpoint._protocol import operator_plans, seals
from langgraph_s3_checkpoint._protocol.plans import FolderEnd, FolderKeys, folder_by_folder
from langgraph_s3_checkpoint._protocol.requests import DeleteObjects, Emit, ListKeys, Page, Put
from langgraph_s3_checkpoint.gc import gc
from langgraph_s3_checkpoint.memory import MemoryBucket

THREADS = 600
STEPS = 4
GRACE = 3600


class Bucket:
    """Threads of ``STEPS`` checkpoints each (one in ten with a subgraph), written two hours before the clock."""

    def __init__(self, threads: int = THREADS) -> None:
        self.clock = [datetime(2030, 1, 1, tzinfo=timezone.utc)]
        self.bucket = MemoryBucket(now=lambda: self.clock[0], keep_log=True)
        self.saver = S3Saver(bucket="b", client=self.bucket)
        self.n = 0
        self.configs: dict[tuple[str, str], RunnableConfig] = {}
        self.threads = [f"thread-{i:04d}" for i in range(threads)]
        for i, thread in enumerate(self.threads):
            for _ in range(STEPS):
                self.put(thread)
            if i % 10 == 0:
                self.put(thread, ns="sub:1")
        self.later(hours=2)

    def later(self, hours: float) -> None:
        self.clock[0] += timedelta(hours=hours)

    def put(self, thread: str, ns: str = "", run: str | None = None) -> None:
        self.n += 1
        checkpoint = empty_checkpoint()
        checkpoint["id"] = f"1f0{self.n:029d}"
        checkpoint["channel_values"] = {"messages": f"turn {self.n}"}
        checkpoint["channel_versions"] = {"messages": f"{self.n:032}.0"}
        config: RunnableConfig = self.configs.get((thread, ns)) or {
            "configurable": {"thread_id": thread, "checkpoint_ns": ns}
        }
        metadata: CheckpointMetadata = {"source": "loop", "step": self.n, "run_id": run or f"{thread}-run{self.n // 3}"}
        self.configs[(thread, ns)] = self.saver.put(config, checkpoint, metadata, dict(checkpoint["channel_versions"]))

    def counted(self, operation: Callable[[], Any]) -> tuple[Any, collections.Counter[str], list[Any]]:
        """What ``operation`` returned, its requests by kind, and the requests."""
        log = self.bucket.log
        assert log is not None
        del log[:]
        result = operation()
        requests = [request for request, _ in log]
        return result, collections.Counter(type(request).__name__ for request in requests), requests

    def gc(self) -> tuple[Any, collections.Counter[str], list[Any]]:
        return self.counted(lambda: gc(self.saver, grace_seconds=GRACE))

    def expire(self, older_than: timedelta = timedelta(days=30)) -> tuple[Any, collections.Counter[str], list[Any]]:
        return self.counted(lambda: self.saver.expire_threads(older_than))

    def stats(self) -> tuple[Any, collections.Counter[str], list[Any]]:
        plan = operator_plans.all_thread_stats(self.saver.plans.layout)
        return self.counted(lambda: list(self.saver.bucket_io.iterate(plan)))

    @property
    def pages(self) -> int:
        """Pages of a flat listing of every thread."""
        return math.ceil(len(self.bucket.keys("threads/")) / 1000)


@pytest.fixture(scope="module")
def settled() -> Bucket:
    """The threads, judged once by gc (which sealed each)."""
    b = Bucket()
    first, _, _ = b.gc()
    assert first.total == 0 and first.records_read > 0
    assert len(b.bucket.keys("_gc/")) == THREADS
    return b


def _copy(b: Bucket) -> Bucket:
    other = Bucket.__new__(Bucket)
    other.__dict__.update(b.__dict__)
    other.clock = [b.clock[0]]
    other.bucket = b.bucket.copy()
    other.bucket.now = lambda: other.clock[0]
    other.saver = S3Saver(bucket="b", client=other.bucket)
    other.configs = dict(b.configs)
    return other


def test_nothing_changed_costs_a_listing_per_thousand_keys_and_nothing_per_thread(settled: Bucket) -> None:
    b = _copy(settled)
    b.later(hours=2)
    assert b.pages >= 3, "the listing of every thread spans pages"
    report, gc_costs, _ = b.gc()
    assert (report.total, report.records_read, report.threads_unchanged) == (0, 0, THREADS)
    # threads/ (flat), _gc/ (the seals, in step), runs/ and _setup/: each fewer than 1,000 keys but threads/.
    seal_pages = math.ceil(THREADS / 1000)
    run_pages = math.ceil(len(b.bucket.keys("runs/")) / 1000)
    assert gc_costs == {"ListKeys": b.pages + seal_pages + run_pages + 1}
    expired, expire_costs, _ = b.expire()
    assert expired == [] and expire_costs == {"ListKeys": b.pages}
    stats, stats_costs, _ = b.stats()
    assert len(stats) == THREADS and stats_costs == {"ListKeys": b.pages}
    per_thread = (sum(gc_costs.values()) + sum(expire_costs.values())) / THREADS
    assert per_thread <= 0.1, per_thread


def test_one_thread_changed_costs_requests_for_that_thread_only(settled: Bucket) -> None:
    b = _copy(settled)
    changed = b.threads[7]
    b.put(changed)
    b.later(hours=2)
    report, costs, requests = b.gc()
    assert (report.total, report.records_read, report.threads_unchanged) == (0, 1, THREADS - 1)
    seal_pages = math.ceil(THREADS / 1000)
    run_pages = math.ceil(len(b.bucket.keys("runs/")) / 1000)
    # Its scan as before: LIST ns/, the namespace, r/, its own keys; GET its seal, its head, the new record; its new
    # seal, and the one it replaces deleted.
    assert costs == {
        "ListKeys": b.pages + seal_pages + run_pages + 1 + 4,
        "Get": 3,
        "Put": 1,
        "DeleteObjects": 1,
    }
    prefix_wide = {"threads/", "_gc/", "runs/", "_setup/"}
    touched: set[str] = set()
    for request in requests:
        if isinstance(request, ListKeys) and request.prefix in prefix_wide:
            continue
        touched.update(_keys_of(request))
    ours = (f"threads/{changed}/", f"_gc/{changed}/")
    assert touched and all(key.startswith(ours) for key in touched), sorted(touched)
    # The next gc: nothing changed again.
    b.later(hours=2)
    again, costs, _ = b.gc()
    assert (again.records_read, again.threads_unchanged) == (0, THREADS)
    assert set(costs) == {"ListKeys"}


def test_an_idle_thread_costs_its_delete_only(settled: Bucket) -> None:
    b = _copy(settled)
    b.later(hours=24 * 20)
    for thread in b.threads[1:]:
        b.put(thread)  # every thread but one is written again
    b.later(hours=24 * 20)
    expired, costs, requests = b.expire(timedelta(days=30))
    assert expired == [b.threads[0]]
    assert costs["ListKeys"] >= b.pages
    outside = [
        request
        for request in requests
        if not (isinstance(request, ListKeys) and request.prefix == "threads/")
        and not any(key.startswith(f"threads/{b.threads[0]}/") for key in _keys_of(request))
        and not any(key.startswith(f"runs/{b.threads[0]}-") for key in _keys_of(request))
    ]
    assert outside == []


def _keys_of(request: Any) -> tuple[str, ...]:
    if isinstance(request, DeleteObjects):
        return request.keys
    return (getattr(request, "prefix", None) or request.key,)


def test_garbage_kept_for_its_age_is_judged_again_until_it_goes() -> None:
    """A thread gc left young garbage in gets a seal that says nothing of its listing: the next gc scans it again
    although nothing changed, and once the garbage went, the thread is skipped."""
    b = Bucket(threads=3)
    gc(b.saver, grace_seconds=GRACE)
    leftover = b.threads[1]
    plan = b.saver.plans.put(*_put_args(b, leftover))
    reply: Any = None
    while True:  # a put that dies after its record, before its head: an uncommitted record
        step = plan.send(reply)
        assert isinstance(step, list)
        if any(isinstance(r, Put) and r.key.endswith("/head") for r in step):
            for request in step:
                if not (isinstance(request, Put) and request.key.endswith("/head")):
                    b.bucket.execute(request)
            plan.close()
            break
        reply = [b.bucket.execute(request) for request in step]
    young, _, _ = b.gc()
    # The record; its run's index entry stays while the record it names is there (tests/test_run_index.py).
    assert (young.young, young.threads_unchanged) == (1, 2)
    assert seals.thread_of("", b.bucket.keys(f"_gc/{leftover}/")[0]) == (leftover, None)
    still, _, _ = b.gc()
    assert (still.young, still.threads_unchanged) == (1, 2), "scanned again: its garbage may go by age"
    b.later(hours=2)
    gone, _, _ = b.gc()
    assert gone.deleted == {"uncommitted_record": 1, "dangling_run_entry": 1}
    assert gone.threads_unchanged == 2
    b.later(hours=2)
    settled_, _, _ = b.gc()
    assert (settled_.total, settled_.threads_unchanged) == (0, 3)


def _put_args(b: Bucket, thread: str) -> tuple[Any, Any, Any, Any]:
    b.n += 1
    checkpoint = empty_checkpoint()
    checkpoint["id"] = f"1f0{b.n:029d}"
    config = b.configs[(thread, "")]
    return config, checkpoint, {"source": "loop", "step": b.n, "run_id": "late"}, {}


def test_a_seal_of_0_1_0_is_used_and_replaced() -> None:
    """Release 0.1.0 wrote ``_gc/{T}/sealed`` (no listing digest in its key): gc reads it as before (the records it
    seals are not read again) and replaces it by one whose key says what the thread's listing shows."""
    b = Bucket(threads=2)
    gc(b.saver, grace_seconds=GRACE)
    for key in b.bucket.keys("_gc/"):
        obj = b.bucket.object(key)
        assert obj is not None
        segment = key.split("/")[1]
        b.bucket.execute(DeleteObjects((key,)))
        b.bucket.execute(Put(seals.key_of("", segment), obj.body, expires=False))
    assert all(key.endswith("/sealed") for key in b.bucket.keys("_gc/"))
    b.later(hours=1)
    report, costs, _ = b.gc()
    assert (report.records_read, report.records_sealed, report.threads_unchanged) == (0, 2 * STEPS + 1, 0)
    assert costs["Put"] == 2 and costs["DeleteObjects"] == 1
    found = [seals.thread_of("", key) for key in b.bucket.keys("_gc/")]
    assert len(found) == 2 and all(seal is not None and seal[1] is not None for seal in found), found
    again, _, _ = b.gc()
    assert again.threads_unchanged == 2


def test_a_seal_key_of_this_release_is_foreign_to_0_1_0s_rule() -> None:
    """0.1.0's gc takes only a key whose last segment is ``sealed`` for a seal and counts any other key under
    ``_gc/`` as foreign, leaving it alone (checked by running 0.1.0's gc over this release's seals); this release
    reads both forms."""
    digest = seals.Summary()
    digest.add("ns/~/head", '"abc"')
    key = seals.key_of("p/", "t", digest.digest)
    assert key.rpartition("/")[2] != "sealed" and key.startswith("p/_gc/t/sealed.")
    assert seals.thread_of("p/", key) == ("t", digest.digest)
    assert seals.thread_of("p/", seals.key_of("p/", "t")) == ("t", None)
    for foreign in ("p/_gc/t/sealed.", "p/_gc/t/sealed.XYZ", "p/_gc/t/other", "p/_gc/a.b/sealed", "p/_gc/t"):
        assert seals.thread_of("p/", foreign) is None


def test_the_summary_does_not_depend_on_the_order_keys_are_met_in() -> None:
    keys = [(f"ns/~/c/{i}/checkpoint", f'"{i:032x}"') for i in range(50)]
    one, other = seals.Summary(), seals.Summary()
    for relative, etag in keys:
        one.add(relative, etag)
    for relative, etag in reversed(keys):
        other.add(relative, etag)
    assert one.digest == other.digest
    other.add("ns/~/head", '"1"')
    other.remove("ns/~/head", "1")  # quotes or not, as listings give them
    assert one.digest == other.digest
    other.remove(*keys[0])
    other.add(keys[0][0], '"ffff"')  # the same key, rewritten
    assert one.digest != other.digest
    unknown = seals.Summary()
    unknown.add("name", None)
    assert unknown.digest is None


def _walk(pages: list[list[str]]) -> list[Any]:
    """What ``folder_by_folder`` emits over listing pages of these keys."""
    plan = folder_by_folder("threads/")
    emitted: list[Any] = []
    reply: Any = None
    answers = iter(pages)
    while True:
        try:
            step = plan.send(reply)
        except StopIteration:
            return emitted
        if isinstance(step, Emit):
            item = step.value
            emitted.append(
                ("keys", item.segment, item.page.keys) if isinstance(item, FolderKeys) else ("end", item.segment)
            )
            assert isinstance(item, FolderKeys | FolderEnd)
            reply = None
            continue
        keys = next(answers)
        last = keys is pages[-1]
        reply = [Page([f"threads/{k}" for k in keys], [], None if last else "more")]


def test_the_walk_hands_out_each_thread_once_its_keys_are_all_listed() -> None:
    emitted = _walk([["a/1", "a/2", "b/1"], ["b/2", "x", "c/1"], ["c/2"]])
    assert emitted == [
        ("keys", "a", ["threads/a/1", "threads/a/2"]),
        ("end", "a"),
        ("keys", "b", ["threads/b/1"]),
        ("keys", "b", ["threads/b/2"]),
        ("end", "b"),
        ("keys", None, ["threads/x"]),
        ("keys", "c", ["threads/c/1"]),
        ("keys", "c", ["threads/c/2"]),
        ("end", "c"),
    ]
    # Byte order (S3: "a-b/" before "a/") and folder order (SeaweedFS: "a" before "a-b") are both accepted.
    assert [e for e in _walk([["a-b/1", "a/1"]]) if e[0] == "end"] == [("end", "a-b"), ("end", "a")]
    assert [e for e in _walk([["a/1", "a-b/1"]]) if e[0] == "end"] == [("end", "a"), ("end", "a-b")]


def test_the_walk_refuses_a_listing_in_no_known_order() -> None:
    """A thread met again after another would be judged from part of its keys (expire_threads could take it for
    idle): refused."""
    with pytest.raises(ValueError, match="no known key order"):
        _walk([["a/1", "b/1"], ["a/2"]])
    with pytest.raises(ValueError, match="no known key order"):
        _walk([["b/1", "a/1"]])


def test_skipping_a_thread_keeps_what_a_scan_keeps(settled: Bucket) -> None:
    """A thread skipped keeps everything; a gc without seals over the same keys deletes nothing there either."""
    b = _copy(settled)
    b.later(hours=2)
    with_seals, _, _ = b.gc()
    assert with_seals.threads_unchanged == THREADS
    twin = b.bucket.copy()
    for key in twin.keys("_gc/"):
        twin.execute(DeleteObjects((key,)))
    fresh = gc(S3Saver(bucket="b", client=twin), grace_seconds=GRACE)
    assert (fresh.total, fresh.threads_unchanged) == (0, 0)
    assert [k for k in twin.keys("") if not k.startswith("_gc/")] == [
        k for k in b.bucket.keys("") if not k.startswith("_gc/")
    ]
    assert fresh.scanned == with_seals.scanned and fresh.foreign == with_seals.foreign
    assert fresh.records_read == with_seals.records_sealed
