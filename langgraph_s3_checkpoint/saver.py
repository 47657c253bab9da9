"""``S3Saver`` and ``AsyncS3Saver``: LangGraph's checkpointer API over the plans in :mod:`core`.

Both savers implement every sync and async method of ``BaseCheckpointSaver``; each method is one line
that hands a plan to the store's sync or async driver. They differ only in how they are opened
(``with`` / ``async with``), in ``setup`` being awaitable, and in ``AsyncS3Saver`` refusing blocking
calls made from inside a running event loop (where they would stall every other coroutine).
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import random
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from .codec import Codec
from .core import Core
from .errors import InvalidConfigError, SaverMisuseError
from .keys import Layout
from .memory import MemoryBucket
from .requests import Plan
from .shell import BodyCache, BucketIO
from .transport import DirectTransport

T = TypeVar("T")
SaverT = TypeVar("SaverT", bound="BaseS3Saver")

DEFAULT_INLINE_THRESHOLD = 4096
DEFAULT_COMPRESS_THRESHOLD = 4096
DEFAULT_CACHE_BYTES = 32 * 1024 * 1024

_INT_OPTIONS = (
    "inline_threshold",
    "compress_threshold",
    "max_concurrency",
    "max_attempts",
    "ttl_days",
    "cache_bytes",
)
EXPIRY_TAG = "langgraph-s3-ttl=1"
"""Object tag matched by the expiry rule that ``setup()`` installs when ``ttl_days`` is set."""
_BOOL_OPTIONS = ("create_bucket", "require_conditional_writes")


def make_client(
    *,
    endpoint_url: str | None = None,
    region_name: str | None = None,
    addressing_style: str | None = None,
    connect_timeout: float = 5.0,
    read_timeout: float = 60.0,
    max_attempts: int = 5,
    max_pool_connections: int = 64,
    **client_kwargs: Any,
) -> Any:
    """A boto3 S3 client with bounded timeouts and retries (standard mode: 5xx, throttling, resets).

    Credentials come from the standard boto3 chain; ``AWS_ENDPOINT_URL`` is honoured by boto3 itself.
    Path-style addressing is the default when an endpoint is given, as local servers expect.
    """
    import boto3
    from botocore.config import Config

    if addressing_style is None and endpoint_url:
        addressing_style = "path"
    config = Config(
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        retries={"mode": "standard", "max_attempts": max_attempts},
        max_pool_connections=max_pool_connections,
        s3={"addressing_style": addressing_style} if addressing_style else None,
    )
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint_url, region_name=region_name, config=config, **client_kwargs
    )


def parse_url(url: str) -> tuple[str, str, dict[str, Any]]:
    """Split ``s3://bucket/prefix?option=value`` into bucket, prefix and typed options."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise InvalidConfigError(f"expected a URL like 's3://bucket/prefix', got {url!r}")
    options: dict[str, Any] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in _INT_OPTIONS:
            try:
                options[name] = int(value)
            except ValueError:
                raise InvalidConfigError(f"URL option {name}={value!r} must be an integer") from None
        elif name in _BOOL_OPTIONS:
            options[name] = value.lower() in ("1", "true", "yes", "on")
        elif name == "region":
            options["region_name"] = value
        else:
            options[name] = value
    return parts.netloc, parts.path.strip("/"), options


