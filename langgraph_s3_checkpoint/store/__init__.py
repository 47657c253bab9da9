"""``S3Store`` and ``AsyncS3Store``: LangGraph's long-term memory ``BaseStore`` on the saver's bucket.

Same design as the saver: every operation is a *plan* (a generator yielding batches of independent
requests, see :mod:`.._protocol.requests`), written once in :class:`StorePlans` and driven by ``BucketIO.run`` (sync)
or ``BucketIO.arun`` (async). Embeddings are computed by the store classes before a plan starts (with
``embed_documents`` or ``aembed_documents``), so plans stay pure.

Layout under ``{prefix}/store/`` (labels and keys escaped by :func:`.._protocol.keys.escape`; segments longer than
180 characters become ``~`` + SHA-256 and the real label is kept in a ``names/`` object)::

    store/ns/{l1}/.../{ln}/~/{key}       one item (value, timestamps, TTL), the only source of truth
    store/vec/{l1}/.../{ln}/~/{shard}    vectors of the namespace's items whose key hashes to ``shard``
    store/names/{digest}                 the real label or key behind a digest segment (immutable)

``~`` alone is never an escaped label (labels are not empty), so a namespace's own items never mix with
a child namespace's. The saver only reads ``threads/``, ``runs/`` and ``_setup/``: saver and store can
share one bucket and prefix. See docs/design.md, "Long-term memory store".
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import logging
import threading
from abc import abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from langgraph.checkpoint.serde.base import SerializerProtocol, maybe_add_typed_methods
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.store.base import (
    BaseStore,
    IndexConfig,
    Op,
    PutOp,
    Result,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    tokenize_path,
    validate_op_namespace,
)

from .._protocol import expiry
from .._protocol.checkpoint_plans import CheckpointPlans
from .._protocol.codec import Codec
from .._protocol.keys import MAX_KEY_BYTES, Layout, key_bytes
from .._protocol.requests import (
    Plan,
)
from .._protocol.store.checks import check_index, check_op, check_ttl, index_fields
from .._protocol.store.embedding import assign_vectors, last_writes, texts_to_embed
from .._protocol.store.layout import DEFAULT_VECTOR_SHARDS, Place, StoreLayout
from .._protocol.store.objects import StoreCodec
from .._protocol.store.plans import StorePlans
from .._transport.bucket_io import BucketIO, ClosesAtBlockEnd
from .._transport.connect import open_bucket
from ..errors import (
    InvalidConfigError,
)
from ..options import (
    DEFAULT_COMPRESS_THRESHOLD,
    DEFAULT_OPERATION_TIMEOUT,
    STORE,
    check_serde,
    check_whole_numbers,
    parse_url,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")
StoreT = TypeVar("StoreT", bound="BaseS3Store")
Method = TypeVar("Method", bound=Callable[..., Any])


def _refused_when_closed(method: Method) -> Method:
    """``BaseStore``'s ``method`` (``get``, ``aput`` ...), refusing a closed store with :class:`SaverMisuseError`
    naming ``method``: BaseStore's methods run :meth:`~BaseS3Store.batch`, whose own check would name ``batch``."""
    name = method.__name__
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def checked_async(self: BaseS3Store, *args: Any, **kwargs: Any) -> Any:
            self._bucket_io.check_open(name)
            return await method(self, *args, **kwargs)

        return checked_async  # type: ignore[return-value]

    @functools.wraps(method)
    def checked(self: BaseS3Store, *args: Any, **kwargs: Any) -> Any:
        self._bucket_io.check_open(name)
        return method(self, *args, **kwargs)

    return checked  # type: ignore[return-value]


