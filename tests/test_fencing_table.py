"""The fencing table, row by row: every (parent, how the put's run read it, source) against every state of the head.

:data:`~langgraph_s3_checkpoint._protocol.fencing.FENCING_TABLE` picks a rule from what a put says and how its
run read the parent; :data:`~langgraph_s3_checkpoint._protocol.fencing.SETTLE_TABLE`
says what the rule does on the head as it is.
Here each row is set up for real on an in-memory bucket (the run's read made by the saver itself, with the run's
``Runtime`` in the config as LangGraph passes it; UNREAD rows put without a run, as a direct call does) and the put's
observable outcome is compared with what the two tables say: committed on top of the head, already committed (a lost
answer), or refused with the error the refusal names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import pytest
from helpers import NEW, OLD, OTHER, PARENT, Run, cfg, checkpoint, cid
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointMetadata

from langgraph_s3_checkpoint import CheckpointConflictError, ParentNotCommittedError, S3Saver
from langgraph_s3_checkpoint._protocol.fencing import (
    ABSENT,
    FENCING_TABLE,
    SETTLE_TABLE,
    HeadNow,
    ParentRead,
    Refusal,
    Rule,
    Seen,
    Source,
    rule_for,
    settle,
)
from langgraph_s3_checkpoint._protocol.requests import Get
from langgraph_s3_checkpoint.memory import MemoryBucket

pytestmark = pytest.mark.memory
"""No S3 server: every test of this module runs in memory (``pytest -m memory``)."""


def test_the_tables_are_complete() -> None:
    assert set(FENCING_TABLE) == {(p, r, s) for p in (False, True) for r in ParentRead for s in Source} - {
        # a run's own commit has an id: a put with no parent cannot continue it
        (False, ParentRead.OWN, s)
        for s in Source
    }
    assert set(SETTLE_TABLE) == {(rule, head) for rule in Rule for head in HeadNow} - {
        # a put with no parent has no parent for the head to hold, nor one to be a detached fork
        (Rule.CREATE, HeadNow.PARENT),
        (Rule.CREATE, HeadNow.OTHER_BESIDE_A_DETACHED_PARENT),
    }


@dataclass
class Row:
    """One case: the bucket before the put, how the caller read the parent, and what the head then holds."""

    has_parent: bool
    read: ParentRead
    source: Source
    head: str
    """One of :data:`HEAD_STATES`."""

    @property
    def head_now(self) -> HeadNow:
        return {
            "none": HeadNow.NONE,
            "parent": HeadNow.PARENT,
            "this": HeadNow.THIS,
            "other (parent a detached fork)": HeadNow.OTHER_BESIDE_A_DETACHED_PARENT,
            ROLLED_BACK: HeadNow.NAMES_THIS_RUN_ROLLED_BACK,
        }.get(self.head, HeadNow.OTHER)

    @property
    def metadata_source(self) -> str:
        return {Source.STEP: "loop", Source.UPDATE: "update", Source.FORK: "fork"}[self.source]

    def expected(self) -> Any:
        rule = rule_for(cid(PARENT) if self.has_parent else None, self.read, self.metadata_source)
        return settle(rule, self.head_now, parent_committed=self.head != "other (parent not committed)")


ROLLED_BACK = "naming the put's run as rolled back"
"""The head (the parent, or with no parent another writer's first checkpoint) after ``delete_for_runs`` of the put's
run, which had written to it and so might still move it: the put under test is a step of that run."""
HEAD_STATES = (
    ROLLED_BACK,
    "none",
    "parent",
    "this",
    "other (parent committed)",
    "other (parent not committed)",
    "other (parent a detached fork)",
)


def rows() -> list[Row]:
    out = []
    for has_parent, read, source in FENCING_TABLE:
        for head in HEAD_STATES:
            if not has_parent and head in ("parent", "other (parent not committed)", "other (parent a detached fork)"):
                continue  # nothing to hold or to be committed
            if head == "other (parent a detached fork)" and read is ParentRead.LATEST:
                continue  # a detached record is never the head, so never read as the latest
            if head == "other (parent not committed)" and read is ParentRead.OWN:
                continue  # the run's own parent rolled back: the head names the run (row ROLLED_BACK)
            out.append(Row(has_parent, read, source, head))
    return out


class World:
    """A bucket, a saver shared by every run and caller (one process), and the run whose put is under test."""

    def __init__(self) -> None:
        self.bucket = MemoryBucket()
        self.saver = S3Saver(bucket="b", client=self.bucket)
        self.run = Run()

    def put(
        self, parent: int | None, n: int, source: str = "loop", run: str | None = None, *, own: bool = False
    ) -> Any:
        """A put by another party (``own``: by the run under test, which then knows it as its own commit)."""
        meta = cast(CheckpointMetadata, {"source": source, "step": n})
        if run:
            meta["run_id"] = run
        config = cfg("t", "", cid(parent) if parent else None)
        return self.saver.put(self.run.of(config) if own else config, checkpoint(n), meta, {})

    def roll_back_a_run_that_wrote_to(self, n: int) -> None:
        """Run ``r-new`` writes to checkpoint ``n`` (it resumed it), then another call rolls it back."""
        config: RunnableConfig = {
            "configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": cid(n)},
            "metadata": {"run_id": "r-new"},
        }
        self.saver.put_writes(config, [("x", 1)], "resumed-task")
        self.saver.delete_for_runs(["r-new"])

    def run_read_by_id(self, n: int | None) -> None:
        """The run under test read checkpoint ``n`` by id while it was not the head (``None``: LangGraph's replay lookup
        found nothing below its point)."""
        self.saver.plans.recall.runs.read(self.run.runtime, "t", "", Seen(ParentRead.BY_ID, cid(n) if n else ABSENT))

    def head_id(self) -> str | None:
        tup = self.saver.get_tuple(cfg("t"))
        return None if tup is None else tup.checkpoint["id"]

    def record_previous(self, n: int) -> str | None:
        """The head the record of checkpoint ``n`` names as the one it replaced."""
        key = self.saver.plans.layout.record("t", "", cid(n))
        stored = self.bucket.execute(Get(key))
        assert stored is not None
        return self.saver.plans.codec.decode_record(key, stored.body).previous_head


def set_up(row: Row) -> World:
    """The bucket and the run's read of the row, the parent (when there is one) written first as the head."""
    w = World()
    if not row.has_parent:
        if row.read is ParentRead.LATEST:
            assert w.saver.get_tuple(w.run.of(cfg("t"))) is None
        elif row.read is ParentRead.BY_ID:
            w.run_read_by_id(None)
        if row.head == "this":
            w.put(None, NEW)
        elif row.head == "other (parent committed)":
            w.put(None, OTHER, "input")
        elif row.head == ROLLED_BACK:
            w.put(None, OTHER, "input", run="r-other")
            w.roll_back_a_run_that_wrote_to(OTHER)
        return w
    w.put(None, OLD, "input", run="r-old")
    if row.head == "other (parent a detached fork)":
        # a replay's fork from OLD whose id lost the race for the head to a newer step: committed beside it
        w.put(OLD, OTHER, "loop")
        w.put(OLD, PARENT, "fork", own=row.read is ParentRead.OWN)
        assert w.head_id() == cid(OTHER)
        if row.read is ParentRead.BY_ID:
            w.run_read_by_id(PARENT)
        return w
    w.put(OLD, PARENT, "loop", run="r-parent", own=row.read is ParentRead.OWN)
    if row.read is ParentRead.LATEST:
        assert w.saver.get_tuple(w.run.of(cfg("t"))) is not None
    elif row.read is ParentRead.BY_ID:
        w.run_read_by_id(PARENT)  # as a read by id of it, below the head, records
    if row.head == "none":
        w.saver.delete_thread("t")
    elif row.head == "this":
        w.put(PARENT, NEW, "loop")
    elif row.head == "other (parent committed)":
        w.put(PARENT, OTHER, "loop")
    elif row.head == "other (parent not committed)":
        w.saver.delete_for_runs(["r-parent"])  # the head holds OLD again; the parent is gone
    elif row.head == ROLLED_BACK:
        w.roll_back_a_run_that_wrote_to(PARENT)
    return w


@pytest.mark.parametrize(
    "row",
    rows(),
    ids=lambda r: f"{'parent' if r.has_parent else 'no parent'}, {r.read.name}, {r.metadata_source}, head: {r.head}",
)
def test_each_row_does_what_the_tables_say(row: Row) -> None:
    w = set_up(row)
    head_before = w.head_id()
    step = row.expected()
    source = row.metadata_source
    parent = cfg("t", "", cid(PARENT)) if row.has_parent else cfg("t")
    if row.read is not ParentRead.UNREAD:
        parent = w.run.of(parent)
    put = w.saver.put
    metadata = cast(
        CheckpointMetadata, {"source": source, "step": NEW} | ({"run_id": "r-new"} if row.head == ROLLED_BACK else {})
    )
    if step.refused is not None:
        expected_error = {
            Refusal.MOVED: CheckpointConflictError,
            Refusal.CREATED: CheckpointConflictError,
            Refusal.PARENT_NOT_COMMITTED: ParentNotCommittedError,
            Refusal.RUN_ROLLED_BACK: CheckpointConflictError,
        }[step.refused]
        with pytest.raises(
            expected_error, match="rolled back" if step.refused is Refusal.RUN_ROLLED_BACK else None
        ) as refused:
            put(parent, checkpoint(NEW), metadata, {})
        if step.refused is not Refusal.PARENT_NOT_COMMITTED:
            assert not isinstance(refused.value, ParentNotCommittedError), refused.value
        assert w.head_id() == head_before, "a refused put changed the head"
        return
    put(parent, checkpoint(NEW), metadata, {})
    assert w.head_id() == cid(NEW)
    if step.done:
        return
    assert w.record_previous(NEW) == head_before, "committed on top of the head as it was"
