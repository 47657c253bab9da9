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
import os
import random
import threading
import uuid
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
from ._transport.asyncio_sender import AsyncioSender
from ._transport.bucket_io import BodyCache, BucketIO, ClosesAtBlockEnd, explain_boto3, speak_like_the_saver
from ._transport.direct import DirectTransport, NoCredentialsToSignWith
from ._transport.memory_bucket import MemoryBucket
from ._transport.probe import ConditionalWrites
from ._transport.watch import ClientWatch
from .errors import CorruptObjectError, InvalidConfigError, SaverMisuseError
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
unanswered gets the read timeout more to answer (:mod:`._transport.deadline`); the call ends only once all of them have.
It caps calls made of many sequential requests, and a request whose reply trickles in (its read timeout counts from the
last byte received)."""

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
    Path-style addressing is the default when an endpoint is given, as local servers expect.

    Args:
        endpoint_url: The S3 endpoint of a non-AWS server.
        region_name: The region (else ``AWS_REGION``, else botocore's chain).
        addressing_style: ``"path"``, ``"virtual"`` or ``"auto"``.
        connect_timeout: Seconds to open a connection.
        read_timeout: Seconds of silence tolerated while waiting for a reply.
        max_attempts: Attempts per request.
        max_pool_connections: Connections kept per client.
        request_checksum_calculation: botocore's setting: ``"when_required"`` or ``"when_supported"``.
        response_checksum_validation: botocore's setting: ``"when_required"`` or ``"when_supported"``.
        **client_kwargs: Credentials (``aws_access_key_id`` ...), ``verify``, ``use_ssl``, ``api_version``.

    Returns:
        The client, without ``Expect: 100-continue`` (:func:`without_expect_continue`).

    Raises:
        InvalidConfigError: An unknown keyword argument (the message names the valid ones, or the component an
            option belongs to), a setting botocore refuses, or ``AWS_PROFILE`` (``AWS_DEFAULT_PROFILE``) naming a
            profile the AWS config files do not have (botocore's ``ProfileNotFound``; the message names it).
    """
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
    from botocore.exceptions import BotoCoreError, ProfileNotFound

    try:
        client = _new_session().client(
            "s3", endpoint_url=endpoint_url, region_name=region_name, config=config, **client_kwargs
        )
    except ProfileNotFound as exc:  # AWS_PROFILE (or AWS_DEFAULT_PROFILE) names a profile the files lack
        raise InvalidConfigError(_missing_profile_message(str(exc.kwargs.get("profile", "")))) from None
    except ValueError as exc:  # botocore: an endpoint_url that is not a URL, a bad region name
        raise InvalidConfigError(f"cannot create the S3 client: {exc}") from None
    except BotoCoreError as exc:  # botocore reads the AWS config files here (e.g. one it cannot parse); sends nothing
        raise InvalidConfigError(
            f"cannot create the S3 client: {exc}. Fix the AWS configuration it names (AWS_CONFIG_FILE, "
            "AWS_SHARED_CREDENTIALS_FILE, the AWS_* environment variables)"
        ) from None
    without_expect_continue(client)
    return client


