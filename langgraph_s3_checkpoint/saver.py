"""``S3Saver`` and ``AsyncS3Saver``: LangGraph's checkpointer API over the plans in :mod:`core`.

Both savers implement every sync and async method of ``BaseCheckpointSaver``; each method hands a plan
to the I/O shell's sync or async driver (:class:`.shell.BucketIO`). They differ only in how they are opened
(``with`` / ``async with``), in ``setup`` being awaitable, and in ``AsyncS3Saver`` refusing blocking
calls made from inside a running event loop (where they would stall every other coroutine).
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import logging
import os
import random
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
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

from .codec import Codec
from .conditions import ConditionalWrites
from .core import Core
from .errors import CorruptObjectError, InvalidConfigError, SaverMisuseError
from .fencing import DEFAULT_MEMORY_BYTES, SaverMemory
from .keys import EXPIRY_TAG, Layout
from .memory import MemoryBucket
from .native import NativeTransport
from .options import (
    CHECKSUM_SETTINGS,
    SAVER,
    TRANSPORTS,
    URL_OPTIONS,
    check_encryption,
    check_extra_headers,
    check_flags,
    check_location,
    check_seconds,
    check_serde,
    check_whole_numbers,
    parse_url,
)
from .repair import RepairReport, SkippingCodec, repair_plan
from .requests import Plan
from .shell import BodyCache, BucketIO, ClosesAtBlockEnd, explain_boto3, speak_like_the_saver
from .transport import DirectTransport
from .watch import ClientWatch

T = TypeVar("T")
SaverT = TypeVar("SaverT", bound="BaseS3Saver")

DEFAULT_INLINE_THRESHOLD = 4096
DEFAULT_COMPRESS_THRESHOLD = 4096
DEFAULT_CACHE_BYTES = 32 * 1024 * 1024

DEFAULT_CONNECT_TIMEOUT = 5.0
"""Seconds to open a TCP (and TLS) connection. A reachable S3 endpoint connects in milliseconds, even
across continents well under a second; 5 s only trips on a host that drops packets or does not exist."""
DEFAULT_READ_TIMEOUT = 10.0
"""Seconds to wait for the next bytes of a reply (not for the whole reply). S3 answers the small requests
of a checkpoint step in milliseconds; 10 s of silence means the server is stuck, and a retry on a fresh
connection is the cure. botocore's 60 s made a silent endpoint block for minutes."""
DEFAULT_MAX_ATTEMPTS = 3
"""Attempts per request (standard retry mode: 5xx, throttling, resets, timeouts). Three absorb the
transient failures S3 documents; more only make a dead endpoint take longer to report."""
DEFAULT_OPERATION_TIMEOUT = 60.0
"""Deadline in seconds for one saver or store call (``get_tuple``, ``put``, ``setup`` ...; for ``list``, for each
item it yields). No attempt of a request starts after it, a read still unanswered is cut at it, and a write still
unanswered gets the read timeout more to answer (:mod:`.deadline`); the call ends only once all of them have. It caps
calls made of many sequential requests, and a request whose reply trickles in (its read timeout counts from the last
byte received)."""

logger = logging.getLogger("langgraph_s3_checkpoint")

_MAINTENANCE = frozenset(
    {"delete_thread", "delete_for_runs", "copy_thread", "prune", "expire_threads", "repair_thread"}
)
"""Methods that may legitimately take long on a large thread: each request is bounded, the call is not."""
_CLIENT_KWARGS = frozenset(
    {
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "aws_account_id",
        "verify",
        "use_ssl",
        "api_version",
    }
)
"""Keyword arguments passed through to ``boto3.session.Session.client``."""


