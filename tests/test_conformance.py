"""LangGraph's published conformance suite, for every capability, on both servers, async and sync.

The suite only calls the async methods and detects capabilities by which of them a class overrides.
``S3Saver``'s sync paths are therefore run through :class:`SyncPathSaver`, whose async methods call
the sync ones and nothing else. The counts are asserted, not only ``passed_all()``, so a saver that is
detected with fewer capabilities, or runs fewer tests, fails here. The default transport (``auto``: the direct
HTTP one while nothing watches the boto3 client, as here) and boto3 run the whole suite; the async saver's
direct transport is the native asyncio sender.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any
from uuid import uuid4

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.conformance import checkpointer_test, validate

from langgraph_s3_checkpoint import AsyncS3Saver, S3Saver
from langgraph_s3_checkpoint.local import LocalS3Server
from langgraph_s3_checkpoint.memory import MemoryBucket

# Tests per capability in langgraph-checkpoint-conformance 0.0.2 (base 58, extended 7 + 8 + 8).
EXPECTED_TESTS = {
    "put": 17,
    "put_writes": 10,
    "get_tuple": 10,
    "list": 16,
    "delete_thread": 5,
    "delete_for_runs": 7,
    "copy_thread": 8,
    "prune": 8,
}


class SyncPathSaver(BaseCheckpointSaver[str]):
    """Exposes an ``S3Saver``'s *sync* methods under the async names the suite calls."""

    def __init__(self, inner: S3Saver) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.inner.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for item in self.inner.list(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.inner.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self.inner.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.inner.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.inner.delete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.inner.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.inner.prune(thread_ids, strategy=strategy)

    def get_next_version(self, current: str | None, channel: None) -> str:
        return self.inner.get_next_version(current, channel)


def _saver_kwargs(server: LocalS3Server, bucket: str, transport: str) -> dict[str, Any]:
    prefix = f"conformance/{uuid4().hex[:12]}"
    return {"bucket": bucket, "prefix": prefix, "client": server.client(), "transport": transport}


async def assert_conformance(name: str, path: str, saver_kwargs: Callable[[], dict[str, Any]]) -> None:
    """Run the whole conformance suite on the async (``path="async"``) or the sync methods of savers
    made from ``saver_kwargs()`` and assert every capability is detected and passes with the expected counts."""

    @checkpointer_test(name=name)
    async def factory() -> AsyncIterator[BaseCheckpointSaver[Any]]:
        if path == "async":
            kwargs = saver_kwargs()
            saver: Any = AsyncS3Saver(**kwargs)
            # The async saver with the direct transport sends GET/PUT/LIST from the event loop
            # (_transport/asyncio_sender.py).
            direct = kwargs.get("transport") != "boto3" and not isinstance(kwargs["client"], MemoryBucket)
            assert (saver.bucket_io.native is not None) == direct
            await saver.setup()
            yield saver
            saver.close()
        else:
            inner = S3Saver(**saver_kwargs())
            inner.setup()
            yield SyncPathSaver(inner)
            inner.close()

    report = await validate(factory)
    failures = {name: result.failures for name, result in report.results.items() if result.failures}
    assert not failures, failures
    assert {name for name, r in report.results.items() if r.detected} == set(EXPECTED_TESTS)
    assert {name: r.tests_passed for name, r in report.results.items()} == EXPECTED_TESTS
    assert all(r.passed and r.tests_failed == 0 for r in report.results.values())
    assert report.passed_all()


@pytest.mark.parametrize("transport", ["boto3", "auto"])
@pytest.mark.parametrize("path", ["async", "sync"])
async def test_conformance_all_capabilities(s3_server: LocalS3Server, bucket: str, path: str, transport: str) -> None:
    await assert_conformance(
        f"S3Saver-{path}-{transport}-{s3_server.kind}", path, lambda: _saver_kwargs(s3_server, bucket, transport)
    )


@pytest.mark.memory
def test_sync_wrapper_uses_only_sync_methods() -> None:
    """The wrapper must not reach the inner saver's async methods (they would test the wrong path)."""
    import inspect

    source = inspect.getsource(SyncPathSaver)
    assert "self.inner.a" not in source
