"""The commit table, row by row: what one commit attempt meets -> what the put does.

`fencing.COMMIT_TABLE` decides each step of ``committing._commit``: on the head an
attempt stands on (move the head, commit detached, done already, refuse a clock behind the head) and, once a head
PUT was refused, on what `fencing.settle` made of the head read then (done, withdraw
the record, join again). Each row is set up for real on an in-memory bucket, the row is checked to be the one met
(the two functions that name the situation are watched), and the put's observable outcome is compared with what that
row must do: the requests it sent, the head, the record and the error. Each expectation is written out here, not
derived from the table, so a changed row fails its case.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from helpers import NEW, OLD, OTHER, PARENT, cfg, checkpoint, cid, cid_number
from langgraph.checkpoint.base import CheckpointMetadata

from langgraph_s3_checkpoint import CheckpointConflictError, ClockSkewError, S3Saver
from langgraph_s3_checkpoint._protocol import committing
from langgraph_s3_checkpoint._protocol.fencing import (
    COMMIT_TABLE,
    SUPERSEDED,
    AgainOnHead,
    ClockBehindHead,
    CommitDetached,
    Committed,
    Meets,
    MoveHead,
    Swap,
    Withdraw,
)
from langgraph_s3_checkpoint._protocol.requests import CREATE, PRECONDITION_FAILED, Get, Put, Request, Update
from langgraph_s3_checkpoint.memory import MemoryBucket

pytestmark = pytest.mark.memory
"""No S3 server: every test of this module runs in memory (``pytest -m memory``)."""


class Bucket(MemoryBucket):
    """An in-memory bucket that runs ``on_head_put`` (and may answer for it) when the head PUT of ``watched`` comes."""

    def __init__(self) -> None:
        super().__init__(keep_log=True)
        self.watched: str | None = None
        self.before_head_put: Callable[[], None] | None = None
        self.lose_answer: Callable[[], None] | None = None
        """Applies the head PUT, runs this, and answers 412 (an answer lost, the retry refused)."""
        self.peek: Callable[[str, bytes], str] | None = None

    def execute(self, request: Request) -> Any:
        if not (isinstance(request, Put) and request.key.endswith("/head") and self._is_watched(request)):
            return super().execute(request)
        if self.before_head_put is not None:
            self.before_head_put()
        if self.lose_answer is None:
            return super().execute(request)
        lose, self.lose_answer = self.lose_answer, None
        super().execute(request)
        lose()
        return PRECONDITION_FAILED

    def _is_watched(self, request: Put) -> bool:
        return self.peek is not None and self.peek(request.key, request.body) == self.watched


class World:
    """A bucket, the saver under test, and a second saver (another process) that moves the head meanwhile."""

    def __init__(self) -> None:
        self.bucket = Bucket()
        self.saver = S3Saver(bucket="b", client=self.bucket)
        self.other = S3Saver(bucket="b", client=self.bucket)
        self.bucket.peek = self.saver.plans.codec.peek_head_id
        self.layout = self.saver.plans.layout

    def put(self, saver: S3Saver, parent: int | str | None, n: int | str, source: str = "loop") -> Any:
        """A put in a call chain of its own (it read nothing)."""
        parent_id = cid(parent) if isinstance(parent, int) else parent
        config = cfg("t", "", parent_id)
        return contextvars.Context().run(
            saver.put, config, checkpoint(n), cast(CheckpointMetadata, {"source": source, "step": 1}), {}
        )

    def head(self) -> tuple[str, str]:
        stored = self.bucket.execute(Get(self.layout.head("t", "")))
        assert stored is not None
        return self.saver.plans.codec.peek_head_id("head", stored.body), stored.etag

    def record(self, n: int | str) -> Any:
        """The stored record of checkpoint ``n`` (``None``: none)."""
        key = self.layout.record("t", "", cid(n) if isinstance(n, int) else n)
        stored = self.bucket.execute(Get(key))
        return None if stored is None else self.saver.plans.codec.decode_record(key, stored.body)

    def sent_since(self, mark: int) -> list[Put]:
        assert self.bucket.log is not None
        return [r for r, _ in self.bucket.log[mark:] if isinstance(r, Put)]

    def mark(self) -> int:
        assert self.bucket.log is not None
        return len(self.bucket.log)


@pytest.fixture
def met(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Meets]]:
    """The rows of the table the put met, in order."""
    seen: list[Meets] = []
    for name in ("attempt_meets", "refused_write_meets"):
        original = getattr(committing, name)

        def watched(*args: Any, _original: Any = original) -> Meets:
            seen.append(_original(*args))
            return seen[-1]

        monkeypatch.setattr(committing, name, watched)
    yield seen


def test_the_table_has_a_row_for_every_situation() -> None:
    assert set(COMMIT_TABLE) == set(Meets)


def test_head_holds_parent_moves_the_head_if_match_the_parents_etag(met: list[Meets]) -> None:
    w = World()
    w.put(w.saver, None, PARENT, "input")
    _, parent_etag = w.head()
    met.clear()
    mark = w.mark()
    w.put(w.saver, PARENT, NEW)  # the saver remembers the head it committed: no GET
    assert met == [Meets.HEAD_HOLDS_PARENT] and COMMIT_TABLE[met[0]] == MoveHead(Swap.ON_PARENT)
    head_puts = [p for p in w.sent_since(mark) if p.key.endswith("/head")]
    assert [p.mode for p in head_puts] == [Update(parent_etag)]
    assert w.head()[0] == cid(NEW) and w.record(NEW).previous_head == cid(PARENT)


def test_no_head_creates_it(met: list[Meets]) -> None:
    w = World()
    w.put(w.saver, None, NEW, "input")
    assert met == [Meets.NO_HEAD] and COMMIT_TABLE[met[0]] == MoveHead(Swap.CREATE)
    head_puts = [p for p in w.sent_since(0) if p.key.endswith("/head")]
    assert [p.mode for p in head_puts] == [CREATE]
    assert w.head()[0] == cid(NEW) and w.record(NEW).previous_head is None


def test_older_head_is_moved_on_from_and_its_record_offered(met: list[Meets]) -> None:
    w = World()
    w.put(w.saver, None, OLD, "input")
    w.put(w.saver, OLD, OTHER)
    head_id, head_etag = w.head()
    met.clear()
    mark = w.mark()
    w.put(w.other, OLD, NEW, "fork")  # a fork from OLD: it commits on top of whatever the head is
    assert met == [Meets.OLDER_HEAD] and COMMIT_TABLE[met[-1]] == MoveHead(Swap.ON_HEAD)
    sent = w.sent_since(mark)
    assert [p.mode for p in sent if p.key.endswith("/head")] == [Update(head_etag)]
    # the head's own record, offered create-only in the same batch (it may be a head-only commit)
    assert any(p.key == w.layout.record("t", "", head_id) and p.mode == CREATE for p in sent)
    assert w.head()[0] == cid(NEW) and w.record(NEW).previous_head == cid(OTHER)


def test_newer_head_leaves_the_head_and_commits_the_record_detached(met: list[Meets]) -> None:
    w = World()
    w.put(w.saver, None, OLD, "input")
    w.put(w.saver, OLD, OTHER)
    met.clear()
    mark = w.mark()
    w.put(w.other, OLD, PARENT, "fork")  # older than the head it meets
    assert met == [Meets.NEWER_HEAD] and COMMIT_TABLE[met[-1]] == CommitDetached()
    assert not [p for p in w.sent_since(mark) if p.key.endswith("/head")]
    assert w.head()[0] == cid(OTHER)
    assert w.record(PARENT).detached and w.record(PARENT).previous_head is None


def test_newer_head_holding_the_parent_is_a_clock_behind(met: list[Meets]) -> None:
    w = World()
    w.put(w.saver, None, "b", "input")  # ids that carry no time ("b" sorts after "a")
    met.clear()
    mark = w.mark()
    with pytest.raises(ClockSkewError, match="the head"):
        w.put(w.other, "b", "a", "fork")
    assert met == [Meets.NEWER_HEAD_IS_PARENT] and COMMIT_TABLE[met[-1]] == ClockBehindHead()
    assert not [p for p in w.sent_since(mark) if "/c/" in p.key or p.key.endswith("/head")]
    assert w.head()[0] == "b" and w.record("a") is None


def test_head_is_this_is_done_without_sending_the_commit(met: list[Meets]) -> None:
    w = World()
    w.put(w.saver, None, PARENT, "input")
    w.put(w.saver, PARENT, NEW)
    _, etag = w.head()
    met.clear()
    mark = w.mark()
    w.put(w.other, PARENT, NEW, "update")  # the same put again, through a saver that knows nothing
    assert met == [Meets.HEAD_IS_THIS] and COMMIT_TABLE[met[-1]] == Committed()
    record_key = w.layout.record("t", "", cid(NEW))
    assert not [p for p in w.sent_since(mark) if p.key == record_key or p.key.endswith("/head")]
    assert w.head() == (cid(NEW), etag)
    assert w.other.plans.recall.head("t", "", cid(NEW)).etag == etag  # type: ignore[union-attr]


def test_a_lost_answer_is_committed(met: list[Meets]) -> None:
    w = World()
    w.put(w.saver, None, PARENT, "input")
    w.bucket.watched, w.bucket.lose_answer = cid(NEW), lambda: None
    met.clear()
    w.put(w.saver, PARENT, NEW)
    assert met == [Meets.HEAD_HOLDS_PARENT, Meets.ANSWER_LOST] and COMMIT_TABLE[met[-1]] == Committed()
    head_id, etag = w.head()
    assert head_id == cid(NEW) and w.record(NEW) is not None
    assert w.saver.plans.recall.head("t", "", cid(NEW)).etag == etag  # type: ignore[union-attr]


def test_a_lost_answer_continued_meanwhile_is_committed_and_remembered_as_superseded(met: list[Meets]) -> None:
    w = World()
    w.put(w.saver, None, PARENT, "input")
    w.bucket.watched = cid(NEW)
    w.bucket.lose_answer = lambda: w.put(w.other, NEW, 25)
    met.clear()
    w.put(w.saver, PARENT, NEW)
    assert met[0] == Meets.HEAD_HOLDS_PARENT and met[-1] == Meets.ANSWER_LOST_AND_CONTINUED
    assert COMMIT_TABLE[met[-1]] == Committed(superseded=True)
    assert w.head()[0] == cid(25) and w.record(NEW) is not None and w.record(25).previous_head == cid(NEW)
    assert w.saver.plans.recall.head("t", "", cid(NEW)).etag == SUPERSEDED  # type: ignore[union-attr]


def test_a_refused_rule_withdraws_the_record(met: list[Meets]) -> None:
    w = World()
    w.put(w.saver, None, PARENT, "input")
    caller = contextvars.Context()
    assert caller.run(w.saver.get_tuple, cfg("t")) is not None  # the caller reads the parent as the latest
    w.put(w.other, PARENT, OTHER)  # another process moves the head: this saver still remembers the parent's
    met.clear()
    mark = w.mark()
    with pytest.raises(CheckpointConflictError):
        caller.run(w.saver.put, cfg("t", "", cid(PARENT)), checkpoint(NEW), {"source": "loop", "step": 1}, {})
    assert met == [Meets.HEAD_HOLDS_PARENT, Meets.RULE_REFUSES] and COMMIT_TABLE[met[-1]] == Withdraw()
    record_key = w.layout.record("t", "", cid(NEW))
    assert [p.key for p in w.sent_since(mark) if p.key == record_key]  # it was sent, then withdrawn
    assert w.record(NEW) is None and w.head()[0] == cid(OTHER)


def test_a_joining_rule_commits_on_the_head_now(met: list[Meets]) -> None:
    w = World()
    w.put(w.saver, None, PARENT, "input")
    w.put(w.other, PARENT, OTHER)  # this saver still remembers the parent's head
    met.clear()
    w.put(w.saver, PARENT, NEW, "update")  # a direct put: continue the parent, else fork
    assert met == [Meets.HEAD_HOLDS_PARENT, Meets.RULE_COMMITS_ON_HEAD, Meets.OLDER_HEAD]
    assert COMMIT_TABLE[Meets.RULE_COMMITS_ON_HEAD] == AgainOnHead()
    assert w.head()[0] == cid(NEW) and w.record(NEW).previous_head == cid(OTHER)


def test_a_head_moving_under_every_attempt_withdraws_the_record(met: list[Meets]) -> None:
    w = World()
    w.put(w.saver, None, OLD, "input")
    movers = iter(range(OLD + 1, NEW))

    def move_the_head() -> None:
        head_id, _ = w.head()
        n = next(movers)
        w.put(w.other, cid_number(head_id), n)

    w.bucket.watched, w.bucket.before_head_put = cid(NEW), move_the_head
    with pytest.raises(CheckpointConflictError, match=f"{committing.ON_HEAD_ATTEMPTS} attempts"):
        w.put(w.saver, OLD, NEW, "fork")
    assert met.count(Meets.RULE_COMMITS_ON_HEAD) == committing.ON_HEAD_ATTEMPTS
    assert COMMIT_TABLE[Meets.ATTEMPTS_SPENT] == Withdraw()
    assert w.record(NEW) is None and w.head()[0] != cid(NEW)
