"""Regression tests for commit-protocol defects of 101cb5b, fixed in 1267803.

Each test drives the public saver API (plus boto3 on the bucket to plant crash leftovers and foreign
keys, and, where a race must be reproduced exactly, a plan stepped by hand) on every server kind.
A randomized test compares the raw saver API with InMemorySaver. The last tests (found while writing
these, not fixed by 1267803) pin defects that remain: rolling back to a detached survivor, and foreign
folders under ``threads/``.
"""

from __future__ import annotations

import contextlib
import operator
import os
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Annotated, Any, TypedDict, cast

import pytest
from helpers import Crash, cfg, crash_at, deletes_records, lose_first_answer
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from langgraph_s3_checkpoint import (
    CheckpointConflictError,
    ClockSkewError,
    CorruptObjectError,
    NewerFormatError,
    S3Saver,
    TargetThreadExistsError,
    maintenance,
)
from langgraph_s3_checkpoint.gc import gc as run_gc
from langgraph_s3_checkpoint.keys import Layout
from langgraph_s3_checkpoint.local import LocalS3Server
from langgraph_s3_checkpoint.ops import Problem, export_thread, import_thread, verify_thread
from langgraph_s3_checkpoint.requests import PRECONDITION_FAILED, Delete, DeleteIfMatch, Put

BIG = 6000
"""Characters of a value large enough to be stored as its own object."""
LONG_THREAD = "long-" + "x" * 300
"""A thread id too long to be a key segment (stored behind a digest and a ``name`` object)."""


# -- helpers ----------------------------------------------------------------------------------------
@pytest.fixture
def make_saver(s3_server: LocalS3Server, bucket: str, prefix: str) -> Iterator[Callable[[], S3Saver]]:
    """``make_saver()`` opens another saver (another process, with its own memory) on the same prefix."""
    savers: list[S3Saver] = []

    def make() -> S3Saver:
        saver = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
        savers.append(saver)
        return saver

    yield make
    for saver in savers:
        saver.close()


def cid(n: int, sub: int = 0) -> str:
    """Checkpoint ids that sort by (n, sub)."""
    return f"1f0{n:06d}-{sub:04d}-6000-8000-000000000000"


def ver(n: int, tag: str = "0") -> str:
    """A channel version in LangGraph's format (``{counter:032}.{random}``)."""
    return f"{n:032}.{tag}"


def put(
    saver: Any,
    thread: str,
    checkpoint_id: str,
    parent: str | None = None,
    *,
    ns: str = "",
    values: dict[str, Any] | None = None,
    versions: dict[str, str] | None = None,
    new: dict[str, str] | None = None,
    source: str = "loop",
    run: str | None = None,
) -> Any:
    """Put one checkpoint: ``values``/``versions`` (default: a small ``n``), ``new`` the changed versions."""
    values = {"n": checkpoint_id} if values is None else values
    versions = {ch: ver(1, checkpoint_id) for ch in values} if versions is None else versions
    checkpoint = empty_checkpoint()
    checkpoint["id"] = checkpoint_id
    checkpoint["channel_values"] = dict(values)
    checkpoint["channel_versions"] = dict(versions)
    metadata: dict[str, Any] = {"source": source, "step": 0}
    if run is not None:
        metadata["run_id"] = run
    return saver.put(cfg(thread, ns, parent), checkpoint, metadata, dict(versions if new is None else new))


def ids(tuples: Any) -> list[str]:
    return [t.checkpoint["id"] for t in tuples]


def latest_id(saver: S3Saver, thread: str, ns: str = "") -> str | None:
    tup = saver.get_tuple(cfg(thread, ns))
    return None if tup is None else tup.checkpoint["id"]


def send(saver: S3Saver, requests: list[Any]) -> list[Any]:
    """Send one batch of requests through the saver's I/O shell, as its drivers would."""

    def one_batch() -> Any:
        return (yield requests)

    shell = getattr(saver, "_store", None) or saver._io  # type: ignore[attr-defined]
    return cast(list[Any], shell.run(one_batch()))


def drive(saver: S3Saver, plan: Any, on_batch: Callable[[list[Any]], list[Any] | None]) -> Any:
    """Run a plan, letting ``on_batch(requests)`` answer a batch itself (or return None to send it)."""
    reply: Any = None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration as stop:
            return stop.value
        answered = on_batch(step)
        reply = send(saver, step) if answered is None else answered


def head_put_of(saver: S3Saver, thread: str, ns: str = "") -> Callable[[Any], bool]:
    key = saver._core.layout.head(thread, ns)
    return lambda request: isinstance(request, Put) and request.key == key


def put_plan(saver: S3Saver, thread: str, checkpoint_id: str, parent: str | None = None, **kw: Any) -> Any:
    """The plan of ``put`` (same arguments as :func:`put`), not yet started."""

    class Capture:
        plan: Any = None

        def put(self, *args: Any) -> None:
            self.plan = saver._core.put(*args)

    capture = Capture()
    put(capture, thread, checkpoint_id, parent, **kw)
    return capture.plan


def crash_before_head(saver: S3Saver, thread: str, checkpoint_id: str, parent: str | None = None, **kw: Any) -> None:
    """A put that dies after everything but its head PUT landed: its record is an uncommitted leftover."""
    is_head = head_put_of(saver, thread, kw.get("ns", ""))

    def on_batch(step: list[Any]) -> list[Any] | None:
        if any(is_head(r) for r in step):
            send(saver, [r for r in step if not is_head(r)])
            raise Crash
        return None

    with pytest.raises(Crash):
        drive(saver, put_plan(saver, thread, checkpoint_id, parent, **kw), on_batch)


# -- a: per-task writes with InMemorySaver's rule -----------------------------------------------------
WRITE_CALLS = [
    ("task-a", [("__interrupt__", "first question")]),
    ("task-a", [("__resume__", "first answer"), ("x", 1), ("y", 2)]),
    ("task-a", [("__interrupt__", "second question")]),
    ("task-a", [("__resume__", "second answer"), ("x", 10)]),
    ("task-a", [("x", 100), ("z", 3)]),
    ("task-b", [("y", "b1")]),
    ("task-b", [("y", "b2"), ("w", "b3")]),
    ("task-b", [("__error__", "boom")]),
    ("task-b", [("__error__", "boom again")]),
]


def test_a_put_writes_merge_like_in_memory_saver(make_saver: Callable[[], S3Saver]) -> None:
    """Defect: writes were keyed per put_writes call (by the call's first index), so a task's later calls
    (a second resume value, a new special write in a combined call, regular writes after a resume) were
    dropped or overwrote the wrong index. All writes must follow InMemorySaver's per-(task, idx) rule."""
    saver, fresh, memory = make_saver(), make_saver(), InMemorySaver()
    for target in (saver, memory):
        config = put(target, "t", cid(1))
        for task, writes in WRITE_CALLS:
            target.put_writes(config, writes, task)
    expected = memory.get_tuple(cfg("t")).pending_writes
    assert saver.get_tuple(cfg("t")).pending_writes == expected
    assert fresh.get_tuple(cfg("t", "", cid(1))).pending_writes == expected
    assert next(iter(fresh.list(cfg("t")))).pending_writes == expected


class TwoNodes(TypedDict):
    log: Annotated[list[str], operator.add]


def two_parallel_nodes(checkpointer: Any) -> tuple[Any, dict[str, int]]:
    """``asks_twice`` interrupts twice, then completes; ``flaky`` (parallel) fails its first three runs, so
    the step that ``asks_twice`` completes in does not finish: its writes must be read back from storage."""
    calls = {"flaky": 0, "asks_twice": 0}
    asked = threading.Event()

    def asks_twice(state: TwoNodes) -> dict[str, Any]:
        calls["asks_twice"] += 1
        try:
            first = interrupt("first?")
            second = interrupt("second?")
            return {"log": [f"asked:{first}:{second}"]}
        finally:
            asked.set()

    def flaky(state: TwoNodes) -> dict[str, Any]:
        calls["flaky"] += 1
        if calls["flaky"] < 4:
            # Fail only once the other node has ended and its writes are stored (a failure first would
            # cancel it, and which one wins would be a race).
            asked.wait(10)
            asked.clear()
            time.sleep(0.5)
            raise RuntimeError(f"flaky failure {calls['flaky']}")
        return {"log": ["flaky"]}

    builder = StateGraph(TwoNodes)
    builder.add_node("asks_twice", asks_twice)
    builder.add_node("flaky", flaky)
    builder.add_edge(START, "asks_twice")
    builder.add_edge(START, "flaky")
    builder.add_edge("asks_twice", END)
    builder.add_edge("flaky", END)
    return builder.compile(checkpointer=checkpointer), calls


