"""What gc costs, on both servers: what changed, not the threads nor the history (gc.py, seals.py).

The first gc reads every record once, to place it on its namespace's commit chain, and seals what it found; the
seal's key says what the thread's listing shows once gc is done. A later gc walks every thread in one flat listing
(1,000 keys a page) in step with the listing of the seals: over 4 threads of 30 or of 90 checkpoints each, with
nothing new it sends the four listings of the prefix and nothing else (no request per thread), so its cost grows
with neither the threads nor the history. With k threads given a leftover and a commit since, it scans those k as
before (a LIST of each one's namespaces, of each namespace, of its run entries and of its own keys, a GET of its
head and of its seal), reads the 2k records and deletes the k, again the same at both sizes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, cast

import pytest
from helpers import RequestCounter
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_s3_checkpoint import S3Saver
from langgraph_s3_checkpoint._protocol import operator_plans
from langgraph_s3_checkpoint._protocol.keys import escape
from langgraph_s3_checkpoint._protocol.requests import Put, Request
from langgraph_s3_checkpoint.gc import gc
from langgraph_s3_checkpoint.local import LocalS3Server

THREADS = 4
SEALED_AFTER = 3.0
"""Seconds before records are sealed by a gc with ``grace_seconds=0``: LastModified counts whole seconds."""


class History:
    """Checkpoints written straight through the saver, with increasing ids and a new run every 4 steps."""

    def __init__(self, saver: S3Saver) -> None:
        self.saver = saver
        self.n = 0
        self.configs: dict[str, Any] = {}

    def _checkpoint(self) -> Any:
        self.n += 1
        checkpoint = empty_checkpoint()
        checkpoint["id"] = f"1f0{self.n:029d}"
        checkpoint["channel_values"] = {"messages": f"turn {self.n}"}
        checkpoint["channel_versions"] = {"messages": f"{self.n:032}.0"}
        return checkpoint

    def _args(self, thread: str, run: str | None) -> tuple[Any, Any, Any, Any]:
        config = self.configs.get(thread) or {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        checkpoint = self._checkpoint()
        metadata = {"source": "loop", "step": self.n, "run_id": run or f"{thread}-run{self.n // 4}"}
        return config, checkpoint, metadata, dict(checkpoint["channel_versions"])

    def put(self, thread: str, run: str | None = None) -> None:
        self.configs[thread] = self.saver.put(*self._args(thread, run))

    def put_dying_before_its_head(self, thread: str, run: str) -> None:
        """A put whose process dies after its record landed, before its head: a leftover record."""
        plan = self.saver.plans.put(*self._args(thread, run))
        io = self.saver.bucket_io
        reply: Any = None
        while True:
            step = cast(list[Request], plan.send(reply))
            if any(isinstance(r, Put) and r.key.endswith("/head") for r in step):
                for request in step:
                    if not (isinstance(request, Put) and request.key.endswith("/head")):
                        io.execute(request)
                plan.close()
                return
            reply = [io.execute(request) for request in step]


@pytest.mark.parametrize("records", [30, 90])
def test_gc_costs_the_threads_and_what_changed_not_the_history(
    s3_server: LocalS3Server,
    bucket: str,
    prefix: str,
    count_requests: Callable[[Any], RequestCounter],
    records: int,
) -> None:
    client = s3_server.client()
    with S3Saver(bucket=bucket, prefix=prefix, client=client) as saver:
        history = History(saver)
        threads = [f"thread-{t}" for t in range(THREADS)]
        for thread in threads:
            for _ in range(records):
                history.put(thread)
        time.sleep(SEALED_AFTER)
        counter = count_requests(client)
        first = gc(saver, grace_seconds=0)
        assert (first.total, first.records_read, first.records_sealed) == (0, THREADS * records, 0)
        assert counter.calls["PutObject"] == THREADS, "one seal per thread"

        counter.reset()
        second = gc(saver, grace_seconds=0)
        assert (second.total, second.records_read, second.records_sealed) == (0, 0, THREADS * records)
        assert second.threads_unchanged == THREADS
        # The listings of threads/ (flat: one page here), _gc/ (the seals, in step with the threads), runs/ and
        # _setup/; nothing per thread.
        assert counter.snapshot() == {"ListObjectsV2": 4}

        k = 3
        for thread in threads[:k]:
            history.put_dying_before_its_head(thread, run="late")
            history.put(thread, run="late")  # overtakes it: the leftover is an orphan, below the head, off the chain
        time.sleep(SEALED_AFTER)
        counter.reset()
        third = gc(saver, grace_seconds=0)
        assert third.deleted == {"orphan_record": k}
        assert (third.records_read, third.records_sealed) == (2 * k, THREADS * records)
        assert third.threads_unchanged == THREADS - k
        # Per changed thread: LIST ns/, LIST the namespace, LIST r/, LIST its own keys; GET the head, GET the seal.
        assert counter.snapshot() == {
            "ListObjectsV2": 4 + 4 * k,
            "GetObject": 2 * k + 2 * k,  # + the k orphans and the k commits since
            "DeleteObjects": k + 1,  # each thread's garbage in one request; the seals replaced, in one
            "PutObject": k,  # their seals, now covering the new commits
        }

        counter.reset()
        fourth = gc(saver, grace_seconds=0)
        assert (fourth.total, fourth.records_read, fourth.threads_unchanged) == (0, 0, THREADS)
        assert counter.snapshot() == {"ListObjectsV2": 4}


@pytest.mark.parametrize("twins", [False, True], ids=["0.2", "0.1-twins"])
def test_gc_keeps_the_entry_of_a_run_known_only_by_the_checkpoint_it_names(
    s3_server: LocalS3Server,
    bucket: str,
    prefix: str,
    count_requests: Callable[[Any], RequestCounter],
    twins: bool,
) -> None:
    """A run that resumed another run's checkpoint and committed nothing of its own is indexed by an entry naming
    that checkpoint (its writes are there, for ``delete_for_runs`` to take out), and no committed record names
    the run: gc keeps such an entry while the checkpoint it names is there, sealed or not, and still deletes an
    entry naming a checkpoint that is gone, and one whose thread was deleted. Each such entry costs a GET and a 1-key
    LIST per scan of its thread (none while the thread does not change); entries of runs with committed records of
    their own cost nothing. The same for the global entry alone (0.2) and for a 0.1.x entry with its twin under the
    thread (judged by the thread pass)."""
    client = s3_server.client()
    with S3Saver(bucket=bucket, prefix=prefix, client=client) as saver:
        history = History(saver)
        for _ in range(8):
            history.put("t")
        layout = saver.plans.layout
        resumed = f"1f0{3:029d}"  # committed, by run t-run0
        named = {"resumer": resumed, "ghost": f"1f0{0:029d}"}  # no checkpoint has the ghost's id
        entries = {
            run: [layout.run_entry(run, "t", ""), *([layout.thread_run_entry(run, "t", "")] if twins else [])]
            for run in named
        }
        for run, keys in entries.items():
            for key in keys:
                client.put_object(Bucket=bucket, Key=key, Body=named[run].encode())
        time.sleep(SEALED_AFTER)
        first = gc(saver, grace_seconds=0)
        assert first.deleted == {"dangling_run_entry": 1}

        def exists(key: str) -> bool:
            return bool(client.list_objects_v2(Bucket=bucket, Prefix=key).get("KeyCount"))

        assert all(exists(key) for key in entries["resumer"]), "the resumer's entries stay"
        assert not any(exists(key) for key in entries["ghost"]), "an entry naming no checkpoint goes"

        counter = count_requests(client)
        second = gc(saver, grace_seconds=0)
        assert (second.total, second.records_read, second.records_sealed) == (0, 0, 8)
        # Nothing changed: the four listings of the prefix; the thread is not scanned again.
        assert counter.snapshot() == {"ListObjectsV2": 4}
        assert all(exists(key) for key in entries["resumer"])

        history.put("t")
        time.sleep(SEALED_AFTER)
        counter.reset()
        third = gc(saver, grace_seconds=0)
        assert (third.total, third.records_read, third.records_sealed) == (0, 1, 8)
        # The thread changed: its scan (4 LISTs, GETs of its head and seal and of the new record), + the resumer's
        # entry and a 1-key LIST of what it names; its new seal, and the old one deleted.
        assert counter.snapshot() == {
            "ListObjectsV2": 4 + 4 + 1,
            "GetObject": 2 + 1 + 1,
            "PutObject": 1,
            "DeleteObjects": 1,
        }
        assert all(exists(key) for key in entries["resumer"])

        saver.delete_thread("t")
        gc(saver, grace_seconds=0)
        assert not any(exists(key) for key in entries["resumer"]), "gone with its namespace"


def test_nothing_changed_costs_no_request_per_thread_whatever_the_servers_order_of_folders(
    s3_server: LocalS3Server,
    bucket: str,
    prefix: str,
    count_requests: Callable[[Any], RequestCounter],
) -> None:
    """SeaweedFS lists folder by folder ("a" before "a-b"), S3 and moto by the keys' bytes ("a-b/" before "a/"): the
    flat listing of the threads and the listing of the seals follow the same order on each server, so each seal is
    matched to its thread and skips it, and the seal of a thread that is gone is deleted. ``expire_threads`` and the
    statistics read the same flat listing."""
    client = s3_server.client()
    with S3Saver(bucket=bucket, prefix=prefix, client=client) as saver:
        history = History(saver)
        threads = ["a", "a-b", "a.b", "a-b-c", "b"]
        for thread in threads:
            for _ in range(3):
                history.put(thread)
        history.put("a-b", run="sub")  # a second run: two run-index entries
        time.sleep(SEALED_AFTER)
        first = gc(saver, grace_seconds=0)
        assert (first.total, first.threads_unchanged) == (0, 0)
        counter = count_requests(client)
        second = gc(saver, grace_seconds=0)
        assert (second.total, second.records_read, second.threads_unchanged) == (0, 0, len(threads))
        assert counter.snapshot() == {"ListObjectsV2": 4}
        counter.reset()
        assert saver.expire_threads(timedelta(days=1)) == []
        stats = list(saver.bucket_io.iterate(operator_plans.all_thread_stats(saver.plans.layout)))
        assert sorted(s.thread_id for s in stats) == sorted(threads)
        assert counter.snapshot() == {"ListObjectsV2": 2}  # one page each

        saver.delete_thread("a-b")
        counter.reset()
        third = gc(saver, grace_seconds=0)
        # delete_thread leaves the thread's run-index entries (the index is keyed by run): gc finds them dangling,
        # a GET of their namespace's head each, which the flat listing no longer showed.
        assert (third.deleted, third.threads_unchanged) == ({"dangling_run_entry": 2}, len(threads) - 1)
        assert counter.snapshot() == {"ListObjectsV2": 4, "GetObject": 2, "DeleteObjects": 2}  # + the seal of "a-b"
        seals_left = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/_gc/").get("Contents", [])
        assert sorted(o["Key"].split("/")[-2] for o in seals_left) == sorted(escape(t) for t in threads if t != "a-b")
