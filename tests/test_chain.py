"""The commit chain's rules, row by row (`_protocol/chain.py`): every standing, and each row of the
tables in its docstring, with a case that fails if the row changes. Then the rows that used to live outside
``chain.py``, on an in-memory bucket: the listing's skipped damaged record (UNDECODABLE), a record read by id
below a damaged head (trusted), and what ``prune`` deletes (PRUNABLE whatever its age, PENDING only once old).
"""

from __future__ import annotations

import contextvars

import pytest
from helpers import cfg, checkpoint, cid

from langgraph_s3_checkpoint import CorruptObjectError, S3Saver
from langgraph_s3_checkpoint._protocol.chain import Chain, Standing
from langgraph_s3_checkpoint._protocol.requests import Get, Put
from langgraph_s3_checkpoint.memory import MemoryBucket

pytestmark = pytest.mark.memory
"""No S3 server: every test of this module runs in memory (``pytest -m memory``)."""

# Ids as the chain compares them: "9" is the newest. A history 1 <- 3 <- 5 <- 7 (head), with 6 an orphan beside it.
HEAD, LINK, ORPHAN_ID, BELOW = "7", "5", "6", "3"


def walked(chain: Chain, *records: tuple[str, str | None, bool]) -> list[Standing]:
    return [chain.standing(cid, previous, detached) for cid, previous, detached in records]


def test_every_standing_has_a_row_here() -> None:
    """A standing added to the enum must come with its rows in this file (and in the table of chain.py)."""
    assert {s.name for s in Standing} == {"COMMITTED", "PENDING", "ORPHAN", "PRUNABLE", "UNDECODABLE"}


# -- Chain.standing, one row of the table each -------------------------------------------------------------
def test_no_head_everything_is_pending() -> None:
    chain = Chain.without_head()
    assert walked(chain, ("9", "8", False), ("1", None, True)) == [Standing.PENDING, Standing.PENDING]


def test_an_id_newer_than_the_head_is_pending_and_moves_no_link() -> None:
    chain = Chain.from_head(HEAD, LINK)
    assert chain.standing("8", HEAD, False) is Standing.PENDING
    assert chain.standing("8", HEAD, False, undecodable=True) is Standing.PENDING
    assert chain.link == LINK


def test_a_damaged_head_trusts_every_record() -> None:
    chain = Chain.of_damaged_head()
    assert walked(chain, ("9", None, False), ("6", None, False), ("1", None, False)) == [Standing.COMMITTED] * 3
    assert chain.standing("2", None, False, undecodable=True) is Standing.COMMITTED
    assert chain.decided("4") is Standing.COMMITTED and not chain.pending("9")


def test_an_undecodable_record_is_never_shown_and_leaves_the_link() -> None:
    chain = Chain.from_head(HEAD, LINK)
    assert chain.standing(LINK, None, False, undecodable=True) is Standing.UNDECODABLE
    assert chain.link == LINK  # the records below are judged as below a missing link
    assert chain.standing(BELOW, "1", False) is Standing.COMMITTED and chain.link == "1"


def test_the_heads_own_record_is_committed_and_moves_no_link() -> None:
    chain = Chain.from_head(HEAD, LINK)
    assert chain.standing(HEAD, LINK, False) is Standing.COMMITTED and chain.link == LINK


def test_a_detached_record_is_committed_and_moves_no_link() -> None:
    chain = Chain.from_head(HEAD, LINK)
    assert chain.standing(ORPHAN_ID, None, True) is Standing.COMMITTED and chain.link == LINK


def test_the_next_link_is_committed_and_the_link_moves_to_its_previous_head() -> None:
    chain = Chain.from_head(HEAD, LINK)
    assert chain.standing(LINK, BELOW, False) is Standing.COMMITTED and chain.link == BELOW


def test_an_id_between_two_links_is_an_orphan() -> None:
    chain = Chain.from_head(HEAD, LINK)
    assert chain.standing(ORPHAN_ID, LINK, False) is Standing.ORPHAN and chain.link == LINK


def test_below_a_missing_link_the_chain_resumes() -> None:
    chain = Chain.from_head(HEAD, LINK)  # the record of LINK was deleted (a prune, a rollback)
    assert chain.standing("4", BELOW, False) is Standing.COMMITTED and chain.link == BELOW


def test_below_the_chains_first_record_everything_is_an_orphan() -> None:
    chain = Chain.from_head(HEAD, None)
    assert walked(chain, ("6", None, False), ("2", None, False)) == [Standing.ORPHAN, Standing.ORPHAN]


def test_a_whole_history_newest_first() -> None:
    chain = Chain.from_head(HEAD, LINK)
    history = [
        ("9", HEAD, False),  # a put in flight
        (HEAD, LINK, False),
        (ORPHAN_ID, LINK, False),  # lost the race for the head
        (LINK, BELOW, False),
        ("4", None, True),  # a fork committed beside the head it met
        (BELOW, "1", False),
        ("2", "1", False),  # lost the race for the head
        ("1", None, False),
        ("0", None, False),  # a first put that died before its head
    ]
    assert walked(chain, *history) == [
        Standing.PENDING,
        Standing.COMMITTED,
        Standing.ORPHAN,
        Standing.COMMITTED,
        Standing.COMMITTED,
        Standing.COMMITTED,
        Standing.ORPHAN,
        Standing.COMMITTED,
        Standing.ORPHAN,
    ]