def make_client(
    *,
    endpoint_url: str | None = None,
    region_name: str | None = None,
    addressing_style: str | None = None,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    max_pool_connections: int = 64,
    request_checksum_calculation: str = "when_required",
    response_checksum_validation: str = "when_required",
    **client_kwargs: Any,
) -> Any:
    """A boto3 S3 client with bounded timeouts and retries (standard mode: 5xx, throttling, resets), and
    botocore's checksums only where S3 requires them (:data:`CHECKSUM_SETTINGS`).

    Credentials come from the standard boto3 chain; ``AWS_ENDPOINT_URL`` is honoured by boto3 itself, and the
    region comes from ``region_name``, else ``AWS_REGION`` (which botocore does not read; other AWS SDKs and the
    AWS CLI prefer it to ``AWS_DEFAULT_REGION``), else botocore's chain (``AWS_DEFAULT_REGION``, the profile).
    Path-style addressing is the default when an endpoint is given, as local servers expect. Unknown
    keyword arguments raise :class:`InvalidConfigError` naming the valid ones.
    """
    import boto3
    from botocore.config import Config

    unknown = sorted(set(client_kwargs) - _CLIENT_KWARGS)
    if misplaced := [name for name in unknown if name in URL_OPTIONS and not URL_OPTIONS[name].keyword]:
        # A constructor takes its own options by name: what reaches the client here is another component's.
        raise InvalidConfigError(
            "; ".join(
                f"{name} is an option of the {' and '.join(sorted(URL_OPTIONS[name].used_by))} only"
                for name in misplaced
            )
            + " (a location URL may carry it: the components that do not use it ignore it there)"
        )
    if unknown:
        raise InvalidConfigError(
            f"unknown option(s) {', '.join(unknown)}; valid options: "
            f"{', '.join(sorted({*URL_OPTIONS, 'region_name', *_CLIENT_KWARGS, 'client', 'serde'}))}"
        )
    if addressing_style not in (None, "path", "virtual", "auto"):
        raise InvalidConfigError(f"addressing_style={addressing_style!r} must be one of path, virtual, auto")
    if addressing_style is None and (
        endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    ):
        addressing_style = "path"  # local and non-AWS servers expect it (boto3 reads AWS_ENDPOINT_URL itself)
    check_whole_numbers(max_attempts=max_attempts)
    for name, setting in (
        ("request_checksum_calculation", request_checksum_calculation),
        ("response_checksum_validation", response_checksum_validation),
    ):
        if setting not in CHECKSUM_SETTINGS:
            raise InvalidConfigError(f"{name}={setting!r} must be one of {', '.join(CHECKSUM_SETTINGS)}")
    region_name = region_name or os.environ.get("AWS_REGION") or None
    config = Config(
        connect_timeout=check_seconds("connect_timeout", connect_timeout),
        read_timeout=check_seconds("read_timeout", read_timeout),
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        max_pool_connections=max_pool_connections,
        s3={"addressing_style": addressing_style} if addressing_style else None,
        request_checksum_calculation=request_checksum_calculation,
        response_checksum_validation=response_checksum_validation,
    )
    try:
        client = boto3.session.Session().client(
            "s3", endpoint_url=endpoint_url, region_name=region_name, config=config, **client_kwargs
        )
    except ValueError as exc:  # botocore: an endpoint_url that is not a URL, a bad region name
        raise InvalidConfigError(f"cannot create the S3 client: {exc}") from None
    without_expect_continue(client)
    return client


def without_expect_continue(client: Any) -> Any:
    """Stop ``client`` from sending ``Expect: 100-continue`` on PutObject, so a PUT costs one round trip.

    botocore adds the header to every PUT/POST with a file-like body (PutObject bodies always are) and
    then waits for the server's interim ``100 Continue`` before sending the body: a second round trip
    per PUT. Checkpoint bodies are small, so the header's only benefit (not uploading a large body the
    server would refuse) does not apply; some servers never answer it for an empty body (SeaweedFS).
    Only this client's handlers change (botocore copies the session's handlers into each client)."""
    from botocore.handlers import add_expect_header

    client.meta.events.unregister("before-call.s3", add_expect_header)
    return client