def _missing_profile_message(profile: str) -> str:
    """What to do when the AWS profile botocore was told to use does not exist; names the profiles that do."""
    import botocore.session

    variable = next(
        (name for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE") if os.environ.get(name) == profile), "the profile"
    )
    try:
        known = sorted(botocore.session.Session(profile=None).full_config.get("profiles", {}))
    except Exception:  # a config file botocore cannot read: the profiles it has stay unnamed
        known = []
    return (
        f"{variable}={profile!r} names an AWS profile that does not exist in the AWS config and credentials files "
        f"({os.environ.get('AWS_CONFIG_FILE', '~/.aws/config')}, "
        f"{os.environ.get('AWS_SHARED_CREDENTIALS_FILE', '~/.aws/credentials')}; the profiles there: "
        f"{', '.join(known) or 'none'}). Set {variable} to one of them, add the profile (aws configure --profile "
        f"{profile}), or unset {variable} to use the rest of the credential chain."
    )


_shared_loader: Any = None
_shared_loader_lock = threading.Lock()


def _new_session() -> Any:
    """A boto3 session of its own for each client, sharing one botocore data loader per process.

    A session of its own, because boto3's sessions are not safe for creating clients from several threads and a new
    one reads the credential chain and the environment as they are now. The shared loader, because each new
    session's loader otherwise parses the S3 service model and its endpoint rules from JSON again: about 0.15 s of
    CPU per client on the test machine, 0.015 s with the loader shared (which is what one session does for all its
    clients: the loader only reads botocore's and boto3's data files and caches them)."""
    import boto3
    import botocore.session

    global _shared_loader
    with _shared_loader_lock:
        core = botocore.session.get_session()
        if _shared_loader is not None:
            core.register_component("data_loader", _shared_loader)
        session = boto3.session.Session(botocore_session=core)
        loader = core.get_component("data_loader")
        # boto3 appends its own data folder to the loader's search paths for every session it is given.
        loader.search_paths[:] = list(dict.fromkeys(loader.search_paths))
        _shared_loader = loader
    return session


def without_expect_continue(client: Any) -> Any:
    """Stop ``client`` from sending ``Expect: 100-continue`` on PutObject, so a PUT costs one round trip.

    botocore adds the header to every PUT/POST with a file-like body (PutObject bodies always are) and
    then waits for the server's interim ``100 Continue`` before sending the body: a second round trip
    per PUT. Checkpoint bodies are small, so the header's only benefit (not uploading a large body the
    server would refuse) does not apply; some servers never answer it for an empty body (SeaweedFS).
    Only this client's handlers change (botocore copies the session's handlers into each client).

    Args:
        client: A boto3 S3 client.

    Returns:
        The same client.
    """
    from botocore.handlers import add_expect_header

    client.meta.events.unregister("before-call.s3", add_expect_header)
    return client


def _explain_refusal(client: Any, refused: Exception) -> None:
    """Log why ``transport="auto"`` sends every request through boto3, unless the client has no credentials: then
    every request fails with an error that says how to provide them, and a note about the transport ahead of it
    would only mislead."""
    if not isinstance(refused, NoCredentialsToSignWith):
        explain_boto3(client, "every request", f"the direct transport cannot imitate this client ({refused})")


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
    event loop (:mod:`._transport.asyncio_sender`); without it, from the thread pool over blocking sockets
    (:mod:`._transport.blocking_sender`). ``"auto"`` (the default) sends them directly while nothing but botocore
    watches the client (:mod:`._transport.watch`) and through boto3 otherwise, or always through boto3 when the direct
    transport cannot imitate the client."""
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
    in_memory = isinstance(client, MemoryBucket)
    direct: DirectTransport | None = None
    watch: ClientWatch | None = None
    contention = deadline or DEFAULT_OPERATION_TIMEOUT
    if not in_memory:
        speak_like_the_saver(client)  # before the watch looks at the client's handlers
    if not in_memory and transport != "boto3":
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
            _explain_refusal(client, refused)
    return BucketIO(
        client,
        bucket,
        max_concurrency=max_concurrency,
        put_args=put_args,
        get_args=get_args,
        copy_args=copy_args,
        expiry_tag=expiry_tag,
        direct=direct,
        native=AsyncioSender(direct) if direct and native_async else None,
        watch=watch,
        cache=cache,
        backend=client if in_memory else None,
        deadline=deadline,
        serves=serves,
        conditions=None
        if in_memory
        else _gate(client, bucket, prefix, require_conditional_writes, extra_headers, serves),
        extra_headers=extra_headers,
        contention_seconds=contention,
    )


def _gate(
    client: Any, bucket: str, prefix: str, required: bool, extra_headers: tuple[tuple[str, str], ...], serves: str
) -> ConditionalWrites:
    """The conditional-write probe's gate (:mod:`._transport.probe`): its verdict is the process's for this endpoint,
    bucket and extra headers; its objects go under the saver's prefix (IAM policies may allow no other)."""
    layout = Layout(prefix)
    return ConditionalWrites(
        endpoint=str(getattr(client.meta, "endpoint_url", "") or "(default)"),
        bucket=bucket,
        probe_key=lambda: layout.probe(uuid.uuid4().hex),
        required=required,
        extra_headers=tuple(sorted((name.lower(), value) for name, value in extra_headers)),
        serves=serves,
    )


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
            larger ones are stored once per version.
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
        cache_bytes: Memory for bodies of listed records and writes, reused while their ETag is unchanged.
        memory_bytes: Memory for the heads this saver read or committed, so a step continuing one sends no GET.
        extra_headers: Headers sent, signed, with every request (a mapping, or ``"Name:value,..."``).
        connect_timeout: Seconds to open a connection (only for the client the saver makes).
        read_timeout: Seconds of silence tolerated while waiting for a reply (only for the client the saver makes).
        max_attempts: Attempts per request for transient failures (only for the client the saver makes).
        operation_timeout: Deadline in seconds of one call (for ``list``, of each item it yields); ``None``: none.
            Maintenance calls (deletes, copies, prune, expiry, repair) are bounded per request only.
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
        self._bucket_io = make_bucket_io(
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


__all__ = ["AsyncS3Saver", "BaseS3Saver", "S3Saver", "make_client", "parse_url", "without_expect_continue"]
