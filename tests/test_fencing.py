"""Fencing: several writers on one thread never fork its history, and legitimate forks still work.

The hammer test runs real worker processes (tests/workers/fence_worker.py) against one thread; the
others interleave two savers in one process, which is deterministic. Each saver has its own memory of
the heads it saw, exactly like separate processes.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import Run, cfg, cid, ids, put
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint
from workers.common import fence_graph, finish, release, spawn, worker_env

from langgraph_s3_checkpoint import CheckpointConflictError, ClockSkewError, S3Saver
from langgraph_s3_checkpoint.local import LocalS3Server

WORKERS = 8
COMMITS_PER_WORKER = 4
ATTEMPTS_PER_WORKER = 60


def chain(saver: S3Saver, thread_id: str) -> list[CheckpointTuple]:
    """The thread's history by parent links, newest first; every parent must exist."""
    out: list[CheckpointTuple] = []
    tup = saver.get_tuple(cfg(thread_id))
    while tup is not None:
        out.append(tup)
        if tup.parent_config is None:
            break
        parent = saver.get_tuple(tup.parent_config)
        assert parent is not None, f"parent of {tup.checkpoint['id']} ({tup.metadata}) is missing"
        tup = parent
    return out


def describe(tup: CheckpointTuple) -> str:
    parent = tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None
    values = tup.checkpoint["channel_values"]
    steps, pending = values.get("steps"), values.get("pending")
    return f"{tup.checkpoint['id']} parent={parent} {tup.metadata} pending={pending} steps={steps}"


def assert_linear(saver: S3Saver, thread_id: str) -> list[CheckpointTuple]:
    """Every listed checkpoint lies on the head's parent chain, and each checkpoint adds at most one step."""
    history = chain(saver, thread_id)
    ids = [t.checkpoint["id"] for t in history]
    assert ids == sorted(ids, reverse=True), "parent links must go back in time"
    off_chain = [describe(t) for t in saver.list(cfg(thread_id)) if t.checkpoint["id"] not in set(ids)]
    assert not off_chain, "checkpoints off the head's chain:\n" + "\n".join(off_chain)
    previous: list[str] = []
    for tup in reversed(history):
        steps = tup.checkpoint["channel_values"].get("steps", [])
        assert steps[: len(previous)] == previous and len(steps) - len(previous) in (0, 1), describe(tup)
        previous = steps
    return history


def test_eight_processes_hammering_one_thread_keep_history_linear(
    s3_server: LocalS3Server, bucket: str, prefix: str, make_saver: Any, tmp_path: Path
) -> None:
    env = worker_env(s3_server, bucket, prefix)
    procs = []
    for i in range(WORKERS):
        args = [
            "--thread=hammer",
            f"--worker=w{i}",
            f"--commits={COMMITS_PER_WORKER}",
            f"--attempts={ATTEMPTS_PER_WORKER}",
            "--seconds=90",
            f"--durability={'sync' if i % 2 else 'async'}",
            f"--barrier={tmp_path}",
        ]
        if i % 4 < 2:
            args.append("--saver-per-attempt")
        procs.append(spawn("fence_worker.py", args, env))
    release(tmp_path, WORKERS, procs)
    results = []
    for proc in procs:
        code, result, err = finish(proc)
        assert code == 0 and result is not None, err[-3000:]
        results.append(result)

    committed = [m for r in results for m in r["committed"]]
    conflicts = sum(r["conflicts"] for r in results)
    saver = make_saver()
    history = assert_linear(saver, "hammer")
    steps = history[0].checkpoint["channel_values"]["steps"]
    # Every run that returned is in the final state, once; no run that lost is.
    assert len(steps) == len(committed) == len(set(steps))
    assert set(steps) == set(committed)
    for r in results:  # and each worker's runs appear in the order it made them
        assert [s for s in steps if s in set(r["committed"])] == r["committed"]
    assert conflicts > 0, "8 racing workers should have produced conflicts"
    print(
        f"\n[fencing] {WORKERS} workers, {sum(r['attempts'] for r in results)} runs, "
        f"{len(committed)} committed, {conflicts} conflicts, {len(history)} checkpoints"
    )


