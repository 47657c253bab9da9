"""What a put commits, and what readers take as committed.

A put writes its immutable objects first and its head last (docs/design.md); the head PUT is the commit point.
These tests stop, answer or reorder that sequence by hand (a plan stepped batch by batch, boto3 on the bucket to
plant what a crash leaves) on every server kind: a head PUT whose answer was lost, a head-only commit (the record
PUT lost, the head landed), the records of puts that died before their head. Every crash point of every plan is
walked on the in-memory bucket in test_simulation.py; real processes are killed in test_crash.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from helpers import cfg, cid, crash_before_head, drive, head_put_of, ids, put, put_plan, send, tuple_at
from langchain_core.runnables import RunnableConfig

from langgraph_s3_checkpoint import S3Saver
from langgraph_s3_checkpoint._protocol.requests import PRECONDITION_FAILED


def test_a_head_put_whose_answer_was_lost_is_not_taken_for_a_conflict(make_saver: Callable[[], S3Saver]) -> None:
    """A head PUT that was applied but whose answer was lost (botocore retried and got 412) is the put's own commit,
    even when another writer has already committed on top of it: the put returns its config and keeps its record, which
    the successor names as its parent (taken for a conflict, the put would raise and delete that record)."""
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
    head = tuple_at(reader, cfg("t"))
    assert head.checkpoint["id"] == cid(3) and head.parent_config is not None
    assert reader.get_tuple(head.parent_config) is not None


def test_a_fork_keeps_a_head_only_commit_in_the_history(make_saver: Callable[[], S3Saver], s3_client: Any) -> None:
    """When the head's record is missing (a head-only commit: the record PUT failed, the head landed), a fork that joins
    the head restores that record before it replaces the head, so the checkpoint stays in the history."""
    saver = make_saver()
    put(saver, "t", cid(1))
    put(saver, "t", cid(2), cid(1))
    s3_client.delete_object(Bucket=saver.bucket, Key=saver.plans.layout.record("t", "", cid(2)))
    forker = make_saver()
    assert forker.get_tuple(cfg("t", "", cid(1))) is not None
    put(forker, "t", cid(3), cid(1), source="update")
    assert ids(make_saver().list(cfg("t"))) == [cid(3), cid(2), cid(1)]


def test_history_shows_a_head_only_commit_before_anyone_reads_the_latest(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """A head-only commit (the record PUT lost, the head landed) is in ``list()`` (a UI's ``get_state_history``) at
    once, not only after a latest read restored its record: the head, a copy of the record, stands in for it at its
    place in the history, with its writes, in every listing that reaches it; and a listing writes nothing."""
    saver = make_saver()
    for n in (1, 2, 3):
        put(saver, "t", cid(n), cid(n - 1) if n > 1 else None)
    saver.put_writes(cfg("t", "", cid(3)), [("c", "pending")], "task-1")
    s3_client.delete_object(Bucket=saver.bucket, Key=saver.plans.layout.record("t", "", cid(3)))
    reader = make_saver()
    history = list(reader.list(cfg("t")))
    assert ids(history) == [cid(3), cid(2), cid(1)]
    assert [w[1:] for w in history[0].pending_writes or []] == [("c", "pending")]
    assert ids(reader.list(cfg("t"), limit=1)) == [cid(3)]
    assert ids(reader.list(cfg("t"), before=cfg("t", "", cid(3)))) == [cid(2), cid(1)]
    assert ids(reader.list(None, filter={"step": 0})) == [cid(3), cid(2), cid(1)]
    keys = [o["Key"] for o in s3_client.list_objects_v2(Bucket=saver.bucket, Prefix=saver.prefix)["Contents"]]
    assert saver.plans.layout.record("t", "", cid(3)) not in keys, "a listing is a read: it writes nothing"


def test_records_whose_head_never_landed_are_never_read(make_saver: Callable[[], S3Saver]) -> None:
    """A record whose head never landed (a put that died before its head) is not committed: get_tuple by id does not
    return it, nor does list over all namespaces, even with a ``before`` bound from another namespace (the bound's
    record is missing there, which must not make the listing fall back to "everything not newer than the head")."""
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
    everywhere: RunnableConfig = {"configurable": {"thread_id": "t"}}
    assert sorted(ids(reader.list(everywhere, before=cfg("t", "", cid(5))))) == [cid(1), cid(2), cid(4)]
    assert sorted(ids(reader.list(everywhere))) == [cid(1), cid(2), cid(4), cid(5)]