class BaseS3Saver(BaseCheckpointSaver[str]):
    """Shared construction and the LangGraph API; see :class:`S3Saver` and :class:`AsyncS3Saver`."""

    def __init__(
        self,
        *,
        bucket: str,
        prefix: str = "",
        client: Any = None,
        serde: SerializerProtocol | None = None,
        inline_threshold: int = DEFAULT_INLINE_THRESHOLD,
        compress_threshold: int | None = DEFAULT_COMPRESS_THRESHOLD,
        max_concurrency: int = 32,
        create_bucket: bool = False,
        require_conditional_writes: bool = True,
        server_side_encryption: str | None = None,
        sse_kms_key_id: str | None = None,
        sse_customer_key: str | None = None,
        ttl_days: int | None = None,
        transport: str = "boto3",
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        **client_options: Any,
    ) -> None:
        super().__init__(serde=serde)
        if not bucket:
            raise InvalidConfigError("bucket is required")
        if cache_bytes < 0:
            raise InvalidConfigError(f"cache_bytes must be >= 0 (0 disables the cache), got {cache_bytes!r}")
        if transport not in ("boto3", "direct"):
            raise InvalidConfigError(f"transport must be 'boto3' or 'direct', got {transport!r}")
        if ttl_days is not None and ttl_days < 1:
            raise InvalidConfigError(f"ttl_days must be a whole number of days >= 1, got {ttl_days!r}")
        if client is None:
            client_options.setdefault("max_pool_connections", max(64, max_concurrency * 2))
            client = make_client(**client_options)
        elif client_options:
            raise InvalidConfigError(
                f"client options {sorted(client_options)} only apply when the saver creates the client"
            )
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.client = client
        self.create_bucket = create_bucket
        self.require_conditional_writes = require_conditional_writes
        put_args: dict[str, Any] = {}
        get_args: dict[str, Any] = {}
        if server_side_encryption:
            put_args["ServerSideEncryption"] = server_side_encryption
        if sse_kms_key_id:
            put_args["SSEKMSKeyId"] = sse_kms_key_id
        copy_args: dict[str, Any] = {}
        if sse_customer_key:
            customer = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": sse_customer_key}
            put_args.update(customer)
            get_args.update(customer)
            copy_args = {"CopySourceSSECustomerAlgorithm": "AES256", "CopySourceSSECustomerKey": sse_customer_key}
        self._store = BucketIO(
            client,
            bucket,
            max_concurrency=max_concurrency,
            put_args=put_args,
            get_args=get_args,
            copy_args=copy_args,
            expiry_tag=EXPIRY_TAG if ttl_days else None,
            direct=DirectTransport(
                client,
                bucket,
                put_args=put_args,
                get_args=get_args,
                expiry_tag=EXPIRY_TAG if ttl_days else None,
                max_connections=max_concurrency * 2,
            )
            if transport == "direct" and not isinstance(client, MemoryBucket)
            else None,
            cache=BodyCache(cache_bytes) if cache_bytes else None,
            backend=client if isinstance(client, MemoryBucket) else None,
        )
        self._core = Core(
            layout=Layout(self.prefix),
            codec=Codec(self.serde, compress_threshold=compress_threshold),
            inline_threshold=inline_threshold,
            ttl=timedelta(days=ttl_days) if ttl_days else None,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(bucket={self.bucket!r}, prefix={self.prefix!r})"

    @classmethod
    def _from_url(cls: type[SaverT], url: str, **kwargs: Any) -> SaverT:
        bucket, prefix, options = parse_url(url)
        options.update(kwargs)
        return cls(bucket=bucket, prefix=prefix, **options)

    def close(self) -> None:
        """Release the worker threads. The saver must not be used afterwards."""
        self._store.close()

    def with_allowlist(self, extra_allowlist: Any) -> BaseS3Saver:
        clone = super().with_allowlist(extra_allowlist)
        if clone is not self:
            assert isinstance(clone, BaseS3Saver)
            clone._core = dataclasses.replace(
                self._core, codec=dataclasses.replace(self._core.codec, serde=clone.serde)
            )
        return clone

    def _setup_plan(self) -> Plan[None]:
        return self._core.setup(
            create_bucket=self.create_bucket,
            require_conditional_writes=self.require_conditional_writes,
            bucket=self.bucket,
            token=uuid.uuid4().hex,
        )

    # -- drivers (AsyncS3Saver guards the blocking ones) ------------------------------------------
    def _run(self, plan: Plan[T]) -> T:
        return self._store.run(plan)

    def _iterate(self, plan: Plan[Any]) -> Iterator[Any]:
        return self._store.iterate(plan)

    # -- sync API -----------------------------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._run(self._core.get_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return self._iterate(self._core.list_checkpoints(config, filter=filter, before=before, limit=limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._run(self._core.put(config, checkpoint, metadata, new_versions))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._run(self._core.put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._run(self._core.delete_thread(str(thread_id)))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._run(self._core.delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._run(self._core.copy_thread(str(source_thread_id), str(target_thread_id)))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._run(self._core.prune(thread_ids, strategy))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self._run(self._core.delta_history(config, channels))

    def expire_threads(self, older_than: timedelta, *, dry_run: bool = False) -> builtins.list[str]:
        """Delete every thread not updated for ``older_than`` (its newest head is older); returns their ids.

        A sweep for servers without lifecycle rules, and the safe way to apply a TTL: only whole idle
        threads are removed, never parts of a live one. ``dry_run`` only reports.
        """
        cutoff = datetime.now(timezone.utc) - older_than
        return builtins.list(self._iterate(self._core.expire_threads(cutoff, dry_run=dry_run)))

    async def aexpire_threads(self, older_than: timedelta, *, dry_run: bool = False) -> builtins.list[str]:
        cutoff = datetime.now(timezone.utc) - older_than
        return [t async for t in self._store.aiterate(self._core.expire_threads(cutoff, dry_run=dry_run))]

    # -- async API ----------------------------------------------------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._store.arun(self._core.get_tuple(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        async for item in self._store.aiterate(
            self._core.list_checkpoints(config, filter=filter, before=before, limit=limit)
        ):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._store.arun(self._core.put(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await self._store.arun(self._core.put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._store.arun(self._core.delete_thread(str(thread_id)))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._store.arun(self._core.delete_for_runs(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._store.arun(self._core.copy_thread(str(source_thread_id), str(target_thread_id)))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._store.arun(self._core.prune(thread_ids, strategy))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await self._store.arun(self._core.delta_history(config, channels))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """``{counter:032}.{random:016}``: ordered like the built-in savers, unique across writers."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(str(current).split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"


class S3Saver(BaseS3Saver):
    """Checkpoint LangGraph threads to an S3 bucket.

    ```python
    with S3Saver.from_conn_string("s3://agent-checkpoints/prod") as saver:
        saver.setup()
        graph = builder.compile(checkpointer=saver)
    ```
    """

    @classmethod
    @contextmanager
    def from_conn_string(cls, url: str, **kwargs: Any) -> Iterator[S3Saver]:
        """Open a saver for ``s3://bucket/prefix?options``; keyword arguments override URL options and
        reach the boto3 client when they are client settings (``endpoint_url``, ``region_name`` ...)."""
        saver = cls._from_url(url, **kwargs)
        try:
            yield saver
        finally:
            saver.close()

    def setup(self) -> None:
        """Check the bucket (creating it if ``create_bucket=True``) and that the server enforces
        conditional writes; with ``ttl_days``, install the bucket lifecycle rule that expires the saver's
        tagged objects under its prefix. Idempotent."""
        self._run(self._setup_plan())


class AsyncS3Saver(BaseS3Saver):
    """The asyncio twin of :class:`S3Saver` (same storage, same plans).

    Requests run on the saver's thread pool, so many coroutines can checkpoint concurrently. Its
    blocking methods work from threads without a running event loop and raise
    :class:`~langgraph_s3_checkpoint.errors.SaverMisuseError` on the loop's own thread.
    """

    @classmethod
    @asynccontextmanager
    async def from_conn_string(cls, url: str, **kwargs: Any) -> AsyncIterator[AsyncS3Saver]:
        saver = cls._from_url(url, **kwargs)
        try:
            yield saver
        finally:
            saver.close()

    async def setup(self) -> None:
        await self._store.arun(self._setup_plan())

    def _guard(self, what: str) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        raise SaverMisuseError(
            f"AsyncS3Saver.{what}() blocks and was called from a running event loop's thread. "
            f"Use the async method (await saver.a{what}(...), graph.ainvoke/astream), or call it from "
            "another thread, or use S3Saver."
        )

    def _run(self, plan: Plan[T]) -> T:
        self._guard(getattr(plan, "__name__", "method"))
        return super()._run(plan)

    def _iterate(self, plan: Plan[Any]) -> Iterator[Any]:
        self._guard("list")
        return super()._iterate(plan)


__all__ = ["AsyncS3Saver", "BaseS3Saver", "S3Saver", "make_client", "parse_url"]
