"""``name`` objects: the real id of a thread or namespace whose id is too long to be a key segment.

Only the ``name`` object leads from a digest folder back to its id, so listing threads, ``delete_for_runs``,
``expire_threads`` and ``verify`` depend on it. These tests check that nothing loses it silently:

* gc deletes a name left alone (a thread rolled back to nothing) while a first put of that thread commits,
  in every interleaving of the two plans: the put offers the name again once committed and gc puts back a
  name it deleted when it then finds the thread in use, so a committed thread keeps its name;
* a rollback that meets a namespace whose name is missing or damaged raises an error naming that object,
  after rolling back everything else, instead of returning as if done; ``repair_thread`` writes a thread's
  name again;
* ``langgraph-s3 threads`` and ``verify`` neither crash on a damaged name nor take it for another thread's.

Everything runs on :class:`MemoryBucket` (no server): the plans are the saver's own.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from helpers import BIG, LONG_THREAD, Crash, cfg, checkpoint, cid, drive, put, put_plan, tuple_at, ver
from langchain_core.runnables import RunnableConfig
from sim import Op, interleavings

from langgraph_s3_checkpoint import CorruptObjectError, S3Saver, cli
from langgraph_s3_checkpoint._protocol.garbage_collection import gc_plan
from langgraph_s3_checkpoint._protocol.keys import Layout, escape, is_digest, named_id
from langgraph_s3_checkpoint._protocol.requests import DeleteObjects, Put
from langgraph_s3_checkpoint.memory import MemoryBucket

LONG = "L" * 200
"""An id longer than a key segment: stored as a digest, with a ``name`` object."""
PREFIX = "p"


def config(thread_id: str, ns: str = "") -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}


def metadata(run_id: str) -> Any:
    return {"source": "input", "step": -1, "run_id": run_id}


def name_keys(thread_id: str, ns: str) -> list[str]:
    layout = Layout(PREFIX)
    keys = [layout.thread_name(thread_id)] if is_digest(escape(thread_id)) else []
    return keys + ([layout.ns_name(thread_id, ns)] if is_digest(escape(ns)) else [])


def readable_name(bucket: MemoryBucket, key: str) -> bool:
    obj = bucket.object(key)
    segment = key.rsplit("/", 2)[-2]
    return named_id(segment, None if obj is None else obj.body) is not None


@pytest.mark.memory
@pytest.mark.parametrize(("thread_id", "ns"), [(LONG, ""), ("t", "N" * 200)], ids=["long thread", "long namespace"])
def test_gc_never_leaves_a_committed_thread_without_its_name(thread_id: str, ns: str) -> None:
    """The race: a thread rolled back to nothing keeps an old ``name`` (a first put's create-only offer of it
    is refused, so its age is not renewed); gc deletes it as alone while a new first put commits."""
    committed = 0

    def build() -> tuple[Any, list[Op]]:
        clock = [datetime(2030, 1, 1, tzinfo=timezone.utc)]
        bucket = MemoryBucket(now=lambda: clock[0], keep_log=True)

        def saver() -> S3Saver:
            return S3Saver(bucket="b", client=bucket, prefix=PREFIX)

        saver().put(config(thread_id, ns), checkpoint(1), metadata("r1"), {})
        saver().delete_for_runs(["r1"])  # the thread's only run: its namespace is left without a head
        assert all(bucket.object(k) is not None for k in name_keys(thread_id, ns))
        clock[0] += timedelta(hours=2)
        writer = saver()
        put = writer.plans.put(config(thread_id, ns), checkpoint(2), metadata("r2"), {})
        return bucket, [Op("gc", saver(), gc_plan(saver().plans, 3600, False)), Op("put", writer, put)]

    def judge(bucket: Any, ops: list[Op], schedule: str) -> list[str]:
        nonlocal committed
        problems = [f"{op.label} {op.status}: {op.error!r}" for op in ops if op.status != "returned"]
        if bucket.object(f"{Layout(PREFIX).ns(thread_id, ns)}head") is not None:
            committed += 1
            problems += [f"{key} lost" for key in name_keys(thread_id, ns) if not readable_name(bucket, key)]
            listed = {
                t.config["configurable"]["thread_id"]
                for t in S3Saver(bucket="b", client=bucket, prefix=PREFIX).list(None)
            }
            if ns == "" and thread_id not in listed:
                problems.append("the thread is not listed")
        return problems

    runs, failures = interleavings(build, judge)
    assert failures == [], "\n".join(failures[:10])
    assert runs > 10 and committed == runs, (runs, committed)


def two_threads_of_one_run() -> tuple[MemoryBucket, S3Saver]:
    bucket = MemoryBucket()
    saver = S3Saver(bucket="b", client=bucket, prefix=PREFIX)
    for n, thread_id in enumerate(("short", LONG)):
        saver.put(config(thread_id), checkpoint(n), metadata("r1"), {})
    return bucket, saver


@pytest.mark.memory
@pytest.mark.parametrize("damage", ["missing", "not utf-8", "another id"])
def test_a_rollback_that_cannot_find_a_thread_by_its_name_says_so(damage: str) -> None:
    bucket, saver = two_threads_of_one_run()
    name_key = Layout(PREFIX).thread_name(LONG)
    if damage == "missing":
        bucket.execute(DeleteObjects((name_key,)))
    else:
        bucket.execute(Put(name_key, b"\xff\xfe" if damage == "not utf-8" else b"short"))

    with pytest.raises(CorruptObjectError) as raised:
        saver.delete_for_runs(["r1"])
    assert raised.value.key == name_key
    assert "repair_thread" in str(raised.value) and "not rolled back" in str(raised.value)
    assert saver.get_tuple(config("short")) is None, "the other thread of the run is rolled back first"
    assert saver.get_tuple(config(LONG)) is not None

    report = saver.repair_thread(LONG)
    assert report.name_restored and report.ok
    assert readable_name(bucket, name_key)
    assert not saver.repair_thread(LONG).name_restored
    saver.delete_for_runs(["r1"])
    assert saver.get_tuple(config(LONG)) is None


@pytest.mark.memory
def test_a_dry_repair_only_reports_the_missing_name() -> None:
    bucket, saver = two_threads_of_one_run()
    name_key = Layout(PREFIX).thread_name(LONG)
    bucket.execute(DeleteObjects((name_key,)))
    assert saver.repair_thread(LONG, dry_run=True).name_restored
    assert bucket.object(name_key) is None


def run_cli(saver: S3Saver, *argv: str) -> tuple[int, str]:
    args = cli.build_parser().parse_args(["--url", f"s3://b/{PREFIX}", *argv])
    out = io.StringIO()
    bucket_io = dataclasses.replace(saver.bucket_io, deadline=None)
    ctx = cli.Context(saver=saver, bucket_io=bucket_io, as_json=False, progress=False, out=out)
    return args.handler(ctx, args), out.getvalue()


@pytest.mark.memory
@pytest.mark.parametrize("body", [None, b"\xff\xfe", b"short"], ids=["missing", "not utf-8", "another id"])
def test_threads_and_verify_with_a_damaged_name(body: bytes | None) -> None:
    bucket, saver = two_threads_of_one_run()
    name_key = Layout(PREFIX).thread_name(LONG)
    bucket.execute(DeleteObjects((name_key,)) if body is None else Put(name_key, body))

    status, listed = run_cli(saver, "threads")
    assert status == cli.EXIT_OK
    assert listed.count("short") == 1 and LONG not in listed

    status, verified = run_cli(saver, "verify")
    assert status == cli.EXIT_PROBLEMS
    assert f"PROBLEM {name_key}: " in verified and "repair" in verified

    saver.repair_thread(LONG)
    status, verified = run_cli(saver, "verify")
    assert status == cli.EXIT_OK, verified
    assert "in 2 thread(s): OK" in verified


def test_a_put_retried_after_its_name_put_failed_writes_the_name(make_saver: Callable[[], S3Saver]) -> None:
    """A saver remembers a ``name`` object as written only once its PUT succeeded: when that put fails, the retried put
    writes it, and list(None) shows the thread id rather than its digest."""
    saver = make_saver()

    def fail_on_name(step: list[Any]) -> None:
        if any(isinstance(r, Put) and r.key.endswith("/name") for r in step):
            raise Crash  # e.g. the connection dropped: nothing of this batch was stored

    with pytest.raises(Crash):
        drive(saver, put_plan(saver, LONG_THREAD, cid(1)), fail_on_name)
    put(saver, LONG_THREAD, cid(1))
    assert [t.config["configurable"]["thread_id"] for t in make_saver().list(None)] == [LONG_THREAD]


def test_a_saver_writes_the_name_again_after_its_own_delete_or_copy(make_saver: Callable[[], S3Saver]) -> None:
    """After delete_thread by the same saver (or copy_thread onto the thread), the saver must not believe the thread's
    ``name`` object still exists: its next put writes it, and list(None) shows the thread id, not a digest."""
    saver = make_saver()
    big: dict[str, Any] = {"values": {"big": "b" * BIG}, "versions": {"big": ver(1)}}
    put(saver, LONG_THREAD, cid(1), run="run-1", **big)
    saver.delete_thread(LONG_THREAD)
    put(saver, LONG_THREAD, cid(2), run="run-1", **big)
    reader = make_saver()
    assert [t.config["configurable"]["thread_id"] for t in reader.list(None)] == [LONG_THREAD]
    assert tuple_at(reader, cfg(LONG_THREAD)).checkpoint["channel_values"]["big"] == "b" * BIG

    saver.delete_thread(LONG_THREAD)
    put(saver, "source", cid(3), **big)
    saver.copy_thread("source", LONG_THREAD)
    put(saver, LONG_THREAD, cid(4), cid(3), **big, new={})
    assert {t.config["configurable"]["thread_id"] for t in reader.list(None)} == {LONG_THREAD, "source"}
    assert tuple_at(reader, cfg(LONG_THREAD)).checkpoint["channel_values"]["big"] == "b" * BIG


def test_a_saver_writes_the_name_again_after_another_savers_delete(make_saver: Callable[[], S3Saver]) -> None:
    """After another saver deleted a thread, this saver's next put of it as a new thread writes the ``name`` object and
    run-index entries again, whatever it remembers writing: the thread lists by its id, and its run can be rolled
    back."""
    saver, other = make_saver(), make_saver()
    put(saver, LONG_THREAD, cid(1), run="run-1", values={"big": "b" * BIG}, versions={"big": ver(1)})
    other.delete_thread(LONG_THREAD)
    put(saver, LONG_THREAD, cid(2), run="run-1", values={"big": "b" * BIG}, versions={"big": ver(1)})
    reader = make_saver()
    assert [t.config["configurable"]["thread_id"] for t in reader.list(None)] == [LONG_THREAD]
    assert tuple_at(reader, cfg(LONG_THREAD)).checkpoint["channel_values"]["big"] == "b" * BIG
    reader.delete_for_runs(["run-1"])
    assert reader.get_tuple(cfg(LONG_THREAD)) is None