def test_a_graph_node_interrupting_twice(make_saver: Callable[[], S3Saver]) -> None:
    """Defect (graph form): a node interrupts twice and completes beside a parallel node that keeps failing;
    the completing call ``put_writes([resume, resume, log])`` was refused (its batch key existed), so the
    completed node ran a fourth time on the last resume. Must run and end exactly as with InMemorySaver."""
    results = []
    for checkpointer in (InMemorySaver(), make_saver()):
        graph, calls = two_parallel_nodes(checkpointer)
        config = {"configurable": {"thread_id": "g"}}
        outputs: list[Any] = []
        for command in ({"log": []}, Command(resume="one"), Command(resume="two"), None):
            try:
                out = graph.invoke(command, config)
            except RuntimeError as exc:
                outputs.append(str(exc))
                continue
            # Interrupt ids derive from random task ids: compare the questions asked.
            outputs.append({k: [i.value for i in v] if k == "__interrupt__" else v for k, v in out.items()})
        state = graph.get_state(config)
        results.append((outputs, state.values, state.next, calls))
    assert results[1] == results[0]
    assert sorted(results[1][1]["log"]) == ["asked:one:two", "flaky"]
    assert results[1][3] == {"flaky": 4, "asks_twice": 3}  # its completed run's writes were kept


# -- b: writes of a checkpoint without a record ------------------------------------------------------
def test_b_writes_without_record_are_nobodys(make_saver: Callable[[], S3Saver]) -> None:
    """Defect: writes stored for a checkpoint id that has no record (here: never put) were listed after
    the next newer record and attributed to it by list()."""
    saver = make_saver()
    put(saver, "t", cid(1))
    put(saver, "t", cid(3), cid(1))
    saver.put_writes(cfg("t", "", cid(2)), [("x", "stray")], "task")
    listed = list(saver.list(cfg("t")))
    assert ids(listed) == [cid(3), cid(1)]
    assert [t.pending_writes for t in listed] == [[], []]
    assert saver.get_tuple(cfg("t")).pending_writes == []


# -- c: delete_for_runs --------------------------------------------------------------------------------
def test_c_delete_for_runs_never_promotes_a_leftover(make_saver: Callable[[], S3Saver], s3_client: Any) -> None:
    """Defect: delete_for_runs moved the head back to the newest record below the run, even a put's
    leftover that never committed; and a run whose head landed but whose record is missing (head-only
    commit) was not recognised as the run's, so its head stayed."""
    saver = make_saver()
    put(saver, "t", cid(1), run="run-a")
    crash_before_head(saver, "t", cid(2), cid(1))  # never committed
    put(saver, "t", cid(3), cid(1), run="run-b")
    saver.delete_for_runs(["run-b"])
    assert latest_id(make_saver(), "t") == cid(1)
    assert ids(make_saver().list(cfg("t"))) == [cid(1)]

    put(saver, "u", cid(11), run="run-c")
    put(saver, "u", cid(12), cid(11), run="run-d")
    s3_client.delete_object(Bucket=saver.bucket, Key=saver._core.layout.record("u", "", cid(12)))
    saver.delete_for_runs(["run-d"])
    assert latest_id(make_saver(), "u") == cid(11)
    assert ids(make_saver().list(cfg("u"))) == [cid(11)]


