"""Crash consistency: SIGKILL between any two S3 requests, then resume from a new process.

A child process runs the crash graph (three rounds of fan-out to three parallel nodes, with a channel
large enough to be stored as a blob) and kills itself with SIGKILL just before its N-th HTTP request,
N drawn at random from the requests an uncrashed run makes. That lands the crash between two requests
of the commit protocol, wherever they are. A fresh process then resumes every killed thread.

Checked for every durability mode: the final state equals an uncrashed run's, no node ran more than
once per process, and (sync and async) a node whose writes were stored before the crash was not run
again. The same is done for delete_thread, copy_thread and prune: afterwards every thread reads at
its last committed checkpoint and re-running the operation finishes it.

Size: ``LGS3_CRASH_ITERATIONS`` kills per durability mode (default 10, so 30 graph kills) and per
maintenance operation (default 4). ``LGS3_CRASH_SEED`` fixes the random kill points.
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import RequestCounter, cfg, checkpoint_id_of, is_record_key
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint
from workers.common import (
    crash_graph,
    crash_input,
    crash_markers,
    crash_saver,
    finish,
    ops_graph,
    run,
    spawn,
    worker_env,
)

from langgraph_s3_checkpoint import AsyncS3Saver, CheckpointConflictError, S3Saver
from langgraph_s3_checkpoint._protocol import plans
from langgraph_s3_checkpoint._protocol.keys import escape
from langgraph_s3_checkpoint._protocol.seals import thread_of
from langgraph_s3_checkpoint._protocol.writes import TaskWrites
from langgraph_s3_checkpoint.gc import agc, gc
from langgraph_s3_checkpoint.local import LocalS3Server

ITERATIONS = int(os.environ.get("LGS3_CRASH_ITERATIONS", "10"))
OPS_ITERATIONS = max(2, ITERATIONS * 2 // 5)
SEED = int(os.environ.get("LGS3_CRASH_SEED", random.randrange(1 << 30)))
ROUNDS = 3
PARALLEL = 2
"""Children killed at the same time (on different threads)."""
SMALL_DELETE_BATCH = 4
SIGKILLED = -9

BUCKET = "lgs3-test"


def fresh(server: LocalS3Server, saver: S3Saver) -> S3Saver:
    """A saver with no memory, as a new process would have."""
    return S3Saver(bucket=saver.bucket, prefix=saver.prefix, client=server.client())


def stored_markers(saver: S3Saver, thread_id: str) -> set[str]:
    """Node executions the thread's head holds: in its state, or as pending writes."""
    head = saver.get_tuple(cfg(thread_id))
    if head is None:
        return set()
    found = set(head.checkpoint["channel_values"].get("log", []))
    for _, channel, value in head.pending_writes or []:
        if channel == "log":
            found.update(value)
    return found


def describe_history(saver: S3Saver, thread_id: str) -> str:
    lines = []
    for t in saver.list(cfg(thread_id)):
        values = t.checkpoint["channel_values"]
        writes = [(task[:8], ch, v) for task, ch, v in t.pending_writes or [] if not ch.startswith("branch:")]
        parent = t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
        lines.append(
            f"{t.checkpoint['id']} <- {parent} {t.metadata.get('source')} step={t.metadata.get('step')} "
            f"round={values.get('round')} log={values.get('log')} writes={writes}"
        )
    return "\n".join(lines)


