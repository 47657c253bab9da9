"""Faults between the saver and a real server: throttling, 5xx, resets, and lost responses.

Requests go through :class:`faultproxy.FaultProxy`, an HTTP proxy in front of the real server that
forwards requests unchanged (signatures still verify) and injects faults at random or on demand. The
saver's own client is made by ``make_client`` (standard retries) with a budget of 6 attempts
(``RETRY_BUDGET``, above the shipped default of 3, so that a 10 % fault rate over thousands of requests
never exhausts it by chance), so what is tested is the saver's behaviour under retries, with each
transport: boto3, the direct transport of the sync saver (urllib3), and the direct transport of the async
saver, whose requests go out from the event loop (``async-direct``: :class:`OnLoop` runs the async saver's
methods on a loop thread, so the same tests drive it). The most interesting fault is
``lost``: the server applies a PUT but the answer never arrives, so the retry meets the new state (412
for a conditional PUT) and the saver must recognise its own commit.

The last tests are about server behaviour rather than injected faults: objects the saver creates
concurrently must all survive.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import os
import random
import threading
from collections.abc import Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
from faultproxy import FaultProxy
from helpers import cfg, client_options, create_task_in
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    empty_checkpoint,
)
from workers.common import crash_graph, crash_input, crash_markers, fence_graph

from langgraph_s3_checkpoint import (
    AsyncS3Saver,
    CheckpointConflictError,
    S3RequestError,
    S3Saver,
    make_client,
)
from langgraph_s3_checkpoint.local import LocalS3Server

BUCKET = "lgs3-test"
FAULT_RATE = 0.10
RETRY_BUDGET = 6
"""Attempts per request for the saver behind the proxy (the default is 3: see saver.DEFAULT_MAX_ATTEMPTS)."""
RUNS = int(os.environ.get("LGS3_FAULT_RUNS", "100"))
RUNNERS = 10
SEED = int(os.environ.get("LGS3_FAULT_SEED", random.randrange(1 << 30)))


@pytest.fixture
def proxy(seaweedfs_server: LocalS3Server) -> Iterator[FaultProxy]:
    seaweedfs_server.create_bucket(BUCKET)
    with FaultProxy(seaweedfs_server.endpoint_url, seed=SEED) as p:
        yield p


T = TypeVar("T")


class OnLoop(BaseCheckpointSaver[str]):
    """An :class:`AsyncS3Saver`'s async methods under the sync names, run on one event loop in a thread.

    Graphs and tests call it synchronously (from several threads at once); every request is sent by the
    async saver from that loop, so with ``transport="direct"`` the native asyncio sender is what is tested."""

    def __init__(self, inner: AsyncS3Saver) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop as if in the caller's own context: the saver records how a caller read a
        checkpoint in its ``contextvars`` context (docs/safety.md, "The fencing table"), so what the call set there
        is carried back, as an ``await`` in the caller's task would keep it."""
        caller = contextvars.copy_context()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def finish(task: asyncio.Task[T]) -> None:
            if task.cancelled():
                done.cancel()
            elif (error := task.exception()) is not None:
                done.set_exception(error)
            else:
                done.set_result(task.result())

        def start() -> None:
            create_task_in(self.loop, coroutine, caller).add_done_callback(finish)

        self.loop.call_soon_threadsafe(start)
        result = done.result()
        for var, value in caller.items():
            var.set(value)
        return result

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._call(self.inner.aget_tuple(config))

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> Iterator[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            return [item async for item in self.inner.alist(config, **kwargs)]

        return iter(self._call(collect()))

    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, versions: ChannelVersions
    ) -> RunnableConfig:
        return self._call(self.inner.aput(config, checkpoint, metadata, versions))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._call(self.inner.aput_writes(config, writes, task_id, task_path))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._call(self.inner.adelete_for_runs(run_ids))

    def get_next_version(self, current: str | None, channel: None) -> str:
        return self.inner.get_next_version(current, channel)

    def close(self) -> None:
        self.inner.close()  # from another thread than the loop's, as a caller may
        self._call(asyncio.sleep(0.05))
        self._call(self.loop.shutdown_asyncgens())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


@pytest.fixture(params=["boto3", "direct", "async-direct"])
def savers(
    seaweedfs_server: LocalS3Server, proxy: FaultProxy, prefix: str, request: pytest.FixtureRequest
) -> Iterator[tuple[Any, S3Saver]]:
    """(saver behind the fault proxy, saver talking to the server directly) on the same prefix.

    The saver behind the proxy uses each transport in turn: all must retry the same faults."""
    client = make_client(**client_options(seaweedfs_server, proxy.url), max_attempts=RETRY_BUDGET)
    faulty: Any
    if request.param == "async-direct":
        inner = AsyncS3Saver(bucket=BUCKET, prefix=prefix, client=client, transport="direct")
        assert inner.bucket_io.native is not None
        faulty = OnLoop(inner)
    else:
        faulty = S3Saver(bucket=BUCKET, prefix=prefix, client=client, transport=request.param)
    direct = S3Saver(bucket=BUCKET, prefix=prefix, client=seaweedfs_server.client())
    yield faulty, direct
    faulty.close()
    direct.close()


