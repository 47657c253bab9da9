"""``export`` against ``prune`` on a live thread: an archive never references a value it lacks.

The export plan is driven batch by batch on the in-memory bucket; between any two of its batches a run commits
a checkpoint with a new version of a large value and ``prune(keep_latest)`` deletes the older checkpoints and
the values only they referenced. Every export then either raises :class:`ThreadChangedError` (nothing emitted
after it: no heads, so the archive imports as nothing) or produces an archive that imports into a fresh thread
whose every checkpoint reads in full.
"""

from __future__ import annotations

import contextvars
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from helpers import cfg, checkpoint, cid
from langgraph.checkpoint.base import ChannelVersions

from langgraph_s3_checkpoint import S3Saver, ThreadChangedError
from langgraph_s3_checkpoint._protocol.operator_plans import Exported, export_thread, import_thread
from langgraph_s3_checkpoint._protocol.requests import Emit
from langgraph_s3_checkpoint.memory import MemoryBucket

pytestmark = pytest.mark.memory
"""No S3 server: every test of this module runs in memory (``pytest -m memory``)."""

LARGE = 64
"""Bytes above which a value gets its own object (the saver's ``inline_threshold`` here)."""


class Clock:
    """The in-memory server's clock: the history is written a day before the put and the prune, so the prune's
    grace period (young objects may belong to a put in flight) spares nothing of it."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now


def a_thread_of_three_checkpoints() -> tuple[S3Saver, MemoryBucket, Any]:
    """The saver, its bucket, and ``put_and_prune``: a fourth checkpoint a day later, then ``prune(keep_latest)``."""
    clock = Clock()
    bucket = MemoryBucket(now=clock)
    saver = S3Saver(bucket="b", client=bucket, inline_threshold=LARGE)
    for n in (1, 2, 3):
        step(saver, n)

    def put_and_prune() -> None:
        clock.now += timedelta(days=1)
        step(saver, 4)
        saver.prune(["t"], strategy="keep_latest")

    return saver, bucket, put_and_prune


def step(saver: S3Saver, n: int) -> None:
    """Checkpoint ``n`` of thread ``t``, on ``n - 1``, with a new large value of ``doc`` (and ``notes`` kept)."""
    cp = checkpoint(n)
    cp["channel_values"] = {"doc": f"draft {n} " + "x" * 200, "notes": "n" * 200}
    cp["channel_versions"] = {"doc": f"{n:032d}", "notes": f"{1:032d}"}
    new_versions: ChannelVersions = {"doc": f"{n:032d}"} if n > 1 else dict(cp["channel_versions"])
    parent = cfg("t", "", cid(n - 1)) if n > 1 else cfg("t")
    contextvars.Context().run(saver.put, parent, cp, {"source": "loop", "step": n}, new_versions)


def export_interrupted(saver: S3Saver, bucket: MemoryBucket, at: int, meanwhile: Any) -> list[Exported] | None:
    """Run the export plan, calling ``meanwhile()`` before its ``at``-th batch; the archive, or ``None`` if the
    export raised :class:`ThreadChangedError`. Fails if ``at`` is past the last batch."""
    plan = export_thread(saver.plans.layout, saver.plans.codec, "t")
    archive: list[Exported] = []
    batches = 0
    reply: Any = None
    try:
        while True:
            item = plan.send(reply)
            if isinstance(item, Emit):
                archive.append(item.value)
                reply = None
                continue
            if batches == at:
                meanwhile()
            batches += 1
            reply = [bucket.execute(request) for request in item]
    except StopIteration:
        assert batches > at, f"the export has only {batches} batches"
        return archive
    except ThreadChangedError:
        return None


def batches_of_an_export() -> int:
    saver, bucket, _ = a_thread_of_three_checkpoints()
    plan = export_thread(saver.plans.layout, saver.plans.codec, "t")
    count, reply = 0, None
    try:
        while True:
            item = plan.send(reply)
            reply = None if isinstance(item, Emit) else [bucket.execute(r) for r in item]
            count += not isinstance(item, Emit)
    except StopIteration:
        return count


@pytest.mark.parametrize("at", range(batches_of_an_export()))
def test_an_export_with_a_put_and_a_prune_before_any_batch_reads_whole_or_raises(at: int) -> None:
    saver, bucket, put_and_prune = a_thread_of_three_checkpoints()
    archive = export_interrupted(saver, bucket, at, put_and_prune)
    if archive is None:
        return  # told to export again; nothing of the thread's heads went out
    importer = S3Saver(bucket="b", client=bucket, prefix="imported", inline_threshold=LARGE)
    importer.bucket_io.run(import_thread(importer.plans.layout, importer.plans.codec, "t", archive))
    history = list(contextvars.Context().run(importer.list, cfg("t")))
    assert history, f"the archive imported as an empty thread: {[e.relative for e in archive]}"
    for tup in history:
        values = tup.checkpoint["channel_values"]
        assert values["doc"].startswith(f"draft {tup.metadata['step']} ") and values["notes"] == "n" * 200


def test_the_race_is_met_and_export_says_so() -> None:
    """Between reading the heads and listing the thread, the put and prune delete the large value the snapshot
    head references: the export raises, naming it, instead of writing an archive whose latest cannot be read."""
    saver, bucket, put_and_prune = a_thread_of_three_checkpoints()
    with pytest.raises(ThreadChangedError, match=r"changed while it was exported.*doc.*export again"):
        plan = export_thread(saver.plans.layout, saver.plans.codec, "t")
        reply: Any = None
        batches = 0
        while True:
            item = plan.send(reply)
            if isinstance(item, Emit):
                reply = None
                continue
            if batches == 2:  # after the namespaces' listing and the heads' read
                put_and_prune()
            batches += 1
            reply = [bucket.execute(request) for request in item]