def test_c_a_rollback_of_a_threads_only_run_that_dies_is_not_brought_back_by_repair(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """Defect: rolling back the run that holds a namespace's only checkpoints deletes its head, then its records;
    a rollback that died between the two left them headless, and repair_thread took them for a thread whose head
    was lost and brought the cancelled run back. The rollback now marks the thread as delete_thread does."""
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


def test_c_a_rollback_that_empties_a_namespace_takes_the_puts_that_died_on_it(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """Found by the adversarial review: rolling back the run that held a namespace's only checkpoints left the
    record of another run's put that had died before its head (newer than the head, continuing it); with no head
    left, repair_thread took that record for a lost head and committed it. Such records can never commit once the
    head is gone: the rollback deletes them with the run's."""
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


def test_c_a_dead_rollback_of_a_subgraphs_only_run_marks_that_namespace_only(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """Found by the adversarial review: a rollback that died after removing a namespace's head marked the whole
    thread, so the live thread kept a marker that verify reported as a dead delete_thread (advising to delete
    the thread), that gc never removed, and that made repair refuse the thread's other namespaces. A rollback
    marks only the namespace it empties, and the messages name the rollback and its run."""
    saver = make_saver()
    put(saver, "t", cid(1), run="run-a")
    put(saver, "t", cid(2), ns="sub", run="run-b")
    put(saver, "t", cid(3), cid(2), ns="sub", run="run-b")
    crash_at(saver, deletes_records)
    with pytest.raises(Crash):
        saver.delete_for_runs(["run-b"])
    layout = saver._core.layout
    marker = Layout.deleting_in(layout.ns("t", "sub"))
    keys = [o["Key"] for o in s3_client.list_objects_v2(Bucket=saver.bucket, Prefix=layout.thread("t"))["Contents"]]
    assert marker in keys and layout.deleting("t") not in keys
    fresh = make_saver()
    assert latest_id(fresh, "t") == cid(1) and latest_id(fresh, "t", "sub") is None
    outcomes = {n.checkpoint_ns: n for n in fresh.repair_thread("t").namespaces}
    assert outcomes[""].status == "ok"
    assert outcomes["sub"].status == "deleting" and "delete_for_runs(['run-b'])" in outcomes["sub"].reason
    found = fresh.bucket_io.iterate(verify_thread(layout, fresh._core.codec, "t"))
    problems = [f for f in found if isinstance(f, Problem)]
    assert [(p.key, "run-b" in p.problem and "rollback" in p.problem) for p in problems] == [(marker, True)]
    report = run_gc(fresh, grace_seconds=0)
    assert report.deleted["unfinished_delete"] == 1 and report.deleted["headless_namespace"] > 0
    assert latest_id(make_saver(), "t") == cid(1)
    keys = [o["Key"] for o in s3_client.list_objects_v2(Bucket=saver.bucket, Prefix=layout.thread("t"))["Contents"]]
    assert not [key for key in keys if key.startswith(layout.ns("t", "sub"))]


def test_c_a_rollback_on_a_namespace_whose_head_was_lost_keeps_the_other_runs_history(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """Found by the adversarial review: a rollback in a namespace whose head had been lost otherwise (deleted by
    hand) took every other run's record that continued a checkpoint for a dead put and deleted them, committed
    history included, so repair_thread could no longer rebuild the head. Only a namespace a rollback emptied
    (itself, or one that died: its marker is there) loses other runs' records."""
    saver = make_saver()
    put(saver, "t", cid(1), run="run-a")
    put(saver, "t", cid(2), cid(1), run="run-a")
    put(saver, "t", cid(3), cid(2), run="run-a")
    put(saver, "t", cid(4), cid(3), run="run-b")
    s3_client.delete_object(Bucket=saver.bucket, Key=saver._core.layout.head("t", ""))
    make_saver().delete_for_runs(["run-b"])
    assert [(n.status, n.head_id) for n in make_saver().repair_thread("t").namespaces] == [("repaired", cid(3))]
    assert ids(make_saver().list(cfg("t"))) == [cid(3), cid(2), cid(1)]


def test_c_delete_for_runs_with_a_damaged_run_index_entry(make_saver: Callable[[], S3Saver], s3_client: Any) -> None:
    """Defect: a run-index entry that is not UTF-8 (damaged, or foreign) made delete_for_runs raise a bare
    UnicodeDecodeError naming no key, and the run could not be deleted. The entry only bounds the walk."""
    saver = make_saver()
    put(saver, "t", cid(1), run="run-a")
    put(saver, "t", cid(2), cid(1), run="run-b")
    put(saver, "t", cid(3), cid(2), run="run-b")
    layout = saver._core.layout
    s3_client.put_object(Bucket=saver.bucket, Key=layout.run_entry("run-b", "t", ""), Body=b"\xff\xfe")
    make_saver().delete_for_runs(["run-b"])
    assert ids(make_saver().list(cfg("t"))) == [cid(1)]


def test_c_delete_for_runs_with_run_ids_that_are_not_str(make_saver: Callable[[], S3Saver]) -> None:
    """Defect: LangGraph copies a ``run_id`` from the config into the metadata as given (an int, a UUID).
    delete_for_runs(["12"]) then deleted nothing, and delete_for_runs([12]) raised a bare AttributeError.
    Run ids match as text, either way round (as PostgresSaver's query matches them)."""
    saver = make_saver()
    run = uuid.UUID(int=7)
    for n, run_id in ((1, "keep"), (2, 12), (3, run)):
        checkpoint = empty_checkpoint()
        checkpoint["id"] = cid(n)
        saver.put(cfg("t", "", cid(n - 1) if n > 1 else None), checkpoint, {"source": "loop", "run_id": run_id}, {})
    make_saver().delete_for_runs(["12"])
    assert ids(make_saver().list(cfg("t"))) == [cid(3), cid(1)]
    make_saver().delete_for_runs([run])  # type: ignore[list-item]
    assert ids(make_saver().list(cfg("t"))) == [cid(1)]


def test_c_list_before_an_empty_id_is_unbounded(make_saver: Callable[[], S3Saver]) -> None:
    """Found by the differential fuzzer: ``before`` with an empty checkpoint id listed nothing, where
    InMemorySaver treats it as no bound."""
    saver, memory = make_saver(), InMemorySaver()
    for target in (saver, memory):
        put(target, "t", cid(1))
        put(target, "t", cid(2), cid(1))
    unbounded = {"configurable": {"checkpoint_id": ""}}
    for config in (cfg("t"), None):
        expected = ids(memory.list(config, before=unbounded))
        assert expected == [cid(2), cid(1)] and ids(saver.list(config, before=unbounded)) == expected


# -- d: prune ------------------------------------------------------------------------------------------
def test_d_prune_spares_a_forks_fresh_large_value(make_saver: Callable[[], S3Saver]) -> None:
    """Defect: prune deleted unreferenced large values whose version is below the head's whatever their
    age, but a fork in flight numbers its versions from an older checkpoint: its freshly written value
    went, and the fork's checkpoint, once committed, could not be read."""
    saver, forker = make_saver(), make_saver()
    for n in (1, 2, 3):
        put(saver, "t", cid(n), cid(n - 1) if n > 1 else None, values={"big": f"{n}" * BIG}, versions={"big": ver(n)})
    forker.get_tuple(cfg("t", "", cid(1)))
    plan = put_plan(
        forker, "t", cid(4), cid(1), values={"big": "f" * BIG}, versions={"big": ver(2, "fork")}, source="fork"
    )
    is_head = head_put_of(forker, "t")
    pruned = []

    def on_batch(step: list[Any]) -> None:
        if any(is_head(r) for r in step) and not pruned:
            saver.prune(["t"])  # the fork's value is written, its head is not yet
            pruned.append(True)

    drive(forker, plan, on_batch)
    assert pruned
    assert make_saver().get_tuple(cfg("t")).checkpoint["channel_values"]["big"] == "f" * BIG


class _AheadClock(datetime):
    """This machine's clock, 15 minutes fast."""

    @classmethod
    def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
        return datetime.now(tz) + timedelta(minutes=15)


def test_d_prune_judges_age_by_the_server_clock(
    make_saver: Callable[[], S3Saver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: prune judged "young enough to be a put in flight" by the local clock; a machine whose clock
    is 15 minutes fast deleted the value a put had just written, before that put committed."""
    saver, pruner = make_saver(), make_saver()
    put(saver, "t", cid(1), values={"big": "1" * BIG}, versions={"big": ver(1)})
    plan = put_plan(saver, "t", cid(2), cid(1), values={"big": "2" * BIG}, versions={"big": ver(2)})
    is_head = head_put_of(saver, "t")
    pruned = []

    def on_batch(step: list[Any]) -> None:
        if any(is_head(r) for r in step) and not pruned:
            with monkeypatch.context() as m:
                m.setattr(maintenance, "datetime", _AheadClock)
                pruner.prune(["t"])
            pruned.append(True)

    drive(saver, plan, on_batch)
    assert pruned
    assert make_saver().get_tuple(cfg("t")).checkpoint["channel_values"]["big"] == "2" * BIG


# -- e: lost answer, then a successor ------------------------------------------------------------------
def test_e_lost_answer_then_successor(make_saver: Callable[[], S3Saver]) -> None:
    """Defect: a head PUT that was applied but whose answer was lost (botocore retried, got 412) was taken
    for a conflict when another writer had already committed on top of it: the put raised and deleted
    its record, which the successor names as its parent."""
    a, b = make_saver(), make_saver()
    put(a, "t", cid(1))
    is_head = head_put_of(a, "t")
    answered = []

    def on_batch(step: list[Any]) -> list[Any] | None:
        if not any(is_head(r) for r in step) or answered:
            return None
        replies = send(a, step)  # the head lands...
        b.get_tuple(cfg("t"))
        put(b, "t", cid(3), cid(2))  # ...another writer continues it...
        answered.append(True)
        return [PRECONDITION_FAILED if is_head(r) else reply for r, reply in zip(step, replies, strict=True)]

    config = drive(a, put_plan(a, "t", cid(2), cid(1)), on_batch)  # ...and the retry's answer is 412
    assert answered and config["configurable"]["checkpoint_id"] == cid(2)
    reader = make_saver()
    assert ids(reader.list(cfg("t"))) == [cid(3), cid(2), cid(1)]
    head = reader.get_tuple(cfg("t"))
    assert head.checkpoint["id"] == cid(3) and reader.get_tuple(head.parent_config) is not None


# -- f: head-only commit repaired before a fork ----------------------------------------------------------
def test_f_fork_keeps_a_head_only_commit(make_saver: Callable[[], S3Saver], s3_client: Any) -> None:
    """Defect: when the head's record was missing (a head-only commit: the record PUT failed), a fork that
    joined the head replaced it without restoring the record, so that checkpoint vanished from history."""
    saver = make_saver()
    put(saver, "t", cid(1))
    put(saver, "t", cid(2), cid(1))
    s3_client.delete_object(Bucket=saver.bucket, Key=saver._core.layout.record("t", "", cid(2)))
    forker = make_saver()
    assert forker.get_tuple(cfg("t", "", cid(1))) is not None
    put(forker, "t", cid(3), cid(1), source="update")
    assert ids(make_saver().list(cfg("t"))) == [cid(3), cid(2), cid(1)]


def test_f_history_shows_a_head_only_commit_before_anyone_reads_the_latest(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """Defect: a head-only commit (the record PUT lost, the head landed) was missing from ``list()`` (a UI's
    ``get_state_history``) until a latest read restored its record; the head, a copy of the record, now stands in
    for it at its place in the history, with its writes, in every listing that reaches it."""
    saver = make_saver()
    for n in (1, 2, 3):
        put(saver, "t", cid(n), cid(n - 1) if n > 1 else None)
    saver.put_writes(cfg("t", "", cid(3)), [("c", "pending")], "task-1")
    s3_client.delete_object(Bucket=saver.bucket, Key=saver._core.layout.record("t", "", cid(3)))
    reader = make_saver()
    history = list(reader.list(cfg("t")))
    assert ids(history) == [cid(3), cid(2), cid(1)]
    assert [w[1:] for w in history[0].pending_writes] == [("c", "pending")]
    assert ids(reader.list(cfg("t"), limit=1)) == [cid(3)]
    assert ids(reader.list(cfg("t"), before=cfg("t", "", cid(3)))) == [cid(2), cid(1)]
    assert ids(reader.list(None, filter={"step": 0})) == [cid(3), cid(2), cid(1)]
    keys = [o["Key"] for o in s3_client.list_objects_v2(Bucket=saver.bucket, Prefix=saver.prefix)["Contents"]]
    assert saver._core.layout.record("t", "", cid(3)) not in keys, "a listing is a read: it writes nothing"


# -- g: name object of a long thread id ------------------------------------------------------------------
def test_g_name_object_written_by_a_retried_put(make_saver: Callable[[], S3Saver]) -> None:
    """Defect: the saver remembered a ``name`` object as written as soon as it planned the PUT; when that
    put failed, the retried put skipped it and list(None) showed the digest instead of the thread id."""
    saver = make_saver()

    def fail_on_name(step: list[Any]) -> None:
        if any(isinstance(r, Put) and r.key.endswith("/name") for r in step):
            raise Crash  # e.g. the connection dropped: nothing of this batch was stored

    with pytest.raises(Crash):
        drive(saver, put_plan(saver, LONG_THREAD, cid(1)), fail_on_name)
    put(saver, LONG_THREAD, cid(1))
    assert [t.config["configurable"]["thread_id"] for t in make_saver().list(None)] == [LONG_THREAD]


# -- h: folder markers and foreign keys ----------------------------------------------------------------
def test_h_folder_markers_and_foreign_keys_are_skipped(make_saver: Callable[[], S3Saver], s3_client: Any) -> None:
    """Defect: zero-byte folder markers (``c/``, ``c/{R}/``) and a foreign key shaped like ours
    (``c/zzzz~/checkpoint``) made readers and maintenance fail parsing them."""
    saver = make_saver()
    put(saver, "t", cid(1), run="run-1")
    put(saver, "t", cid(2), cid(1), run="run-2")
    layout = saver._core.layout
    records = layout.records("t", "")
    for key in (records, layout.checkpoint_dir("t", "", cid(1)), f"{records}zzzz~/checkpoint"):
        s3_client.put_object(Bucket=saver.bucket, Key=key, Body=b"" if key.endswith("/") else b"not ours")
    reader = make_saver()
    assert reader.get_tuple(cfg("t", "", cid(1))).checkpoint["id"] == cid(1)
    assert ids(reader.list(cfg("t"))) == [cid(2), cid(1)]
    assert ids(reader.list(None)) == [cid(2), cid(1)]
    reader.delete_for_runs(["run-2"])
    assert latest_id(reader, "t") == cid(1)
    reader.prune(["t"])
    assert ids(reader.list(cfg("t"))) == [cid(1)]


def test_h_a_record_filed_under_another_checkpoints_key_is_refused(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """Defect: readers took a record's id from its body, so a record copied under another checkpoint's key
    (a botched manual restore) answered ``get_tuple`` for that id with another checkpoint and hid committed
    ones from ``list``. Such an object is reported as corrupt, naming its key."""
    saver = make_saver()
    for n in (1, 2, 3):
        put(saver, "t", cid(n), cid(n - 1) if n > 1 else None)
    layout = saver._core.layout
    misfiled = layout.record("t", "", cid(2))
    s3_client.copy_object(
        Bucket=saver.bucket, Key=misfiled, CopySource={"Bucket": saver.bucket, "Key": layout.record("t", "", cid(1))}
    )
    reader = make_saver()
    with pytest.raises(CorruptObjectError, match="not the one its key names") as info:
        reader.get_tuple(cfg("t", "", cid(2)))
    assert misfiled in str(info.value)
    with pytest.raises(CorruptObjectError, match="not the one its key names"):
        ids(reader.list(cfg("t")))


def test_h_foreign_thread_folders_are_skipped(make_saver: Callable[[], S3Saver], s3_client: Any) -> None:
    """Found while probing (h) on HEAD: a foreign folder under ``threads/`` whose name is not one of our
    escaped segments (``%ZZ``, ``~abc``) made list(None) and expire_threads raise ValueError. It is no
    thread this saver could have written: list(None) skips it and expire_threads does not report it."""
    saver = make_saver()
    put(saver, "t", cid(1))
    root = saver._core.layout.threads_root
    for key in (f"{root}%ZZ/junk", f"{root}~abc/junk"):
        s3_client.put_object(Bucket=saver.bucket, Key=key, Body=b"not ours")
    reader = make_saver()
    assert [t.config["configurable"]["thread_id"] for t in reader.list(None)] == ["t"]
    assert reader.expire_threads(timedelta(days=1), dry_run=True) == []


def test_h_objects_in_folders_no_id_escapes_to_are_not_the_savers(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """Defect: gc walked every folder under ``threads/`` and ``ns/`` as a thread's or a namespace's, so objects
    shaped like ours inside a folder whose name no id escapes to (``a.b``, ``%zz``: ``escape`` writes ``.`` and
    ``%`` as ``%2E`` and ``%25``) were judged headless leftovers and deleted; repair_thread rebuilt a head in such
    a namespace folder; and a writes-shaped key whose task segment no task id escapes to made ``get_tuple`` raise.
    One rule, ``keys.is_own_segment``, now decides for every reader and tool: those objects are foreign."""
    saver = make_saver()
    put(saver, "t", cid(1), values={"big": "v" * BIG}, versions={"big": ver(1)})
    layout = saver._core.layout
    record = s3_client.get_object(Bucket=saver.bucket, Key=layout.record("t", "", cid(1)))["Body"].read()
    root, namespaces = layout.threads_root, layout.namespaces("t")
    in_records = layout.record("t", "", cid(1))[len(layout.records("t", "")) :]  # c/{R}/checkpoint's "{R}/checkpoint"
    foreign = {
        f"{root}a.b/ns/~/b/big/1": b"not ours",
        f"{root}a.b/name": b"a.b",
        f"{root}%zz/ns/~/c/{in_records}": record,
        f"{namespaces}x.y/c/{in_records}": record,
        f"{namespaces}x.y/b/big/1": b"not ours",
        f"{layout.writes('t', '', cid(1))}x.y": b"not ours",
    }
    for key, body in foreign.items():
        s3_client.put_object(Bucket=saver.bucket, Key=key, Body=body)
    time.sleep(1.1)  # LastModified and the server's Date have a one-second resolution

    reader = make_saver()
    assert [t.config["configurable"]["thread_id"] for t in reader.list(None)] == ["t"]
    tup = reader.get_tuple(cfg("t"))
    assert tup is not None and tup.checkpoint["id"] == cid(1) and tup.pending_writes == []
    assert [n.status for n in reader.repair_thread("t").namespaces] == ["ok"]
    report = run_gc(reader, grace_seconds=0)
    assert report.total == 0 and report.foreign >= len(foreign), report
    listed = {o["Key"] for o in s3_client.list_objects_v2(Bucket=saver.bucket, Prefix=root)["Contents"]}
    assert set(foreign) <= listed and f"{namespaces}x.y/head" not in listed


# -- i: uncommitted leftovers stay hidden ----------------------------------------------------------------
def test_i_uncommitted_leftovers_are_hidden(make_saver: Callable[[], S3Saver]) -> None:
    """Defect: a record whose head never landed was returned by get_tuple by id, and by list over all
    namespaces with a ``before`` bound from another namespace (the bound's record missing there made the
    listing fall back to "everything not newer than the head")."""
    saver = make_saver()
    put(saver, "t", cid(1))
    put(saver, "t", cid(2), ns="sub")
    crash_before_head(saver, "t", cid(3), cid(2), ns="sub")  # between two commits: an orphan
    put(saver, "t", cid(4), cid(2), ns="sub")
    crash_before_head(saver, "t", cid(6), cid(4), ns="sub")  # newer than the head
    put(saver, "t", cid(5), cid(1))
    reader = make_saver()
    for leftover in (cid(3), cid(6)):
        assert reader.get_tuple(cfg("t", "sub", leftover)) is None
    assert sorted(ids(reader.list(None))) == [cid(1), cid(2), cid(4), cid(5)]
    everywhere = {"configurable": {"thread_id": "t"}}
    assert sorted(ids(reader.list(everywhere, before=cfg("t", "", cid(5))))) == [cid(1), cid(2), cid(4)]
    assert sorted(ids(reader.list(everywhere))) == [cid(1), cid(2), cid(4), cid(5)]


# -- j: before= a detached checkpoint ----------------------------------------------------------------------
def test_j_list_before_a_detached_checkpoint(make_saver: Callable[[], S3Saver]) -> None:
    """Defect: list(before=X) where X is a detached checkpoint (a fork whose id is older than the head)
    returned nothing, where InMemorySaver returns every older checkpoint."""
    saver, memory = make_saver(), InMemorySaver()
    for target in (saver, memory):
        put(target, "t", cid(1))
        put(target, "t", cid(2), cid(1))
        put(target, "t", cid(4), cid(2))
    forker = make_saver()
    assert forker.get_tuple(cfg("t", "", cid(1))) is not None  # a fork starts by reading its checkpoint
    for target in (forker, memory):
        put(target, "t", cid(3), cid(1), source="update")  # older than the head: detached
    bound = cfg("t", "", cid(3))
    expected = ids(memory.list(cfg("t"), before=bound))
    assert expected == [cid(2), cid(1)]
    assert ids(make_saver().list(cfg("t"), before=bound)) == expected
    assert ids(make_saver().list(cfg("t"))) == ids(memory.list(cfg("t")))


# -- k: clock skew -------------------------------------------------------------------------------------
def test_k_clock_skew_is_refused(make_saver: Callable[[], S3Saver]) -> None:
    """Defect: a put continuing the head with an id older than the head's (the writer's clock is behind)
    was committed as a detached record that no reader takes for the latest. It must raise
    ClockSkewError (not CheckpointConflictError), and commit nothing."""
    saver = make_saver()
    put(saver, "t", cid(5))
    with pytest.raises(Exception) as fenced:
        put(saver, "t", cid(3), cid(5))
    with pytest.raises(Exception) as joined:
        put(make_saver(), "t", cid(4), cid(5))
    for info in (fenced, joined):
        assert type(info.value).__name__ == "ClockSkewError", repr(info.value)
        assert not isinstance(info.value, CheckpointConflictError)
    reader = make_saver()
    assert ids(reader.list(cfg("t"))) == [cid(5)]
    assert reader.get_tuple(cfg("t", "", cid(3))) is None and reader.get_tuple(cfg("t", "", cid(4))) is None


def test_k_clock_skew_of_a_fork_is_refused(make_saver: Callable[[], S3Saver]) -> None:
    """Defect: time travel by a writer whose clock is behind (``update_state`` on an older checkpoint) made a
    child older than its own parent; it was committed detached, so the edit never became the latest
    state although ``update_state`` succeeded. A child older than its parent is refused whatever the fence."""

    def uuid6(n: int) -> str:  # shaped like LangGraph's ids, which carry the writer's clock
        return f"1f{n:06d}-0000-6000-8000-000000000000"

    put(make_saver(), "t", uuid6(5))
    put(make_saver(), "t", uuid6(7), uuid6(5))
    forker = make_saver()
    assert forker.get_tuple(cfg("t", "", uuid6(5))) is not None  # how LangGraph starts a fork: read explicitly
    with pytest.raises(ClockSkewError, match="older than its parent"):
        put(forker, "t", uuid6(4), uuid6(5), source="update")
    assert ids(make_saver().list(cfg("t"))) == [uuid6(7), uuid6(5)]


# -- l: the saver's memory does not outlive its own deletes ---------------------------------------------
def test_l_memory_after_own_delete_thread_and_copy_thread(make_saver: Callable[[], S3Saver]) -> None:
    """Defect: after delete_thread (or with a stale memory, copy_thread) by the same saver, it still
    believed the thread's ``name`` object existed and skipped it: list(None) showed a digest."""
    saver = make_saver()
    big = {"values": {"big": "b" * BIG}, "versions": {"big": ver(1)}}
    put(saver, LONG_THREAD, cid(1), run="run-1", **big)
    saver.delete_thread(LONG_THREAD)
    put(saver, LONG_THREAD, cid(2), run="run-1", **big)
    reader = make_saver()
    assert [t.config["configurable"]["thread_id"] for t in reader.list(None)] == [LONG_THREAD]
    assert reader.get_tuple(cfg(LONG_THREAD)).checkpoint["channel_values"]["big"] == "b" * BIG

    saver.delete_thread(LONG_THREAD)
    put(saver, "source", cid(3), **big)
    saver.copy_thread("source", LONG_THREAD)
    put(saver, LONG_THREAD, cid(4), cid(3), **big, new={})
    assert {t.config["configurable"]["thread_id"] for t in reader.list(None)} == {LONG_THREAD, "source"}
    assert reader.get_tuple(cfg(LONG_THREAD)).checkpoint["channel_values"]["big"] == "b" * BIG


def test_l_memory_after_own_delete_for_runs(make_saver: Callable[[], S3Saver]) -> None:
    """Defect: after its own delete_for_runs the saver still believed the run's index entries existed, so a
    late commit of the cancelled run wrote none and a second delete_for_runs could not find it; a later
    put on the survivor must commit and read back."""
    saver = make_saver()
    put(saver, "t", cid(1), run="run-a", values={"big": "1" * BIG}, versions={"big": ver(1)})
    put(saver, "t", cid(2), cid(1), run="run-b", values={"big": "2" * BIG}, versions={"big": ver(2)})
    saver.delete_for_runs(["run-b"])
    put(saver, "t", cid(3), cid(1), run="run-b", values={"big": "3" * BIG}, versions={"big": ver(2, "late")})
    saver.delete_for_runs(["run-b"])
    reader = make_saver()
    assert ids(reader.list(cfg("t"))) == [cid(1)]
    put(saver, "t", cid(4), cid(1), run="run-c", values={"big": "1" * BIG}, versions={"big": ver(1)}, new={})
    assert ids(reader.list(cfg("t"))) == [cid(4), cid(1)]
    assert reader.get_tuple(cfg("t")).checkpoint["channel_values"]["big"] == "1" * BIG


def test_l_memory_after_own_prune(make_saver: Callable[[], S3Saver]) -> None:
    """Defect: a saver that had read a checkpoint remembered its large value as existing after its own
    prune deleted it, so a fork from that checkpoint referenced a value it never wrote again."""
    saver = make_saver()
    put(saver, "t", cid(1), values={"big": "1" * BIG}, versions={"big": ver(1)})
    put(saver, "t", cid(2), cid(1), values={"big": "2" * BIG}, versions={"big": ver(2)})
    assert saver.get_tuple(cfg("t", "", cid(1))) is not None  # how a fork starts
    saver.prune(["t"])
    put(saver, "t", cid(3), cid(1), values={"big": "1" * BIG}, versions={"big": ver(1)}, new={}, source="fork")
    reader = make_saver()
    assert reader.get_tuple(cfg("t")).checkpoint["channel_values"]["big"] == "1" * BIG
    assert ids(reader.list(cfg("t"))) == [cid(3), cid(2)]


def test_l_memory_after_another_savers_delete(make_saver: Callable[[], S3Saver]) -> None:
    """Defect: after ANOTHER saver deleted a thread, this saver's next put of it as a new thread skipped
    the ``name`` object (and run-index entries) it remembered writing."""
    saver, other = make_saver(), make_saver()
    put(saver, LONG_THREAD, cid(1), run="run-1", values={"big": "b" * BIG}, versions={"big": ver(1)})
    other.delete_thread(LONG_THREAD)
    put(saver, LONG_THREAD, cid(2), run="run-1", values={"big": "b" * BIG}, versions={"big": ver(1)})
    reader = make_saver()
    assert [t.config["configurable"]["thread_id"] for t in reader.list(None)] == [LONG_THREAD]
    assert reader.get_tuple(cfg(LONG_THREAD)).checkpoint["channel_values"]["big"] == "b" * BIG
    reader.delete_for_runs(["run-1"])
    assert reader.get_tuple(cfg(LONG_THREAD)) is None


# -- m: copy_thread into a target another writer creates meanwhile --------------------------------------
def test_m_copy_thread_refused_by_a_target_created_meanwhile(make_saver: Callable[[], S3Saver]) -> None:
    """Defect: copy_thread wrote the target's heads with ``If-None-Match`` and ignored the replies, so a copy
    into a target that another writer created while it was copying returned normally without being applied
    (and a copy-then-delete "move" lost the source). It must raise, and the other writer's checkpoint stays."""
    copier, writer = make_saver(), make_saver()
    put(copier, "src", cid(1))
    put(copier, "src", cid(2), cid(1))
    original_names = copier._core._names

    def names_then_a_writer(thread_id: str, ns: str) -> Any:
        put(writer, "dst", cid(9), source="input")  # lands between the copy's check and its commit
        return original_names(thread_id, ns)

    copier._core._names = names_then_a_writer  # type: ignore[method-assign]
    with pytest.raises(TargetThreadExistsError, match="another writer"):
        copier.copy_thread("src", "dst")
    reader = make_saver()
    assert ids(reader.list(cfg("dst"))) == [cid(9)]
    assert ids(reader.list(cfg("src"))) == [cid(2), cid(1)]


def test_m_copy_thread_copies_the_writes_of_a_task_named_head(make_saver: Callable[[], S3Saver]) -> None:
    """Defect: copy_thread skipped every key ending in ``/head``, which is also the writes object of a task whose
    id is ``head``: the copy lost that task's pending writes. What a copy carries over is now decided by the
    one classifier of a thread's keys (``keys.classify``), as export's is."""
    saver = make_saver()
    put(saver, "source", cid(1))
    saver.put_writes(cfg("source", "", cid(1)), [("ch", "from the task named head")], "head")
    saver.put_writes(cfg("source", "", cid(1)), [("ch", "from another task")], "other")
    saver.copy_thread("source", "target")
    copied = make_saver().get_tuple(cfg("target"))
    assert copied is not None
    assert sorted(copied.pending_writes) == [
        ("head", "ch", "from the task named head"),
        ("other", "ch", "from another task"),
    ]


def test_m_copy_thread_whose_head_answer_was_lost(make_saver: Callable[[], S3Saver]) -> None:
    """A copy whose head PUT landed but whose answer was lost finds its own head on the retry: no error."""
    copier = make_saver()
    put(copier, "src", cid(1))
    lost = lose_first_answer(copier, lambda r: isinstance(r, Put) and bool(r.if_none_match) and r.key.endswith("/head"))
    copier.copy_thread("src", "dst")
    assert lost and ids(make_saver().list(cfg("dst"))) == [cid(1)]


def test_m_copy_thread_while_the_source_moves_on_and_is_pruned(
    make_saver: Callable[[], S3Saver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: copy_thread snapshots the source's heads, copies the objects, then commits the heads. If the
    source moved on and a prune removed a large value the snapshot references (older than the grace period)
    before it was copied, the copy committed a head whose value was gone: the target could not be read. It
    now takes a new snapshot when a referenced value was not copied."""
    monkeypatch.setattr(maintenance, "PRUNE_GRACE", timedelta(0))  # stands in for a value written long ago
    source, copier = make_saver(), make_saver()
    big = {"big": "a" * BIG}
    put(source, "src", cid(1), values=big, versions={"big": ver(1)})
    original = copier._core._copy_history
    moved: list[bool] = []

    def copy_after_the_source_moved(source_id: str, target_id: str, needed: set[str]) -> Any:
        if not moved:  # after the heads' snapshot: the source takes a step and is pruned
            moved.append(True)
            put(source, "src", cid(2), cid(1), values={"big": "b" * BIG}, versions={"big": ver(2)})
            make_saver().prune(["src"])
        return (yield from original(source_id, target_id, needed))

    copier._core._copy_history = copy_after_the_source_moved  # type: ignore[method-assign]
    copier.copy_thread("src", "dst")
    copied = make_saver().get_tuple(cfg("dst"))
    assert moved and copied is not None
    assert copied.checkpoint["id"] == cid(2) and copied.checkpoint["channel_values"]["big"] == "b" * BIG


# -- o: delete_thread racing the first put of a new thread ---------------------------------------------
def test_o_delete_thread_racing_a_new_threads_first_put(make_saver: Callable[[], S3Saver], s3_client: Any) -> None:
    """Defect: the first put of a new thread wrote its large value, delete_thread deleted it, then the put's head
    landed (a new thread's head is created with If-None-Match: there was no head to fence on). put returned,
    and every read of the thread raised CorruptObjectError. delete_thread now goes over the thread again when
    objects reappeared during a pass: the thread reads as deleted, consistently."""
    writer, deleter = make_saver(), make_saver()
    plan = put_plan(writer, "t", cid(1), values={"big": "v" * BIG}, versions={"big": ver(1)})
    values_written = send(writer, plan.send(None))  # the large value lands; the head is not sent yet
    original = deleter._core._delete_thread_once
    passes: list[int] = []

    def a_pass_then_the_head_lands(thread_id: str) -> Any:
        yield from original(thread_id)
        passes.append(1)
        if len(passes) == 1:  # the put resumes: its record and head land after this pass
            with contextlib.suppress(StopIteration):
                reply: Any = values_written
                while True:
                    reply = send(writer, plan.send(reply))

    deleter._core._delete_thread_once = a_pass_then_the_head_lands  # type: ignore[method-assign]
    deleter.delete_thread("t")
    assert len(passes) == 2
    assert make_saver().get_tuple(cfg("t")) is None
    assert s3_client.list_objects_v2(Bucket=writer.bucket, Prefix=f"{writer.prefix}/threads/").get("KeyCount") == 0


def test_o_two_deletes_of_one_thread_each_remove_only_their_own_marker(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """The ``deleting`` marker keeps repair_thread from bringing back what a delete that died had condemned. With
    two deletes of one thread at once, the first to finish must not remove the marker of the other, which may
    still die part-way: each writes its own bytes and removes the marker only while it is still its own."""
    first, second = make_saver(), make_saver()
    for n in (1, 2):
        put(first, "t", cid(n), cid(n - 1) if n > 1 else None)
    marker = first._core.layout.deleting("t")
    plan = first._core.delete_thread("t")
    reply = send(first, plan.send(None))  # the first delete has found the thread
    reply = send(first, plan.send(reply))  # and written its marker
    second_plan = second._core.delete_thread("t")
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


def test_o_delete_of_a_thread_with_no_objects_writes_nothing(
    make_saver: Callable[[], S3Saver], s3_client: Any, count_requests: Callable[[Any], Any]
) -> None:
    """Deleting a thread that was never written (LangGraph's Agent Server deletes threads that never ran) used to
    write and remove a ``deleting`` marker: five requests, and on SeaweedFS an empty folder that gc then counted as
    a foreign object for ever. One 1-key LIST now finds nothing and ends it."""
    saver = make_saver()
    counter = count_requests(saver.client)
    saver.delete_thread("never-written")
    assert counter.snapshot() == {"ListObjectsV2": 1}
    assert s3_client.list_objects_v2(Bucket=saver.bucket, Prefix=f"{saver.prefix}/threads/").get("KeyCount") == 0


def test_o_copy_onto_a_target_whose_delete_died_shows_none_of_its_records(make_saver: Callable[[], S3Saver]) -> None:
    """Found by the adversarial review: copy_thread onto a target whose delete_thread had died after the heads (its
    records still stored) showed the target's deleted records under the copy: the source was pruned, so the copy's
    chain has a missing link and the records below it read as committed. A target with objects but no head is now
    deleted before the copy."""
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


@pytest.mark.parametrize("delete_done", ["heads", "all"])
def test_o_repair_racing_delete_thread_takes_its_head_back(
    make_saver: Callable[[], S3Saver], s3_client: Any, delete_done: str
) -> None:
    """Found by the adversarial review: repair_thread rebuilding a lost head while delete_thread ran on the thread
    wrote its head after the delete had removed the heads (or everything): the deleted thread read as alive
    again. Repair now checks, after writing a missing head, that no delete began meanwhile and that the record
    it restored is still there; otherwise it deletes the head it wrote."""
    writer = make_saver()
    for n in (1, 2, 3):
        put(writer, "t", cid(n), cid(n - 1) if n > 1 else None)
    head = writer._core.layout.head("t", "")
    s3_client.delete_object(Bucket=writer.bucket, Key=head)  # lost by hand: repair has work to do
    deleter = make_saver()
    deleting = deleter._core.delete_thread("t")
    reply: Any = None

    def delete_until(done: Callable[[list[Any]], bool]) -> None:
        nonlocal reply
        with contextlib.suppress(StopIteration):
            while True:
                batch = deleting.send(reply)
                reply = send(deleter, batch)
                if done(batch):
                    return

    repairer = make_saver()
    send_one = repairer.bucket_io._send

    def send_racing_a_delete(request: Any, *deadline: Any) -> Any:
        if isinstance(request, Put) and request.key == head and not reply:
            # The delete runs between repair's reads and its head PUT.
            delete_until(lambda batch: delete_done == "heads" and any(isinstance(r, Delete) for r in batch))
        return send_one(request, *deadline)

    repairer.bucket_io._send = send_racing_a_delete
    [outcome] = repairer.repair_thread("t").namespaces
    assert outcome.status == "changed" and "delete" in outcome.reason
    delete_until(lambda batch: False)
    assert make_saver().get_tuple(cfg("t")) is None
    assert s3_client.list_objects_v2(Bucket=writer.bucket, Prefix=f"{writer.prefix}/threads/").get("KeyCount") == 0


def test_o_a_copy_that_died_is_not_made_a_history_by_repair(make_saver: Callable[[], S3Saver], s3_client: Any) -> None:
    """A copy_thread that died before its heads left the source's records under the target; repair_thread took
    them for a thread whose heads were lost and committed a copy that never committed (design.md used to list
    this as a known limit). The target is now marked ``copying`` until its heads land."""
    writer = make_saver()
    for n in (1, 2, 3):
        put(writer, "s", cid(n), cid(n - 1) if n > 1 else None)
    copier = make_saver()
    target_head = copier._core.layout.head("x", "")
    crash_at(copier, lambda r: isinstance(r, Put) and r.key == target_head)
    with pytest.raises(Crash):
        copier.copy_thread("s", "x")
    fresh = make_saver()
    [outcome] = fresh.repair_thread("x").namespaces
    assert outcome.status == "copying" and "copy_thread" in outcome.reason
    assert fresh.get_tuple(cfg("x")) is None
    layout = fresh._core.layout
    found = fresh.bucket_io.iterate(verify_thread(layout, fresh._core.codec, "x"))
    assert [p.key for p in found if isinstance(p, Problem) and "copy_thread" in p.problem] == [layout.copying("x")]
    make_saver().copy_thread("s", "x")  # again: the dead copy's objects go first
    assert ids(make_saver().list(cfg("x"))) == ids(make_saver().list(cfg("s"))) == [cid(3), cid(2), cid(1)]
    keys = [o["Key"] for o in s3_client.list_objects_v2(Bucket=writer.bucket, Prefix=layout.thread("x"))["Contents"]]
    assert layout.copying("x") not in keys and layout.deleting("x") not in keys


def test_o_gc_removes_what_a_dead_copy_left(make_saver: Callable[[], S3Saver], s3_client: Any) -> None:
    writer = make_saver()
    put(writer, "s", cid(1))
    copier = make_saver()
    target_head = copier._core.layout.head("x", "")
    crash_at(copier, lambda r: isinstance(r, Put) and r.key == target_head)
    with pytest.raises(Crash):
        copier.copy_thread("s", "x")
    report = run_gc(make_saver(), grace_seconds=0)
    assert report.deleted["unfinished_copy"] == 1 and report.deleted["headless_namespace"] > 0
    layout = writer._core.layout
    assert s3_client.list_objects_v2(Bucket=writer.bucket, Prefix=layout.thread("x")).get("KeyCount") == 0
    assert ids(make_saver().list(cfg("s"))) == [cid(1)]


def test_o_an_import_that_died_is_not_made_a_history_by_repair(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """An import (``langgraph-s3 import``) that died before its heads left the archive's records under the
    thread without a marker: repair_thread took them for a thread whose heads were lost and committed an import
    that never finished. The import now marks its thread ``copying`` until its heads land, as copy_thread does;
    repair, verify and gc treat what it left as they treat a dead copy's."""
    writer = make_saver()
    for n in (1, 2, 3):
        put(writer, "s", cid(n), cid(n - 1) if n > 1 else None)
    layout = writer._core.layout
    archive = list(writer.bucket_io.iterate(export_thread(layout, writer._core.codec, "s")))
    importer = make_saver()
    crash_at(importer, lambda r: isinstance(r, Put) and r.key == layout.head("x", ""))
    with pytest.raises(Crash):
        importer.bucket_io.run(import_thread(layout, "x", archive))
    fresh = make_saver()
    [outcome] = fresh.repair_thread("x").namespaces
    assert outcome.status == "copying" and "an import" in outcome.reason and "import --replace" in outcome.reason
    assert fresh.get_tuple(cfg("x")) is None
    found = fresh.bucket_io.iterate(verify_thread(layout, fresh._core.codec, "x"))
    assert [p.key for p in found if isinstance(p, Problem) and "an import" in p.problem] == [layout.copying("x")]
    report = run_gc(make_saver(), grace_seconds=0)
    assert report.deleted["unfinished_copy"] == 1 and report.deleted["headless_namespace"] > 0
    assert s3_client.list_objects_v2(Bucket=writer.bucket, Prefix=layout.thread("x")).get("KeyCount") == 0
    assert make_saver().bucket_io.run(import_thread(layout, "x", archive)) == len(archive)  # again, to the end
    assert ids(make_saver().list(cfg("x"))) == [cid(3), cid(2), cid(1)]
    keys = [o["Key"] for o in s3_client.list_objects_v2(Bucket=writer.bucket, Prefix=layout.thread("x"))["Contents"]]
    assert layout.copying("x") not in keys


def test_o_gc_removes_the_marker_of_a_copy_that_committed_and_died(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """A copy whose heads landed and which died before removing its ``copying`` marker: the marker protects
    nothing any more (every namespace has a head), so gc removes it, and the copy reads whole throughout."""
    writer = make_saver()
    for n in (1, 2):
        put(writer, "s", cid(n), cid(n - 1) if n > 1 else None)
    put(writer, "s", cid(3), ns="sub")
    copier = make_saver()
    marker = copier._core.layout.copying("x")
    crash_at(copier, lambda r: isinstance(r, DeleteIfMatch) and r.key == marker)
    with pytest.raises(Crash):
        copier.copy_thread("s", "x")
    assert ids(make_saver().list(cfg("x"))) == [cid(2), cid(1)]
    assert run_gc(make_saver(), grace_seconds=0).deleted["unfinished_copy"] == 1
    keys = [
        o["Key"]
        for o in s3_client.list_objects_v2(Bucket=writer.bucket, Prefix=writer._core.layout.thread("x"))["Contents"]
    ]
    assert marker not in keys
    assert ids(make_saver().list(cfg("x"))) == [cid(2), cid(1)]
    assert ids(make_saver().list(cfg("x", "sub"))) == [cid(3)]


def test_o_prune_racing_a_fork_that_reuses_an_older_large_value(
    make_saver: Callable[[], S3Saver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: prune read the head, then deleted every large value it does not reference. A fork of an older
    checkpoint committed meanwhile reuses that checkpoint's value (offered with If-None-Match, found existing,
    not rewritten); prune deleted it under the fork's head, and the fork could not be read. Prune now re-reads
    the head before it deletes large values and keeps what it references."""
    monkeypatch.setattr(maintenance, "PRUNE_GRACE", timedelta(0))  # stands in for a value written long ago
    writer, pruner, forker = make_saver(), make_saver(), make_saver()
    put(writer, "t", cid(1), values={"big": "1" * BIG}, versions={"big": ver(1)})
    put(writer, "t", cid(2), cid(1), values={"big": "2" * BIG}, versions={"big": ver(2)})
    assert forker.get_tuple(cfg("t", "", cid(1))) is not None  # a fork starts by reading its checkpoint
    original = pruner._core._prune_scope

    def scope_then_a_fork(thread_id: str, ns: str) -> Any:
        scope = yield from original(thread_id, ns)
        put(forker, "t", cid(3), cid(1), values={"big": "1" * BIG}, versions={"big": ver(1)}, new={}, source="update")
        return scope

    pruner._core._prune_scope = scope_then_a_fork  # type: ignore[method-assign]
    pruner.prune(["t"])
    latest = make_saver().get_tuple(cfg("t"))
    assert latest is not None and latest.checkpoint["id"] == cid(3)
    assert latest.checkpoint["channel_values"]["big"] == "1" * BIG


# -- n: objects of a newer release ------------------------------------------------------------------------
def test_n_objects_of_a_newer_release_are_not_taken_for_damage(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """Defect: a head and records in a newer format (a rolling upgrade, then a rollback) were reported as a
    damaged head whose advice was ``repair_thread``, which moved the head back to the newest record this
    release could read; gc then listed the newer release's commits as uncommitted leftovers to delete.
    Now every reader, repair and gc stop at such an object with NewerFormatError, and nothing changes."""
    saver = make_saver()
    for n in (1, 2, 3):
        put(saver, "t", cid(n), cid(n - 1) if n > 1 else None)
    layout = saver._core.layout
    newer = [layout.head("t", ""), layout.record("t", "", cid(3)), layout.record("t", "", cid(2))]
    for key in newer:
        body = s3_client.get_object(Bucket=saver.bucket, Key=key)["Body"].read()
        s3_client.put_object(Bucket=saver.bucket, Key=key, Body=body[:4] + bytes((body[4] + 1,)) + body[5:])
    before = sorted(o["Key"] for o in s3_client.list_objects_v2(Bucket=saver.bucket, Prefix=saver.prefix)["Contents"])
    old = make_saver()
    with pytest.raises(NewerFormatError, match="newer release"):
        old.get_tuple(cfg("t"))
    with pytest.raises(NewerFormatError):
        old.repair_thread("t")
    with pytest.raises(NewerFormatError):
        run_gc(old, grace_seconds=0)
    after = sorted(o["Key"] for o in s3_client.list_objects_v2(Bucket=saver.bucket, Prefix=saver.prefix)["Contents"])
    assert after == before
    assert not isinstance(NewerFormatError("k", 2, 1), CorruptObjectError)


# -- randomized differential test against InMemorySaver ---------------------------------------------
DIFF_OPS = int(os.environ.get("LGS3_DIFF_OPS", "300"))
DIFF_SEED = int(os.environ.get("LGS3_DIFF_SEED", "20261130"))
DIFF_THREADS = ["a", "b", "c", "d", "long-" + "y" * 250]
DIFF_NAMESPACES = ["", "child"]


class Reference(InMemorySaver):
    """InMemorySaver plus the operations it lacks, with the meaning the S3 saver gives them."""

    def copy_thread(self, source: str, target: str) -> None:
        for ns, checkpoints in list(self.storage[source].items()):
            self.storage[target][ns] = dict(checkpoints)
        for (thread, ns, checkpoint_id), writes in list(self.writes.items()):
            if thread == source:
                self.writes[(target, ns, checkpoint_id)] = dict(writes)
        for (thread, *rest), blob in list(self.blobs.items()):
            if thread == source:
                self.blobs[(target, *rest)] = blob

    def delete_for_runs(self, run_ids: list[str]) -> None:
        for thread, namespaces in self.storage.items():
            for ns, checkpoints in namespaces.items():
                for checkpoint_id, (_, metadata, _) in list(checkpoints.items()):
                    if self.serde.loads_typed(metadata).get("run_id") in run_ids:
                        del checkpoints[checkpoint_id]
                        self.writes.pop((thread, ns, checkpoint_id), None)

    def prune(self, thread_ids: list[str]) -> None:
        for thread in thread_ids:
            for ns, checkpoints in self.storage[thread].items():
                for checkpoint_id in sorted(checkpoints)[:-1]:
                    del checkpoints[checkpoint_id]
                    self.writes.pop((thread, ns, checkpoint_id), None)

    def committed(self, thread: str, ns: str) -> list[str]:
        return sorted(self.storage[thread][ns]) if thread in self.storage else []

    def empty(self, thread: str) -> bool:
        return not any(self.storage[thread].values()) if thread in self.storage else True


def _norm(tup: Any) -> Any:
    if tup is None:
        return None
    conf = tup.config["configurable"]
    parent = tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None
    return (
        conf["thread_id"],
        conf["checkpoint_ns"],
        conf["checkpoint_id"],
        tup.checkpoint["channel_values"],
        tup.metadata,
        parent,
        tup.pending_writes,
    )


def test_randomized_against_in_memory_saver(make_saver: Callable[[], S3Saver]) -> None:
    """A fixed-seed random sequence of put/put_writes/get_tuple/list/delete_thread/copy_thread/
    delete_for_runs/prune on a few threads, through two savers, gives what InMemorySaver gives."""
    rng = random.Random(DIFF_SEED)
    savers = [make_saver(), make_saver()]
    ref = Reference()
    log: list[str] = []
    counter = iter(range(1, 1_000_000))
    version = iter(range(1, 1_000_000))
    used: set[str] = set()
    run_of: dict[str, str] = {}
    dead_runs: set[str] = set()
    runs_seen: list[str] = []
    last_writer: dict[tuple[str, str], int] = {}

    def check(got: Any, want: Any, what: str) -> None:
        if got == want:
            return
        history = "\n".join(log[-25:])
        if isinstance(got, list) and isinstance(want, list):
            extra = [_short(x) for x in got if x not in want]
            missing = [_short(x) for x in want if x not in got]
            raise AssertionError(f"{what}: only in S3 {extra}\nonly in InMemorySaver {missing}\nlast ops:\n{history}")
        raise AssertionError(f"{what}: S3 {_short(got)}\n!= InMemorySaver {_short(want)}\nlast ops:\n{history}")

    def check_latest(thread: str, ns: str, saver: S3Saver) -> None:
        check(
            _norm(saver.get_tuple(cfg(thread, ns))), _norm(ref.get_tuple(cfg(thread, ns))), f"latest {thread[:8]}/{ns}"
        )

    def check_lists(thread: str, saver: S3Saver) -> None:
        for ns in DIFF_NAMESPACES:
            check(
                [_norm(t) for t in saver.list(cfg(thread, ns))], [_norm(t) for t in ref.list(cfg(thread, ns))], "list"
            )
            committed = ref.committed(thread, ns)
            if committed:
                bound = cfg(thread, ns, rng.choice(committed))
                limit = rng.choice([None, 1, 2, 5])
                check(
                    [_norm(t) for t in saver.list(cfg(thread, ns), before=bound, limit=limit)],
                    [_norm(t) for t in ref.list(cfg(thread, ns), before=bound, limit=limit)],
                    f"list before {bound['configurable']['checkpoint_id']} limit {limit}",
                )
        everywhere = {"configurable": {"thread_id": thread}}
        check(
            sorted(map(_norm_key, saver.list(everywhere))), sorted(map(_norm_key, ref.list(everywhere))), "list all ns"
        )
        bounds = [c for ns in DIFF_NAMESPACES for c in ref.committed(thread, ns)]
        if bounds:
            # InMemorySaver groups namespaces, the S3 saver merges them newest first: compare as sets.
            bound = cfg(thread, "", rng.choice(bounds))
            for config in (everywhere, None):
                check(
                    sorted(map(_norm_key, saver.list(config, before=bound))),
                    sorted(map(_norm_key, ref.list(config, before=bound))),
                    f"list {config and thread[:8]} before {bound['configurable']['checkpoint_id']}",
                )
        fork_filter = {"source": "fork"}
        check(
            sorted(map(_norm_key, saver.list(everywhere, filter=fork_filter))),
            sorted(map(_norm_key, ref.list(everywhere, filter=fork_filter))),
            "list filter",
        )

    def do_put(thread: str, ns: str, parent: str | None, checkpoint_id: str, source: str, s: int) -> None:
        base = ref.get_tuple(cfg(thread, ns, parent)) if parent else None
        values = dict(base.checkpoint["channel_values"]) if base else {}
        versions = dict(base.checkpoint["channel_versions"]) if base else {}
        new: dict[str, str] = {}
        for channel in ("n", "note", "big"):
            if base is None or channel == "n" or rng.random() < 0.3:
                new[channel] = versions[channel] = ver(next(version), f"{s}")
                size = BIG if channel == "big" else 10
                values[channel] = f"{channel}-{new[channel]}-".ljust(size, "v")
        run = None
        if source != "update":
            if thread not in run_of or rng.random() < 0.3:
                run_of[thread] = f"run-{len(runs_seen)}"
                runs_seen.append(run_of[thread])
            run = run_of[thread]
        log.append(
            f"saver{s} put {thread[:8]}/{ns} {checkpoint_id[:13]} parent={parent and parent[:13]} {source} {run}"
        )
        for target in (savers[s], ref):
            put(
                target,
                thread,
                checkpoint_id,
                parent,
                ns=ns,
                values=values,
                versions=versions,
                new=new,
                source=source,
                run=run,
            )
        used.add(checkpoint_id)
        last_writer[(thread, ns)] = s

    def touched(thread: str) -> None:
        for key in [k for k in last_writer if k[0] == thread]:
            del last_writer[key]

    for _ in range(DIFF_OPS):
        s = rng.randrange(2)
        saver = savers[s]
        thread, ns = rng.choice(DIFF_THREADS), rng.choice(DIFF_NAMESPACES)
        committed = ref.committed(thread, ns)
        op = rng.choices(
            ["continue", "fork", "detached", "writes", "by_id", "list", "delete", "copy", "runs", "prune", "crash"],
            [35, 6, 4, 20, 5, 6, 2, 4, 4, 3, 3],
        )[0]
        if op == "crash":
            # A put that dies before its head PUT: InMemorySaver never sees it.
            parent = committed[-1] if committed else None
            checkpoint_id = cid(next(counter))
            run = run_of.get(thread) if rng.random() < 0.5 else None
            log.append(
                f"saver{s} crashed put {thread[:8]}/{ns} {checkpoint_id[:13]} parent={parent and parent[:13]} {run}"
            )
            values = {"n": checkpoint_id, "big": "c" * BIG}
            versions = {ch: ver(next(version), "crash") for ch in values}
            crash_before_head(saver, thread, checkpoint_id, parent, ns=ns, values=values, versions=versions, run=run)
        elif op == "continue" or (op in ("fork", "detached", "writes", "by_id") and not committed):
            if last_writer.get((thread, ns)) != s or rng.random() < 0.5:
                check_latest(thread, ns, saver)  # what LangGraph does when a run starts
            parent = committed[-1] if committed else None
            do_put(thread, ns, parent, cid(next(counter)), "loop" if parent else "input", s)
        elif op in ("fork", "detached"):
            parent = rng.choice(committed[:-1] or committed) if op == "detached" else rng.choice(committed)
            check(
                _norm(saver.get_tuple(cfg(thread, ns, parent))), _norm(ref.get_tuple(cfg(thread, ns, parent))), "by id"
            )
            if op == "fork":
                do_put(thread, ns, parent, cid(next(counter)), "fork", s)
            elif parent != committed[-1]:
                head_n = int(committed[-1][3:9])
                checkpoint_id = cid(head_n - 1, rng.randrange(1, 9999))
                if checkpoint_id not in used:
                    do_put(thread, ns, parent, checkpoint_id, "update", s)
        elif op == "writes":
            target = rng.choice(committed[-3:])
            task = rng.choice(["task-1", "task-2", "task-3"])
            writes = [
                (rng.choice(["x", "y", "__interrupt__", "__resume__", "__error__"]), f"w{rng.randrange(1000)}")
                for _ in range(rng.randint(1, 3))
            ]
            log.append(f"saver{s} put_writes {thread[:8]}/{ns} {target[:13]} {task} {writes}")
            for w in (saver, ref):
                w.put_writes(cfg(thread, ns, target), writes, task)
        elif op == "by_id":
            target = rng.choice(committed)
            log.append(f"saver{s} get_tuple {thread[:8]}/{ns} {target[:13]}")
            check(
                _norm(saver.get_tuple(cfg(thread, ns, target))), _norm(ref.get_tuple(cfg(thread, ns, target))), "by id"
            )
        elif op == "list":
            log.append(f"saver{s} list {thread[:8]}")
            check_lists(thread, saver)
        elif op == "delete":
            log.append(f"saver{s} delete_thread {thread[:8]}")
            for w in (saver, ref):
                w.delete_thread(thread)
            run_of.pop(thread, None)
            touched(thread)
        elif op == "copy":
            targets = [t for t in DIFF_THREADS if t != thread and ref.empty(t)]
            if targets and not ref.empty(thread):
                target = rng.choice(targets)
                log.append(f"saver{s} copy_thread {thread[:8]} -> {target[:8]}")
                for w in (saver, ref):
                    w.copy_thread(thread, target)
                touched(target)
        elif op == "runs":
            alive = [r for r in runs_seen if r not in dead_runs]
            if alive:
                chosen = rng.sample(alive, min(len(alive), rng.randint(1, 2)))
                log.append(f"saver{s} delete_for_runs {chosen}")
                for w in (saver, ref):
                    w.delete_for_runs(chosen)
                dead_runs.update(chosen)
                for t, r in list(run_of.items()):
                    if r in chosen:
                        del run_of[t]
                last_writer.clear()
        elif op == "prune":
            log.append(f"saver{s} prune {thread[:8]}")
            for w in (saver, ref):
                w.prune([thread])
            touched(thread)
        check_latest(thread, ns, savers[1 - s])
    reader = make_saver()
    for thread in DIFF_THREADS:
        for ns in DIFF_NAMESPACES:
            check_latest(thread, ns, reader)
        check_lists(thread, reader)
    check(sorted(map(_norm_key, reader.list(None))), sorted(map(_norm_key, ref.list(None))), "list(None)")


def _short(item: Any) -> str:
    """A compared item without its large values."""
    return re.sub(r"v{50,}", "v…", str(item))[:600]


def _norm_key(tup: Any) -> str:
    return repr(_norm(tup))


def test_delete_for_runs_back_to_a_detached_survivor(make_saver: Callable[[], S3Saver]) -> None:
    """Found by the randomized test (seed 5): when delete_for_runs moves the head back to a detached record
    (a fork whose id was older than the head), that record's empty chain link hid every older checkpoint:
    they vanished from list() and get_tuple by id, where InMemorySaver keeps them."""
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


def test_gc_after_rollback_to_a_detached_survivor_keeps_history(make_saver: Callable[[], S3Saver]) -> None:
    """Consequence of the defect above: gc, which applies the same chain rule, takes the checkpoints below
    the detached head for orphans and deletes them for good; a later put does not bring them back."""
    from langgraph_s3_checkpoint.gc import gc

    saver = make_saver()
    put(saver, "t", cid(1), run="run-a")
    put(saver, "t", cid(3), cid(1), run="run-b")
    forker = make_saver()
    assert forker.get_tuple(cfg("t", "", cid(1))) is not None
    put(forker, "t", cid(2), cid(1), source="update")  # older than the head: detached
    saver.delete_for_runs(["run-b"])
    gc(saver, grace_seconds=0)
    put(saver, "t", cid(4), cid(2))
    assert ids(make_saver().list(cfg("t"))) == [cid(4), cid(2), cid(1)]
