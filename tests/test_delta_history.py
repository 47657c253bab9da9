"""``get_delta_channel_history``: exact request counts per load, with the read cache on and off, and an internal
read that changes nothing a later put is fenced by.

The thread is built through the API so that its shape is known exactly: checkpoints c0..c(N-1) in one line, the
DeltaChannel ``log`` stored (its seed) at every ``SNAPSHOT``-th checkpoint and absent in between, and on each
checkpoint ``TASKS`` writes objects (one task writes to ``log``, the others elsewhere). Loading checkpoint n walks
from its parent down to the nearest seed: ``D`` ancestors, each one record and ``TASKS`` writes objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, Any
from uuid import uuid4

import pytest
from helpers import RequestCounter
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from langgraph_s3_checkpoint import CheckpointConflictError, S3Saver
from langgraph_s3_checkpoint.local import LocalS3Server
from langgraph_s3_checkpoint.memory import MemoryBucket

SNAPSHOT = 8
TASKS = 2


def _thread(saver: S3Saver, n: int) -> list[RunnableConfig]:
    """A DeltaChannel thread of ``n`` checkpoints (see the module docs); their configs, oldest first."""
    config: RunnableConfig = {"configurable": {"thread_id": f"t-{uuid4().hex}", "checkpoint_ns": ""}}
    configs = []
    for i in range(n):
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6())
        checkpoint["channel_versions"] = {"log": f"{i:08}", "other": f"{i:08}"}
        checkpoint["channel_values"] = {"other": i, **({"log": [f"seed {i}"]} if i % SNAPSHOT == 0 else {})}
        metadata = {"source": "loop", "step": i, "parents": {}}
        config = saver.put(config, checkpoint, metadata, dict(checkpoint["channel_versions"]))  # type: ignore[arg-type]
        saver.put_writes(config, [("log", f"w{i}")], "writer", "~pull, writer")
        for task in range(1, TASKS):
            saver.put_writes(config, [("other", f"o{i}")], f"task-{task}", f"~pull, task-{task}")
        configs.append(config)
    return configs


def _ancestors_read(n: int) -> int:
    """Ancestors a load of checkpoint ``n`` reads: from its parent down to the nearest seed, included."""
    parent = n - 1
    return parent - (parent // SNAPSHOT) * SNAPSHOT + 1


@pytest.fixture
def make(
    s3_server: LocalS3Server, bucket: str, prefix: str, count_requests: Callable[[Any], RequestCounter]
) -> Iterator[Callable[[int], tuple[S3Saver, RequestCounter]]]:
    made: list[S3Saver] = []

    def saver(read_cache_bytes: int) -> tuple[S3Saver, RequestCounter]:
        client = s3_server.client()
        s = S3Saver(bucket=bucket, prefix=prefix, client=client, read_cache_bytes=read_cache_bytes)
        made.append(s)
        return s, count_requests(client)

    yield saver
    for s in made:
        s.close()


@pytest.mark.parametrize("n", [10, 41])
def test_requests_per_load_with_the_cache_off(make: Callable[[int], tuple[S3Saver, RequestCounter]], n: int) -> None:
    """Every load reads its target, one page of the listing below it, and exactly the ancestors back to the
    seed (record + writes objects each): nothing newer than the target, no record below the seed."""
    writer, _ = make(1 << 20)
    configs = _thread(writer, n)
    reader, counter = make(0)
    for i in (n - 1, n - 2, SNAPSHOT + 1):
        counter.reset()
        history = reader.get_delta_channel_history(config=configs[i], channels=["log"])
        d = _ancestors_read(i)
        assert counter.snapshot() == {"GetObject": 1 + d * (1 + TASKS), "ListObjectsV2": 1}, (i, d)
        assert history == BaseCheckpointSaver.get_delta_channel_history(reader, config=configs[i], channels=["log"])


def test_requests_per_load_with_the_cache_on(make: Callable[[int], tuple[S3Saver, RequestCounter]]) -> None:
    """Loads one after another, as a thread's turns are: an ancestor read by an earlier load (listed again with
    the same ETag) costs nothing, so each load reads its target and the one ancestor it has not seen."""
    writer, _ = make(1 << 20)
    configs = _thread(writer, 30)
    reader, counter = make(32 << 20)
    first = 20
    counter.reset()
    reader.get_delta_channel_history(config=configs[first], channels=["log"])
    assert counter.snapshot() == {"GetObject": 1 + _ancestors_read(first) * (1 + TASKS), "ListObjectsV2": 1}
    for i in range(first + 1, 30):
        counter.reset()
        history = reader.get_delta_channel_history(config=configs[i], channels=["log"])
        # The target is read by key (not from a listing), and so was its parent by the last load: the parent is
        # the one ancestor read from the listing for the first time.
        assert counter.snapshot() == {"GetObject": 1 + (1 + TASKS), "ListObjectsV2": 1}, i
        assert history["log"]["writes"][-1][2] == f"w{i - 1}"
    counter.reset()
    reader.get_delta_channel_history(config=configs[29], channels=["log"])  # again: only the target and the LIST
    assert counter.snapshot() == {"GetObject": 1, "ListObjectsV2": 1}


def test_the_walk_remembers_nothing_a_put_is_fenced_by(make: Callable[[int], tuple[S3Saver, RequestCounter]]) -> None:
    """Two runs of a thread through one saver read head H; the fast one commits H2 on H. The slow one's load
    rebuilds its DeltaChannel from H (read by id, now below the head): that must not make H a fork point, or the
    slow run's put on H would join and silently fork the thread instead of raising."""
    saver, _ = make(1 << 20)
    configs = _thread(saver, 3)
    head = configs[-1]
    assert saver.get_tuple({"configurable": {"thread_id": head["configurable"]["thread_id"]}}) is not None
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6())
    saver.put(head, checkpoint, {"source": "loop", "step": 3, "parents": {}}, {})  # the fast run
    saver.get_delta_channel_history(config=head, channels=["log"])  # the slow run's load of H
    late = empty_checkpoint()
    late["id"] = str(uuid6())
    with pytest.raises(CheckpointConflictError):
        saver.put(head, late, {"source": "loop", "step": 3, "parents": {}}, {})