class BaseS3Store(ClosesAtBlockEnd, BaseStore):
    """Shared construction and ``batch``/``abatch``; see :class:`S3Store` and :class:`AsyncS3Store`.

    ``BaseStore``'s methods (``get``, ``put``, ``delete``, ``search``, ``list_namespaces`` and their ``a``
    forms) each run one :meth:`batch` (or :meth:`abatch`) and raise what it raises. The options the saver also
    takes mean the same as there (:class:`~.saver.BaseS3Saver`; docs/operations.md, "The location URL").

    Args:
        bucket: The bucket's name.
        prefix: The key prefix (the saver's, if they share one: the store's objects live under ``store/``).
        client: A boto3 S3 client (or a :class:`~.memory.MemoryBucket`); by default one the store makes from
            ``client_options``.
        serde: The serializer of item values; by default LangGraph's ``JsonPlusSerializer``.
        index: LangGraph's ``IndexConfig`` (``embed``, ``dims``, ``fields``, ``distance_type``) for semantic
            search; ``None``: no vectors.
        ttl: LangGraph's ``TTLConfig`` (``default_ttl``, ``refresh_on_read``, ``sweep_interval_minutes``).
        compress_threshold: Objects of at least this many bytes are zlib-compressed; ``None``: never.
        max_concurrency: Requests in parallel on the store's thread pool.
        create_bucket: Let ``setup()`` create a missing bucket.
        require_conditional_writes: Refuse a server that does not enforce conditional writes.
        server_side_encryption: As the saver's.
        sse_kms_key_id: As the saver's.
        sse_customer_key: As the saver's.
        transport: ``"auto"``, ``"boto3"`` or ``"direct"``, as the saver's.
        vector_shards: Vector shard objects per namespace of an indexed store.
        operation_timeout: Deadline in seconds of one call (the TTL sweep is bounded per request only).
        extra_headers: Headers sent, signed, with every request.
        **client_options: Settings of the client the store makes (``endpoint_url``, ``region_name`` ...).

    Raises:
        InvalidConfigError: An option, ``index`` or ``ttl`` is malformed, out of range or unknown, or client
            options were given beside ``client=``; the message names it.

    Errors every call may raise, besides those its docstring names (all are :class:`S3CheckpointError`):
    :class:`S3RequestError` (the endpoint is unreachable, silent or failing after retries, or the call passed
    ``operation_timeout``), :class:`S3AccessError`, :class:`BucketNotFoundError`,
    :class:`ConditionalWritesUnsupportedError` (at the first write) and :class:`SaverMisuseError` (a call on a
    closed store).
    """

    supports_ttl = True

    def __init__(
        self,
        *,
        bucket: str,
        prefix: str = "",
        client: Any = None,
        serde: SerializerProtocol | None = None,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        compress_threshold: int | None = DEFAULT_COMPRESS_THRESHOLD,
        max_concurrency: int = 32,
        create_bucket: bool = False,
        require_conditional_writes: bool = True,
        server_side_encryption: str | None = None,
        sse_kms_key_id: str | None = None,
        sse_customer_key: str | None = None,
        transport: str = "auto",
        vector_shards: int = DEFAULT_VECTOR_SHARDS,
        operation_timeout: float | None = DEFAULT_OPERATION_TIMEOUT,
        extra_headers: Mapping[str, str] | str | None = None,
        **client_options: Any,
    ) -> None:
        check_whole_numbers(compress_threshold=compress_threshold, vector_shards=vector_shards)
        check_serde(serde)
        check_ttl(ttl)
        check_index(index)
        opened = open_bucket(
            "store",
            bucket=bucket,
            prefix=prefix,
            client=client,
            client_options=client_options,
            max_concurrency=max_concurrency,
            create_bucket=create_bucket,
            require_conditional_writes=require_conditional_writes,
            server_side_encryption=server_side_encryption,
            sse_kms_key_id=sse_kms_key_id,
            sse_customer_key=sse_customer_key,
            transport=transport,
            extra_headers=extra_headers,
            operation_timeout=operation_timeout,
            native_async=True,  # the async methods of both classes send from the loop with the direct transport
        )
        self.bucket = bucket
        self.prefix = opened.prefix
        self.client = opened.client
        self.create_bucket = create_bucket
        self.require_conditional_writes = require_conditional_writes
        self.operation_timeout = opened.deadline
        """Deadline of one call, as the saver's (the TTL sweep, which reads every item, is bounded per request only)."""
        self._bucket_io = opened.bucket_io
        self.serde: SerializerProtocol = maybe_add_typed_methods(serde or JsonPlusSerializer())
        self.ttl_config = ttl
        self.index_config: dict[str, Any] | None = None
        self.embeddings: Any = None
        if index:
            config: dict[str, Any] = dict(index)
            self.embeddings = ensure_embeddings(config.get("embed"))
            config["fields"] = index_fields(index)
            config["__tokenized_fields"] = [
                (p, tokenize_path(p)) if p != "$" else (p, p) for p in (config["fields"] or ["$"])
            ]
            self.index_config = config
        codec = Codec(self.serde, compress_threshold=compress_threshold)
        self._codec = codec
        self._plans = StorePlans(
            layout=StoreLayout(self.prefix),
            codec=StoreCodec(codec),
            vector_shards=vector_shards,
            indexed=self.embeddings is not None,
            distance=str((index or {}).get("distance_type", "cosine")),
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(bucket={self.bucket!r}, prefix={self.prefix!r})"

    @property
    def plans(self) -> StorePlans:
        """The store's plans, with its layout, codec and sweep state: the handle for tools (the CLI, tests), which
        run them through :attr:`bucket_io`."""
        return self._plans

    @property
    def bucket_io(self) -> BucketIO:
        """The I/O shell that runs this store's plans."""
        return self._bucket_io

    @classmethod
    def _from_url(cls: type[StoreT], url: str, **kwargs: Any) -> StoreT:
        bucket, prefix, options = parse_url(url, used_by=STORE)  # one URL serves saver, store and cache
        options.update(kwargs)
        return cls(bucket=bucket, prefix=prefix, **options)

    def close(self) -> None:
        """Stop the TTL sweeper and release the worker threads and connections. Idempotent; every later call
        raises :class:`SaverMisuseError` naming it (``with``/``async with`` blocks end with this)."""
        self._stop_sweeping()
        self._bucket_io.close()

    def _setup_plan(self) -> Plan[None]:
        core = CheckpointPlans(layout=Layout(self.prefix), codec=self._codec)
        yield from core.setup(create_bucket=self.create_bucket, bucket=self.bucket)
        # A store without items has none an older release wrote: its first sweep need not read them all.
        yield from expiry.file_if_empty(self._plans.expiring)

    # -- preparing a batch ------------------------------------------------------------------------
    def _prepare(self, ops: Iterable[Op]) -> tuple[list[Op], dict[str, list[Place]], list[str]]:
        """Check every op's namespace; return the ops, the texts their writes need embedded (the last
        write to each item) and their distinct queries: nothing to embed without an index."""
        listed = list(ops)
        for op in listed:
            validate_op_namespace(op)
            check_op(op)
            if isinstance(op, PutOp):
                self._check_key_length(op)
        if self.index_config is None:
            return listed, {}, []
        to_embed = texts_to_embed(self.index_config, last_writes(listed))
        queries = sorted({op.query for op in listed if isinstance(op, SearchOp) and op.query})
        return listed, to_embed, queries

    def _check_key_length(self, op: PutOp) -> None:
        """S3 keys are at most 1,024 bytes (AWS, SeaweedFS): refuse an item whose object key would be longer
        before any of the batch is written, instead of failing halfway through it."""
        size = key_bytes(self._plans.layout.item(op.namespace, op.key))
        if size > MAX_KEY_BYTES:
            raise InvalidConfigError(
                f"item {op.key!r} in namespace {tuple(op.namespace)!r} would be stored under a key of {size} bytes; "
                f"S3 allows {MAX_KEY_BYTES}. Use shorter or fewer namespace labels (or a shorter prefix)"
            )

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run LangGraph store operations: the texts to embed are embedded first, then the ops run as one plan.

        Args:
            ops: ``GetOp``, ``PutOp``, ``SearchOp`` and ``ListNamespacesOp`` values, in any mix.

        Returns:
            One result per op, in order: an ``Item`` or ``None``, ``None``, a list of ``SearchItem``, a list of
            namespaces.

        Raises:
            InvalidArgumentTypeError: A namespace is a ``str`` rather than a tuple, or an item's key is not a ``str``.
            InvalidConfigError: A per-item ``ttl`` is not a positive number of minutes, a label or key holds a lone
                surrogate, or an item's key would pass S3's 1,024 bytes; nothing of the batch was written.
            langgraph.store.base.InvalidNamespaceError: A namespace label is empty, not a string, or holds a dot or
                a NUL (LangGraph's own check, as in ``InMemoryStore``).
            ValueError: A filter names an operator that does not exist, as in ``InMemoryStore``.
            SerializationError: A value cannot be serialized.
            StoreConflictError: A vector shard kept changing under its update: the items were written, their
                vectors may be missing from semantic search.
            CorruptObjectError: An item, vector shard or name object the ops read is damaged.
            S3CheckpointError: An error every call may raise (see :class:`BaseS3Store`).
        """
        self._bucket_io.check_open("batch")  # before any embedding is paid for
        listed, to_embed, queries = self._prepare(ops)
        documents = self.embeddings.embed_documents(list(to_embed)) if to_embed else []
        query_vectors = {q: list(self.embeddings.embed_query(q)) for q in queries}
        return self._bucket_io.run(self._plans.batch(listed, assign_vectors(to_embed, documents), query_vectors))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch`, awaited (embeddings with ``aembed_documents``): same arguments, results and errors."""
        self._bucket_io.check_open("abatch")
        listed, to_embed, queries = self._prepare(ops)
        documents = await self.embeddings.aembed_documents(list(to_embed)) if to_embed else []
        answers = await asyncio.gather(*(self.embeddings.aembed_query(q) for q in queries))
        query_vectors = {q: list(v) for q, v in zip(queries, answers, strict=True)}
        return await self._bucket_io.arun(self._plans.batch(listed, assign_vectors(to_embed, documents), query_vectors))

    # BaseStore's methods, each refusing a closed store by its own name (a later call raises SaverMisuseError naming
    # the method the user called, as the saver's and the cache's do); otherwise BaseStore's, running one batch.
    get = _refused_when_closed(BaseStore.get)
    put = _refused_when_closed(BaseStore.put)
    delete = _refused_when_closed(BaseStore.delete)
    search = _refused_when_closed(BaseStore.search)
    list_namespaces = _refused_when_closed(BaseStore.list_namespaces)
    aget = _refused_when_closed(BaseStore.aget)
    aput = _refused_when_closed(BaseStore.aput)
    adelete = _refused_when_closed(BaseStore.adelete)
    asearch = _refused_when_closed(BaseStore.asearch)
    alist_namespaces = _refused_when_closed(BaseStore.alist_namespaces)

    def _run(self, what: str, plan: Plan[T], *, bounded: bool = True) -> T:
        self._bucket_io.check_open(what)
        return self._bucket_io.run(plan, bounded=bounded)

    async def _arun(self, what: str, plan: Plan[T], *, bounded: bool = True) -> T:
        self._bucket_io.check_open(what)
        return await self._bucket_io.arun(plan, bounded=bounded)

    # -- TTL ----------------------------------------------------------------------------------------
    async def asweep_ttl(self, *, full: bool = False) -> int:
        """:meth:`S3Store.sweep_ttl`, awaited: same arguments, result and errors."""
        return await self._arun("asweep_ttl", self._plans.sweep(full), bounded=False)

    def _sweep_interval_s(self, sweep_interval_minutes: float | None) -> float | None:
        """Seconds between background sweeps (the argument, else ``ttl_config``'s, else 5 minutes), or None
        without a ``ttl_config``: nothing can expire, so no sweeper starts (as in LangGraph's stores)."""
        if not self.ttl_config:
            return None
        return 60 * float(sweep_interval_minutes or self.ttl_config.get("sweep_interval_minutes") or 5)

    @abstractmethod
    def _stop_sweeping(self) -> None:
        """Stop the background sweeper without waiting for it (``close``)."""


def _log_sweep(store: BaseS3Store, swept: int) -> None:
    if swept:
        logger.info("%s TTL sweep deleted %d expired items", type(store).__name__, swept)


def _log_failed_sweep(store: BaseS3Store) -> None:
    logger.exception("%s TTL sweep failed; retrying at the next interval", type(store).__name__)


class S3Store(BaseS3Store):
    """LangGraph long-term memory in an S3 bucket, beside (and independent of) the saver's threads.

    ```python
    with S3Store.from_conn_string("s3://agent-state/prod") as store:
        store.setup()
        graph = builder.compile(checkpointer=saver, store=store)
    ```
    Its async methods (``aget``, ``asearch`` ...) work too; :class:`AsyncS3Store` is the same store
    opened with ``async with``.
    """

    @classmethod
    def from_conn_string(
        cls, url: str, *, index: IndexConfig | None = None, ttl: TTLConfig | None = None, **kwargs: Any
    ) -> S3Store:
        """A store for a location URL (the saver's). Use it in ``with`` (or ``async with``), which closes it at the
        block's end; or as it is, and call :meth:`close` when done.

        Args:
            url: ``s3://bucket/prefix?option=value&...``; options only the saver or the cache use are ignored.
            index: LangGraph's ``IndexConfig``, for semantic search.
            ttl: LangGraph's ``TTLConfig``.
            **kwargs: Options that override the URL's.

        Returns:
            The store (its own context manager: ``with`` hands back the store itself).

        Raises:
            InvalidConfigError: The URL is not ``s3://bucket/...``, or an option is unknown or malformed.
        """
        return cls._from_url(url, index=index, ttl=ttl, **kwargs)

    def setup(self) -> None:
        """Check the bucket (creating it with ``create_bucket=True``) and conditional-write support; an empty
        store also records that it needs no full TTL sweep. Idempotent.

        Raises:
            BucketNotFoundError: The bucket does not exist and ``create_bucket`` is not set.
            ConditionalWritesUnsupportedError: The server does not enforce conditional writes.
            S3CheckpointError: An error every call may raise (see :class:`BaseS3Store`).
        """
        self._run("setup", self._setup_plan())

    # -- TTL: a sweeper thread, as PostgresStore's --------------------------------------------------
    _sweeper: threading.Thread | None = None
    _sweeper_stop: threading.Event
    _sweeper_future: concurrent.futures.Future[None] | None = None

    def sweep_ttl(self, *, full: bool = False) -> int:
        """Delete every expired item now. (Reads are already blind to them.)

        Args:
            full: Read every item instead of only those whose expiry came due (after processes of an older
                release wrote items).

        Returns:
            How many items were deleted.

        Raises:
            S3CheckpointError: An error every call may raise (see :class:`BaseS3Store`).
        """
        return self._run("sweep_ttl", self._plans.sweep(full), bounded=False)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> concurrent.futures.Future[None]:
        """Sweep expired items periodically on a daemon thread, as PostgresStore does. A sweep that fails is
        logged and tried again at the next interval.

        Args:
            sweep_interval_minutes: Minutes between sweeps (default: ``ttl_config``'s, else 5).

        Returns:
            A future that completes when :meth:`stop_ttl_sweeper` stops the thread; already done without a
            ``ttl_config`` (nothing can expire, so nothing starts). A sweeper already running is kept.

        Raises:
            SaverMisuseError: The store is closed.
        """
        self._bucket_io.check_open("start_ttl_sweeper")
        if self._sweeper is not None and self._sweeper.is_alive() and self._sweeper_future is not None:
            return self._sweeper_future
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        interval = self._sweep_interval_s(sweep_interval_minutes)
        if interval is None:
            future.set_result(None)
            return future
        stop = self._sweeper_stop = threading.Event()

        def loop() -> None:
            while not stop.wait(interval):
                try:
                    _log_sweep(self, self._bucket_io.run(self._plans.sweep(), bounded=False))
                except Exception:
                    _log_failed_sweep(self)
            future.set_result(None)

        self._sweeper = threading.Thread(target=loop, daemon=True, name="lgs3-store-ttl-sweeper")
        self._sweeper_future = future
        self._sweeper.start()
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread.

        Args:
            timeout: Seconds to wait for it to stop (``None``: until it does).

        Returns:
            Whether it stopped within ``timeout`` (``True`` when none was running).
        """
        if self._sweeper is None:
            return True
        self._sweeper_stop.set()
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped

    def _stop_sweeping(self) -> None:
        if self._sweeper is not None:
            self._sweeper_stop.set()


class AsyncS3Store(BaseS3Store):
    """The asyncio twin of :class:`S3Store` (same objects, same plans, awaited).

    BaseStore's blocking methods (``get``, ``put``, ``search``, ``batch`` ...) work from any thread, the
    event loop's included, as InMemoryStore's do: they drive the plan with the store's own blocking I/O
    (``BucketIO.run``), never by scheduling work on the loop, so they cannot deadlock; called on the loop's
    thread they block the loop for the duration of the call, so prefer ``await store.aget(...)`` there.
    (AsyncPostgresStore refuses such calls because its sync methods wait for a coroutine on the very loop
    they would block.) The TTL methods ``sweep_ttl``, ``start_ttl_sweeper`` and ``stop_ttl_sweeper`` are
    coroutines, as AsyncPostgresStore's are.
    """

    @classmethod
    def from_conn_string(
        cls, url: str, *, index: IndexConfig | None = None, ttl: TTLConfig | None = None, **kwargs: Any
    ) -> AsyncS3Store:
        """A store for a location URL, as :meth:`S3Store.from_conn_string`: use it in ``async with`` (or ``with``),
        which closes it at the block's end, or as it is, and call :meth:`close` when done."""
        return cls._from_url(url, index=index, ttl=ttl, **kwargs)

    async def setup(self) -> None:
        """:meth:`S3Store.setup`, awaited: same effect and errors."""
        await self._arun("setup", self._setup_plan())

    # -- TTL: a sweeper task on the event loop, as AsyncPostgresStore's ------------------------------
    # sweep_ttl, start_ttl_sweeper and stop_ttl_sweeper are coroutines here, as in AsyncPostgresStore and
    # AsyncSqliteStore (and what LangGraph's Agent Server awaits): code written for those runs unchanged.
    _sweeper_task: asyncio.Task[None] | None = None

    async def sweep_ttl(self, *, full: bool = False) -> int:
        """:meth:`~BaseS3Store.asweep_ttl` under AsyncPostgresStore's name: same arguments, result and errors."""
        return await self._arun("sweep_ttl", self._plans.sweep(full), bounded=False)

    async def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> asyncio.Task[None]:
        """Sweep expired items periodically in a task on the running loop, as AsyncPostgresStore does. A sweep
        that fails is logged and tried again at the next interval.

        Args:
            sweep_interval_minutes: Minutes between sweeps (default: ``ttl_config``'s, else 5).

        Returns:
            The task, which ends when :meth:`stop_ttl_sweeper` (or closing the store) cancels it; without a
            ``ttl_config`` nothing sweeps and the task ends at once. A sweeper already running is kept.

        Raises:
            SaverMisuseError: The store is closed.
        """
        self._bucket_io.check_open("start_ttl_sweeper")
        if self._sweeper_task is not None and not self._sweeper_task.done():
            return self._sweeper_task
        interval = self._sweep_interval_s(sweep_interval_minutes)
        if interval is None:
            return asyncio.create_task(asyncio.sleep(0))

        async def loop() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    _log_sweep(self, await self._bucket_io.arun(self._plans.sweep(), bounded=False))
                except Exception:
                    _log_failed_sweep(self)

        self._sweeper_task = asyncio.create_task(loop(), name="lgs3-store-ttl-sweeper")
        return self._sweeper_task

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Cancel the sweeper task.

        Args:
            timeout: Seconds to wait for it to end (``None``: until it does).

        Returns:
            Whether it ended within ``timeout`` (``True`` when none was running).
        """
        task = self._sweeper_task
        if task is None or task.done():
            self._sweeper_task = None
            return True
        task.cancel()
        await asyncio.wait({task}, timeout=timeout)
        if task.done():
            self._sweeper_task = None
        return task.done()

    def _stop_sweeping(self) -> None:
        task = self._sweeper_task
        if task is not None and not task.done() and not task.get_loop().is_closed():
            task.get_loop().call_soon_threadsafe(task.cancel)


__all__ = ["AsyncS3Store", "BaseS3Store", "S3Store", "StoreLayout", "StorePlans"]