def executions(execdir: Path, thread_id: str) -> collections.Counter[str]:
    path = execdir / f"{thread_id}.log"
    return collections.Counter(path.read_text().split()) if path.exists() else collections.Counter()


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_sigkill_between_any_two_requests_then_resume(
    weed: tuple[LocalS3Server, S3Saver], prefix: str, tmp_path: Path, durability: str
) -> None:
    server, saver = weed
    rng = random.Random(f"{SEED}-{durability}")
    reference_graph = crash_graph(crash_saver(saver), rounds=ROUNDS, execlog=None)  # the workers' thresholds
    counter = RequestCounter(saver.client)
    reference = reference_graph.invoke(crash_input(), cfg(f"reference-{durability}"), durability=durability)
    counter.detach()
    requests_per_run = counter.total()
    assert reference["log"] == crash_markers(ROUNDS)

    env = worker_env(server, BUCKET, prefix)
    common = [f"--durability={durability}", f"--rounds={ROUNDS}", f"--execdir={tmp_path}"]
    threads = [f"{durability}-{i}" for i in range(ITERATIONS)]
    kill_points = {t: rng.randint(1, requests_per_run) for t in threads}
    killed: list[str] = []
    for i in range(0, len(threads), PARALLEL):
        batch = threads[i : i + PARALLEL]
        procs = [
            spawn("crash_worker.py", ["run", f"--threads={t}", f"--kill-at={kill_points[t]}", *common], env)
            for t in batch
        ]
        for thread, proc in zip(batch, procs, strict=True):
            code, _, err = finish(proc)
            assert code in (0, SIGKILLED), err[-3000:]
            if code == SIGKILLED:
                killed.append(thread)

    checker = fresh(server, saver)
    stored = {t: stored_markers(checker, t) for t in threads}
    resumed = run("crash_worker.py", ["resume", f"--threads={','.join(threads)}", *common], env)

    for thread in threads:
        if resumed["finals"][thread] != reference["log"]:
            raise AssertionError(
                f"{thread} (killed at request {kill_points[thread]}) ended with {resumed['finals'][thread]}; "
                f"stored before resuming: {sorted(stored[thread])}; history:\n{describe_history(checker, thread)}"
            )
        ran = executions(tmp_path, thread)
        assert set(ran) == set(reference["log"]), thread
        assert max(ran.values()) <= 2, (thread, ran)  # at most once per process
        if durability != "exit":
            rerun = {m for m in stored[thread] if ran[m] != 1}
            assert not rerun, f"{thread} (killed at request {kill_points[thread]}) re-ran stored nodes {rerun}"
        head = checker.get_tuple(cfg(thread))
        assert head is not None and head.checkpoint["channel_values"]["log"] == reference["log"]
    checker.close()
    assert len(killed) >= len(threads) * 3 // 4, f"only {len(killed)} of {len(threads)} children were killed"
    reruns = sum(max(0, n - 1) for t in threads for n in executions(tmp_path, t).values())
    print(
        f"\n[crash {durability}] seed={SEED} {requests_per_run} requests/run, {len(killed)} kills, "
        f"{reruns} node re-executions, {resumed['conflicts']} resume conflicts"
    )


# -- delete_thread, copy_thread, prune ---------------------------------------------------------------
def populate(saver: S3Saver, thread_id: str) -> None:
    """Three runs of a graph with a subgraph: several namespaces, blobs, run-index entries."""
    graph = ops_graph(saver)
    for i in range(3):
        graph.invoke({"log": [f"in{i}"]}, {"configurable": {"thread_id": thread_id}})


def snapshot(saver: S3Saver, thread_id: str) -> dict[str, Any]:
    """Every committed checkpoint of the thread: id -> (namespace, values)."""
    return {
        t.checkpoint["id"]: (t.config["configurable"]["checkpoint_ns"], t.checkpoint["channel_values"])
        for t in saver.list({"configurable": {"thread_id": thread_id}})
    }


def heads(saver: S3Saver, thread_id: str) -> dict[str, Any]:
    """Latest checkpoint per namespace: ns -> (id, values)."""
    latest: dict[str, Any] = {}
    for cid, (ns, values) in sorted(snapshot(saver, thread_id).items()):
        latest[ns] = (cid, values)
    for ns in list(latest):
        head = saver.get_tuple(cfg(thread_id, ns))
        assert head is not None
        latest[ns] = (head.checkpoint["id"], head.checkpoint["channel_values"])
    return latest


def keys_of_thread(saver: S3Saver, thread_id: str) -> list[str]:
    """Every object of the thread, including its global run-index entries."""
    root, segment = saver.plans.layout.prefix, escape(thread_id)
    paginator = saver.client.get_paginator("list_objects_v2")
    found = []
    for page in paginator.paginate(Bucket=saver.bucket, Prefix=f"{root}threads/{segment}/"):
        found += [o["Key"] for o in page.get("Contents", ())]
    for page in paginator.paginate(Bucket=saver.bucket, Prefix=f"{root}runs/"):
        found += [o["Key"] for o in page.get("Contents", ()) if o["Key"].split("/")[-2] == segment]
    return found