def _concat(state: list[str] | None, writes: Any) -> list[str]:
    return [*(state or []), *(w for batch in writes for w in batch)]


class _Chat(TypedDict):
    log: Annotated[list[str], DeltaChannel(_concat, snapshot_frequency=3)]
    notes: Annotated[list[str], DeltaChannel(_concat, snapshot_frequency=2)]


@pytest.mark.memory
def test_every_checkpoint_matches_the_default_walk() -> None:
    """For every checkpoint of a graph's thread (and the latest, asked without an id), with two DeltaChannels
    whose seeds are an inline value and a large value: what LangGraph's default walk over ``get_tuple`` finds."""
    saver = S3Saver(bucket="b", client=MemoryBucket(), inline_threshold=64)
    builder = StateGraph(_Chat)
    builder.add_node("reply", lambda s: {"log": [f"reply {len(s['log'])}"], "notes": ["n" * 100]})
    builder.add_edge(START, "reply")
    graph = builder.compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    for turn in range(7):
        graph.invoke({"log": [f"turn {turn}"], "notes": []}, config)
    targets = [config, *(t.config for t in saver.list(config))]
    assert len(targets) > 7 * 2  # at least an input and a step checkpoint per turn
    for target in targets:
        ours = saver.get_delta_channel_history(config=target, channels=["log", "notes"])
        assert ours == BaseCheckpointSaver.get_delta_channel_history(saver, config=target, channels=["log", "notes"])
    assert len(graph.get_state(config).values["notes"]) == 7
