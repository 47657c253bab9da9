"""The five ways a thread forked silently (or a put lied) on cfeae32, as users meet them, on both servers.

What decides a put's fencing is what travels with it: its run's ``Runtime`` (LangGraph passes it with every call of
a run), else the ids this saver returned to the caller, and the bucket's state (``_protocol/fencing.py``). Before,
reads were recorded per ``contextvars`` context, and the commit chain trusted a missing link. Each test below failed
on cfeae32:

1. a stream consumer's read between a run's steps became the run's read (its step committed as a fork);
2. a pool worker's reads leaked from one request to the next (a fork, or a refused deliberate edit);
3. a record landing in a gap a rollback opened was judged committed, and its refused put reported success;
4. a run went on after ``delete_thread``/``expire_threads`` and brought the thread back;
5. a caller's own commit was blamed on "another writer".
"""

from __future__ import annotations

import asyncio
import operator
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Annotated, Any, cast

import pytest
from helpers import Crash, Run, cfg, checkpoint, cid, drive, head_put_of, ids, latest_id, put, put_plan, send
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointMetadata
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_s3_checkpoint import AsyncS3Saver, CheckpointConflictError, ParentNotCommittedError, S3Saver


class Steps(TypedDict):
    steps: Annotated[list[str], operator.add]


def three_steps(saver: Any, during: dict[str, Callable[[], None]] | None = None) -> Any:
    """one -> two -> three, each appending its name; ``during[name]`` runs inside that node first."""

    def node(name: str) -> Callable[..., dict[str, list[str]]]:
        def run(state: Steps) -> dict[str, list[str]]:
            if during and name in during:
                during[name]()
            return {"steps": [name]}

        return run

    builder = StateGraph(Steps)
    builder.add_sequence([(name, node(name)) for name in ("one", "two", "three")])
    builder.add_edge(START, "one")
    builder.add_edge("three", END)
    return builder.compile(checkpointer=saver)