def test_straggler_loses_and_winner_is_intact(make_saver: Any) -> None:
    """A reads the head and stalls inside a node; B commits; A's put must fail, B's state survives."""
    a_saver, b_saver = make_saver(), make_saver()
    config: RunnableConfig = {"configurable": {"thread_id": "straggler"}}
    fence_graph(b_saver).invoke({"pending": "base"}, config)

    inside, resume = threading.Event(), threading.Event()

    def stall() -> None:
        inside.set()
        assert resume.wait(30)

    outcome: list[BaseException | None] = []

    def run_a() -> None:
        try:
            fence_graph(a_saver, on_step=stall).invoke({"pending": "A"}, config, durability="sync")
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run_a)
    worker.start()
    assert inside.wait(30)
    fence_graph(b_saver).invoke({"pending": "B"}, config, durability="sync")
    b_head = b_saver.get_tuple(config)
    resume.set()
    worker.join(60)

    assert len(outcome) == 1 and isinstance(outcome[0], CheckpointConflictError)
    assert outcome[0].thread_id == "straggler"
    head = make_saver().get_tuple(config)
    assert head is not None and b_head is not None
    assert head.checkpoint["id"] == b_head.checkpoint["id"]
    assert head.checkpoint["channel_values"]["steps"] == ["base", "B"]
    assert_linear(make_saver(), "straggler")


def test_straggler_put_after_another_saver_committed(make_saver: Any) -> None:
    """The same race on the raw saver API: read head, other writer commits, put raises."""
    a, b = make_saver(), make_saver()
    first = a.put(cfg("raw"), empty_checkpoint(), {"step": 0}, {})
    assert a.get_tuple(cfg("raw")) is not None
    b.get_tuple(cfg("raw"))
    b_config = b.put(first, empty_checkpoint(), {"step": 1}, {})
    with pytest.raises(CheckpointConflictError):
        a.put(first, empty_checkpoint(), {"step": 1}, {})
    head = make_saver().get_tuple(cfg("raw"))
    assert head is not None and head.config == b_config
    assert [t.config for t in make_saver().list(cfg("raw"))] == [b_config, first]


def test_two_writers_creating_the_same_new_thread_exactly_one_wins(make_saver: Any) -> None:
    """Two runs (each a LangGraph run: its runtime travels with its calls) both find a new thread empty and put its
    first checkpoint: one commits, the other raises."""
    a, b = make_saver(), make_saver()
    run_a, run_b = Run(), Run()
    assert a.get_tuple(run_a.of(cfg("fresh"))) is None
    assert b.get_tuple(run_b.of(cfg("fresh"))) is None
    won = a.put(run_a.of(cfg("fresh")), empty_checkpoint(), {"step": -1, "writer": "a"}, {})
    with pytest.raises(CheckpointConflictError, match="read as empty"):
        b.put(run_b.of(cfg("fresh")), empty_checkpoint(), {"step": -1, "writer": "b"}, {})
    listed = list(make_saver().list(cfg("fresh")))
    assert [t.config for t in listed] == [won] and listed[0].metadata["writer"] == "a"


def test_a_direct_parentless_put_on_a_thread_in_use_is_a_new_root(make_saver: Any) -> None:
    """Outside a run, nothing that travels with a parentless put says its caller found the thread empty (``get_tuple``
    returned nothing to pass on): the put is stored as a new root on top of the head, as InMemorySaver stores it."""
    a, b = make_saver(), make_saver()
    assert a.get_tuple(cfg("fresh")) is None
    assert b.get_tuple(cfg("fresh")) is None
    first = a.put(cfg("fresh"), empty_checkpoint(), {"step": -1, "writer": "a"}, {})
    second = b.put(cfg("fresh"), empty_checkpoint(), {"step": -1, "writer": "b"}, {})
    assert [t.config for t in make_saver().list(cfg("fresh"))] == [second, first]