def make_bucket_io(
    client: Any,
    bucket: str,
    *,
    prefix: str = "",
    require_conditional_writes: bool = True,
    extra_headers: tuple[tuple[str, str], ...] = (),
    max_concurrency: int = 32,
    server_side_encryption: str | None = None,
    sse_kms_key_id: str | None = None,
    sse_customer_key: str | None = None,
    transport: str = "auto",
    expiry_tag: str | None = None,
    cache: BodyCache | None = None,
    deadline: float | None = None,
    native_async: bool = False,
    serves: str = "saver",
) -> BucketIO:
    """The I/O shell for ``client``: encryption arguments, transport (an in-process :class:`MemoryBucket`
    answers every request itself), the retention tag, read cache and deadline, the headers both transports add,
    and the conditional-write probe before the first write (its objects under ``prefix``; without conditional
    writes it refuses, or with ``require_conditional_writes=False`` writes without them). Saver and store share
    it; ``serves`` names which one holds it in the error for a call after ``close()``.

    With the direct transport and ``native_async``, the async driver sends GET, PUT and LIST from the
    event loop (:mod:`.native`); without it, from the thread pool over blocking sockets (:mod:`.blocking`).
    ``"auto"`` (the default) sends them directly while nothing but botocore watches the client (:mod:`.watch`)
    and through boto3 otherwise, or always through boto3 when the direct transport cannot imitate the client."""
    if transport not in TRANSPORTS:
        raise InvalidConfigError(f"transport must be one of {', '.join(map(repr, TRANSPORTS))}, got {transport!r}")
    put_args: dict[str, Any] = {}
    get_args: dict[str, Any] = {}
    copy_args: dict[str, Any] = {}
    if server_side_encryption:
        put_args["ServerSideEncryption"] = server_side_encryption
    if sse_kms_key_id:
        put_args["SSEKMSKeyId"] = sse_kms_key_id
    if sse_customer_key:
        customer = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": sse_customer_key}
        put_args.update(customer)
        get_args.update(customer)
        copy_args = {"CopySourceSSECustomerAlgorithm": "AES256", "CopySourceSSECustomerKey": sse_customer_key}
    memory = isinstance(client, MemoryBucket)
    direct: DirectTransport | None = None
    watch: ClientWatch | None = None
    contention = deadline or DEFAULT_OPERATION_TIMEOUT
    if not memory:
        speak_like_the_saver(client)  # before the watch looks at the client's handlers
    if not memory and transport != "boto3":
        try:
            direct = DirectTransport(
                client,
                bucket,
                put_args=put_args,
                get_args=get_args,
                expiry_tag=expiry_tag,
                max_connections=max_concurrency * 2,
                contention_seconds=contention,
                extra_headers=dict(extra_headers),
            )
            watch = ClientWatch(client) if transport == "auto" else None
        except (InvalidConfigError, AttributeError, TypeError) as refused:
            if transport == "direct":
                raise
            if direct is not None:
                direct.close()
                direct = None
            explain_boto3(client, "every request", f"the direct transport cannot imitate this client ({refused})")
    return BucketIO(
        client,
        bucket,
        max_concurrency=max_concurrency,
        put_args=put_args,
        get_args=get_args,
        copy_args=copy_args,
        expiry_tag=expiry_tag,
        direct=direct,
        native=NativeTransport(direct) if direct and native_async else None,
        watch=watch,
        cache=cache,
        backend=client if memory else None,
        deadline=deadline,
        serves=serves,
        conditions=None if memory else _gate(client, bucket, prefix, require_conditional_writes, extra_headers),
        extra_headers=extra_headers,
        contention_seconds=contention,
    )


def _gate(
    client: Any, bucket: str, prefix: str, required: bool, extra_headers: tuple[tuple[str, str], ...]
) -> ConditionalWrites:
    """The conditional-write probe's gate (:mod:`.conditions`): its verdict is the process's for this endpoint,
    bucket and extra headers; its objects go under the saver's prefix (IAM policies may allow no other)."""
    layout = Layout(prefix)
    return ConditionalWrites(
        endpoint=str(getattr(client.meta, "endpoint_url", "") or "(default)"),
        bucket=bucket,
        probe_key=lambda: layout.probe(uuid.uuid4().hex),
        required=required,
        extra_headers=tuple(sorted((name.lower(), value) for name, value in extra_headers)),
    )


