"""Fencing decided by what travels with a put (its run, the ids it was returned), never by what else the process read.

One process serves several runs of a thread while a UI reads its history. Each run here is a :class:`helpers.Run`
(the ``Runtime`` LangGraph passes with every call of a run); a UI or a direct caller makes calls without one. The
parties share one saver, and so one memory, as in one Agent Server process. Each test failed on d54071b, where reads
made anywhere in the process marked fork points and the remembered head decided fences.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar, cast

import pytest
from helpers import Run, cfg, checkpoint, cid
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import CheckpointMetadata, CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_s3_checkpoint import CheckpointConflictError, ParentNotCommittedError, S3Saver
from langgraph_s3_checkpoint.local import LocalS3Server
from langgraph_s3_checkpoint.memory import MemoryBucket

T = TypeVar("T")


@pytest.fixture
def bucket() -> MemoryBucket:
    return MemoryBucket()


def saver_on(bucket: MemoryBucket) -> S3Saver:
    return S3Saver(bucket="b", client=bucket)


def put(saver: S3Saver, parent: RunnableConfig, n: int, source: str = "loop") -> RunnableConfig:
    return saver.put(parent, checkpoint(n), cast(CheckpointMetadata, {"source": source, "step": n}), {})


def latest_id(saver: S3Saver, thread_id: str) -> str | None:
    tup = saver.get_tuple(cfg(thread_id))
    return None if tup is None else tup.checkpoint["id"]


def history(saver: S3Saver, thread_id: str) -> list[str]:
    return [t.checkpoint["id"] for t in saver.list(cfg(thread_id))]


# -- a: what others read never turns a straggler into a fork ----------------------------------------------------
Wrap = Callable[[RunnableConfig], RunnableConfig]
READS_OF_THE_PARENT: dict[str, Callable[[S3Saver, RunnableConfig, Wrap], Any]] = {
    "delta history of the parent": lambda s, h, of: s.get_delta_channel_history(config=of(h), channels=["messages"]),
    "the parent by id": lambda s, h, of: s.get_tuple(of(h)),
    "a page of history": lambda s, h, of: list(s.list(of(cfg(h["configurable"]["thread_id"])), limit=2)),
    "the one checkpoint below the head": lambda s, h, of: list(
        s.list(of(cfg(h["configurable"]["thread_id"])), before=latest_config(s, h), limit=1)
    ),
}


def latest_config(saver: S3Saver, config: RunnableConfig) -> RunnableConfig:
    tup = saver.get_tuple(cfg(config["configurable"]["thread_id"]))
    assert tup is not None
    return tup.config


@pytest.mark.memory
@pytest.mark.parametrize(
    ("reader", "read"),
    [("a UI", read) for read in READS_OF_THE_PARENT] + [("the slow run itself", read) for read in READS_OF_THE_PARENT],
)
def test_a_a_read_of_the_parent_after_the_other_run_committed_leaves_the_straggler_fenced(
    bucket: MemoryBucket, read: str, reader: str
) -> None:
    """Two runs of one saver read head H as the latest; the fast one commits on H. Whatever a UI reads afterwards,
    and whatever the slow run reads again (its DeltaChannel rebuild, a page of history, H by id: only its first read
    of the namespace says how it set out), the slow run's put on H loses instead of committing a second child of H."""
    saver = saver_on(bucket)
    head = put(saver, cfg("t"), 1, "input")
    slow, fast = Run(), Run()
    assert saver.get_tuple(slow.of(cfg("t"))) is not None
    assert saver.get_tuple(fast.of(cfg("t"))) is not None
    won = saver.put(fast.of(head), checkpoint(2), {"source": "loop", "step": 2}, {})
    READS_OF_THE_PARENT[read](saver, head, slow.of if reader == "the slow run itself" else (lambda c: c))
    with pytest.raises(CheckpointConflictError) as refused:
        saver.put(slow.of(head), checkpoint(3), {"source": "loop", "step": 3}, {})
    assert not isinstance(refused.value, ParentNotCommittedError)
    assert latest_id(saver_on(bucket), "t") == won["configurable"]["checkpoint_id"]
    assert history(saver_on(bucket), "t") == [
        won["configurable"]["checkpoint_id"],
        head["configurable"]["checkpoint_id"],
    ]


def _extend(state: list[str], batches: Sequence[list[str]]) -> list[str]:
    return [*state, *(m for batch in batches for m in batch)]