def history(saver: S3Saver, thread_id: str) -> list[CheckpointTuple]:
    """The parent chain from the head; asserts that list() shows exactly that chain."""
    chain: list[CheckpointTuple] = []
    tup = saver.get_tuple(cfg(thread_id))
    while tup is not None:
        chain.append(tup)
        parent = chain[-1].parent_config
        tup = saver.get_tuple(parent) if parent else None
        assert tup is not None or not parent, f"parent {parent} of {chain[-1].checkpoint['id']} is missing"
    listed = [t.checkpoint["id"] for t in saver.list(cfg(thread_id))]
    assert listed == [t.checkpoint["id"] for t in chain], "history is not one chain"
    return chain


def test_hundred_graph_runs_at_ten_percent_faults_match_fault_free_runs(
    savers: tuple[S3Saver, S3Saver], proxy: FaultProxy
) -> None:
    faulty, direct = savers
    reference = crash_graph(direct, rounds=1, execlog=None).invoke(crash_input(), cfg("reference"))
    assert reference["log"] == crash_markers(1)
    proxy.rate = FAULT_RATE
    graph = crash_graph(faulty, rounds=1, execlog=None)

    def one(i: int) -> None:
        graph.invoke(crash_input(), cfg(f"run-{i}"), durability="sync")

    with ThreadPoolExecutor(RUNNERS) as pool:
        list(pool.map(one, range(RUNS)))
    proxy.rate = 0.0
    counts = proxy.snapshot()

    checked = crash_graph(direct, rounds=1, execlog=None)
    for i in range(RUNS):
        assert checked.get_state(cfg(f"run-{i}")).values == reference, f"run-{i}"
        try:
            assert len(history(direct, f"run-{i}")) == len(history(direct, "reference"))
        except AssertionError as exc:
            trail = "\n".join(" ".join(e) for e in proxy.log if f"/run-{i}/" in e[1])
            raise AssertionError(f"run-{i}: {exc}; its requests:\n{trail}") from exc
    injected = sum(v for k, v in counts.items() if k not in ("requests", "forwarded"))
    assert injected >= counts["requests"] * FAULT_RATE / 2, counts
    assert counts.get("lost", 0) + counts.get("lost_500", 0) > 0, counts
    print(f"\n[faults] seed={SEED} {RUNS} runs at {FAULT_RATE:.0%}: {counts}")


@pytest.mark.parametrize("fault", ["lost", "lost_500"])
@pytest.mark.parametrize("fresh_thread", [True, False], ids=["first-put", "fenced-put"])
def test_lost_answer_to_the_head_put_counts_as_committed(
    savers: tuple[S3Saver, S3Saver], proxy: FaultProxy, fault: str, fresh_thread: bool
) -> None:
    """The head PUT is applied but its answer is lost; the retry gets 412 and the saver sees its own
    checkpoint at the head: success, one checkpoint, no error."""
    faulty, direct = savers
    parent = cfg("ambiguous")
    if not fresh_thread:
        parent = faulty.put(parent, empty_checkpoint(), {"step": 0}, {})
        faulty.get_tuple(cfg("ambiguous"))
    before = proxy.snapshot()
    proxy.inject(fault, method="PUT", key_suffix="/head")
    checkpoint = empty_checkpoint()
    stored = faulty.put(parent, checkpoint, {"step": 1}, {})
    after = proxy.snapshot()
    assert after[fault] == before.get(fault, 0) + 1 and proxy.pending_rules() == 0
    head = direct.get_tuple(cfg("ambiguous"))
    assert head is not None and head.config == stored and head.checkpoint["id"] == checkpoint["id"]
    assert len(history(direct, "ambiguous")) == (1 if fresh_thread else 2)
    # The saver knows where the head is: its next put is fenced and commits.
    nxt = faulty.put(stored, empty_checkpoint(), {"step": 2}, {})
    assert direct.get_tuple(cfg("ambiguous")).config == nxt  # type: ignore[union-attr]


def test_graph_with_every_head_answer_lost(savers: tuple[S3Saver, S3Saver], proxy: FaultProxy) -> None:
    faulty, direct = savers
    proxy.inject("lost", method="PUT", key_suffix="/head", times=100, alternate=True)
    result = fence_graph(faulty).invoke({"pending": "x"}, {"configurable": {"thread_id": "every-head-lost"}})
    assert result["steps"] == ["x"]
    assert proxy.snapshot()["lost"] >= 3  # input checkpoint and two loop checkpoints
    chain = history(direct, "every-head-lost")
    assert chain[0].checkpoint["channel_values"]["steps"] == ["x"]


