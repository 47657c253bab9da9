"""Rolling back runs (``delete_for_runs``): what a rollback removes, what it keeps, and what it leaves when it dies.

A rollback removes the checkpoints of the runs it names and moves each head back to the newest committed
checkpoint that survives; a namespace it empties is marked while it works, so that repair and gc know what a
rollback that died had condemned. Each test drives the public saver API on every server kind (boto3 on the bucket
plants crash leftovers and damage), with several savers standing for several processes. Rollbacks racing other
writers are in test_fencing.py, a rollback's pending writes in test_run_writes.py, every crash point and
interleaving on the in-memory bucket in test_simulation.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from helpers import (
    BIG,
    Crash,
    Run,
    cfg,
    checkpoint,
    cid,
    crash_at,
    crash_before_head,
    deletes_records,
    drive,
    head_put_of,
    ids,
    latest_id,
    put,
    put_plan,
    send,
    tuple_at,
    ver,
)
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_s3_checkpoint import CheckpointConflictError, S3Saver
from langgraph_s3_checkpoint._protocol.keys import Layout
from langgraph_s3_checkpoint._protocol.operator_plans import Problem, verify_thread
from langgraph_s3_checkpoint._protocol.requests import PRECONDITION_FAILED, Get
from langgraph_s3_checkpoint.gc import gc as run_gc


def test_a_rollback_moves_the_head_back_to_a_committed_checkpoint_never_to_a_leftover(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """The head moves back to the newest committed checkpoint below the run, never to the record of a put that died
    before its head (that checkpoint never committed); and a run whose head landed but whose record is missing (a
    head-only commit) is still the run's: its head goes too."""
    saver = make_saver()
    put(saver, "t", cid(1), run="run-a")
    crash_before_head(saver, "t", cid(2), cid(1))  # never committed
    put(saver, "t", cid(3), cid(1), run="run-b")
    saver.delete_for_runs(["run-b"])
    assert latest_id(make_saver(), "t") == cid(1)
    assert ids(make_saver().list(cfg("t"))) == [cid(1)]

    put(saver, "u", cid(11), run="run-c")
    put(saver, "u", cid(12), cid(11), run="run-d")
    s3_client.delete_object(Bucket=saver.bucket, Key=saver.plans.layout.record("u", "", cid(12)))
    saver.delete_for_runs(["run-d"])
    assert latest_id(make_saver(), "u") == cid(11)
    assert ids(make_saver().list(cfg("u"))) == [cid(11)]