class Chat(TypedDict):
    messages: Annotated[list[str], DeltaChannel(_extend)]


def test_a_two_runs_of_a_delta_channel_graph_in_one_process_never_fork(s3_server: LocalS3Server, prefix: str) -> None:
    """The defect as users met it: one saver (one server process) runs two requests of one conversation, a graph
    with a DeltaChannel. Both start from the same latest checkpoint; the fast one finishes; a UI then shows the
    thread's history (which rebuilds the DeltaChannel of every checkpoint by id). The slow run must fail with
    CheckpointConflictError, and the thread must hold the fast run's turn, linearly."""
    saver = S3Saver(bucket="lgs3-test", prefix=prefix, client=s3_server.client())
    s3_server.create_bucket("lgs3-test")
    both_read = threading.Barrier(2, timeout=30)
    fast_done, ui_done = threading.Event(), threading.Event()
    original_get_tuple, original_put = saver.get_tuple, saver.put

    def get_tuple(config: RunnableConfig) -> CheckpointTuple | None:
        tup = original_get_tuple(config)
        if "checkpoint_id" not in config["configurable"] and config["configurable"].get("who"):
            both_read.wait()  # both runs have read the same latest checkpoint before either writes
        return tup

    def put(config: RunnableConfig, *args: Any) -> RunnableConfig:
        if config["configurable"].get("who") == "slow":
            assert ui_done.wait(timeout=30)
        return original_put(config, *args)

    saver.get_tuple = get_tuple
    saver.put = put  # type: ignore[assignment]
    builder = StateGraph(Chat)
    builder.add_node("reply", lambda state: {"messages": [f"reply {len(state['messages'])}"]})
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    graph = builder.compile(checkpointer=saver)
    thread: RunnableConfig = {"configurable": {"thread_id": "chat"}}
    graph.invoke({"messages": ["hello"]}, thread)
    outcomes: dict[str, str] = {}

    def run(who: str) -> None:
        try:
            graph.invoke({"messages": [f"from {who}"]}, {"configurable": {"thread_id": "chat", "who": who}})
            outcomes[who] = "committed"
        except CheckpointConflictError:
            outcomes[who] = "conflict"
        finally:
            if who == "fast":
                fast_done.set()

    runs = [threading.Thread(target=run, args=(who,)) for who in ("slow", "fast")]
    for t in runs:
        t.start()
    assert fast_done.wait(timeout=60)
    shown = list(graph.get_state_history(thread))  # the UI, in this thread: every checkpoint by id
    assert shown
    ui_done.set()
    for t in runs:
        t.join(timeout=60)
    assert outcomes == {"fast": "committed", "slow": "conflict"}
    saver.get_tuple, saver.put = original_get_tuple, original_put
    fresh = S3Saver(bucket="lgs3-test", prefix=prefix, client=s3_server.client())
    final = builder.compile(checkpointer=fresh).get_state(thread).values["messages"]
    assert final == ["hello", "reply 1", "from fast", "reply 3"]
    ids = [t.checkpoint["id"] for t in fresh.list(cfg("chat"))]
    parents = [t.parent_config["configurable"]["checkpoint_id"] for t in fresh.list(cfg("chat")) if t.parent_config]
    assert len(parents) == len(set(parents)), f"a checkpoint with two children: {ids}"
    for s in (saver, fresh):
        s.close()


# -- b: a fork from a checkpoint this process once saw as the head ---------------------------------------------
@pytest.mark.memory
def test_b_a_fork_from_a_checkpoint_the_process_last_saw_as_the_head_commits(bucket: MemoryBucket) -> None:
    """Process A last saw H as the head; process B moves the thread on; A reads H by id and puts a child of H.
    That is a fork (InMemorySaver and a fresh process store it), not a conflict."""
    a, b = saver_on(bucket), saver_on(bucket)
    head = put(a, cfg("t"), 1, "input")
    assert a.get_tuple(cfg("t")) is not None  # A's last view: H is the head
    b.get_tuple(cfg("t"))
    moved = put(b, head, 2)
    old = a.get_tuple(head)  # A asks for H by id: what it returns is a fork point for a put on it
    assert old is not None
    forked = a.put(old.config, checkpoint(3), {"source": "update", "step": 2}, {})
    assert latest_id(saver_on(bucket), "t") == forked["configurable"]["checkpoint_id"]
    ids = history(saver_on(bucket), "t")
    assert ids == [
        forked["configurable"]["checkpoint_id"],
        moved["configurable"]["checkpoint_id"],
        cid(1),
    ]


