"""TTL sweep: whole idle threads are removed, live ones are untouched; the cost is per thread, not per object."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from helpers import RequestCounter
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_s3_checkpoint import AsyncS3Saver, S3Saver
from langgraph_s3_checkpoint.local import LocalS3Server


def _history(saver: S3Saver, thread_id: str, steps: int, ns: str = "") -> None:
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
    for step in range(steps):
        config = saver.put(config, empty_checkpoint(), {"step": step}, {})
        saver.put_writes(config, [("ch", step)], f"task-{step}")


def test_expire_threads(
    s3_server: LocalS3Server, bucket: str, prefix: str, count_requests: Callable[[Any], RequestCounter]
) -> None:
    client = s3_server.client()
    saver = S3Saver(bucket=bucket, prefix=prefix, client=client)
    _history(saver, "old/1", 20)
    _history(saver, "old/1", 3, ns="sub:1")
    _history(saver, "old 2", 5)

    # Nothing is older than a day: nothing goes.
    assert saver.expire_threads(timedelta(days=1)) == []
    counter = count_requests(client)
    # A cutoff in the future makes every thread idle; a dry run only reports.
    assert sorted(saver.expire_threads(timedelta(seconds=-60), dry_run=True)) == ["old 2", "old/1"]
    # index LIST, then per thread: namespaces LIST + one head LIST per namespace (no history listing)
    assert counter.snapshot() == {"ListObjectsV2": 1 + (1 + 2) + (1 + 1)}
    assert saver.get_tuple({"configurable": {"thread_id": "old/1"}}) is not None

    assert sorted(saver.expire_threads(timedelta(seconds=-60))) == ["old 2", "old/1"]
    assert saver.get_tuple({"configurable": {"thread_id": "old/1"}}) is None
    assert list(saver.list(None)) == []
    assert client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/threads/").get("KeyCount") == 0
    saver.close()


async def test_async_expire_threads(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    sync = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    _history(sync, "t", 2)
    saver = AsyncS3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    assert await saver.aexpire_threads(timedelta(days=1)) == []
    assert await saver.aexpire_threads(timedelta(seconds=-60)) == ["t"]
    assert await saver.aget_tuple({"configurable": {"thread_id": "t"}}) is None
    saver.close()
    sync.close()