def test_a_rollback_that_dies_after_the_head_is_not_undone_by_repair(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """Rolling back the run that holds a namespace's only checkpoints deletes its head, then its records. If it dies
    between the two, repair_thread must not take the headless records for a thread whose head was lost (that would bring
    the cancelled run back): the rollback marks the thread as delete_thread does, repair reports the dead rollback, and
    the rollback run again finishes, marker included."""
    saver = make_saver()
    put(saver, "t", cid(1), run="run-a")
    put(saver, "t", cid(2), cid(1), run="run-a")
    crash_at(saver, deletes_records)
    with pytest.raises(Crash):
        saver.delete_for_runs(["run-a"])
    fresh = make_saver()
    assert fresh.get_tuple(cfg("t")) is None  # the head went first
    [outcome] = fresh.repair_thread("t").namespaces
    assert outcome.status == "deleting" and "delete_for_runs(['run-a'])" in outcome.reason
    assert fresh.get_tuple(cfg("t")) is None
    make_saver().delete_for_runs(["run-a"])  # run again, it finishes, the dead attempt's marker with it
    assert s3_client.list_objects_v2(Bucket=saver.bucket, Prefix=f"{saver.prefix}/threads/").get("KeyCount") == 0


def test_a_rollback_that_empties_a_namespace_also_removes_the_puts_that_died_on_it(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """The record of another run's put that died before its head (continuing the run's head) can never commit once the
    head is gone: a rollback that empties the namespace deletes it with the run's records, so that repair_thread cannot
    take it for a lost head and commit it."""
    saver = make_saver()
    put(saver, "t", cid(1), run="run-a")
    put(saver, "t", cid(2), cid(1), run="run-a")
    crash_before_head(saver, "t", cid(3), cid(2), run="run-b")
    make_saver().delete_for_runs(["run-a"])
    assert make_saver().get_tuple(cfg("t")) is None
    assert [n.status for n in make_saver().repair_thread("t").namespaces] in ([], ["ok"])
    assert make_saver().get_tuple(cfg("t")) is None
    left = s3_client.list_objects_v2(Bucket=saver.bucket, Prefix=f"{saver.prefix}/threads/").get("Contents", [])
    assert not [obj["Key"] for obj in left if "/c/" in obj["Key"]]


def test_a_rollback_that_dies_in_a_subgraph_marks_only_that_namespace(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """A rollback that dies after removing a subgraph namespace's head marks that namespace only, not the thread: the
    live root namespace repairs as ok, the other namespace is reported as a dead rollback naming its run (not as a dead
    delete_thread, whose advice is to delete the thread), and gc removes that marker and the namespace's leftovers while
    the thread stays readable."""
    saver = make_saver()
    put(saver, "t", cid(1), run="run-a")
    put(saver, "t", cid(2), ns="sub", run="run-b")
    put(saver, "t", cid(3), cid(2), ns="sub", run="run-b")
    crash_at(saver, deletes_records)
    with pytest.raises(Crash):
        saver.delete_for_runs(["run-b"])
    layout = saver.plans.layout
    marker = Layout.deleting_in(layout.ns("t", "sub"))
    keys = [o["Key"] for o in s3_client.list_objects_v2(Bucket=saver.bucket, Prefix=layout.thread("t"))["Contents"]]
    assert marker in keys and layout.deleting("t") not in keys
    fresh = make_saver()
    assert latest_id(fresh, "t") == cid(1) and latest_id(fresh, "t", "sub") is None
    outcomes = {n.checkpoint_ns: n for n in fresh.repair_thread("t").namespaces}
    assert outcomes[""].status == "ok"
    assert outcomes["sub"].status == "deleting" and "delete_for_runs(['run-b'])" in outcomes["sub"].reason
    found = fresh.bucket_io.iterate(verify_thread(layout, fresh.plans.codec, "t"))
    problems = [f for f in found if isinstance(f, Problem)]
    assert [(p.key, "run-b" in p.problem and "rollback" in p.problem) for p in problems] == [(marker, True)]
    report = run_gc(fresh, grace_seconds=0)
    assert report.deleted["unfinished_delete"] == 1 and report.deleted["headless_namespace"] > 0
    assert latest_id(make_saver(), "t") == cid(1)
    keys = [o["Key"] for o in s3_client.list_objects_v2(Bucket=saver.bucket, Prefix=layout.thread("t"))["Contents"]]
    assert not [key for key in keys if key.startswith(layout.ns("t", "sub"))]


def test_a_rollback_where_the_head_was_lost_keeps_the_other_runs_history(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """In a namespace whose head was lost otherwise (deleted by hand), a rollback deletes only its run's records: the
    other runs' committed history stays, so repair_thread can still rebuild the head. Only a namespace a rollback
    empties (itself, or one that died: its marker is there) loses other runs' records."""
    saver = make_saver()
    put(saver, "t", cid(1), run="run-a")
    put(saver, "t", cid(2), cid(1), run="run-a")
    put(saver, "t", cid(3), cid(2), run="run-a")
    put(saver, "t", cid(4), cid(3), run="run-b")
    s3_client.delete_object(Bucket=saver.bucket, Key=saver.plans.layout.head("t", ""))
    make_saver().delete_for_runs(["run-b"])
    assert [(n.status, n.head_id) for n in make_saver().repair_thread("t").namespaces] == [("repaired", cid(3))]
    assert ids(make_saver().list(cfg("t"))) == [cid(3), cid(2), cid(1)]


def test_a_run_index_entry_that_is_not_utf8_does_not_stop_a_rollback(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """A run-index entry that is not UTF-8 (damaged, or foreign) only bounds the rollback's walk: the run is still
    rolled back, where decoding the entry would raise a bare UnicodeDecodeError naming no key."""
    saver = make_saver()
    put(saver, "t", cid(1), run="run-a")
    put(saver, "t", cid(2), cid(1), run="run-b")
    put(saver, "t", cid(3), cid(2), run="run-b")
    layout = saver.plans.layout
    s3_client.put_object(Bucket=saver.bucket, Key=layout.run_entry("run-b", "t", ""), Body=b"\xff\xfe")
    make_saver().delete_for_runs(["run-b"])
    assert ids(make_saver().list(cfg("t"))) == [cid(1)]


def test_run_ids_that_are_not_str_match_as_text(make_saver: Callable[[], S3Saver]) -> None:
    """LangGraph copies a ``run_id`` from the config into the metadata as given (an int, a UUID): run ids match as text,
    either way round, as PostgresSaver's query matches them (``delete_for_runs(["12"])`` rolls back run 12,
    ``delete_for_runs([uuid])`` the run whose id is that UUID)."""
    saver = make_saver()
    run = uuid.UUID(int=7)
    for n, run_id in ((1, "keep"), (2, 12), (3, run)):
        saver.put(cfg("t", "", cid(n - 1) if n > 1 else None), checkpoint(n), {"source": "loop", "run_id": run_id}, {})  # type: ignore[typeddict-item]
    make_saver().delete_for_runs(["12"])
    assert ids(make_saver().list(cfg("t"))) == [cid(3), cid(1)]
    make_saver().delete_for_runs([run])  # type: ignore[list-item]
    assert ids(make_saver().list(cfg("t"))) == [cid(1)]


def test_a_saver_forgets_the_run_index_entries_its_own_rollback_deleted(make_saver: Callable[[], S3Saver]) -> None:
    """After its own delete_for_runs a saver must not believe the run's index entries still exist: a late commit of the
    cancelled run is refused (the head it moved back names the run), and a second delete_for_runs finds nothing of it;
    a later put on the survivor commits and reads back."""
    saver = make_saver()
    put(saver, "t", cid(1), run="run-a", values={"big": "1" * BIG}, versions={"big": ver(1)})
    put(saver, "t", cid(2), cid(1), run="run-b", values={"big": "2" * BIG}, versions={"big": ver(2)})
    saver.delete_for_runs(["run-b"])
    with pytest.raises(CheckpointConflictError, match="rolled back"):
        put(saver, "t", cid(3), cid(1), run="run-b", values={"big": "3" * BIG}, versions={"big": ver(2, "late")})
    saver.delete_for_runs(["run-b"])
    reader = make_saver()
    assert ids(reader.list(cfg("t"))) == [cid(1)]
    put(saver, "t", cid(4), cid(1), run="run-c", values={"big": "1" * BIG}, versions={"big": ver(1)}, new={})
    assert ids(reader.list(cfg("t"))) == [cid(4), cid(1)]
    assert tuple_at(reader, cfg("t")).checkpoint["channel_values"]["big"] == "1" * BIG


def test_a_rollback_to_a_detached_checkpoint_keeps_the_history_below_it(make_saver: Callable[[], S3Saver]) -> None:
    """When delete_for_runs moves the head back to a detached record (a fork whose id is older than the head's), every
    older checkpoint stays listed and readable by id, as in InMemorySaver: the detached record's empty chain link must
    not hide them."""
    saver, memory = make_saver(), InMemorySaver()
    for target in (saver, memory):
        put(target, "t", cid(1), run="run-a")
        put(target, "t", cid(3), cid(1), run="run-b")
    forker = make_saver()
    assert forker.get_tuple(cfg("t", "", cid(1))) is not None
    for target in (forker, memory):
        put(target, "t", cid(2), cid(1), source="update")  # older than the head: detached
    saver.delete_for_runs(["run-b"])
    del memory.storage["t"][""][cid(3)]  # InMemorySaver has no delete_for_runs
    reader = make_saver()
    assert latest_id(reader, "t") == cid(2)
    assert ids(reader.list(cfg("t"))) == ids(memory.list(cfg("t"))) == [cid(2), cid(1)]
    assert reader.get_tuple(cfg("t", "", cid(1))) is not None


def test_gc_after_a_rollback_to_a_detached_checkpoint_keeps_the_history_below_it(
    make_saver: Callable[[], S3Saver],
) -> None:
    """gc applies the readers' chain rule: after a rollback to a detached record it keeps the checkpoints below it (they
    are history, not orphans to delete for good), and a later put continues that history."""
    saver = make_saver()
    put(saver, "t", cid(1), run="run-a")
    put(saver, "t", cid(3), cid(1), run="run-b")
    forker = make_saver()
    assert forker.get_tuple(cfg("t", "", cid(1))) is not None
    put(forker, "t", cid(2), cid(1), source="update")  # older than the head: detached
    saver.delete_for_runs(["run-b"])
    run_gc(saver, grace_seconds=0)
    put(saver, "t", cid(4), cid(2))
    assert ids(make_saver().list(cfg("t"))) == [cid(4), cid(2), cid(1)]


def test_a_late_step_of_a_run_after_another_process_rolled_it_back_is_rolled_back_by_the_next_rollback(
    make_saver: Callable[[], S3Saver],
) -> None:
    """A worker that still holds the head of its run's first checkpoint puts the run's next step after another process
    rolled the run back (the thread is empty again). The step commits as the thread's first checkpoint, as it would
    on InMemorySaver, so it must index the run again: the worker had left the entries out because the parent it
    continued was its own run's, but the rollback deleted them with the parent. Without them a second rollback of the
    run did not find the step, which stayed visible."""
    worker, operator = make_saver(), make_saver()
    put(worker, "t", cid(1), run="run-a")
    operator.delete_for_runs(["run-a"])
    assert latest_id(make_saver(), "t") is None
    put(worker, "t", cid(2), cid(1), run="run-a")
    assert latest_id(make_saver(), "t") == cid(2)
    operator.delete_for_runs(["run-a"])
    assert latest_id(make_saver(), "t") is None
    assert ids(make_saver().list(cfg("t"))) == []


def test_a_rollback_of_a_running_run_refuses_its_step_in_flight_and_its_later_steps(
    make_saver: Callable[[], S3Saver],
) -> None:
    """The Agent Server rolls back a run that is still running (a new run with ``multitask_strategy="rollback"``, or a
    cancel with ``action="rollback"``), and the run's put may be on its way: its record stored, its head PUT not yet
    applied. Deleting the run's records alone let that head PUT land after the rollback returned, and the thread
    showed the step of a run that no longer existed. The rollback now rewrites the head (the same checkpoint, so a new
    ETag, naming the run as rolled back): the late head PUT is refused, the put withdraws its record and raises, and a
    step of the run that reads the head only afterwards is refused too. Another run goes on as usual."""
    worker, operator = make_saver(), make_saver()
    put(worker, "t", cid(1), run="run-a")
    is_head = head_put_of(worker, "t")
    late: list[Any] = []

    def on_batch(step: list[Any]) -> list[Any] | None:
        if not any(is_head(r) for r in step):
            return None
        others = iter(send(worker, [r for r in step if not is_head(r)]))  # the record lands
        operator.delete_for_runs(["run-b"])  # while the head PUT is on its way
        late.extend(send(worker, [r for r in step if is_head(r)]))
        heads = iter(late)
        return [next(heads) if is_head(r) else next(others) for r in step]

    with pytest.raises(CheckpointConflictError, match="rolled back"):
        drive(worker, put_plan(worker, "t", cid(2), cid(1), run="run-b"), on_batch)
    assert late == [PRECONDITION_FAILED]
    assert ids(make_saver().list(cfg("t"))) == [cid(1)]

    straggler = make_saver()
    with pytest.raises(CheckpointConflictError, match="rolled back"):
        put(straggler, "t", cid(3), cid(1), run="run-b")
    assert ids(make_saver().list(cfg("t"))) == [cid(1)]
    put(straggler, "t", cid(4), cid(1), run="run-c")
    assert ids(make_saver().list(cfg("t"))) == [cid(4), cid(1)]


def test_a_rollback_of_a_run_others_continued_leaves_their_head_holding_its_checkpoint(
    make_saver: Callable[[], S3Saver],
) -> None:
    """A run whose checkpoints another run continued cannot move the head: the head is not fenced against it (it names
    no run), only rewritten to name the link the rollback deletes below it (chain.py, "Deleted links"), and the worker
    holding it continues without a conflict (its put, refused on the old ETag, finds the head holding its parent)."""
    worker, operator = make_saver(), make_saver()
    run_c = Run()
    put(worker, "t", cid(1), run="run-a")
    put(worker, "t", cid(2), cid(1), run="run-b")
    put(worker, "t", cid(3), cid(2), run="run-c", in_run=run_c)
    head_key = worker.plans.layout.head("t", "")
    operator.delete_for_runs(["run-b"])
    after = send(operator, [Get(head_key)])[0]
    codec = operator.plans.codec
    assert codec.peek_head_id(head_key, after.body) == cid(3)
    assert codec.rolled_back_runs(head_key, after.body) == []
    assert codec.peek_chain(head_key, after.body)[2] == {cid(2): cid(1)}
    put(worker, "t", cid(4), cid(3), run="run-c", in_run=run_c)
    assert latest_id(make_saver(), "t") == cid(4)
    assert ids(make_saver().list(cfg("t"))) == [cid(4), cid(3), cid(1)]