class BaseS3Saver(ClosesAtBlockEnd, BaseCheckpointSaver[str]):
    """Shared construction and the LangGraph API; see :class:`S3Saver` and :class:`AsyncS3Saver`."""

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
        cache_bytes: int = DEFAULT_CACHE_BYTES,
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
        prefix = check_location(bucket, prefix)
        check_whole_numbers(
            inline_threshold=inline_threshold,
            max_concurrency=max_concurrency,
            cache_bytes=cache_bytes,
            memory_bytes=memory_bytes,
            compress_threshold=compress_threshold,
            ttl_days=ttl_days,
        )
        check_flags(create_bucket=create_bucket, require_conditional_writes=require_conditional_writes)
        check_encryption(server_side_encryption, sse_kms_key_id, sse_customer_key)
        timeouts: dict[str, Any] = {
            name: value
            for name, value in (
                ("connect_timeout", connect_timeout),
                ("read_timeout", read_timeout),
                ("max_attempts", max_attempts),
            )
            if value is not None
        }
        self.operation_timeout = (
            None if operation_timeout is None else check_seconds("operation_timeout", operation_timeout)
        )
        if client is None:
            client_options.setdefault("max_pool_connections", max(64, max_concurrency * 2))
            client = make_client(**client_options, **timeouts)
        elif client_options or timeouts:
            raise InvalidConfigError(
                f"client options {sorted({*client_options, *timeouts})} only apply when the saver creates the "
                "client; set them on your client (botocore.config.Config) instead"
            )
        self.bucket = bucket
        self.prefix = prefix
        self.client = client
        self.create_bucket = create_bucket
        self.require_conditional_writes = require_conditional_writes
        self._store = make_bucket_io(
            client,
            bucket,
            prefix=self.prefix,
            require_conditional_writes=require_conditional_writes,
            extra_headers=check_extra_headers(extra_headers),
            max_concurrency=max_concurrency,
            server_side_encryption=server_side_encryption,
            sse_kms_key_id=sse_kms_key_id,
            sse_customer_key=sse_customer_key,
            transport=transport,
            expiry_tag=EXPIRY_TAG if ttl_days else None,
            cache=BodyCache(cache_bytes) if cache_bytes else None,
            deadline=self.operation_timeout,
            native_async=self._native_async,
        )
        self._core = Core(
            layout=Layout(self.prefix),
            codec=Codec(self.serde, compress_threshold=compress_threshold),
            inline_threshold=inline_threshold,
            ttl=timedelta(days=ttl_days) if ttl_days else None,
            memory=SaverMemory(memory_bytes, track_blob_ages=bool(ttl_days)),
        )

    @property
    def plans(self) -> Core:
        """The saver's plans, with its layout, codec and memory: the handle for tools built on the saver
        (gc, repair, the CLI), which run their own plans through :attr:`bucket_io`."""
        return self._core

    @property
    def bucket_io(self) -> BucketIO:
        """The I/O shell that runs plans for this saver (its client, transport, read cache, timeouts)."""
        return self._store

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
        return self._core.setup(create_bucket=self.create_bucket, bucket=self.bucket)

    # -- drivers (AsyncS3Saver guards the blocking ones) ------------------------------------------
    # ``what`` is the public method the user called, for the messages of SaverMisuseError; maintenance
    # methods (which may run long on a large thread) are not held to ``operation_timeout``.
    def _run(self, what: str, plan: Plan[T]) -> T:
        self._store.check_open(what)
        return self._store.run(plan, bounded=what not in _MAINTENANCE)

    def _iterate(self, what: str, plan: Plan[Any]) -> Iterator[Any]:
        self._store.check_open(what)
        return self._store.iterate(plan, bounded=what not in _MAINTENANCE)

    async def _arun(self, what: str, plan: Plan[T]) -> T:
        self._store.check_open(what)
        return await self._store.arun(plan, bounded=what.removeprefix("a") not in _MAINTENANCE)

    def _aiterate(self, what: str, plan: Plan[Any]) -> AsyncIterator[Any]:
        self._store.check_open(what)
        return self._store.aiterate(plan, bounded=what.removeprefix("a") not in _MAINTENANCE)

    # -- sync API -----------------------------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._run("get_tuple", self._core.get_tuple(config))

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
        """LangGraph's ``list``; by default a damaged record stops it with :class:`CorruptObjectError`.

        ``skip_damaged=True`` leaves out checkpoint records (and pending-writes objects) that cannot be
        decoded and goes on with older history; each one is reported to ``on_damaged`` (default: a
        warning on the ``langgraph_s3_checkpoint`` logger). Undecryptable objects (a missing or wrong key)
        are never skipped: that is a configuration error, not damage. A damaged head still raises (see
        :meth:`repair_thread`).
        """
        core = self._listing_core(skip_damaged, on_damaged)
        return self._iterate("list", core.list(config, filter=filter, before=before, limit=limit))

    def _listing_core(self, skip_damaged: bool, on_damaged: Callable[[CorruptObjectError], None] | None) -> Core:
        if not skip_damaged:
            return self._core
        report = on_damaged if on_damaged is not None else _warn_damaged
        return dataclasses.replace(
            self._core, codec=SkippingCodec(self._core.codec.serde, self._core.codec.compress_threshold, report)
        )

    def repair_thread(self, thread_id: str, *, dry_run: bool = False) -> RepairReport:
        """Rebuild the damaged or missing heads of a thread's namespaces from their newest committed record.

        A head is the commit pointer of a namespace; if it is unreadable (or was deleted) the thread reads
        as empty although its history is stored. For each namespace this reads the head and, when it is
        damaged or missing while records exist, chooses the record to restore (see
        :mod:`langgraph_s3_checkpoint.repair` for the rule and why) and writes it as the head with a
        conditional PUT, so a writer that commits meanwhile wins. Nothing is deleted, and nothing a crash
        left uncommitted is committed (a first put that died before its head, the records of a
        ``delete_thread`` that died part-way, a record whose large values are gone). A thread id too long to be a
        key segment also gets its ``name`` object written again if it is missing or holds another id
        (``RepairReport.name_restored``). Returns what it found and did per namespace; ``dry_run`` only reports.
        """
        report: RepairReport = self._run("repair_thread", repair_plan(self._core, str(thread_id), dry_run=dry_run))
        return report

    async def arepair_thread(self, thread_id: str, *, dry_run: bool = False) -> RepairReport:
        report: RepairReport = await self._arun(
            "arepair_thread", repair_plan(self._core, str(thread_id), dry_run=dry_run)
        )
        return report

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._run("put", self._core.put(config, checkpoint, metadata, new_versions))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._run("put_writes", self._core.put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._run("delete_thread", self._core.delete_thread(str(thread_id)))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._run("delete_for_runs", self._core.delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._run("copy_thread", self._core.copy_thread(str(source_thread_id), str(target_thread_id)))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._run("prune", self._core.prune(thread_ids, strategy))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self._run("get_delta_channel_history", self._core.get_delta_channel_history(config, channels))

    def expire_threads(self, older_than: timedelta, *, dry_run: bool = False) -> builtins.list[str]:
        """Delete every thread not updated for ``older_than`` (its newest head is older); returns their ids.

        A sweep for servers without lifecycle rules, and the safe way to apply a TTL: only whole idle
        threads are removed, never parts of a live one. ``dry_run`` only reports.
        """
        plan = self._core.expire_threads(older_than, dry_run=dry_run)
        return builtins.list(self._iterate("expire_threads", plan))

    async def aexpire_threads(self, older_than: timedelta, *, dry_run: bool = False) -> builtins.list[str]:
        plan = self._core.expire_threads(older_than, dry_run=dry_run)
        return [t async for t in self._aiterate("aexpire_threads", plan)]

    # -- async API ----------------------------------------------------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._arun("aget_tuple", self._core.get_tuple(config))

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
        core = self._listing_core(skip_damaged, on_damaged)
        async for item in self._aiterate("alist", core.list(config, filter=filter, before=before, limit=limit)):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._arun("aput", self._core.put(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await self._arun("aput_writes", self._core.put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._arun("adelete_thread", self._core.delete_thread(str(thread_id)))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._arun("adelete_for_runs", self._core.delete_for_runs(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._arun("acopy_thread", self._core.copy_thread(str(source_thread_id), str(target_thread_id)))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._arun("aprune", self._core.prune(thread_ids, strategy))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await self._arun("aget_delta_channel_history", self._core.get_delta_channel_history(config, channels))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """``{counter:032}.{random:016}``: ordered like the built-in savers, unique across writers."""
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
    @contextmanager
    def from_conn_string(cls, url: str, **kwargs: Any) -> Iterator[S3Saver]:
        """Open a saver for ``s3://bucket/prefix?options``; keyword arguments override URL options and
        reach the boto3 client when they are client settings (``endpoint_url``, ``region_name`` ...)."""
        with cls._from_url(url, **kwargs) as saver:
            yield saver

    def setup(self) -> None:
        """Check the bucket (creating it if ``create_bucket=True``) and that the server enforces
        conditional writes; with ``ttl_days``, install the bucket lifecycle rule that expires the saver's
        tagged objects under its prefix. Idempotent."""
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
    @asynccontextmanager
    async def from_conn_string(cls, url: str, **kwargs: Any) -> AsyncIterator[AsyncS3Saver]:
        with cls._from_url(url, **kwargs) as saver:
            yield saver

    async def setup(self) -> None:
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


__all__ = ["AsyncS3Saver", "BaseS3Saver", "S3Saver", "make_client", "parse_url", "without_expect_continue"]