def elsewhere(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` as another process would: on a thread of its own (nothing of this thread's context goes with it)."""
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join(60)
    return out[0] if out else None


def assert_no_checkpoint_has_two_children(saver: S3Saver, thread: str) -> None:
    listed = list(saver.list(cfg(thread)))
    parents = [t.parent_config["configurable"]["checkpoint_id"] for t in listed if t.parent_config]
    assert len(parents) == len(set(parents)), f"the thread forked: {[t.checkpoint['id'] for t in listed]}"


# -- 1: a stream consumer's read is not the run's --------------------------------------------------------------
def test_1_a_stream_consumers_read_between_steps_leaves_the_run_fenced(make_saver: Callable[[], S3Saver]) -> None:
    """Process A streams a run and shows each checkpoint it is told about (``get_state`` by id). Process B commits on
    top of one of them before A's consumer reads it. A's next step must be refused as a straggler, and B's step stay
    the latest: the consumer's loop body runs in the generator's context, but what it reads is not the run's."""
    a, b = make_saver(), make_saver()
    graph_a, graph_b = three_steps(a), three_steps(b)
    thread: RunnableConfig = {"configurable": {"thread_id": "streamed"}}
    shown = []
    with pytest.raises(CheckpointConflictError):
        for event in graph_a.stream({"steps": []}, thread, stream_mode="checkpoints", durability="sync"):
            if event["next"] == ["two"]:  # the checkpoint after "one"
                elsewhere(lambda: graph_b.update_state(thread, {"steps": ["b"]}))
            shown.append(graph_a.get_state(event["config"]).values)
    assert three_steps(make_saver()).get_state(thread).values["steps"] == ["one", "b"]
    assert_no_checkpoint_has_two_children(make_saver(), "streamed")


async def test_1_the_same_with_astream(make_saver: Callable[[], S3Saver]) -> None:
    base = make_saver()
    async with AsyncS3Saver(bucket=base.bucket, prefix=base.prefix, client=base.client) as a:
        graph_a, graph_b = three_steps(a), three_steps(make_saver())
        thread: RunnableConfig = {"configurable": {"thread_id": "astreamed"}}
        with pytest.raises(CheckpointConflictError):
            async for event in graph_a.astream({"steps": []}, thread, stream_mode="checkpoints", durability="sync"):
                if event["next"] == ["two"]:
                    await asyncio.to_thread(graph_b.update_state, thread, {"steps": ["b"]})
                await graph_a.aget_state(event["config"])
    assert three_steps(make_saver()).get_state(thread).values["steps"] == ["one", "b"]
    assert_no_checkpoint_has_two_children(make_saver(), "astreamed")


# -- 2: a pool worker's reads do not leak from one request to the next ----------------------------------------
def test_2_a_pool_workers_read_by_id_does_not_make_a_later_step_a_fork(make_saver: Callable[[], S3Saver]) -> None:
    """A sync web server's pool worker serves a UI's ``get_tuple`` of X by id, then a step whose parent is X after
    another process moved the head: the step is a straggler's and is refused (it committed as a fork before)."""
    saver, other = make_saver(), make_saver()
    put(other, "t", cid(1), source="input")
    moved = put(other, "t", cid(2), cid(1))
    with ThreadPoolExecutor(max_workers=1) as pool:  # one worker thread: one context for every task
        assert pool.submit(saver.get_tuple, cfg("t", "", cid(1))).result() is not None
        with pytest.raises(CheckpointConflictError) as refused:
            pool.submit(put, saver, "t", cid(3), cid(1)).result()
    assert not isinstance(refused.value, ParentNotCommittedError)
    assert latest_id(make_saver(), "t") == moved["configurable"]["checkpoint_id"]


@pytest.mark.parametrize("source", ["update", None])
def test_2_a_pool_workers_latest_read_does_not_refuse_a_later_deliberate_edit(
    make_saver: Callable[[], S3Saver], source: str | None
) -> None:
    """The other way round: a worker that once served a latest read of X later sends a deliberate edit of X (source
    ``update``, or a direct put with none) after another process moved the head. It is stored as a fork, as on a
    fresh thread (it was refused as a conflict before)."""
    saver, other = make_saver(), make_saver()
    put(other, "t", cid(1), source="input")
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(saver.get_tuple, cfg("t")).result() is not None
        put(other, "t", cid(2), cid(1))
        metadata = cast(CheckpointMetadata, {"step": 1} if source is None else {"source": source, "step": 1})
        edited = pool.submit(saver.put, cfg("t", "", cid(1)), checkpoint(3), metadata, {}).result()
    latest = make_saver().get_tuple(cfg("t"))
    assert latest is not None and latest.config == edited
    assert latest.parent_config == cfg("t", "", cid(1))


# -- 3: a record landing in a gap a rollback opened ----------------------------------------------------------
@pytest.mark.parametrize("fate", ["head refused", "died before its head"])
def test_3_a_record_landing_in_a_gap_a_rollback_opened_is_never_committed(
    make_saver: Callable[[], S3Saver], fate: str
) -> None:
    """Thread C1. Run W reads C1 and puts X on it; its record and head PUTs are held in the network. Meanwhile another
    process commits C2 (run B) and C3 (run C), and rolls B back: C3 names C2 as its previous head. Then W's record
    lands (X sorts between C1 and C2) and its head PUT is refused, or W dies before sending it. History must read C3,
    C1 (X was never a head), and W's put must raise. Before, the chain resumed at the first record below the deleted
    link, X, and W's put reported success."""
    w, other = make_saver(), make_saver()
    put(other, "t", cid(1), run="run0", source="input")
    run_w = Run()
    assert w.get_tuple(run_w.of(cfg("t"))) is not None
    is_head = head_put_of(w, "t")

    def held(step: list[Any]) -> list[Any] | None:
        if not any(is_head(r) for r in step):
            return None
        put(other, "t", cid(3), cid(1), run="runB")
        put(other, "t", cid(4), cid(3), run="runC")
        other.delete_for_runs(["runB"])
        if fate == "died before its head":
            send(w, [r for r in step if not is_head(r)])
            raise Crash
        return send(w, step)

    plan = put_plan(w, "t", cid(2), cid(1), run="runW", in_run=run_w)
    with pytest.raises(Crash if fate == "died before its head" else CheckpointConflictError):
        drive(w, plan, held)
    reader = make_saver()
    assert ids(reader.list(cfg("t"))) == [cid(4), cid(1)]
    assert reader.get_tuple(cfg("t", "", cid(2))) is None


def test_3_a_record_landing_below_a_pruned_head_is_never_committed(make_saver: Callable[[], S3Saver]) -> None:
    """The same shape after ``prune``: a straggler's record held in the network lands below the kept head."""
    w, other = make_saver(), make_saver()
    put(other, "t", cid(1), source="input")
    run_w = Run()
    assert w.get_tuple(run_w.of(cfg("t"))) is not None
    is_head = head_put_of(w, "t")

    def held(step: list[Any]) -> list[Any] | None:
        if any(is_head(r) for r in step):
            put(other, "t", cid(3), cid(1))
            put(other, "t", cid(4), cid(3))
            other.prune(["t"])
            return send(w, step)
        return None

    with pytest.raises(CheckpointConflictError):
        drive(w, put_plan(w, "t", cid(2), cid(1), in_run=run_w), held)
    reader = make_saver()
    assert ids(reader.list(cfg("t"))) == [cid(4)]
    assert reader.get_tuple(cfg("t", "", cid(2))) is None


# -- 4: deletion is final --------------------------------------------------------------------------------------
@pytest.mark.parametrize("deletion", ["delete_thread", "expire_threads"])
def test_4_a_run_does_not_bring_back_a_thread_deleted_between_its_steps(
    make_saver: Callable[[], S3Saver], deletion: str
) -> None:
    """A user's "forget this conversation" (or a retention policy) deletes a thread while a run is between two steps.
    The run's next step is refused (``ParentNotCommittedError``) and the thread stays deleted; a new first checkpoint
    still creates the thread anew."""
    operator_saver = make_saver()

    def delete() -> None:
        if deletion == "delete_thread":
            elsewhere(lambda: operator_saver.delete_thread("forgotten"))
        else:
            elsewhere(lambda: operator_saver.expire_threads(timedelta(0)))

    graph = three_steps(make_saver(), during={"two": delete})
    thread: RunnableConfig = {"configurable": {"thread_id": "forgotten"}}
    with pytest.raises(ParentNotCommittedError):
        graph.invoke({"steps": []}, thread, durability="sync")
    reader = make_saver()
    assert reader.get_tuple(cfg("forgotten")) is None and list(reader.list(cfg("forgotten"))) == []
    assert three_steps(make_saver()).invoke({"steps": []}, thread)["steps"] == ["one", "two", "three"]


# -- 5: a caller's own commit is never "another writer" ---------------------------------------------------------
def test_5_a_callers_own_first_put_then_a_parentless_put(make_saver: Callable[[], S3Saver]) -> None:
    """``get_tuple`` (nothing there), a put that creates the thread, then a put with no parent: both are stored (the
    second as a new root, as InMemorySaver stores it); before, the second blamed "another writer"."""
    saver = make_saver()
    assert saver.get_tuple(cfg("t")) is None
    first = put(saver, "t", cid(1), source="input")
    second = put(saver, "t", cid(2), source="input")
    assert ids(make_saver().list(cfg("t"))) == [cid(2), cid(1)]
    assert first != second


def test_5_a_callers_own_step_then_an_update_of_the_same_parent(make_saver: Callable[[], S3Saver]) -> None:
    """``get_tuple`` (P), a ``loop`` put of C on P, then an ``update`` put on P with the same config: the caller's own
    commit is its newest knowledge, so the update is a deliberate edit of an older checkpoint, stored as a fork; before
    it raised "another writer committed since this caller read it"."""
    saver = make_saver()
    put(saver, "t", cid(1), source="input")
    read = saver.get_tuple(cfg("t"))
    assert read is not None
    stepped = saver.put(read.config, checkpoint(2), {"source": "loop", "step": 1}, {})
    edited = saver.put(read.config, checkpoint(3), {"source": "update", "step": 1}, {})
    assert ids(make_saver().list(cfg("t"))) == [cid(3), cid(2), cid(1)]
    assert edited != stepped


def test_5_a_head_rewritten_by_a_rollback_of_another_run_is_continued(make_saver: Callable[[], S3Saver]) -> None:
    """Run r1 read P as the latest; a rollback of run rB, which had resumed P and might still move it, rewrote the head
    (the same checkpoint, naming rB). r1's step on P commits: nobody moved past P. Before, it was refused "as moved",
    saying another writer had committed."""
    saver, operator_saver = make_saver(), make_saver()
    put(saver, "t", cid(1), run="r0", source="input")
    r1 = Run()
    assert saver.get_tuple(r1.of(cfg("t"))) is not None
    resumed: RunnableConfig = {
        "configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": cid(1)},
        "metadata": {},
    }
    resumed["metadata"]["run_id"] = "rB"
    operator_saver.put_writes(resumed, [("steps", ["rB"])], "task-rB")
    operator_saver.delete_for_runs(["rB"])
    put(saver, "t", cid(2), cid(1), run="r1", in_run=r1)
    assert latest_id(make_saver(), "t") == cid(2)


def test_5_no_refusal_blames_another_writer(make_saver: Callable[[], S3Saver]) -> None:
    """Every refusal says what happened, naming the checkpoint the thread is at now; none says "another writer"."""
    saver, other = make_saver(), make_saver()
    put(other, "t", cid(1), source="input")
    straggler, racer = Run(), Run()
    assert saver.get_tuple(straggler.of(cfg("t"))) is not None
    put(other, "t", cid(2), cid(1))
    with pytest.raises(CheckpointConflictError) as moved:
        put(saver, "t", cid(3), cid(1), in_run=straggler)
    assert cid(1) in str(moved.value) and cid(2) in str(moved.value)
    assert saver.get_tuple(racer.of(cfg("new"))) is None
    put(other, "new", cid(4), source="input")
    with pytest.raises(CheckpointConflictError) as created:
        put(saver, "new", cid(5), source="input", in_run=racer)
    assert cid(4) in str(created.value)
    for refused in (moved, created):
        assert "another writer" not in str(refused.value).lower()