class _Steps(TypedDict):
    steps: Annotated[list[str], lambda x, y: x + y]


def _one_step_graph() -> StateGraph:
    """START -> ``step`` (appends ``ran``) -> END, not compiled."""
    builder = StateGraph(_Steps)
    builder.add_node("step", lambda s: {"steps": ["ran"]})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder


def test_b_update_state_on_a_checkpoint_the_process_last_saw_as_the_head(s3_server: LocalS3Server, prefix: str) -> None:
    """The same through LangGraph: ``update_state(config_of_H)`` in the process that last saw H as the head."""
    s3_server.create_bucket("lgs3-test")
    a = S3Saver(bucket="lgs3-test", prefix=prefix, client=s3_server.client())
    b = S3Saver(bucket="lgs3-test", prefix=prefix, client=s3_server.client())

    builder = _one_step_graph()
    graph_a, graph_b = builder.compile(checkpointer=a), builder.compile(checkpointer=b)
    thread: RunnableConfig = {"configurable": {"thread_id": "fork"}}
    graph_a.invoke({"steps": ["one"]}, thread)
    seen = graph_a.get_state(thread)  # A's last view of the thread
    graph_b.invoke({"steps": ["two"]}, thread)
    forked = graph_a.update_state(seen.config, {"steps": ["edited"]})
    assert graph_b.get_state(thread).config["configurable"]["checkpoint_id"] == forked["configurable"]["checkpoint_id"]
    assert graph_b.get_state(thread).values["steps"] == ["one", "ran", "edited"]
    for s in (a, b):
        s.close()


# -- k: puts that used to blame a writer who does not exist --------------------------------------------------
def test_k_update_state_on_a_checkpoint_id_that_was_never_written_is_stored(
    s3_server: LocalS3Server, prefix: str
) -> None:
    """``update_state`` on a checkpoint id the thread never had: InMemorySaver stores it as a new branch; so does
    the saver, and the thread's latest state is the update."""
    s3_server.create_bucket("lgs3-test")

    builder = _one_step_graph()
    phantom = "1f000000-0000-6000-8000-000000000bad"
    outcomes = []
    for saver in (InMemorySaver(), S3Saver(bucket="lgs3-test", prefix=prefix, client=s3_server.client())):
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"steps": ["one"]}, {"configurable": {"thread_id": "t"}})
        updated = graph.update_state({"configurable": {"thread_id": "t", "checkpoint_id": phantom}}, {"steps": ["x"]})
        state = graph.get_state({"configurable": {"thread_id": "t"}})
        assert state.config["configurable"]["checkpoint_id"] == updated["configurable"]["checkpoint_id"]
        outcomes.append(
            (state.values, state.parent_config["configurable"]["checkpoint_id"] if state.parent_config else None)
        )
    assert outcomes[0] == outcomes[1]


@pytest.mark.memory
def test_k_a_rolled_back_parent_read_by_id_forks_and_unread_is_named(bucket: MemoryBucket) -> None:
    """A checkpoint rolled back by ``delete_for_runs``: a step of the rolled-back run is refused as such; a step of
    another run on it is refused naming the missing parent, no other writer; read by id first with the config the put
    returned (``update_state`` does), a put on it stores a new branch."""
    saver = saver_on(bucket)
    base = saver.put(cfg("t"), checkpoint(1), {"source": "input", "step": 0, "run_id": "r0"}, {})
    doomed = saver.put(base, checkpoint(2), {"source": "loop", "step": 1, "run_id": "r1"}, {})
    saver.delete_for_runs(["r1"])
    assert latest_id(saver, "t") == base["configurable"]["checkpoint_id"]
    on_doomed = cfg("t", "", doomed["configurable"]["checkpoint_id"])
    with pytest.raises(CheckpointConflictError, match="run was rolled back"):
        saver.put(on_doomed, checkpoint(3), {"source": "loop", "step": 2, "run_id": "r1"}, {})
    with pytest.raises(ParentNotCommittedError, match="rolled back") as refused:
        saver.put(on_doomed, checkpoint(3), {"source": "loop", "step": 2, "run_id": "r2"}, {})
    assert doomed["configurable"]["checkpoint_id"] in str(refused.value)
    assert "Another writer" not in str(refused.value)
    assert saver.get_tuple(doomed) is None
    updated = saver.put(doomed, checkpoint(4), {"source": "update", "step": 2}, {})
    assert latest_id(saver_on(bucket), "t") == updated["configurable"]["checkpoint_id"]


