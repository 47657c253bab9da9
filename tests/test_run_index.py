"""The run index costs one PUT per run and namespace (issue 40, item 5), and stays exact where threads are copied,
imported or deleted: ``delete_for_runs`` finds every checkpoint of a run, in copies too (as InMemorySaver's, which
matches runs by metadata wherever they are).

A put of a run's first checkpoint in a namespace writes ``runs/{run}/{T}/{N}`` (create-only) and nothing under the
thread; 0.1.x also wrote a twin ``threads/{T}/r/{run}/{N}`` (tests/test_format_upgrade.py runs 0.1.0 itself).
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.graph import END, START, StateGraph

from langgraph_s3_checkpoint import S3Saver
from langgraph_s3_checkpoint._protocol.operator_plans import export_thread, import_thread
from langgraph_s3_checkpoint._protocol.requests import Put
from langgraph_s3_checkpoint.gc import gc
from langgraph_s3_checkpoint.memory import MemoryBucket

pytestmark = pytest.mark.memory
KEY = b"0123456789abcdef0123456789abcdef"


class Chat(TypedDict, total=False):
    messages: Annotated[list[str], operator.add]


def chat(saver: S3Saver) -> Any:
    def reply(state: Chat) -> Chat:
        return {"messages": [f"reply to {state['messages'][-1]}"]}

    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


def turn(graph: Any, thread: str, run: str | None, durability: str = "sync") -> None:
    config: dict[str, Any] = {"configurable": {"thread_id": thread}}
    if run is not None:
        config["metadata"] = {"run_id": run}
    graph.invoke({"messages": [f"hello from {run}"]}, config, durability=durability)


def puts(bucket: MemoryBucket, start: int) -> list[str]:
    assert bucket.log is not None
    return [request.key for request, _ in bucket.log[start:] if isinstance(request, Put)]


def keys(bucket: MemoryBucket, prefix: str) -> list[str]:
    return bucket.keys(prefix)


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_run_costs_one_index_put(durability: str) -> None:
    """Turn for turn, a chat with a ``run_id`` (as the Agent Server sends) costs one PUT more than without: its
    run's entry, and nothing under the thread. Under ``durability="async"`` the step's writes are sent while the
    put that indexes the run is still in flight: they send no entry of their own (the saver knows one is on its
    way), where a second, refused create-only PUT would still be billed."""
    bucket = MemoryBucket(keep_log=True)
    saver = S3Saver(bucket="b", client=bucket)
    graph = chat(saver)
    turn(graph, "plain", None, durability)
    turn(graph, "runs", "r0", durability)
    for n in range(1, 6):
        start = len(bucket.log or ())
        turn(graph, "plain", None, durability)
        without = puts(bucket, start)
        start = len(bucket.log or ())
        turn(graph, "runs", f"r{n}", durability)
        with_run = puts(bucket, start)
        layout = saver.plans.layout
        assert len(with_run) == len(without) + 1, (with_run, without)
        assert [key for key in with_run if key.startswith(layout.prefix + "runs/")] == [
            layout.run_entry(f"r{n}", "runs", "")
        ]
    assert not keys(bucket, saver.plans.layout.thread("runs") + "r/")


def test_the_entry_names_the_runs_first_checkpoint_and_rollback_finds_it() -> None:
    bucket = MemoryBucket()
    saver = S3Saver(bucket="b", client=bucket)
    graph = chat(saver)
    for run in ("r1", "r2", "r3"):
        turn(graph, "t", run)
    of_r2 = [t.config for t in saver.list({"configurable": {"thread_id": "t"}}) if t.metadata.get("run_id") == "r2"]
    entry = bucket.object(saver.plans.layout.run_entry("r2", "t", ""))
    assert entry is not None and entry.body.decode() == min(c["configurable"]["checkpoint_id"] for c in of_r2)
    saver.delete_for_runs(["r3"])
    assert graph.get_state({"configurable": {"thread_id": "t"}}).values["messages"][-1] == "reply to hello from r2"
    assert not keys(bucket, saver.plans.layout.run_index("r3"))


def _runs_of(saver: S3Saver, thread: str) -> set[str]:
    return {str(t.metadata.get("run_id")) for t in saver.list({"configurable": {"thread_id": thread}})}


def test_a_copy_is_indexed_by_the_runs_it_carries_even_without_the_key() -> None:
    """copy_thread rebuilds the target's entries from the records (which name their run in the clear, beside the
    encrypted metadata) and writes objects it copies: a saver without the thread's key can copy it, and a rollback
    of a run then takes it out of the copy too."""
    bucket = MemoryBucket()
    keyed = S3Saver(bucket="b", client=bucket, serde=EncryptedSerializer.from_pycryptodome_aes(key=KEY))
    graph = chat(keyed)
    for run in ("r1", "r2"):
        turn(graph, "source", run)
    S3Saver(bucket="b", client=bucket).copy_thread("source", "copy")  # no key
    layout = keyed.plans.layout
    assert keys(bucket, layout.run_entry("r2", "copy", "")), "the copy's run is indexed"
    keyed.delete_for_runs(["r2"])
    assert _runs_of(keyed, "source") == _runs_of(keyed, "copy") == {"r1"}


def test_an_import_is_indexed_by_the_runs_it_carries() -> None:
    bucket = MemoryBucket()
    saver = S3Saver(bucket="b", client=bucket)
    graph = chat(saver)
    for run in ("r1", "r2"):
        turn(graph, "source", run)
    layout, codec = saver.plans.layout, saver.plans.codec
    archive = list(saver.bucket_io.iterate(export_thread(layout, codec, "source")))
    saver.bucket_io.run(import_thread(layout, codec, "imported", archive))
    assert keys(bucket, layout.run_entry("r1", "imported", ""))
    saver.delete_for_runs(["r2"])
    assert _runs_of(saver, "source") == _runs_of(saver, "imported") == {"r1"}


def test_the_entries_of_a_deleted_thread_go_with_the_next_gc() -> None:
    """delete_thread cannot list a thread's entries (the index is keyed by run); gc finds them dangling: their
    namespace has no head."""
    bucket = MemoryBucket()
    saver = S3Saver(bucket="b", client=bucket)
    graph = chat(saver)
    for run in ("r1", "r2"):
        turn(graph, "gone", run)
    turn(graph, "kept", "r3")
    saver.delete_thread("gone")
    layout = saver.plans.layout
    assert keys(bucket, layout.run_index("r1"))
    report = gc(saver, grace_seconds=0)
    assert report.deleted["dangling_run_entry"] == 2
    assert not keys(bucket, layout.run_index("r1")) and not keys(bucket, layout.run_index("r2"))
    assert keys(bucket, layout.run_index("r3")), "a live thread's entry stays"
    assert gc(saver, grace_seconds=0).total == 0


def test_writes_sent_while_the_put_that_indexes_their_run_is_in_flight_send_no_entry() -> None:
    """LangGraph sends a step's writes without waiting for its put (``durability="async"``): with the put's entry
    sent and not yet answered, the writes to that checkpoint send no second entry (a refused create-only PUT is
    billed all the same). Driven at the plan level, so the put is held exactly between its entry and its commit."""
    bucket = MemoryBucket(keep_log=True)
    saver = S3Saver(bucket="b", client=bucket)
    head = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, _checkpoint(), {"run_id": "r0"}, {})
    step = _checkpoint()
    put = saver.plans.put(head, step, {"source": "loop", "step": 1, "run_id": "r1"}, {})
    first = next(put)  # the prerequisites, as sent: the run's entry
    assert isinstance(first, list)
    layout = saver.plans.layout
    assert [r.key for r in first if isinstance(r, Put)] == [layout.run_entry("r1", "t", "")]
    start = len(bucket.log or ())
    mine: RunnableConfig = {
        "configurable": {**head["configurable"], "checkpoint_id": step["id"]},
        "metadata": {"run_id": "r1"},
    }
    saver.put_writes(mine, [("messages", ["hi"])], "task-1")
    assert puts(bucket, start) == [layout.task_writes("t", "", step["id"], "task-1")]
    put.close()


def _checkpoint() -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6())
    return checkpoint
