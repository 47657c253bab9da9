"""``S3Saver`` and ``AsyncS3Saver``: LangGraph's checkpointer API over the plans in :mod:`._protocol.checkpoint_plans`.

Both savers implement every sync and async method of ``BaseCheckpointSaver``; each method hands a plan
to the I/O shell's sync or async driver (:class:`._transport.bucket_io.BucketIO`). They differ only in how they are
opened (``with`` / ``async with``), in ``setup`` being awaitable, and in ``AsyncS3Saver`` refusing blocking
calls made from inside a running event loop (where they would stall every other coroutine).
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import logging
import random
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

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

from ._protocol.checkpoint_plans import CheckpointPlans
from ._protocol.codec import Codec
from ._protocol.fencing import DEFAULT_MEMORY_BYTES, Recall
from ._protocol.keys import EXPIRY_TAG, Layout
from ._protocol.repair import RepairReport, SkippingCodec, repair_plan
from ._protocol.requests import Plan
from ._transport.bucket_io import BucketIO, ClosesAtBlockEnd, ReadCache
from ._transport.connect import open_bucket
from .errors import CorruptObjectError, SaverMisuseError
from .options import (
    DEFAULT_COMPRESS_THRESHOLD,
    DEFAULT_INLINE_THRESHOLD,
    DEFAULT_OPERATION_TIMEOUT,
    DEFAULT_READ_CACHE_BYTES,
    SAVER,
    check_serde,
    check_whole_numbers,
    parse_url,
)

T = TypeVar("T")
SaverT = TypeVar("SaverT", bound="BaseS3Saver")

logger = logging.getLogger("langgraph_s3_checkpoint")

_MAINTENANCE = frozenset(
    {"delete_thread", "delete_for_runs", "copy_thread", "prune", "expire_threads", "repair_thread"}
)
"""Methods that may legitimately take long on a large thread: each request is bounded, the call is not."""


class BaseS3Saver(ClosesAtBlockEnd, BaseCheckpointSaver[str]):
    """Shared construction and the LangGraph API; see :class:`S3Saver` and :class:`AsyncS3Saver`.

    Every option can also be given in the location URL of ``from_conn_string`` (docs/operations.md, "The location
    URL", says what each does and why its default).

    Args:
        bucket: The bucket's name.
        prefix: The key prefix every object of this saver lives under (``""``: the bucket's root).
        client: A boto3 S3 client (or a :class:`~.memory.MemoryBucket`); by default one made by :func:`make_client`
            from ``client_options`` and the timeouts.
        serde: LangGraph's serializer for every value and for metadata (``EncryptedSerializer``, ``with_allowlist``
            apply); by default LangGraph's.
        inline_threshold: Serialized channel values up to this many bytes live inside the checkpoint record;
            larger ones are stored once per version, and a larger list that only grew as what was appended to
            its last stored version (docs/design.md, "Large lists as what was appended").
        compress_threshold: Objects of at least this many bytes are zlib-compressed when that makes them
            smaller; ``None``: never.
        max_concurrency: Requests in parallel on the saver's thread pool.
        create_bucket: Let ``setup()`` create a missing bucket (the one way to have it created).
        require_conditional_writes: Refuse a server that does not enforce ``If-None-Match``/``If-Match``;
            ``False`` only with one writer per thread.
        server_side_encryption: ``"AES256"``, ``"aws:kms"`` or ``"aws:kms:dsse"`` on every PUT and COPY.
        sse_kms_key_id: The KMS key for ``aws:kms``.
        sse_customer_key: An SSE-C key of 32 bytes (excludes ``server_side_encryption``).
        ttl_days: Tag every object for expiry; ``setup()`` installs the lifecycle rule.
        transport: ``"auto"``, ``"boto3"`` or ``"direct"``: who sends GET, PUT and LIST.
        read_cache_bytes: Memory for bodies of listed records and writes, reused while their ETag is unchanged,
            and of large values (which never change).
        memory_bytes: Memory for the heads this saver read or committed, so a step continuing one sends no GET.
        extra_headers: Headers sent, signed, with every request (a mapping, or ``"Name:value,..."``).
        connect_timeout: Seconds to open a connection (only for the client the saver makes).
        read_timeout: Seconds of silence tolerated while waiting for a reply (only for the client the saver makes).
        max_attempts: Attempts per request for transient failures (only for the client the saver makes).
        operation_timeout: Deadline in seconds of one call (for ``list``, of each item it yields); ``None``: none.
            ThreadEdits calls (deletes, copies, prune, expiry, repair) are bounded per request only.
        **client_options: Settings of the client the saver makes: ``endpoint_url``, ``region_name``,
            ``addressing_style``, credentials, the checksum settings.

    Raises:
        InvalidConfigError: An option is malformed, out of range or unknown, or client options were given
            beside ``client=``; the message names it. Nothing is sent before these checks.

    Errors every call may raise, besides those its docstring names (all are :class:`S3CheckpointError`):
    :class:`S3RequestError` (the endpoint is unreachable, silent or failing after retries, or the call passed
    ``operation_timeout``; a write that failed so may still have been applied; its subclasses
    :class:`NotS3EndpointError`, :class:`WrongRegionError` and :class:`ConditionalRequestConflictError` say why),
    :class:`S3AccessError` (credentials refused or missing), :class:`BucketNotFoundError`,
    :class:`ConditionalWritesUnsupportedError` (at the first write, when the server does not enforce conditional
    writes) and :class:`SaverMisuseError` (a call on a closed saver; :class:`AsyncS3Saver`: a blocking call on the
    event loop's thread).
    """

    _native_async = False
    """Whether the async driver sends direct-transport requests from the event loop (:class:`AsyncS3Saver`)."""

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
        transport: str = "auto",
        read_cache_bytes: int = DEFAULT_READ_CACHE_BYTES,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
        extra_headers: Mapping[str, str] | str | None = None,
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
        max_attempts: int | None = None,
        operation_timeout: float | None = DEFAULT_OPERATION_TIMEOUT,
        **client_options: Any,
    ) -> None:
        check_serde(serde)
        super().__init__(serde=serde)
        check_whole_numbers(
            inline_threshold=inline_threshold,
            read_cache_bytes=read_cache_bytes,
            memory_bytes=memory_bytes,
            compress_threshold=compress_threshold,
            ttl_days=ttl_days,
        )
        opened = open_bucket(
            "saver",
            bucket=bucket,
            prefix=prefix,
            client=client,
            client_options={
                **client_options,
                "connect_timeout": connect_timeout,
                "read_timeout": read_timeout,
                "max_attempts": max_attempts,
            },
            max_concurrency=max_concurrency,
            create_bucket=create_bucket,
            require_conditional_writes=require_conditional_writes,
            server_side_encryption=server_side_encryption,
            sse_kms_key_id=sse_kms_key_id,
            sse_customer_key=sse_customer_key,
            transport=transport,
            extra_headers=extra_headers,
            operation_timeout=operation_timeout,
            expiry_tag=EXPIRY_TAG if ttl_days else None,
            cache=ReadCache(read_cache_bytes) if read_cache_bytes else None,
            native_async=self._native_async,
        )
        self.bucket = bucket
        self.prefix = opened.prefix
        self.client = opened.client
        self.create_bucket = create_bucket
        self.require_conditional_writes = require_conditional_writes
        self.operation_timeout = opened.deadline
        self._bucket_io = opened.bucket_io
        self._plans = CheckpointPlans(
            layout=Layout(self.prefix),
            codec=Codec(self.serde, compress_threshold=compress_threshold),
            inline_threshold=inline_threshold,
            ttl=timedelta(days=ttl_days) if ttl_days else None,
            recall=Recall(memory_bytes, track_blob_ages=bool(ttl_days)),
        )

    @property
    def plans(self) -> CheckpointPlans:
        """The saver's plans, with its layout, codec and recall: the handle for tools built on the saver
        (gc, repair, the CLI), which run their own plans through :attr:`bucket_io`."""
        return self._plans

    @property
    def bucket_io(self) -> BucketIO:
        """The I/O shell that runs plans for this saver (its client, transport, read cache, timeouts)."""
        return self._bucket_io

    def __repr__(self) -> str:
        return f"{type(self).__name__}(bucket={self.bucket!r}, prefix={self.prefix!r})"

    @classmethod
    def _from_url(cls: type[SaverT], url: str, **kwargs: Any) -> SaverT:
        bucket, prefix, options = parse_url(url, used_by=SAVER)
        options.update(kwargs)
        return cls(bucket=bucket, prefix=prefix, **options)

    def close(self) -> None:
        """Release the worker threads and connections. Idempotent.

        A closed saver refuses every further call with :class:`SaverMisuseError` (naming the method), rather
        than silently re-opening a thread pool that nobody would close; ``from_conn_string``'s ``with`` block
        closes the saver at its end.
        """
        self._bucket_io.close()

    def with_allowlist(self, extra_allowlist: Any) -> BaseS3Saver:
        """A saver like this one whose serializer also allows ``extra_allowlist`` (LangGraph's ``with_allowlist``).

        Args:
            extra_allowlist: The ``(module, ..., name)`` paths msgpack may also load.

        Returns:
            A saver sharing this one's bucket, I/O and recall, or this saver when its serializer is unchanged (one
            without a msgpack allow-list, or that already allows them).
        """
        clone = super().with_allowlist(extra_allowlist)
        if clone is not self:
            assert isinstance(clone, BaseS3Saver)
            clone._plans = dataclasses.replace(
                self._plans, codec=dataclasses.replace(self._plans.codec, serde=clone.serde)
            )
        return clone

    def _setup_plan(self) -> Plan[None]:
        return self._plans.setup(create_bucket=self.create_bucket, bucket=self.bucket)

    # -- drivers (AsyncS3Saver guards the blocking ones) ------------------------------------------
    # ``what`` is the public method the user called, for the messages of SaverMisuseError; maintenance
    # methods (which may run long on a large thread) are not held to ``operation_timeout``.
    def _run(self, what: str, plan: Plan[T]) -> T:
        self._bucket_io.check_open(what)
        return self._bucket_io.run(plan, bounded=what not in _MAINTENANCE)

    def _iterate(self, what: str, plan: Plan[Any]) -> Iterator[Any]:
        self._bucket_io.check_open(what)
        return self._bucket_io.iterate(plan, bounded=what not in _MAINTENANCE)

    async def _arun(self, what: str, plan: Plan[T]) -> T:
        self._bucket_io.check_open(what)
        return await self._bucket_io.arun(plan, bounded=what.removeprefix("a") not in _MAINTENANCE)

    def _aiterate(self, what: str, plan: Plan[Any]) -> AsyncIterator[Any]:
        self._bucket_io.check_open(what)
        return self._bucket_io.aiterate(plan, bounded=what.removeprefix("a") not in _MAINTENANCE)

    # -- sync API -----------------------------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Read a checkpoint with its pending writes: the latest of the thread, or the one the config names.

        Only committed checkpoints are returned. Reading the latest costs a GET of the head, a LIST of the
        checkpoint's folder and one parallel round of GETs for its writes and large values, whatever the
        history's length; a record a crash left missing is restored from the head.

        Args:
            config: ``{"configurable": {"thread_id": ..., "checkpoint_ns": ..., "checkpoint_id": ...}}``;
                without ``checkpoint_id``, the latest checkpoint of the namespace.

        Returns:
            The checkpoint tuple, or ``None`` if the thread (or that checkpoint) has none.

        Raises:
            InvalidConfigError: ``config`` has no ``thread_id``, or a namespace or id that is not a string.
            DamagedHeadError: The namespace's head is unreadable (see :meth:`repair_thread`).
            DecryptionError: An object cannot be decrypted with the serializer's key.
            CorruptObjectError: The record, its writes or a large value it references is damaged or missing.
            NewerFormatError: An object was written by a newer release of this package.
            S3CheckpointError: an error every call may raise (see :class:`BaseS3Saver`).
        """
        return self._run("get_tuple", self._plans.get_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
        skip_damaged: bool = False,
        on_damaged: Callable[[CorruptObjectError], None] | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Stream committed checkpoints, newest first, as LangGraph's ``list``.

        ``list(config)`` without ``checkpoint_ns`` lists every namespace of the thread, newest first across them;
        ``list(None)`` walks every thread under the prefix (threads in key order). Memory stays flat in history
        length, and ``limit=k`` reads k records (one LIST, one parallel round of GETs), not the whole history.

        Args:
            config: The thread (and optionally namespace, or one checkpoint id) to list; ``None`` for every thread.
            filter: Metadata keys and values a checkpoint must match.
            before: Only checkpoints older than this config's ``checkpoint_id``.
            limit: At most this many checkpoints.
            skip_damaged: Leave out records (and pending-writes objects) that cannot be decoded and go on with
                older history instead of raising. Undecryptable objects are never skipped (a missing or wrong
                key is a configuration error, not damage), and a damaged head still raises.
            on_damaged: Called with each object ``skip_damaged`` leaves out (default: a warning on the
                ``langgraph_s3_checkpoint`` logger).

        Yields:
            Checkpoint tuples with their pending writes.

        Raises:
            InvalidConfigError: ``config`` has no ``thread_id``, or a namespace or id that is not a string.
            DamagedHeadError: A namespace's head is unreadable (see :meth:`repair_thread`).
            DecryptionError: An object cannot be decrypted with the serializer's key.
            CorruptObjectError: A record or writes object is damaged (unless ``skip_damaged``).
            NewerFormatError: An object was written by a newer release of this package.
            S3CheckpointError: an error every call may raise (see :class:`BaseS3Saver`).
        """
        core = self._listing_plans(skip_damaged, on_damaged)
        return self._iterate("list", core.list(config, filter=filter, before=before, limit=limit))

    def _listing_plans(
        self, skip_damaged: bool, on_damaged: Callable[[CorruptObjectError], None] | None
    ) -> CheckpointPlans:
        if not skip_damaged:
            return self._plans
        report = on_damaged if on_damaged is not None else _warn_damaged
        return dataclasses.replace(
            self._plans, codec=SkippingCodec(self._plans.codec.serde, self._plans.codec.compress_threshold, report)
        )

    def repair_thread(self, thread_id: str, *, dry_run: bool = False) -> RepairReport:
        """Rebuild the damaged or missing heads of a thread's namespaces from their newest committed record.

        A head is the commit pointer of a namespace; if it is unreadable (or was deleted) the thread reads
        as empty although its history is stored. For each namespace this reads the head and, when it is
        damaged or missing while records exist, chooses the record to restore (see
        :mod:`langgraph_s3_checkpoint._protocol.repair` for the rule and why) and writes it as the head with a
        conditional PUT, so a writer that commits meanwhile wins. Nothing is deleted, and nothing a crash
        left uncommitted is committed (a first put that died before its head, the records of a
        ``delete_thread`` that died part-way, a record whose large values are gone). A thread id too long to be a
        key segment also gets its ``name`` object written again if it is missing or holds another id
        (``RepairReport.name_restored``).

        Args:
            thread_id: The thread to repair.
            dry_run: Only report what would be written.

        Returns:
            What it found and did per namespace.

        Raises:
            NewerFormatError: An object was written by a newer release: repair stops rather than move a head
                back past that release's commits.
            S3CheckpointError: an error every call may raise (see :class:`BaseS3Saver`).
        """
        report: RepairReport = self._run("repair_thread", repair_plan(self._plans, str(thread_id), dry_run=dry_run))
        return report

    async def arepair_thread(self, thread_id: str, *, dry_run: bool = False) -> RepairReport:
        """:meth:`repair_thread`, awaited: same arguments, result and errors."""
        report: RepairReport = await self._arun(
            "arepair_thread", repair_plan(self._plans, str(thread_id), dry_run=dry_run)
        )
        return report

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Commit a checkpoint: large changed channel values first, then the record and the head in one round trip.

        The head's conditional PUT is the commit: a put that continues the checkpoint its caller read as the
        latest commits only if no other writer moved the thread since (fencing, docs/safety.md); a put from a
        checkpoint read by id (``update_state``, a replay) forks and never conflicts. Nothing is committed when it
        raises, except after an :class:`S3RequestError`, whose write may have landed (``get_tuple`` shows it).

        Args:
            config: The config of the parent checkpoint (``thread_id``, ``checkpoint_ns``, ``checkpoint_id``;
                no ``checkpoint_id`` for a thread's first checkpoint).
            checkpoint: The checkpoint to store.
            metadata: Its metadata (``source``, ``step``, ``run_id`` ...).
            new_versions: The channels whose values changed since the parent, with their new versions.

        Returns:
            The config of the stored checkpoint.

        Raises:
            CheckpointConflictError: Another writer committed to the namespace since the caller read it.
            ParentNotCommittedError: The parent is not a committed checkpoint of the thread (a
                :class:`CheckpointConflictError`; no other writer is blamed).
            ClockSkewError: The checkpoint's id is older than its parent's or the head's.
            SerializationError: A value cannot be serialized.
            InvalidConfigError: ``config`` has no ``thread_id``, the checkpoint's id is not a non-empty string, an
                id is not valid Unicode, or a key would pass S3's 1,024 bytes.
            DamagedHeadError: The namespace's head, read to settle the put, is unreadable.
            S3CheckpointError: an error every call may raise (see :class:`BaseS3Saver`).
        """
        return self._run("put", self._plans.put(config, checkpoint, metadata, new_versions))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Store a task's pending writes on a checkpoint, merged with the task's earlier writes there.

        One object per task: created with ``If-None-Match: *``, merged with ``If-Match`` by later calls, so
        concurrent calls never drop each other's writes. The first write per (task, index) wins and special
        channels replace, as in ``InMemorySaver``.

        Args:
            config: The config of the checkpoint the writes belong to (with its ``checkpoint_id``).
            writes: ``(channel, value)`` pairs.
            task_id: The task that made them.
            task_path: The task's path, by which readers order a checkpoint's writes.

        Raises:
            InvalidConfigError: ``config`` has no ``thread_id`` or ``checkpoint_id``, an id is not valid
                Unicode, or a key would pass S3's 1,024 bytes.
            SerializationError: A value cannot be serialized.
            CheckpointConflictError: The task's writes object kept changing under every merge attempt.
            CorruptObjectError: The task's writes object there is damaged and cannot be merged.
            S3CheckpointError: an error every call may raise (see :class:`BaseS3Saver`).
        """
        self._run("put_writes", self._plans.put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of a thread, in every namespace.

        The heads go first, so the thread reads as deleted from then on; a delete that dies part-way leaves a
        ``deleting`` marker beside what remains: run it again (or let ``gc`` collect the rest).

        Args:
            thread_id: The thread to delete (nothing happens if it has no objects).

        Raises:
            S3CheckpointError: an error every call may raise (see :class:`BaseS3Saver`).
        """
        self._run("delete_thread", self._plans.delete_thread(str(thread_id)))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Roll back runs: remove their checkpoints and writes, moving each head back if a run owned it.

        Large values only the removed checkpoints referenced are left for ``gc``.

        Args:
            run_ids: The runs to remove (a sequence: one string is refused).

        Raises:
            InvalidArgumentTypeError: ``run_ids`` is a single string.
            CheckpointConflictError: A run kept committing (or its writes kept changing) while it was removed.
            CorruptObjectError: A head or record the rollback must read is damaged, or the ``name`` object of a
                long thread id or namespace a run wrote to is missing or damaged (that namespace was not rolled
                back; the others were).
            S3CheckpointError: an error every call may raise (see :class:`BaseS3Saver`).
        """
        self._run("delete_for_runs", self._plans.delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's committed history, every namespace, to a new thread id.

        The target's heads are written last, create-only: until they land the target reads as empty, never
        half-copied. A copy that dies leaves the target marked ``copying``: run it again.

        Args:
            source_thread_id: The thread to copy (nothing happens if nothing is stored under it).
            target_thread_id: The new thread; it must not have checkpoints.

        Raises:
            TargetThreadExistsError: The target has checkpoints (or another writer gave it some meanwhile).
            CheckpointConflictError: Large values the source's heads reference kept being deleted while it copied
                (a concurrent prune or rollback); nothing was committed to the target.
            DamagedHeadError: A head of the source is unreadable.
            S3CheckpointError: an error every call may raise (see :class:`BaseS3Saver`).
        """
        self._run("copy_thread", self._plans.copy_thread(str(source_thread_id), str(target_thread_id)))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Shrink threads' history, as LangGraph's ``prune``.

        ``"keep_latest"`` keeps the newest checkpoint of each namespace and, for ``DeltaChannel`` values it does
        not store, the ancestors back to the one that does; ``"delete"`` deletes the threads.

        Args:
            thread_ids: The threads to prune (a sequence: one string is refused).
            strategy: ``"keep_latest"`` or ``"delete"``.

        Raises:
            InvalidArgumentTypeError: ``thread_ids`` is a single string.
            InvalidConfigError: ``strategy`` is neither of the two.
            CorruptObjectError: A record prune must read to keep a ``DeltaChannel``'s ancestors is damaged.
            S3CheckpointError: an error every call may raise (see :class:`BaseS3Saver`).
        """
        self._run("prune", self._plans.prune(thread_ids, strategy))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Each ``DeltaChannel``'s writes since its last stored value, along the checkpoint's own line of history.

        Args:
            config: The checkpoint whose history to read.
            channels: The channels to read.

        Returns:
            Per channel, its seed value and the writes after it, oldest first.

        Raises:
            InvalidConfigError: ``config`` has no ``thread_id``.
            CorruptObjectError: A record or writes object on the way is damaged, or a large value it references
                is missing (:class:`DecryptionError` without the serializer's key).
            S3CheckpointError: an error every call may raise (see :class:`BaseS3Saver`).
        """
        return self._run("get_delta_channel_history", self._plans.get_delta_channel_history(config, channels))

    def expire_threads(self, older_than: timedelta, *, dry_run: bool = False) -> builtins.list[str]:
        """Delete every thread not updated for ``older_than`` (its newest head is older).

        A sweep for servers without lifecycle rules, and the safe way to apply a TTL: only whole idle
        threads are removed, never parts of a live one. Age is judged by the server's clock.

        Args:
            older_than: How long a thread must have been idle.
            dry_run: Only name the threads.

        Returns:
            The ids of the threads deleted (or, with ``dry_run``, that would be).

        Raises:
            S3CheckpointError: an error every call may raise (see :class:`BaseS3Saver`).
        """
        plan = self._plans.expire_threads(older_than, dry_run=dry_run)
        return builtins.list(self._iterate("expire_threads", plan))

    async def aexpire_threads(self, older_than: timedelta, *, dry_run: bool = False) -> builtins.list[str]:
        """:meth:`expire_threads`, awaited: same arguments, result and errors."""
        plan = self._plans.expire_threads(older_than, dry_run=dry_run)
        return [t async for t in self._aiterate("aexpire_threads", plan)]

    # -- async API ----------------------------------------------------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`get_tuple`, awaited: same arguments, result and errors."""
        return await self._arun("aget_tuple", self._plans.get_tuple(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
        skip_damaged: bool = False,
        on_damaged: Callable[[CorruptObjectError], None] | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list` as an async iterator: same arguments, items and errors."""
        core = self._listing_plans(skip_damaged, on_damaged)
        async for item in self._aiterate("alist", core.list(config, filter=filter, before=before, limit=limit)):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`put`, awaited: same arguments, result and errors."""
        return await self._arun("aput", self._plans.put(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """:meth:`put_writes`, awaited: same arguments and errors."""
        await self._arun("aput_writes", self._plans.put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread`, awaited: same arguments, result and errors."""
        await self._arun("adelete_thread", self._plans.delete_thread(str(thread_id)))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`delete_for_runs`, awaited: same arguments, result and errors."""
        await self._arun("adelete_for_runs", self._plans.delete_for_runs(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`copy_thread`, awaited: same arguments, result and errors."""
        await self._arun("acopy_thread", self._plans.copy_thread(str(source_thread_id), str(target_thread_id)))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`prune`, awaited: same arguments, result and errors."""
        await self._arun("aprune", self._plans.prune(thread_ids, strategy))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """:meth:`get_delta_channel_history`, awaited: same arguments, result and errors."""
        return await self._arun("aget_delta_channel_history", self._plans.get_delta_channel_history(config, channels))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The next version of a channel: ``{counter:032}.{random:016}``, ordered like the built-in savers'
        and unique across writers.

        Args:
            current: The channel's current version (``None`` for a new channel).
            channel: Unused (LangGraph's signature).

        Returns:
            A version that sorts after ``current``.
        """
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(str(current).split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"


def _warn_damaged(error: CorruptObjectError) -> None:
    logger.warning("skipped a damaged object: %s", error)


class S3Saver(BaseS3Saver):
    """Checkpoint LangGraph threads to an S3 bucket.

    ```python
    with S3Saver.from_conn_string("s3://agent-checkpoints/prod") as saver:
        saver.setup()
        graph = builder.compile(checkpointer=saver)
    ```
    """

    @classmethod
    def from_conn_string(cls, url: str, **kwargs: Any) -> S3Saver:
        """A saver for a location URL. Use it in ``with`` (or ``async with``), as LangGraph's savers are used, which
        closes it at the block's end; or as it is, and call :meth:`close` when done.

        Args:
            url: ``s3://bucket/prefix?option=value&...`` (the options of :class:`BaseS3Saver`).
            **kwargs: Options that override the URL's; client settings (``endpoint_url``, ``region_name`` ...)
                reach the boto3 client.

        Returns:
            The saver (its own context manager: ``with`` hands back the saver itself).

        Raises:
            InvalidConfigError: The URL is not ``s3://bucket/...``, or an option is unknown or malformed.
        """
        return cls._from_url(url, **kwargs)

    def setup(self) -> None:
        """Check the bucket (creating it if ``create_bucket=True``) and that the server enforces
        conditional writes; with ``ttl_days``, install the bucket lifecycle rule that expires the saver's
        tagged objects under its prefix. Idempotent; optional (the first write checks conditional writes too).

        Raises:
            BucketNotFoundError: The bucket does not exist and ``create_bucket`` is not set.
            ConditionalWritesUnsupportedError: The server does not enforce conditional writes (and
                ``require_conditional_writes`` is set).
            InvalidConfigError: The server did not keep the lifecycle rule for ``ttl_days`` as sent (it was
                removed again).
            S3CheckpointError: An error every call may raise (see :class:`BaseS3Saver`).
        """
        self._run("setup", self._setup_plan())


class AsyncS3Saver(BaseS3Saver):
    """The asyncio twin of :class:`S3Saver` (same storage, same plans).

    GET, PUT and LIST are sent from the event loop itself by the direct transport (no thread hop, one
    connection pool per loop), unless the client is watched or ``transport="boto3"``; other requests, and
    those that go through boto3, run on the saver's thread pool, so many coroutines can checkpoint
    concurrently either way. Its blocking methods work from threads without a running event loop and raise
    :class:`~langgraph_s3_checkpoint.errors.SaverMisuseError` on the loop's own thread.
    """

    _native_async = True

    @classmethod
    def from_conn_string(cls, url: str, **kwargs: Any) -> AsyncS3Saver:
        """A saver for a location URL, as :meth:`S3Saver.from_conn_string`: use it in ``async with`` (or ``with``),
        which closes it at the block's end, or as it is, and call :meth:`close` when done."""
        return cls._from_url(url, **kwargs)

    async def setup(self) -> None:
        """:meth:`S3Saver.setup`, awaited: same effect and errors."""
        await self._arun("setup", self._setup_plan())

    def _guard(self, what: str) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        raise SaverMisuseError(_blocking_call_message(what))

    def _run(self, what: str, plan: Plan[T]) -> T:
        self._guard(what)
        return super()._run(what, plan)

    def _iterate(self, what: str, plan: Plan[Any]) -> Iterator[Any]:
        self._guard(what)
        return super()._iterate(what, plan)


_ASYNC_TWIN = {"list": "alist", "get_state_history": "aget_state_history"}


def _graph_entry_point() -> str | None:
    """The LangGraph method (``get_state``, ``invoke`` ...) through which the user reached the saver, if any:
    the outermost frame of the call stack that lies in LangGraph's own graph code."""
    import traceback

    entry = None
    for frame in traceback.extract_stack():
        path = frame.filename.replace("\\", "/")
        if "/langgraph/" in path and "/langgraph/checkpoint/" not in path and not frame.name.startswith("_"):
            entry = frame.name
            break
    return entry


def _blocking_call_message(what: str) -> str:
    entry = _graph_entry_point()
    if entry is not None:
        return (
            f"graph.{entry}() is a blocking call and was made from a running event loop's thread with an "
            f"AsyncS3Saver (it needs AsyncS3Saver.{what}()). Use the async form, await graph.a{entry}(...), "
            "or call it from another thread, or use S3Saver."
        )
    twin = _ASYNC_TWIN.get(what, f"a{what}")
    return (
        f"AsyncS3Saver.{what}() blocks and was called from a running event loop's thread. Use "
        f"await saver.{twin}(...) (or graph.ainvoke/astream), or call it from another thread, or use S3Saver."
    )


__all__ = ["AsyncS3Saver", "BaseS3Saver", "S3Saver"]