# -- what is known before a record is read -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("head", "link", "checkpoint_id", "expected"),
    [
        (None, None, "1", Standing.PENDING),  # no head
        (HEAD, LINK, "8", Standing.PENDING),  # newer than the head
        (HEAD, LINK, HEAD, Standing.COMMITTED),  # the head's id
        (HEAD, LINK, LINK, Standing.COMMITTED),  # the next link's id
        (HEAD, LINK, ORPHAN_ID, Standing.ORPHAN),  # between the head and the link
        (HEAD, None, "4", Standing.ORPHAN),  # no link left
        (HEAD, LINK, "4", None),  # below the link: only its record can say
    ],
)
def test_decided(head: str | None, link: str | None, checkpoint_id: str, expected: Standing | None) -> None:
    chain = Chain.from_head(head, link)
    assert chain.decided(checkpoint_id) is expected
    assert chain.link == link  # deciding moves nothing
    assert chain.pending(checkpoint_id) is (expected is Standing.PENDING)


@pytest.mark.parametrize(
    ("head", "checkpoint_id", "expected"),
    [
        (None, "1", Standing.PENDING),  # no head: a first put's writes
        (HEAD, "8", Standing.PENDING),  # a put in flight wrote its writes first
        (HEAD, HEAD, Standing.COMMITTED),  # a head-only commit: the head is its record
        (HEAD, "4", Standing.ORPHAN),  # the record is gone (a loser deleted it, or a prune)
    ],
)
def test_writes_without_their_record(head: str | None, checkpoint_id: str, expected: Standing) -> None:
    assert Chain.from_head(head, LINK).writes_without_record(checkpoint_id) is expected


@pytest.mark.parametrize(
    ("head", "checkpoint_id", "expected"),
    [
        (None, "1", Standing.PENDING),
        (HEAD, "8", Standing.PENDING),
        (HEAD, HEAD, Standing.PRUNABLE),  # prune keeps what it keeps before asking
        (HEAD, LINK, Standing.PRUNABLE),  # committed history prune drops
        (HEAD, ORPHAN_ID, Standing.PRUNABLE),
    ],
)
def test_what_prune_does_not_keep(head: str | None, checkpoint_id: str, expected: Standing) -> None:
    assert Chain.from_head(head, LINK).unkept(checkpoint_id) is expected


# -- the rows on a bucket ----------------------------------------------------------------------------------
class World:
    """A saver on an in-memory bucket, and a history of checkpoints put one on top of the other."""

    def __init__(self, *history: int) -> None:
        self.bucket = MemoryBucket()
        self.saver = S3Saver(bucket="b", client=self.bucket)
        self.layout = self.saver.plans.layout
        parent = None
        for n in history:
            config = cfg("t", "", cid(parent) if parent else None)
            contextvars.Context().run(self.saver.put, config, checkpoint(n), {"source": "loop", "step": n}, {})
            parent = n

    def record(self, n: int) -> str:
        return self.layout.record("t", "", cid(n))


def test_a_skipped_damaged_record_is_left_out_and_the_history_below_it_shown() -> None:
    w = World(1, 2, 3, 4)
    w.bucket.execute(Put(w.record(3), b"not a record"))
    reported: list[CorruptObjectError] = []
    shown = [t.checkpoint["id"] for t in w.saver.list(cfg("t"), skip_damaged=True, on_damaged=reported.append)]
    assert shown == [cid(4), cid(2), cid(1)]  # 3 is UNDECODABLE; 2, below the link it left, is committed
    assert [e.key for e in reported] == [w.record(3)]
    with pytest.raises(CorruptObjectError):
        list(w.saver.list(cfg("t")))


def test_a_record_read_by_id_below_a_damaged_head_is_trusted() -> None:
    w = World(1, 2)
    w.bucket.execute(Put(w.layout.head("t", ""), b"not a head"))
    tup = contextvars.Context().run(w.saver.get_tuple, cfg("t", "", cid(1)))
    assert tup is not None and tup.checkpoint["id"] == cid(1)


def test_prune_deletes_prunable_records_at_once_and_pending_ones_only_once_old() -> None:
    w = World(1, 2, 3)
    in_flight = w.record(9)  # a put in flight: its record, newer than the head, is written before the head
    stored = w.bucket.execute(Get(w.record(3)))
    w.bucket.execute(Put(in_flight, stored.body))
    w.saver.prune(["t"])
    keys = w.bucket.keys(w.layout.records("t", ""))
    assert w.record(1) not in keys and w.record(2) not in keys  # PRUNABLE: gone, young as they are
    assert w.record(3) in keys and in_flight in keys  # the head's record is kept; PENDING and young: kept