@pytest.mark.memory
def test_k_a_parentless_put_on_a_namespace_in_use_is_stored_unless_its_caller_found_it_empty(
    bucket: MemoryBucket,
) -> None:
    """A put with no parent on a namespace that has a head: InMemorySaver stores it, and so does the saver, as a
    new root that becomes the latest. Only a run that itself found the namespace empty and then lost the race
    to create it is refused, and told so."""
    saver = saver_on(bucket)
    first = Run()
    assert saver.get_tuple(first.of(cfg("t"))) is None  # this run found the thread empty
    other = put(saver_on(bucket), cfg("t"), 1, "input")
    root = saver.put(cfg("t"), checkpoint(2), {"source": "input", "step": -1}, {})
    assert latest_id(saver_on(bucket), "t") == root["configurable"]["checkpoint_id"]
    with pytest.raises(CheckpointConflictError, match="since it was read as empty") as refused:
        saver.put(first.of(cfg("t")), checkpoint(3), {"source": "input", "step": -1}, {})
    assert "Another writer" not in str(refused.value)
    assert history(saver_on(bucket), "t") == [
        root["configurable"]["checkpoint_id"],
        other["configurable"]["checkpoint_id"],
    ]


@pytest.mark.memory
def test_k_an_update_of_an_older_checkpoint_not_read_first_is_a_fork(bucket: MemoryBucket) -> None:
    """An ``update`` child of an older checkpoint, put directly without reading it: InMemorySaver stores it and
    so does the saver (a fork on top of the head). A ``loop`` child in the same place is a straggler's and is
    refused, naming its parent."""
    saver = saver_on(bucket)
    base = put(saver, cfg("t"), 1, "input")
    put(saver, base, 2)
    updated = saver.put(
        cfg("t", "", base["configurable"]["checkpoint_id"]), checkpoint(3), {"source": "update", "step": 1}, {}
    )
    assert latest_id(saver_on(bucket), "t") == updated["configurable"]["checkpoint_id"]
    with pytest.raises(CheckpointConflictError, match=base["configurable"]["checkpoint_id"]) as refused:
        saver.put(cfg("t", "", base["configurable"]["checkpoint_id"]), checkpoint(4), {"source": "loop", "step": 1}, {})
    assert not isinstance(refused.value, ParentNotCommittedError)


@pytest.mark.memory
def test_k_a_loop_step_on_a_parent_that_never_committed_is_refused_naming_it(bucket: MemoryBucket) -> None:
    """A run's step whose parent the thread never had, on a namespace in use: refused as a missing parent (no
    writer is blamed); on an empty namespace it is stored, as InMemorySaver stores it."""
    saver = saver_on(bucket)
    put(saver, cfg("t"), 1, "input")
    phantom = cfg("t", "", "1f000000-0000-6000-8000-000000000bad")
    with pytest.raises(ParentNotCommittedError):
        saver.put(phantom, checkpoint(2), {"source": "loop", "step": 1}, {})
    stored = saver.put(
        cfg("empty", "", "1f000000-0000-6000-8000-000000000bad"),
        checkpoint(3),
        {"source": "loop", "step": 1},
        {},
    )
    assert latest_id(saver_on(bucket), "empty") == stored["configurable"]["checkpoint_id"]


@pytest.mark.memory
def test_two_runs_of_one_saver_that_both_found_the_thread_empty_commit_exactly_one(bucket: MemoryBucket) -> None:
    """Two runs through one saver instance both find a new thread empty and both put a first checkpoint: one
    commits, the other raises (before, one saver's second first put joined the first's head: both succeeded)."""
    saver = saver_on(bucket)
    first, second = Run(), Run()
    assert saver.get_tuple(first.of(cfg("new"))) is None
    assert saver.get_tuple(second.of(cfg("new"))) is None
    won = saver.put(first.of(cfg("new")), checkpoint(1), {"source": "input", "step": -1}, {})
    with pytest.raises(CheckpointConflictError):
        saver.put(second.of(cfg("new")), checkpoint(2), {"source": "input", "step": -1}, {})
    assert history(saver_on(bucket), "new") == [won["configurable"]["checkpoint_id"]]
