"""``copy_thread`` (and ``langgraph-s3 import``, which commits as a copy does): a copy lands whole or not at all.

A copy snapshots the source's heads, copies the objects, and writes the target's heads last with If-None-Match;
while it works the target is marked ``copying``, so that repair, verify and gc know what a copy (or an import) that
died left. These tests race it against writers, prune and a dead delete, and stop it at its head or at its marker,
on every server kind.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from helpers import BIG, Crash, cfg, cid, crash_at, deletes_records, ids, lose_first_answer, put, ver

from langgraph_s3_checkpoint import S3Saver, TargetThreadExistsError
from langgraph_s3_checkpoint._protocol import thread_edits
from langgraph_s3_checkpoint._protocol.operator_plans import Problem, export_thread, import_thread, verify_thread
from langgraph_s3_checkpoint._protocol.requests import CREATE, DeleteIfMatch, Put
from langgraph_s3_checkpoint.gc import gc as run_gc


def test_a_copy_onto_a_target_created_meanwhile_raises_and_keeps_the_other_writers_checkpoint(
    make_saver: Callable[[], S3Saver],
) -> None:
    """A copy whose target another writer created while it was copying raises TargetThreadExistsError (its head PUT's
    If-None-Match was refused) instead of returning as if it had copied, which would make a copy-then-delete "move" lose
    the source. The other writer's checkpoint stays."""
    copier, writer = make_saver(), make_saver()
    put(copier, "src", cid(1))
    put(copier, "src", cid(2), cid(1))
    original_names = copier.plans._names

    def names_then_a_writer(thread_id: str, ns: str) -> Any:
        put(writer, "dst", cid(9), source="input")  # lands between the copy's check and its commit
        return original_names(thread_id, ns)

    copier.plans._names = names_then_a_writer
    with pytest.raises(TargetThreadExistsError, match="another writer"):
        copier.copy_thread("src", "dst")
    reader = make_saver()
    assert ids(reader.list(cfg("dst"))) == [cid(9)]
    assert ids(reader.list(cfg("src"))) == [cid(2), cid(1)]


def test_a_copy_carries_the_writes_of_a_task_named_head(make_saver: Callable[[], S3Saver]) -> None:
    """The writes object of a task whose id is ``head`` ends in ``/head`` as a head's key does: what a copy carries over
    is decided by the one classifier of a thread's keys (``keys.classify``), as export's is, so that task's pending
    writes are copied."""
    saver = make_saver()
    put(saver, "source", cid(1))
    saver.put_writes(cfg("source", "", cid(1)), [("ch", "from the task named head")], "head")
    saver.put_writes(cfg("source", "", cid(1)), [("ch", "from another task")], "other")
    saver.copy_thread("source", "target")
    copied = make_saver().get_tuple(cfg("target"))
    assert copied is not None and copied.pending_writes is not None
    assert sorted(copied.pending_writes) == [
        ("head", "ch", "from the task named head"),
        ("other", "ch", "from another task"),
    ]


def test_a_copy_whose_head_answer_was_lost_finds_its_own_head(make_saver: Callable[[], S3Saver]) -> None:
    """A copy whose head PUT landed but whose answer was lost finds its own head on the retry: no error."""
    copier = make_saver()
    put(copier, "src", cid(1))
    lost = lose_first_answer(copier, lambda r: isinstance(r, Put) and r.mode == CREATE and r.key.endswith("/head"))
    copier.copy_thread("src", "dst")
    assert lost and ids(make_saver().list(cfg("dst"))) == [cid(1)]


