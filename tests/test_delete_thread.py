"""``delete_thread``: a deleted thread reads as deleted and stays deleted, through races and crashes.

A delete writes a ``deleting`` marker, removes the heads, then everything else, and the marker last, so that repair
never brings back what a delete that died had condemned, and gc can finish it. These tests race a delete against a
new thread's first put and another delete, and stop it part-way, on every server kind (repair racing a delete is in
test_repair.py).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest
from helpers import (
    BIG,
    Crash,
    cfg,
    chat,
    chat_graph,
    cid,
    crash_at,
    deletes_records,
    put,
    put_plan,
    root_head_key,
    send,
    ver,
)

from langgraph_s3_checkpoint import S3Saver
from langgraph_s3_checkpoint._protocol.operator_plans import Problem, verify_thread
from langgraph_s3_checkpoint.gc import gc as run_gc
from langgraph_s3_checkpoint.local import LocalS3Server


def test_a_delete_racing_a_new_threads_first_put_leaves_the_thread_deleted(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """A new thread's first put writes its large value, delete_thread deletes it, then the put's head lands (a new
    thread's head is created with If-None-Match: there is no head to fence on): the thread would read as damaged.
    delete_thread goes over the thread again when objects reappeared during a pass, so the thread reads as deleted,
    consistently."""
    writer, deleter = make_saver(), make_saver()
    plan = put_plan(writer, "t", cid(1), values={"big": "v" * BIG}, versions={"big": ver(1)})
    values_written = send(writer, plan.send(None))  # the large value lands; the head is not sent yet
    original = deleter.plans._delete_thread_once
    passes: list[int] = []

    def a_pass_then_the_head_lands(thread_id: str) -> Any:
        yield from original(thread_id)
        passes.append(1)
        if len(passes) == 1:  # the put resumes: its record and head land after this pass
            with contextlib.suppress(StopIteration):
                reply: Any = values_written
                while True:
                    reply = send(writer, plan.send(reply))

    deleter.plans._delete_thread_once = a_pass_then_the_head_lands
    deleter.delete_thread("t")
    assert len(passes) == 2
    assert make_saver().get_tuple(cfg("t")) is None
    assert s3_client.list_objects_v2(Bucket=writer.bucket, Prefix=f"{writer.prefix}/threads/").get("KeyCount") == 0


def test_two_deletes_of_one_thread_each_remove_only_their_own_marker(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """The ``deleting`` marker keeps repair_thread from bringing back what a delete that died had condemned. With
    two deletes of one thread at once, the first to finish must not remove the marker of the other, which may
    still die part-way: each writes its own bytes and removes the marker only while it is still its own."""
    first, second = make_saver(), make_saver()
    for n in (1, 2):
        put(first, "t", cid(n), cid(n - 1) if n > 1 else None)
    marker = first.plans.layout.deleting("t")
    plan = first.plans.delete_thread("t")
    reply = send(first, plan.send(None))  # the first delete has found the thread
    reply = send(first, plan.send(reply))  # and written its marker
    second_plan = second.plans.delete_thread("t")
    second_reply = send(second, second_plan.send(None))
    second_reply = send(second, second_plan.send(second_reply))  # so has the second, over it
    with contextlib.suppress(StopIteration):
        while True:
            reply = send(first, plan.send(reply))
    assert s3_client.get_object(Bucket=first.bucket, Key=marker)["Body"].read().startswith(b"delete_thread ")
    with contextlib.suppress(StopIteration):
        while True:
            second_reply = send(second, second_plan.send(second_reply))
    assert s3_client.list_objects_v2(Bucket=first.bucket, Prefix=f"{first.prefix}/threads/").get("KeyCount") == 0


def test_deleting_a_thread_that_was_never_written_is_one_list_and_writes_nothing(
    make_saver: Callable[[], S3Saver], s3_client: Any, count_requests: Callable[[Any], Any]
) -> None:
    """Deleting a thread that was never written (LangGraph's Agent Server deletes threads that never ran) is one 1-key
    LIST that finds nothing. Writing and removing a ``deleting`` marker would cost five requests, and leave on SeaweedFS
    an empty folder that gc counts as a foreign object for ever."""
    saver = make_saver()
    counter = count_requests(saver.client)
    saver.delete_thread("never-written")
    assert counter.snapshot() == {"ListObjectsV2": 1}
    assert s3_client.list_objects_v2(Bucket=saver.bucket, Prefix=f"{saver.prefix}/threads/").get("KeyCount") == 0


def _a_delete_that_dies(saver: S3Saver, thread_id: str, *, turns: int) -> None:
    """A conversation of ``turns`` turns, then a delete_thread that dies after the heads, at the records."""
    chat(saver, thread_id, turns)
    crash_at(saver, deletes_records)
    with pytest.raises(Crash):
        saver.delete_thread(thread_id)


def test_repair_does_not_bring_back_a_thread_whose_delete_died_part_way(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """delete_thread deletes the heads first; if it dies before the records, the ``deleting`` marker it wrote first
    keeps repair_thread from taking the records for a thread whose head was lost and bringing the deleted conversation
    back. Repair reports it, verify names it, and delete_thread run again finishes it, marker included."""
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        _a_delete_that_dies(saver, "gone", turns=3)
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        assert saver.get_tuple(cfg("gone")) is None  # the heads went first: it reads as deleted
        report = saver.repair_thread("gone")
        assert [n.status for n in report.namespaces] == ["deleting"] and not report.ok
        assert "delete_thread again" in report.namespaces[0].reason
        assert saver.get_tuple(cfg("gone")) is None
        found = saver.bucket_io.iterate(verify_thread(saver.plans.layout, saver.plans.codec, "gone"))
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
        graph = chat(saver, "again", 3)
        latest = graph.get_state(cfg("again"))
        client.delete_object(Bucket=bucket, Key=root_head_key(saver, "again"))
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        report = saver.repair_thread("again")
        assert [(n.status, n.head_id) for n in report.namespaces] == [
            ("repaired", latest.config["configurable"]["checkpoint_id"])
        ]
        assert chat_graph(saver).get_state(cfg("again")).values == latest.values


def test_gc_removes_the_marker_of_a_delete_that_died_once_nothing_else_is_left(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        _a_delete_that_dies(saver, "gone", turns=2)
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        report = run_gc(saver, grace_seconds=0)
        assert report.deleted["unfinished_delete"] == 1 and report.deleted["headless_namespace"] > 0
        assert report.foreign == 0
        assert client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/threads/").get("KeyCount", 0) == 0
