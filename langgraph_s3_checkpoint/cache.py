"""``S3Cache``: LangGraph's node cache (``BaseCache``) on the saver's bucket, so saver, store and cache need no
database.

A node compiled with a ``CachePolicy`` asks the cache, before each superstep, for the writes it produced the last
time it ran on the same input, and stores its writes after it ran. Workers that share only a bucket then share
those results: a node one of them computed is served to the others.

Same design as the saver and the store: every operation is a *plan* (a generator yielding batches of independent
requests) in :class:`~._protocol.cache_plans.CachePlans`, with the cache's layout and the bytes of an entry, driven by
``BucketIO.run`` (the sync methods) or ``BucketIO.arun`` (the async ones) over the shared I/O shell. Its optional
``setup`` is the saver's. See docs/design.md, "Node cache".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from langgraph.cache.base import BaseCache, FullKey, Namespace, ValueT
from langgraph.checkpoint.serde.base import SerializerProtocol, maybe_add_typed_methods

from ._protocol import expiry
from ._protocol.cache_plans import (
    CACHE_FOLDER,
    LONGEST_ENTRY_KEY,
    CacheCodec,
    CachedNamespace,
    CacheLayout,
    CachePlans,
    CacheSweep,
    age_of,
    utc_now,
)
from ._protocol.checkpoint_plans import CheckpointPlans
from ._protocol.codec import Codec
from ._protocol.keys import (
    EXPIRY_TAG,
    MAX_KEY_BYTES,
    Layout,
    key_bytes,
)
from ._protocol.requests import Plan
from ._transport.bucket_io import BucketIO, ClosesAtBlockEnd
from ._transport.connect import open_bucket
from .errors import (
    InvalidConfigError,
)
from .options import (
    CACHE,
    DEFAULT_COMPRESS_THRESHOLD,
    DEFAULT_OPERATION_TIMEOUT,
    check_serde,
    check_whole_numbers,
    parse_url,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")


class S3Cache(ClosesAtBlockEnd, BaseCache[ValueT]):
    """LangGraph's node cache in an S3 bucket, beside the saver's threads and the store's items.

    ```python
    with S3Cache.from_conn_string("s3://agent-state/prod") as cache:
        graph = builder.compile(checkpointer=saver, store=store, cache=cache)
    ```
    One class serves the sync and the async graph methods (``get``/``aget``, ``set``/``aset``,
    ``clear``/``aclear``) and both ``with`` and ``async with``. Options are the saver's (``from_conn_string``
    takes the same URL; ``ttl_days`` tags entries for the lifecycle rule ``setup()`` installs). ``now`` is this
    machine's clock, for tests; expiry is judged by the server's clock (:func:`age_of`).

    Args:
        bucket: The bucket's name.
        prefix: The key prefix (the saver's, if they share one: entries live under ``cache/``).
        client: A boto3 S3 client (or a :class:`~.memory.MemoryBucket`); by default one the cache makes from
            ``client_options``.
        serde: The serializer of cached values; by default LangGraph's.
        compress_threshold: As the saver's.
        max_concurrency: As the saver's.
        create_bucket: As the saver's.
        require_conditional_writes: Refuse a server that does not enforce conditional writes, as the saver does.
            Off by default: the cache needs none (``set`` is a plain PUT, the last writer wins), and on such a
            server it sends none (its sweep checks each conditional delete with a LIST first, so a sweep racing a
            ``set`` may delete the entry just written: a miss, never a wrong or expired value).
        server_side_encryption: As the saver's.
        sse_kms_key_id: As the saver's.
        sse_customer_key: As the saver's.
        ttl_days: As the saver's: tag entries for the lifecycle rule.
        transport: As the saver's.
        operation_timeout: Deadline in seconds of ``get`` and ``set`` (``clear`` and sweeps are bounded per
            request only).
        extra_headers: As the saver's.
        now: This machine's clock, for tests.
        **client_options: Settings of the client the cache makes (``endpoint_url``, ``region_name`` ...).

    Raises:
        InvalidConfigError: An option is malformed or out of range, the prefix is too long for entries' keys, or
            client options were given beside ``client=``.

    Errors every call may raise, besides those its docstring names (all are :class:`S3CheckpointError`):
    :class:`S3RequestError` (the endpoint is unreachable, silent or failing after retries, or the call passed
    ``operation_timeout``), :class:`S3AccessError`, :class:`BucketNotFoundError`,
    :class:`ConditionalWritesUnsupportedError` (at the first write, only with ``require_conditional_writes=True``)
    and :class:`SaverMisuseError` (a call on a closed cache).
    """

    def __init__(
        self,
        *,
        bucket: str,
        prefix: str = "",
        client: Any = None,
        serde: SerializerProtocol | None = None,
        compress_threshold: int | None = DEFAULT_COMPRESS_THRESHOLD,
        max_concurrency: int = 32,
        create_bucket: bool = False,
        require_conditional_writes: bool = False,
        server_side_encryption: str | None = None,
        sse_kms_key_id: str | None = None,
        sse_customer_key: str | None = None,
        ttl_days: int | None = None,
        transport: str = "auto",
        operation_timeout: float | None = DEFAULT_OPERATION_TIMEOUT,
        extra_headers: Mapping[str, str] | str | None = None,
        now: Callable[[], datetime] | None = None,
        **client_options: Any,
    ) -> None:
        check_serde(serde)
        super().__init__(serde=serde)
        self.serde = maybe_add_typed_methods(self.serde)
        check_whole_numbers(compress_threshold=compress_threshold, ttl_days=ttl_days)
        opened = open_bucket(
            "cache",
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
            expiry_tag=EXPIRY_TAG if ttl_days else None,
            native_async=True,  # the async methods send from the loop with the direct transport, as the store's
        )
        layout = CacheLayout(opened.prefix)
        if key_bytes(layout.root) - len(CACHE_FOLDER) + LONGEST_ENTRY_KEY > MAX_KEY_BYTES:
            opened.bucket_io.close()
            raise InvalidConfigError(
                f"prefix {opened.prefix!r} is too long for the node cache: its entries' keys could pass S3's "
                f"{MAX_KEY_BYTES} bytes. Use a prefix of at most {MAX_KEY_BYTES - LONGEST_ENTRY_KEY - 1} bytes"
            )
        self.bucket = bucket
        self.prefix = opened.prefix
        self.client = opened.client
        self.create_bucket = create_bucket
        self.require_conditional_writes = require_conditional_writes
        self.ttl_days = ttl_days
        self._bucket_io = opened.bucket_io
        self._codec = Codec(self.serde, compress_threshold=compress_threshold)
        self._plans = CachePlans(layout, CacheCodec(self._codec), now or utc_now)

    @classmethod
    def from_conn_string(cls, url: str, **kwargs: Any) -> S3Cache[Any]:
        """A cache at a location URL, as :meth:`.S3Saver.from_conn_string`: use it in ``with`` or ``async with``,
        which close it at the block's end, or as it is, and call :meth:`close` when done.

        Args:
            url: ``s3://bucket/prefix?option=value&...`` (the saver's URL; options only the saver or the store use
                are ignored).
            **kwargs: Options that override the URL's.

        Returns:
            The cache.

        Raises:
            InvalidConfigError: The URL is not ``s3://bucket/...``, or an option is unknown or malformed.
        """
        bucket, prefix, options = parse_url(url, used_by=CACHE)
        options.update(kwargs)
        return cls(bucket=bucket, prefix=prefix, **options)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(bucket={self.bucket!r}, prefix={self.prefix!r})"

    @property
    def plans(self) -> CachePlans:
        """The cache's plans: the handle for tools (the CLI), which run them through :attr:`bucket_io`."""
        return self._plans

    @property
    def bucket_io(self) -> BucketIO:
        """The I/O shell that runs this cache's plans."""
        return self._bucket_io

    def close(self) -> None:
        """Release the worker threads and connections. Idempotent; every later call raises
        :class:`SaverMisuseError` naming it (``with``/``async with`` blocks end with this)."""
        self._bucket_io.close()

    # -- drivers: get and set are held to operation_timeout; clear and sweep walk a whole folder ------------
    def _run(self, what: str, plan: Plan[T], *, bounded: bool = True) -> T:
        self._bucket_io.check_open(what)
        return self._bucket_io.run(plan, bounded=bounded)

    async def _arun(self, what: str, plan: Plan[T], *, bounded: bool = True) -> T:
        self._bucket_io.check_open(what)
        return await self._bucket_io.arun(plan, bounded=bounded)

    def _setup_plan(self) -> Plan[None]:
        core = CheckpointPlans(
            layout=Layout(self.prefix),
            codec=self._codec,
            ttl=timedelta(days=self.ttl_days) if self.ttl_days else None,
        )
        yield from core.setup(create_bucket=self.create_bucket, bucket=self.bucket)
        yield from expiry.file_if_empty(self._plans.expiring)  # an empty cache's first sweep need not list it all

    # -- BaseCache ------------------------------------------------------------------------------------------
    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        """The cached values of ``keys``, read in one round trip.

        An expired, missing or unreadable entry (damaged, another format, a serializer without its key) is a miss;
        an unreadable one is also a warning on the ``langgraph_s3_checkpoint.cache`` logger.

        Args:
            keys: ``(namespace, key)`` pairs.

        Returns:
            The values found, by key.

        Raises:
            InvalidArgumentTypeError: A namespace is not a tuple of strings, or a key is not a string.
            S3CheckpointError: An error every call may raise (see the class docstring).
        """
        return self._run("get", self._plans.get(keys))

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        """:meth:`get`, awaited: same arguments, result and errors."""
        return await self._arun("aget", self._plans.get(keys))

    def set(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        """Store values, one PUT each, in one round trip: the last writer wins, and readers see whole entries.

        Args:
            pairs: ``(namespace, key)`` -> ``(value, ttl)``, the TTL in seconds (``None``: never expires).

        Raises:
            InvalidArgumentTypeError: A namespace, key or TTL is of the wrong type.
            InvalidConfigError: An entry would be larger than one S3 object holds; nothing was cached.
            SerializationError: A value cannot be serialized.
            S3CheckpointError: An error every call may raise (see the class docstring).
        """
        self._run("set", self._plans.set(pairs))

    async def aset(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        """:meth:`set`, awaited: same arguments and errors."""
        await self._arun("aset", self._plans.set(pairs))

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """Delete the entries of some namespaces, or of the whole cache.

        Args:
            namespaces: The namespaces to clear; ``None``: every one.

        Raises:
            InvalidArgumentTypeError: A namespace is not a tuple of strings.
            S3CheckpointError: An error every call may raise (see the class docstring).
        """
        self._run("clear", self._plans.clear(namespaces), bounded=False)

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """:meth:`clear`, awaited: same arguments and errors."""
        await self._arun("aclear", self._plans.clear(namespaces), bounded=False)

    # -- the rest of the API ---------------------------------------------------------------------------------
    def setup(self) -> None:
        """Check the bucket (creating it with ``create_bucket=True``) as the saver's ``setup`` does; with
        ``ttl_days``, install the lifecycle rule that expires tagged objects under the prefix. Optional: the cache
        works without it.

        Raises:
            BucketNotFoundError: The bucket does not exist and ``create_bucket`` is not set.
            ConditionalWritesUnsupportedError: The server does not enforce conditional writes and
                ``require_conditional_writes=True``.
            InvalidConfigError: The server did not keep the lifecycle rule for ``ttl_days`` as sent.
            S3CheckpointError: An error every call may raise (see the class docstring).
        """
        self._run("setup", self._setup_plan())

    async def asetup(self) -> None:
        """:meth:`setup`, awaited: same effect and errors."""
        await self._arun("asetup", self._setup_plan())

    def sweep(self, *, dry_run: bool = False, full: bool = False) -> CacheSweep:
        """Delete every expired entry now (reads never return one anyway: a sweep only reclaims space).

        Reads the entries whose expiry marker came due, not the others; an entry rewritten since it was read stays,
        and one that cannot be read is left and listed in the result.

        Args:
            dry_run: Only count what would be deleted.
            full: Read every entry, not only those whose marker came due (after processes of a release before
                expiry markers wrote entries while this one already swept).

        Returns:
            What the sweep read, found expired, deleted and left.

        Raises:
            S3CheckpointError: An error every call may raise (see the class docstring).
        """
        return self._run("sweep", self._plans.sweep(dry_run=dry_run, full=full), bounded=False)

    async def asweep(self, *, dry_run: bool = False, full: bool = False) -> CacheSweep:
        """:meth:`sweep`, awaited: same arguments, result and errors."""
        return await self._arun("asweep", self._plans.sweep(dry_run=dry_run, full=full), bounded=False)


__all__ = ["CacheLayout", "CachePlans", "CacheSweep", "CachedNamespace", "S3Cache", "age_of"]
