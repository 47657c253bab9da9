"""Scans over many threads share round trips (``plans.side_by_side``).

gc scans each thread that changed since its seal with the same few questions. One thread after another, 100,000
threads at a region's 20 ms are 100,000 round trips per question; judged ``SIDE_BY_SIDE`` at a time, each round trip
carries every thread's next request. These tests pin the round trips (batches), that the requests are the same as
one thread at a time, and that what the scans find and do is unchanged and in thread order. ``expire_threads`` and
``langgraph-s3 threads`` ask no thread anything: one flat listing of every thread shows what they need.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from datetime import timedelta
from typing import Any

import pytest
from helpers import run_plan, send
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_s3_checkpoint import S3Saver
from langgraph_s3_checkpoint._protocol import operator_plans
from langgraph_s3_checkpoint._protocol.garbage_collection import gc_plan
from langgraph_s3_checkpoint._protocol.plans import SIDE_BY_SIDE, side_by_side
from langgraph_s3_checkpoint._protocol.requests import Emit, Get
from langgraph_s3_checkpoint.memory import MemoryBucket

pytestmark = pytest.mark.memory
"""No S3 server: every test of this module runs in memory (``pytest -m memory``)."""

THREADS = 2 * SIDE_BY_SIDE + 6
"""Two full groups and part of a third."""
GROUPS = math.ceil(THREADS / SIDE_BY_SIDE)


def _asks(name: str, questions: int) -> Generator[Any, Any, tuple[str, list[Any]]]:
    heard = []
    for i in range(questions):
        (reply,) = yield [Get(f"{name}/{i}")]
        heard.append(reply)
    return name, heard


def _answer_with_keys(plan: Any) -> tuple[Any, list[list[str]]]:
    """Run a plan answering each GET with its key; the result and the keys of each batch."""
    result, batches = run_plan(plan, lambda step: [request.key for request in step])
    return result, [[request.key for request in batch] for batch in batches]


def test_side_by_side_sends_the_next_request_of_every_running_plan_in_one_batch() -> None:
    result, batches = _answer_with_keys(side_by_side([_asks("a", 1), _asks("b", 3), _asks("c", 0), _asks("d", 2)]))
    assert batches == [["a/0", "b/0", "d/0"], ["b/1", "d/1"], ["b/2"]]
    # Each plan heard its own replies, and the results come back in the plans' order.
    assert result == [("a", ["a/0"]), ("b", ["b/0", "b/1", "b/2"]), ("c", []), ("d", ["d/0", "d/1"])]


def test_side_by_side_of_no_plans_sends_nothing() -> None:
    assert _answer_with_keys(side_by_side([])) == ([], [])


def test_side_by_side_refuses_a_streaming_plan() -> None:
    def streams() -> Generator[Any, Any, None]:
        yield Emit("found")

    with pytest.raises(TypeError, match="streaming"):
        _answer_with_keys(side_by_side([_asks("a", 1), streams()]))


def _saver_with_threads() -> tuple[S3Saver, list[str]]:
    saver = S3Saver(bucket="b", client=MemoryBucket())
    threads = [f"thread-{i:03d}" for i in range(THREADS)]
    for thread in threads:
        config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        saver.put(config, empty_checkpoint(), {"step": 0}, {})
    # One thread with a subgraph: two namespaces, two heads to judge.
    config = {"configurable": {"thread_id": threads[1], "checkpoint_ns": "sub:1"}}
    saver.put(config, empty_checkpoint(), {"step": 0}, {})
    return saver, threads


def _run_counting(saver: S3Saver, plan: Any) -> tuple[list[Any], list[int]]:
    """Run a streaming plan through the saver's I/O; what it emitted and the size of each batch it sent."""
    emitted: list[Any] = []
    sizes: list[int] = []
    reply: Any = None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration:
            return emitted, sizes
        if isinstance(step, Emit):
            emitted.append(step.value)
            reply = None
        else:
            sizes.append(len(step))
            reply = send(saver, step)


def test_expire_threads_judges_every_thread_from_one_flat_listing() -> None:
    saver, _ = _saver_with_threads()
    plan = saver.plans.expire_threads(timedelta(days=30), dry_run=False)
    expired, sizes = _run_counting(saver, plan)
    assert expired == []
    assert sizes == [1]  # every head's date is in the listing (one page: fewer than 1,000 keys)


@pytest.mark.parametrize("dry_run", [True, False])
def test_expire_threads_side_by_side_expires_every_idle_thread_in_order(dry_run: bool) -> None:
    saver, threads = _saver_with_threads()
    expired = saver.expire_threads(timedelta(0), dry_run=dry_run)
    assert expired == threads
    left = [t for t in threads if saver.get_tuple({"configurable": {"thread_id": t, "checkpoint_ns": ""}})]
    assert left == ([] if not dry_run else threads)


def test_thread_statistics_come_from_one_flat_listing() -> None:
    saver, threads = _saver_with_threads()
    stats, sizes = _run_counting(saver, operator_plans.all_thread_stats(saver.plans.layout))
    assert [s.thread_id for s in stats] == threads
    assert [s.namespaces for s in stats] == [1, 2] + [1] * (THREADS - 2)
    assert sizes == [1]  # one page: fewer than 1,000 keys


def _gc_counts(threads: int) -> tuple[int, int]:
    """Round trips and requests of a gc over ``threads`` threads of one checkpoint each, nothing to delete."""
    saver = S3Saver(bucket="b", client=MemoryBucket())
    for i in range(threads):
        config: Any = {"configurable": {"thread_id": f"thread-{i:03d}", "checkpoint_ns": ""}}
        saver.put(config, empty_checkpoint(), {"step": 0}, {})
    plan = gc_plan(saver.plans, 3600, False)
    reply: Any = None
    sizes: list[int] = []
    while True:
        try:
            step = plan.send(reply)
        except StopIteration as done:
            assert done.value.total == 0
            return len(sizes), sum(sizes)
        assert isinstance(step, list)
        sizes.append(len(step))
        reply = send(saver, step)


def test_gc_scans_a_group_of_threads_per_round_trip() -> None:
    one_trips, one_requests = _gc_counts(1)
    many_trips, many_requests = _gc_counts(THREADS)
    per_thread = (many_requests - one_requests) // (THREADS - 1)
    # Per thread 6 requests as before, and its first seal (its key says what the thread's listing shows, so that the
    # next gc skips it while nothing changes); the 4 listings of the prefix.
    assert (per_thread, one_requests - per_thread) == (7, 4)
    # Each group of threads takes as many round trips as one thread; the prefix's own listings come on top.
    assert one_trips == one_requests
    assert many_trips == (one_trips - per_thread) + GROUPS * per_thread