def test_racing_first_runs_on_a_new_thread_commit_exactly_one(make_saver: Any) -> None:
    """Graph runs that all find the thread empty: the first put of exactly one of them commits."""
    racers = 4
    gate = threading.Barrier(racers)

    class GatedSaver(S3Saver):
        """Holds every first put until all racers have read the (empty) thread."""

        gated = True

        def put(self, *args: Any, **kwargs: Any) -> Any:
            if self.gated:
                self.gated = False
                gate.wait(30)
            return super().put(*args, **kwargs)

    base = make_saver()
    savers = [GatedSaver(bucket=base.bucket, prefix=base.prefix, client=base.client) for _ in range(racers)]
    outcomes: dict[str, str] = {}
    config: RunnableConfig = {"configurable": {"thread_id": "new-race"}}

    def race(i: int) -> None:
        try:
            fence_graph(savers[i]).invoke({"pending": f"r{i}"}, config, durability="sync")
            outcomes[f"r{i}"] = "won"
        except CheckpointConflictError:
            outcomes[f"r{i}"] = "conflict"

    threads = [threading.Thread(target=race, args=(i,)) for i in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for saver in savers:
        saver.close()
    assert sorted(outcomes.values()) == ["conflict"] * (racers - 1) + ["won"]
    winner = next(k for k, v in outcomes.items() if v == "won")
    history = assert_linear(make_saver(), "new-race")
    assert history[0].checkpoint["channel_values"]["steps"] == [winner]


def test_update_state_on_an_older_checkpoint_is_a_fork_not_a_conflict(make_saver: Any) -> None:
    saver = make_saver()
    graph = fence_graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": "fork"}}
    for marker in ("one", "two", "three"):
        graph.invoke({"pending": marker}, config)
    old = next(s for s in graph.get_state_history(config) if s.values.get("steps") == ["one"])
    forked = graph.update_state(old.config, {"steps": ["edited"]})
    assert graph.get_state(config).config["configurable"]["checkpoint_id"] == forked["configurable"]["checkpoint_id"]
    graph.invoke({"pending": "four"}, config)
    assert graph.get_state(config).values["steps"] == ["one", "edited", "four"]
    # Another worker forks the same old checkpoint: also no conflict.
    other = fence_graph(make_saver())
    other.update_state(old.config, {"steps": ["again"]})
    assert other.get_state(config).values["steps"] == ["one", "again"]


def test_replay_from_a_checkpoint_id_is_not_a_conflict(make_saver: Any) -> None:
    graph = fence_graph(make_saver())
    config: RunnableConfig = {"configurable": {"thread_id": "replay"}}
    graph.invoke({"pending": "one"}, config)
    graph.invoke({"pending": "two"}, config)
    oldest = list(graph.get_state_history(config))[-1]
    # Replaying from the thread's first checkpoint re-runs the first run on a new branch.
    replayed = fence_graph(make_saver()).invoke(None, oldest.config)
    assert replayed["steps"] == ["one"]
    assert fence_graph(make_saver()).get_state(config).values["steps"] == ["one"]


def test_copied_thread_accepts_writes_from_any_saver(make_saver: Any) -> None:
    saver = make_saver()
    graph = fence_graph(saver)
    graph.invoke({"pending": "one"}, {"configurable": {"thread_id": "src"}})
    saver.copy_thread("src", "dst")
    graph.invoke({"pending": "two"}, {"configurable": {"thread_id": "dst"}})
    fence_graph(make_saver()).invoke({"pending": "three"}, {"configurable": {"thread_id": "dst"}})
    assert graph.get_state({"configurable": {"thread_id": "dst"}}).values["steps"] == ["one", "two", "three"]
    assert graph.get_state({"configurable": {"thread_id": "src"}}).values["steps"] == ["one"]
    assert_linear(make_saver(), "dst")


def test_straggler_is_fenced_even_after_its_saver_forgot_the_head(make_saver: Any) -> None:
    """A saver remembers the heads it read for at most 10,000 threads. A long step in a busy process
    can outlive that memory; the stale put must still lose rather than join the new head."""
    straggler, other = make_saver(), make_saver()
    straggler.plans.recall._max_threads = 1  # stands in for 10,000 other threads touched meanwhile
    base = straggler.put(cfg("evicted"), empty_checkpoint(), {"source": "input", "step": -1}, {})
    straggler.get_tuple(cfg("evicted"))
    other.get_tuple(cfg("evicted"))
    winner = other.put(base, empty_checkpoint(), {"source": "loop", "step": 0}, {})
    straggler.get_tuple(cfg("another-thread"))  # pushes "evicted" out of the straggler's memory
    with pytest.raises(CheckpointConflictError):
        straggler.put(base, empty_checkpoint(), {"source": "loop", "step": 0}, {})
    head = make_saver().get_tuple(cfg("evicted"))
    assert head is not None and head.config == winner


def _doomed_run(writer: S3Saver, thread: str, earlier_run: bool) -> tuple[RunnableConfig, RunnableConfig]:
    """run-1's checkpoint on a new ``thread``, on run-0's with ``earlier_run``: the config of its parent (the
    thread's, without) and its own."""
    parent: RunnableConfig = cfg(thread)
    if earlier_run:
        parent = writer.put(parent, empty_checkpoint(), {"step": 0, "run_id": "run-0"}, {})
    return parent, writer.put(parent, empty_checkpoint(), {"step": 1, "run_id": "run-1"}, {})


@pytest.mark.parametrize("earlier_run", [False, True], ids=["head-deleted", "head-moved-back"])
def test_rollback_never_removes_a_checkpoint_committed_meanwhile(make_saver: Any, earlier_run: bool) -> None:
    """delete_for_runs reads the head, then moves it back (or deletes it, when the run was the thread's
    first). If another run commits on top of the doomed one in between (the Agent Server starts the
    next run while it rolls back the cancelled one), that checkpoint stays the head; the doomed run's
    records still go."""
    roller, writer = make_saver(), make_saver()
    _, doomed = _doomed_run(writer, "rolled", earlier_run)
    committed = _roll_back_while(
        roller, "run-1", lambda: writer.put(doomed, empty_checkpoint(), {"step": 2, "run_id": "run-2"}, {})
    )
    latest = writer.get_tuple(cfg("rolled"))
    assert latest is not None and latest.config == committed
    assert writer.get_tuple(doomed) is None
    assert [t.metadata["step"] for t in writer.list(cfg("rolled"))] == ([2, 0] if earlier_run else [2])


@pytest.mark.parametrize("earlier_run", [False, True], ids=["head-deleted", "head-moved-back"])
def test_rollback_also_removes_what_the_cancelled_run_commits_meanwhile(make_saver: Any, earlier_run: bool) -> None:
    """A run being cancelled may still commit once while its rollback runs (the Agent Server cancels
    and rolls back concurrently). That checkpoint is the run's too: the rollback starts over and
    removes it, instead of failing or leaving it behind."""
    roller, writer = make_saver(), make_saver()
    parent, doomed = _doomed_run(writer, "cancelled", earlier_run)
    late = _roll_back_while(
        roller, "run-1", lambda: writer.put(doomed, empty_checkpoint(), {"step": 2, "run_id": "run-1"}, {})
    )
    assert writer.get_tuple(late) is None
    remaining = [t.metadata["step"] for t in writer.list(cfg("cancelled"))]
    assert remaining == ([0] if earlier_run else [])
    latest = writer.get_tuple(cfg("cancelled"))
    assert (latest.config if latest else None) == (parent if earlier_run else None)


def _roll_back_while(roller: S3Saver, run_id: str, commit: Any) -> Any:
    """Run ``roller.delete_for_runs([run_id])`` step by step and call ``commit()`` once, at the moment
    between reading the head and moving it; returns what ``commit`` returned."""
    from langgraph_s3_checkpoint._protocol.requests import DeleteIfMatch, Put

    plan = roller.plans.delete_for_runs([run_id])
    reply: Any = None
    committed: Any = None
    with contextlib.suppress(StopIteration):
        while True:
            step = plan.send(reply)
            assert isinstance(step, list)
            moves_head = any(
                isinstance(r, DeleteIfMatch) or (isinstance(r, Put) and r.key.endswith("/head")) for r in step
            )
            if committed is None and moves_head:
                committed = commit()
            reply = roller.bucket_io._batch(step, None)
    assert committed is not None, "the rollback never moved the head"
    return committed


@pytest.mark.parametrize("source", ["input", "update"])
@pytest.mark.parametrize("shared", [True, False], ids=["one-saver", "two-savers"])
def test_two_writers_from_one_read_the_second_raises(make_saver: Any, source: str, shared: bool) -> None:
    """Two requests of one conversation (an input, an ``update_state``) both read the latest checkpoint
    before either writes, through one saver instance or two. The second put must raise, not commit a
    second child of the same parent and silently drop the first writer's checkpoint from the latest state."""
    first = make_saver()
    second = first if shared else make_saver()
    base = first.put(cfg("pair"), empty_checkpoint(), {"source": "input", "step": -1}, {})
    parent_a, parent_b = first.get_tuple(cfg("pair")), second.get_tuple(cfg("pair"))
    assert parent_a is not None and parent_b is not None and parent_a.config == parent_b.config == base
    won = first.put(parent_a.config, empty_checkpoint(), {"source": source, "step": 0}, {})
    with pytest.raises(CheckpointConflictError):
        second.put(parent_b.config, empty_checkpoint(), {"source": source, "step": 0}, {})
    latest = make_saver().get_tuple(cfg("pair"))
    assert latest is not None and latest.config == won
    assert_linear(make_saver(), "pair")


def test_update_from_a_forgotten_read_raises(make_saver: Any) -> None:
    """The same after the saver's bounded memory forgot the head it read: an ``update_state`` on a parent
    another writer has moved past loses instead of joining."""
    stale, other = make_saver(), make_saver()
    stale.plans.recall._max_threads = 1  # stands in for 10,000 other threads touched meanwhile
    base = stale.put(cfg("forgot"), empty_checkpoint(), {"source": "input", "step": -1}, {})
    stale.get_tuple(cfg("forgot"))
    won = other.put(base, empty_checkpoint(), {"source": "update", "step": 0}, {})
    stale.get_tuple(cfg("another-thread"))
    with pytest.raises(CheckpointConflictError):
        stale.put(base, empty_checkpoint(), {"source": "update", "step": 0}, {})
    latest = make_saver().get_tuple(cfg("forgot"))
    assert latest is not None and latest.config == won


def test_concurrent_update_state_through_one_saver(make_saver: Any) -> None:
    """Two ``update_state`` calls through one saver, each having read the latest state before the other
    wrote (two HTTP requests in one app process): one commits, the other raises; none is lost silently."""
    saver = make_saver()
    graph = fence_graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": "updates"}}
    graph.invoke({"pending": "one"}, config)
    both_read, first_done = threading.Barrier(2), threading.Event()
    original = saver.get_tuple

    def get_tuple(config: RunnableConfig) -> CheckpointTuple | None:
        tup = original(config)
        if "checkpoint_id" not in config["configurable"]:
            both_read.wait(timeout=30)
            if threading.current_thread().name == "b":
                first_done.wait(timeout=30)  # b writes after a's commit: no If-Match race decides it
        return tup

    saver.get_tuple = get_tuple
    outcomes: dict[str, str] = {}

    def update(name: str) -> None:
        try:
            graph.update_state(config, {"steps": [name]})
            outcomes[name] = "committed"
        except CheckpointConflictError:
            outcomes[name] = "conflict"
        finally:
            if name == "a":
                first_done.set()

    threads = [threading.Thread(target=update, args=(name,), name=name) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert outcomes == {"a": "committed", "b": "conflict"}
    saver.get_tuple = original
    assert graph.get_state(config).values["steps"] == ["one", "a"]
    assert_linear(make_saver(), "updates")


@pytest.mark.parametrize("reader", ["by id", "history page"])
def test_two_runs_of_one_saver_a_read_meanwhile_does_not_make_the_straggler_a_fork(
    make_saver: Any, reader: str
) -> None:
    """One saver serves two runs of a thread (one server process). Both read the same checkpoint as the latest;
    the fast one commits on top. The slow one must lose, also when the checkpoint was read meanwhile by id while
    it was the head (a UI showing the current state) or in a page of history below the new head: reads that
    used to mark it a fork point for good, exempting the slow run's put from the straggler rule (a silent fork)."""
    saver = make_saver()
    base = saver.put(cfg("shared"), empty_checkpoint(), {"source": "input", "step": -1}, {})
    assert saver.get_tuple(cfg("shared")) is not None  # the slow run reads the latest
    if reader == "by id":
        assert saver.get_tuple(base) is not None  # while it is the head
    assert saver.get_tuple(cfg("shared")) is not None  # the fast run reads the latest
    winner = saver.put(base, empty_checkpoint(), {"source": "loop", "step": 0}, {})
    if reader == "history page":
        assert [t.config for t in saver.list(cfg("shared"), before=winner, limit=2)] == [base]
    with pytest.raises(CheckpointConflictError):
        saver.put(base, empty_checkpoint(), {"source": "loop", "step": 0}, {})
    head = make_saver().get_tuple(cfg("shared"))
    assert head is not None and head.config == winner


def test_the_one_checkpoint_below_a_bound_is_still_a_fork_point(make_saver: Any) -> None:
    """LangGraph finds a subgraph's state for a replay with ``list(before=..., limit=1)``: a put on top of what
    that returns is a fork and joins the head."""
    saver = make_saver()
    base = saver.put(cfg("replayed"), empty_checkpoint(), {"source": "input", "step": -1}, {})
    head = saver.put(base, empty_checkpoint(), {"source": "loop", "step": 0}, {})
    replay = Run()
    assert [t.config for t in saver.list(replay.of(cfg("replayed")), before=head, limit=1)] == [base]
    forked = saver.put(
        replay.of(cfg("replayed", "", base["configurable"]["checkpoint_id"])),
        empty_checkpoint(),
        {"source": "loop", "step": 0},
        {},
    )
    latest = make_saver().get_tuple(cfg("replayed"))
    assert latest is not None and latest.config == forked and latest.parent_config == base


def test_a_put_continuing_the_head_with_an_older_id_is_refused_as_clock_skew(make_saver: Callable[[], S3Saver]) -> None:
    """A put that continues the head with an id older than the head's (the writer's clock is behind) would be a detached
    record that no reader takes for the latest: it raises ClockSkewError (not CheckpointConflictError: running again
    would not help) and commits nothing, whether its saver fences it or another saver joins the head."""
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


def test_a_fork_older_than_its_parent_is_refused_as_clock_skew(make_saver: Callable[[], S3Saver]) -> None:
    """Time travel by a writer whose clock is behind (``update_state`` on an older checkpoint) would make a child older
    than its own parent, committed detached: ``update_state`` would succeed and the edit never become the latest state.
    A child older than its parent is refused whatever the fence."""

    def uuid6(n: int) -> str:  # shaped like LangGraph's ids, which carry the writer's clock
        return f"1f{n:06d}-0000-6000-8000-000000000000"

    put(make_saver(), "t", uuid6(5))
    put(make_saver(), "t", uuid6(7), uuid6(5))
    forker = make_saver()
    assert forker.get_tuple(cfg("t", "", uuid6(5))) is not None  # how LangGraph starts a fork: read explicitly
    with pytest.raises(ClockSkewError, match="older than its parent"):
        put(forker, "t", uuid6(4), uuid6(5), source="update")
    assert ids(make_saver().list(cfg("t"))) == [uuid6(7), uuid6(5)]