def measure(saver: S3Saver, op: str, thread_id: str, target: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """HTTP requests the operation makes on an uncrashed copy of the thread."""
    monkeypatch.setattr(plans, "DELETE_BATCH", SMALL_DELETE_BATCH)
    counter = RequestCounter(saver.client)
    try:
        if op == "delete":
            saver.delete_thread(thread_id)
        elif op == "copy":
            saver.copy_thread(thread_id, target)
        else:
            saver.prune([thread_id], strategy="keep_latest")
    finally:
        counter.detach()
        monkeypatch.undo()
    return counter.total()


@pytest.mark.parametrize("op", ["delete", "copy", "prune"])
def test_sigkill_inside_maintenance_operations(
    weed: tuple[LocalS3Server, S3Saver], prefix: str, op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, saver = weed
    rng = random.Random(f"{SEED}-{op}")
    populate(saver, "template")
    populate(saver, "bystander")
    bystander = snapshot(saver, "bystander")
    saver.copy_thread("template", "measured")
    requests_per_op = measure(saver, op, "measured", "measured-copy", monkeypatch)
    env = worker_env(server, BUCKET, prefix)

    kills = 0
    for i in range(OPS_ITERATIONS):
        victim, target = f"victim-{i}", f"copy-{i}"
        saver.copy_thread("template", victim)
        before = snapshot(saver, victim)
        before_heads = heads(saver, victim)
        kill_at = rng.randint(1, requests_per_op)
        args = [op, f"--thread={victim}", f"--target={target}", f"--kill-at={kill_at}"]
        code, _, err = finish(spawn("ops_worker.py", [*args, f"--delete-batch={SMALL_DELETE_BATCH}"], env))
        assert code in (0, SIGKILLED), err[-3000:]
        kills += code == SIGKILLED

        reader = fresh(server, saver)
        # Every thread still reads without errors, at its last committed checkpoint.
        assert snapshot(reader, "bystander") == bystander
        after = snapshot(reader, victim)
        if op == "delete":
            assert after in ({}, before), f"half-deleted thread visible (kill at {kill_at})"
            reader.delete_thread(victim)
            assert keys_of_thread(reader, victim) == []
        elif op == "copy":
            assert after == before
            copied = snapshot(reader, target)
            # Each namespace's head is committed on its own: the copy of a namespace is all or nothing.
            assert all(copied[cid] == before[cid] for cid in copied), f"half-copied namespace (kill at {kill_at})"
            for ns in {v[0] for v in copied.values()}:
                assert {c for c, v in copied.items() if v[0] == ns} == {c for c, v in before.items() if v[0] == ns}
            if copied != before:
                # Documented recovery for an interrupted copy (docs/safety.md): delete the target, copy again.
                reader.delete_thread(target)
                reader.copy_thread(victim, target)
            assert snapshot(reader, target) == before
        else:
            assert heads(reader, victim) == before_heads
            assert set(after) <= set(before)
            reader.prune([victim], strategy="keep_latest")
            assert heads(reader, victim) == before_heads
            assert set(snapshot(reader, victim)) == {cid for cid, _ in before_heads.values()}
        reader.close()
    assert kills >= OPS_ITERATIONS // 2
    print(f"\n[crash {op}] seed={SEED} {requests_per_op} requests/op, {kills} kills of {OPS_ITERATIONS}")


# -- known defects, shown by tests that fail until they are fixed ------------------------------------
def test_copy_thread_can_be_rerun_after_a_crash_before_it_committed(
    weed: tuple[LocalS3Server, S3Saver], prefix: str
) -> None:
    """A copy killed after copying some objects but before any head leaves a target that reads as
    empty; running copy_thread again should finish the copy instead of refusing the target."""
    server, saver = weed
    populate(saver, "source")
    namespaces = len(heads(saver, "source"))
    counter = RequestCounter(saver.client)
    saver.copy_thread("source", "measured")
    counter.detach()
    env = worker_env(server, BUCKET, prefix)
    # The head PUTs (one per namespace, in parallel) come last; die a few requests before them.
    kill_at = counter.total() - namespaces - 3
    code, _, err = finish(
        spawn("ops_worker.py", ["copy", "--thread=source", "--target=target", f"--kill-at={kill_at}"], env)
    )
    assert code == SIGKILLED, err[-3000:]
    reader = fresh(server, saver)
    assert snapshot(reader, "target") == {}
    assert keys_of_thread(reader, "target"), "the crash should have left copied objects behind"
    reader.copy_thread("source", "target")
    assert snapshot(reader, "target") == snapshot(reader, "source")
    reader.close()


def test_prune_killed_between_delete_batches_leaves_every_checkpoint_readable(
    weed: tuple[LocalS3Server, S3Saver], prefix: str
) -> None:
    """prune deletes in batches; dying after the first one must not leave a checkpoint whose blob is
    gone (list() would raise CorruptObjectError until the prune is run again). Sending one request at
    a time, in key order, makes the kill point exact: blob keys sort before record keys."""
    server, saver = weed
    # One namespace whose `big` channel changes every round: the older blobs are the first victims.
    crash_graph(saver, rounds=3, execlog=None).invoke(crash_input(), cfg("pruned"))
    env = worker_env(server, BUCKET, prefix)
    args = ["prune", "--thread=pruned", "--delete-batch=2", "--max-concurrency=1"]
    code, _, err = finish(spawn("ops_worker.py", [*args, "--kill-op=DeleteObjects", "--kill-at=2"], env))
    assert code == SIGKILLED, err[-3000:]
    reader = fresh(server, saver)
    snapshot(reader, "pruned")  # raises CorruptObjectError if a record lost a blob it references
    reader.close()
    reader = fresh(server, saver)
    reader.prune(["pruned"], strategy="keep_latest")
    assert len(snapshot(reader, "pruned")) == len(heads(reader, "pruned"))
    reader.close()


def test_a_put_interrupted_before_its_head_stays_invisible_after_later_commits(
    weed: tuple[LocalS3Server, S3Saver],
) -> None:
    """A put that dies between its record and its head PUT leaves a record that was never committed.
    Readers hide it while it is newer than the head, but once a resumed run commits a newer checkpoint
    the leftover shows up in list() as a phantom branch."""
    server, saver = weed
    graph = crash_graph(saver, rounds=1, execlog=None)
    graph.invoke(crash_input(), cfg("phantom"), durability="sync")
    head_before = saver.get_tuple(cfg("phantom"))
    assert head_before is not None

    # A second saver writes a checkpoint's record and dies before its head PUT (simulated in-process
    # by failing that one request), then a resumed run commits on top of the old head.
    dying = fresh(server, saver)

    class Died(Exception):
        pass

    def die_on_head_put(params: dict[str, Any], **_: Any) -> None:
        if params.get("Key", "").endswith("/head"):
            raise Died

    dying.client.meta.events.register("before-parameter-build.s3.PutObject", die_on_head_put)
    with pytest.raises(Died):
        crash_graph(dying, rounds=1, execlog=None).update_state(cfg("phantom"), {"log": ["lost"]})
    dying.close()
    head_now = saver.get_tuple(cfg("phantom"))
    assert head_now is not None and head_now.checkpoint["id"] == head_before.checkpoint["id"]
    assert [t.checkpoint["id"] for t in saver.list(cfg("phantom"), limit=1)] == [head_before.checkpoint["id"]]

    resumed = fresh(server, saver)
    crash_graph(resumed, rounds=1, execlog=None).update_state(cfg("phantom"), {"log": ["after"]})
    head = resumed.get_tuple(cfg("phantom"))
    assert head is not None
    chain_ids = set()
    tup: CheckpointTuple | None = head
    while tup is not None:
        chain_ids.add(tup.checkpoint["id"])
        tup = resumed.get_tuple(tup.parent_config) if tup.parent_config else None
    phantoms = [t.checkpoint["id"] for t in resumed.list(cfg("phantom")) if t.checkpoint["id"] not in chain_ids]
    resumed.close()
    assert phantoms == [], f"uncommitted records became visible after a later commit: {phantoms}"


def test_copy_thread_onto_a_deleted_thread_id(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    """Deleting a thread frees its id: copying onto it afterwards must work. SeaweedFS keeps listing
    the emptied "directories" as common prefixes, which copy_thread takes for existing checkpoints."""
    saver = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    populate(saver, "source")
    saver.copy_thread("source", "target")
    saver.delete_thread("target")
    assert keys_of_thread(saver, "target") == []
    saver.copy_thread("source", "target")
    assert snapshot(saver, "target") == snapshot(saver, "source")
    saver.close()


# -- gc: leftovers of interrupted and losing writes ----------------------------------------------------
class _HeadPutFails(Exception):
    pass


def _fail_head_puts(saver: S3Saver) -> None:
    def hook(params: dict[str, Any], **_: Any) -> None:
        if params.get("Key", "").endswith("/head"):
            raise _HeadPutFails

    saver.client.meta.events.register("before-parameter-build.s3.PutObject", hook)


def everything(saver: S3Saver) -> dict[str, Any]:
    """Every committed checkpoint of every thread, read one by one: (thread, id) -> (ns, values, writes)."""
    found: dict[str, Any] = {}
    for tup in saver.list(None):
        conf = tup.config["configurable"]
        again = saver.get_tuple(tup.config)
        assert again is not None
        found[f"{conf['thread_id']}/{conf['checkpoint_id']}"] = (
            conf["checkpoint_ns"],
            again.checkpoint["channel_values"],
            again.pending_writes,
        )
    return found


def all_keys(saver: S3Saver) -> set[str]:
    pages = saver.client.get_paginator("list_objects_v2").paginate(Bucket=saver.bucket, Prefix=f"{saver.prefix}/")
    return {o["Key"] for page in pages for o in page.get("Contents", ()) if not o["Key"].endswith("/")}


def saver_keys(saver: S3Saver) -> set[str]:
    """Every key but gc's seals."""
    return {key for key in all_keys(saver) if not key.startswith(f"{saver.prefix}/_gc/")}


def test_gc_removes_leftovers_and_nothing_committed(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    saver = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    graph = crash_graph(saver, rounds=1, execlog=None)
    graph.invoke(crash_input(), {"configurable": {"thread_id": "live"}, "metadata": {"run_id": "run-live"}})
    populate(saver, "nested")
    layout, codec = saver.plans.layout, saver.plans.codec
    committed = all_keys(saver)
    expected = everything(saver)

    # 1. A conflict loser: its record is deleted, its blob and run-index entries are not.
    winner, loser = fresh(s3_server, saver), fresh(s3_server, saver)
    seen = loser.get_tuple(cfg("live"))
    assert seen is not None
    crash_graph(winner, rounds=1, execlog=None).update_state({"configurable": {"thread_id": "live"}}, {"log": ["w"]})
    lost = empty_checkpoint()
    version = loser.get_next_version(None, None)
    lost["channel_values"], lost["channel_versions"] = {"big": "L" * 9000}, {"big": version}
    with pytest.raises(CheckpointConflictError):
        loser.put(seen.config, lost, {"step": 9, "run_id": "run-lost"}, {"big": version})
    winner.close()
    loser.close()
    # 2. Then a put that dies before its head PUT (record, blob, run-index entries stay behind) ...
    dying = fresh(s3_server, saver)
    _fail_head_puts(dying)
    with pytest.raises(_HeadPutFails):
        crash_graph(dying, rounds=1, execlog=None).update_state(
            {"configurable": {"thread_id": "live"}, "metadata": {"run_id": "run-dead"}}, {"big": "D" * 9000}
        )
    # ... and a first put on a new thread that dies the same way: a namespace without a head.
    with pytest.raises(_HeadPutFails):
        crash_graph(dying, rounds=1, execlog=None).invoke(crash_input(), cfg("never-committed"))
    dying.close()
    # 3. Objects an interrupted prune or copy leaves: writes without a record, a stray global run entry,
    # a setup probe, and the name object of a long thread id with nothing else left.
    ghost = "1f000000-0000-6000-8000-000000000000"
    root = layout.prefix
    raw = {
        layout.task_writes("live", "", ghost, "task"): codec.encode_task_writes(
            TaskWrites.of_call("task", "", None, [(0, "log", codec.dump("x", "x"))])
        ),
        f"{root}runs/ghost-run/{escape('live')}/~": b"1f0",
        layout.probe("interrupted"): b"1",
        layout.thread_name("x" * 300): ("x" * 300).encode(),
    }
    for key, body in raw.items():
        saver.client.put_object(Bucket=bucket, Key=key, Body=body)

    expected = everything(saver)
    before = all_keys(saver)
    assert before - committed, "the scenario should have left objects behind"

    kept = gc(saver, grace_seconds=3600)
    # gc's seals aside (a thread it found settled gets one: its key says what the thread's listing shows).
    assert kept.total == 0 and saver_keys(saver) == before

    dry = gc(saver, grace_seconds=0, dry_run=True)
    assert saver_keys(saver) == before
    assert set(dry.deleted) == {
        "uncommitted_record",
        "orphan_blob",
        "headless_namespace",
        "orphan_writes",
        "dangling_run_entry",
        "setup_probe",
        "orphan_name",
    }, dry.deleted
    assert kept.young == dry.total

    done = gc(saver, grace_seconds=0)
    assert done.deleted == dry.deleted
    remaining = all_keys(saver)
    assert everything(saver) == expected, "a committed checkpoint changed"
    assert not remaining & set(raw)
    assert keys_of_thread(saver, "never-committed") == []
    live_ns = layout.ns("live", "")
    head = saver.get_tuple(cfg("live"))
    assert head is not None
    referenced: set[str] = set()
    for key in remaining:
        if key.startswith(f"{live_ns}c/") and is_record_key(key):
            assert checkpoint_id_of(key) <= head.checkpoint["id"], f"uncommitted record {key} kept"
            body = saver.client.get_object(Bucket=bucket, Key=key)["Body"].read()
            referenced |= {layout.blob("live", "", ch, v) for ch, v in codec.peek_record(key, body)[2].items()}
    assert {k for k in remaining if k.startswith(f"{live_ns}b/")} == referenced
    runs = {k.split("/")[-3] for k in remaining if k.startswith(f"{root}runs/")}
    # run-dead's put died, but update_state had first written run-dead's writes to the head it continued (another
    # run's checkpoint): its entries name that head, so they are not dangling, and a rollback still finds them.
    assert runs & {"run-live", "run-dead", "run-lost", "ghost-run"} == {"run-live", "run-dead"}
    assert gc(saver, grace_seconds=0).total == 0

    def writers_of_the_head() -> set[str]:
        keys = [k for k in all_keys(saver) if k.startswith(layout.writes("live", "", head.checkpoint["id"]))]
        bodies = {k: saver.client.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}
        return set().union(*(codec.peek_task_writes(k, body).runs() for k, body in bodies.items()))

    assert "run-dead" in writers_of_the_head()
    saver.delete_for_runs(["run-dead"])
    assert "run-dead" not in writers_of_the_head()
    assert not {k for k in all_keys(saver) if k.startswith(f"{root}runs/run-dead/")}
    # The threads still work after gc.
    crash_graph(saver, rounds=1, execlog=None).update_state({"configurable": {"thread_id": "live"}}, {"log": ["z"]})
    assert saver.get_tuple(cfg("live")) is not None
    saver.close()
    print(f"\n[gc] scanned {done.scanned}, deleted {dict(done.deleted)} ({done.deleted_bytes} bytes)")


def test_gc_collects_orphan_records_below_the_head(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    """Records older than the head but off its commit chain (chain.py: ORPHAN) can never commit: gc takes
    them (and their writes, and blobs only they reference) at once, past the grace, and nothing committed.
    A detached record (an older id committed by its record alone) is committed and stays."""
    saver = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    populate(saver, "t")
    layout, codec = saver.plans.layout, saver.plans.codec
    ids = sorted(t.checkpoint["id"] for t in saver.list(cfg("t", "")))
    assert len(ids) >= 3
    first, second = ids[0], ids[1]
    template = codec.decode_record(
        layout.record("t", "", second),
        saver.client.get_object(Bucket=bucket, Key=layout.record("t", "", second))["Body"].read(),
    )
    assert template.previous_head == first, "the namespace's chain should be linear"

    def record(checkpoint_id: str, previous_head: str | None, *, detached: bool = False, blob: str = "") -> bytes:
        checkpoint = {**template.checkpoint, "id": checkpoint_id}
        blobs = {"big": blob} if blob else {}
        return codec.encode_record(
            checkpoint,  # type: ignore[arg-type]
            template.metadata,
            first,
            {},
            blobs,
            previous_head=previous_head,
            detached=detached,
        )

    # Between the first two committed records: a put that lost the race for the head (it named the
    # first record as the head it replaced, as the second one did), with writes and its own blob.
    lost, detached, below = f"{first}0", f"{first}1", f"0{first}"
    orphans = {
        layout.record("t", "", lost): record(lost, first, blob="lost-version"),
        layout.task_writes("t", "", lost, "task"): codec.encode_task_writes(
            TaskWrites.of_call("task", "", None, [(0, "log", codec.dump("x", "x"))])
        ),
        layout.blob("t", "", "big", "lost-version"): codec.encode_blob(codec.dump("x", "L" * 9000)),
        # Older than the thread's first commit: no link is left below the first record.
        layout.record("t", "", below): record(below, None),
    }
    kept = {layout.record("t", "", detached): record(detached, first, detached=True)}
    # Keys that are not the saver's (an unknown key, a zero-byte folder marker) are never deleted.
    foreign = {f"{layout.records('t', '')}unknown": b"?", layout.records("t", ""): b""}
    for key, body in {**orphans, **kept, **foreign}.items():
        saver.client.put_object(Bucket=bucket, Key=key, Body=body)
    listed = [t.checkpoint["id"] for t in saver.list(cfg("t"))]
    assert lost not in listed and below not in listed and detached in listed
    expected = everything(saver)
    before = all_keys(saver)
    time.sleep(1.1)  # LastModified and the server's Date have a one-second resolution

    assert gc(saver, grace_seconds=3600).total == 0
    dry = gc(saver, grace_seconds=0, dry_run=True)
    assert dict(dry.deleted) == {"orphan_record": 3, "orphan_blob": 1}, dry.deleted
    assert set(dry.sample) == set(orphans)
    assert dry.foreign >= 1  # some servers do not list folder markers
    assert all_keys(saver) == before
    asaver = AsyncS3Saver(bucket=bucket, prefix=prefix, client=s3_server.client(), transport="direct")
    assert asaver.bucket_io.native is not None  # its listing and reads go out from the event loop
    try:
        adry = asyncio.run(agc(asaver, grace_seconds=0, dry_run=True))
    finally:
        asaver.close()
    assert adry.deleted == dry.deleted and adry.scanned == dry.scanned

    done = gc(saver, grace_seconds=0)
    assert done.deleted == dry.deleted
    # Besides, gc may write the thread's seal (what it found committed, once older than 2 s: not to read it again;
    # its key says what the thread's listing shows after this gc, so that the next one skips it if nothing changes).
    seals = {key for key in all_keys(saver) if key.startswith(f"{layout.prefix}_gc/")}
    found = [thread_of(layout.prefix, key) for key in seals]
    assert len(found) <= 1 and all(seal is not None and seal[0] == "t" for seal in found), seals
    assert all_keys(saver) - seals == before - set(orphans)
    assert f"{layout.records('t', '')}unknown" in all_keys(saver)
    assert everything(saver) == expected, "a committed checkpoint changed"
    assert [t.checkpoint["id"] for t in saver.list(cfg("t"))] == listed
    assert gc(saver, grace_seconds=0).total == 0
    saver.close()