def test_a_real_conflict_behind_a_lost_answer_is_still_a_conflict(
    savers: tuple[S3Saver, S3Saver], proxy: FaultProxy
) -> None:
    """Recognising one's own lost commit must not swallow a genuine conflict."""
    faulty, direct = savers
    base = direct.put(cfg("contested"), empty_checkpoint(), {"step": 0}, {})
    read = faulty.get_tuple(cfg("contested"))
    assert read is not None
    direct.get_tuple(cfg("contested"))
    winner = direct.put(base, empty_checkpoint(), {"step": 1}, {})
    proxy.inject("lost_500", method="PUT", key_suffix="/head")
    with pytest.raises(CheckpointConflictError):
        faulty.put(read.config, empty_checkpoint(), {"step": 1}, {})
    assert direct.get_tuple(cfg("contested")).config == winner  # type: ignore[union-attr]
    assert [t.config for t in direct.list(cfg("contested"))] == [winner, base]


def test_throttling_bursts_are_retried(savers: tuple[S3Saver, S3Saver], proxy: FaultProxy) -> None:
    faulty, direct = savers
    proxy.inject("slowdown", method="PUT", times=3)
    proxy.inject("slowdown", method="GET", times=2)
    result = fence_graph(faulty).invoke({"pending": "x"}, {"configurable": {"thread_id": "throttled"}})
    assert result["steps"] == ["x"] and proxy.snapshot()["slowdown"] == 5
    assert history(direct, "throttled")[0].checkpoint["channel_values"]["steps"] == ["x"]


def test_faults_beyond_the_retry_budget_fail_cleanly(savers: tuple[S3Saver, S3Saver], proxy: FaultProxy) -> None:
    """Six 500s in a row (5 retries after the first try) exhaust the client's retries: put raises
    S3RequestError, nothing commits, and the thread continues normally afterwards."""
    faulty, direct = savers
    graph = fence_graph(faulty)
    config: RunnableConfig = {"configurable": {"thread_id": "exhausted"}}
    graph.invoke({"pending": "one"}, config)
    head = direct.get_tuple(cfg("exhausted"))
    proxy.inject("internal", method="PUT", key_suffix="/head", times=6)
    with pytest.raises(S3RequestError) as raised:
        graph.invoke({"pending": "two"}, config, durability="sync")
    assert "head" in str(raised.value)
    assert direct.get_tuple(cfg("exhausted")).config == head.config  # type: ignore[union-attr]
    graph.invoke({"pending": "three"}, config)
    assert graph.get_state(config).values["steps"] == ["one", "three"]


def test_connection_resets_beyond_the_retry_budget_raise_the_package_error(
    savers: tuple[S3Saver, S3Saver], proxy: FaultProxy
) -> None:
    faulty, _ = savers
    proxy.inject("reset", method="GET", key_suffix="/head", times=6)
    with pytest.raises(S3RequestError, match="Cannot reach the S3 endpoint"):
        faulty.get_tuple(cfg("unreachable"))


def test_lost_answer_while_rolling_back_a_run(savers: tuple[S3Saver, S3Saver], proxy: FaultProxy) -> None:
    """delete_for_runs moves the head back with a conditional PUT; a lost answer to it must not turn
    into a conflict."""
    faulty, direct = savers
    graph = fence_graph(faulty)
    graph.invoke({"pending": "kept"}, {"configurable": {"thread_id": "rollback"}, "metadata": {"run_id": "run-1"}})
    kept = direct.get_tuple(cfg("rollback"))
    graph.invoke({"pending": "dropped"}, {"configurable": {"thread_id": "rollback"}, "metadata": {"run_id": "run-2"}})
    proxy.inject("lost", method="PUT", key_suffix="/head")
    faulty.delete_for_runs(["run-2"])
    assert direct.get_tuple(cfg("rollback")).config == kept.config  # type: ignore[union-attr]


# -- server behaviour: objects created at the same moment must all survive ----------------------------
CONCURRENT_ROUNDS = 150


def test_a_checkpoint_and_its_writes_stored_at_once_both_survive(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """With durability="async" (LangGraph's default) a checkpoint's put and the put_writes of the
    tasks running on it happen concurrently. Both objects must exist afterwards."""
    saver = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    lost: list[str] = []
    with ThreadPoolExecutor(2) as pool:
        for i in range(CONCURRENT_ROUNDS):
            thread = f"concurrent-{i}"
            parent = saver.put(cfg(thread), empty_checkpoint(), {"step": 0}, {})
            child = empty_checkpoint()
            child_config = cfg(thread, checkpoint_id=child["id"])
            put = pool.submit(saver.put, parent, child, {"step": 1}, {})
            writes = pool.submit(saver.put_writes, child_config, [("channel", i)], "task")
            put.result()
            writes.result()
            stored = saver.get_tuple(child_config)
            if stored is None:
                lost.append(f"{thread}: record")
            elif stored.pending_writes != [("task", "channel", i)]:
                lost.append(f"{thread}: writes")
    saver.close()
    assert not lost