def test_a_copy_takes_a_new_snapshot_when_the_source_is_pruned_meanwhile(
    make_saver: Callable[[], S3Saver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy snapshots the source's heads, copies the objects, then commits the heads. If the source moves on and a
    prune removes a large value the snapshot references (older than the grace period) before it was copied, the copy
    takes a new snapshot rather than commit a head whose value is gone."""
    monkeypatch.setattr(thread_edits, "PRUNE_GRACE", timedelta(0))  # stands in for a value written long ago
    source, copier = make_saver(), make_saver()
    big = {"big": "a" * BIG}
    put(source, "src", cid(1), values=big, versions={"big": ver(1)})
    original = copier.plans._copy_history
    moved: list[bool] = []

    def copy_after_the_source_moved(source_id: str, target_id: str, needed: set[str]) -> Any:
        if not moved:  # after the heads' snapshot: the source takes a step and is pruned
            moved.append(True)
            put(source, "src", cid(2), cid(1), values={"big": "b" * BIG}, versions={"big": ver(2)})
            make_saver().prune(["src"])
        return (yield from original(source_id, target_id, needed))

    copier.plans._copy_history = copy_after_the_source_moved  # type: ignore[assignment]
    copier.copy_thread("src", "dst")
    copied = make_saver().get_tuple(cfg("dst"))
    assert moved and copied is not None
    assert copied.checkpoint["id"] == cid(2) and copied.checkpoint["channel_values"]["big"] == "b" * BIG


def test_a_copy_onto_a_target_whose_delete_died_shows_none_of_its_old_records(
    make_saver: Callable[[], S3Saver],
) -> None:
    """A target whose delete_thread died after the heads still holds records; a copy of a pruned source (its chain has a
    missing link) would show them under the copy as committed. A target with objects but no head is deleted before the
    copy."""
    writer = make_saver()
    for n in (1, 2, 3):
        put(writer, "x", cid(n), cid(n - 1) if n > 1 else None)
    deleter = make_saver()
    crash_at(deleter, deletes_records)
    with pytest.raises(Crash):
        deleter.delete_thread("x")
    for n in (11, 12, 13):
        put(writer, "s", cid(n), cid(n - 1) if n > 11 else None)
    writer.prune(["s"], strategy="keep_latest")
    make_saver().copy_thread("s", "x")
    assert ids(make_saver().list(cfg("x"))) == ids(make_saver().list(cfg("s"))) == [cid(13)]


def test_a_copy_that_died_before_its_heads_is_not_made_a_history_by_repair(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """A copy_thread that died before its heads left the source's records under the target: its ``copying`` marker keeps
    repair_thread from taking them for a thread whose heads were lost and committing a copy that never committed. Repair
    and verify name the dead copy, and copying again first removes what it left."""
    writer = make_saver()
    for n in (1, 2, 3):
        put(writer, "s", cid(n), cid(n - 1) if n > 1 else None)
    copier = make_saver()
    target_head = copier.plans.layout.head("x", "")
    crash_at(copier, lambda r: isinstance(r, Put) and r.key == target_head)
    with pytest.raises(Crash):
        copier.copy_thread("s", "x")
    fresh = make_saver()
    [outcome] = fresh.repair_thread("x").namespaces
    assert outcome.status == "copying" and "copy_thread" in outcome.reason
    assert fresh.get_tuple(cfg("x")) is None
    layout = fresh.plans.layout
    found = fresh.bucket_io.iterate(verify_thread(layout, fresh.plans.codec, "x"))
    assert [p.key for p in found if isinstance(p, Problem) and "copy_thread" in p.problem] == [layout.copying("x")]
    make_saver().copy_thread("s", "x")  # again: the dead copy's objects go first
    assert ids(make_saver().list(cfg("x"))) == ids(make_saver().list(cfg("s"))) == [cid(3), cid(2), cid(1)]
    keys = [o["Key"] for o in s3_client.list_objects_v2(Bucket=writer.bucket, Prefix=layout.thread("x"))["Contents"]]
    assert layout.copying("x") not in keys and layout.deleting("x") not in keys


def test_gc_removes_what_a_copy_that_died_left(make_saver: Callable[[], S3Saver], s3_client: Any) -> None:
    """gc removes a dead copy's marker and the target's headless objects, and leaves the source alone."""
    writer = make_saver()
    put(writer, "s", cid(1))
    copier = make_saver()
    target_head = copier.plans.layout.head("x", "")
    crash_at(copier, lambda r: isinstance(r, Put) and r.key == target_head)
    with pytest.raises(Crash):
        copier.copy_thread("s", "x")
    report = run_gc(make_saver(), grace_seconds=0)
    assert report.deleted["unfinished_copy"] == 1 and report.deleted["headless_namespace"] > 0
    layout = writer.plans.layout
    assert s3_client.list_objects_v2(Bucket=writer.bucket, Prefix=layout.thread("x")).get("KeyCount") == 0
    assert ids(make_saver().list(cfg("s"))) == [cid(1)]


def test_an_import_that_died_before_its_heads_is_not_made_a_history_by_repair(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """An import (``langgraph-s3 import``) that died before its heads left the archive's records under the thread: the
    import marks its thread ``copying`` until its heads land, as copy_thread does, so repair, verify and gc treat what
    it left as they treat a dead copy's, and the import run again lands whole."""
    writer = make_saver()
    for n in (1, 2, 3):
        put(writer, "s", cid(n), cid(n - 1) if n > 1 else None)
    layout = writer.plans.layout
    archive = list(writer.bucket_io.iterate(export_thread(layout, writer.plans.codec, "s")))
    importer = make_saver()
    crash_at(importer, lambda r: isinstance(r, Put) and r.key == layout.head("x", ""))
    with pytest.raises(Crash):
        importer.bucket_io.run(import_thread(layout, importer.plans.codec, "x", archive))
    fresh = make_saver()
    [outcome] = fresh.repair_thread("x").namespaces
    assert outcome.status == "copying" and "an import" in outcome.reason and "import --replace" in outcome.reason
    assert fresh.get_tuple(cfg("x")) is None
    found = fresh.bucket_io.iterate(verify_thread(layout, fresh.plans.codec, "x"))
    assert [p.key for p in found if isinstance(p, Problem) and "an import" in p.problem] == [layout.copying("x")]
    report = run_gc(make_saver(), grace_seconds=0)
    assert report.deleted["unfinished_copy"] == 1 and report.deleted["headless_namespace"] > 0
    assert s3_client.list_objects_v2(Bucket=writer.bucket, Prefix=layout.thread("x")).get("KeyCount") == 0
    again = make_saver()
    assert again.bucket_io.run(import_thread(layout, again.plans.codec, "x", archive)) == len(archive)  # to the end
    assert ids(make_saver().list(cfg("x"))) == [cid(3), cid(2), cid(1)]
    keys = [o["Key"] for o in s3_client.list_objects_v2(Bucket=writer.bucket, Prefix=layout.thread("x"))["Contents"]]
    assert layout.copying("x") not in keys


def test_gc_removes_the_marker_of_a_copy_that_committed_and_died(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """A copy whose heads landed and which died before removing its ``copying`` marker: the marker protects
    nothing any more (every namespace has a head), so gc removes it, and the copy reads whole throughout."""
    writer = make_saver()
    for n in (1, 2):
        put(writer, "s", cid(n), cid(n - 1) if n > 1 else None)
    put(writer, "s", cid(3), ns="sub")
    copier = make_saver()
    marker = copier.plans.layout.copying("x")
    crash_at(copier, lambda r: isinstance(r, DeleteIfMatch) and r.key == marker)
    with pytest.raises(Crash):
        copier.copy_thread("s", "x")
    assert ids(make_saver().list(cfg("x"))) == [cid(2), cid(1)]
    assert run_gc(make_saver(), grace_seconds=0).deleted["unfinished_copy"] == 1
    keys = [
        o["Key"]
        for o in s3_client.list_objects_v2(Bucket=writer.bucket, Prefix=writer.plans.layout.thread("x"))["Contents"]
    ]
    assert marker not in keys
    assert ids(make_saver().list(cfg("x"))) == [cid(2), cid(1)]
    assert ids(make_saver().list(cfg("x", "sub"))) == [cid(3)]
