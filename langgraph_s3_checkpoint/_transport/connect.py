"""Opening a bucket: the boto3 client a saver, store or cache makes for itself, and the I/O shell it runs its plans
through. One function, :func:`open_bucket`, does for all three what each constructor did alike: check the location,
make the client (or refuse client options next to a given one), and make the :class:`~.bucket_io.BucketIO` with the
transport, encryption arguments, read cache, deadline and conditional-write probe."""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._protocol.keys import Layout
from ..errors import InvalidConfigError
from ..options import (
    CHECKSUM_SETTINGS,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_OPERATION_TIMEOUT,
    DEFAULT_READ_TIMEOUT,
    TRANSPORTS,
    URL_OPTIONS,
    check_encryption,
    check_extra_headers,
    check_flags,
    check_location,
    check_seconds,
    check_whole_numbers,
)
from .asyncio_sender import AsyncioSender
from .boto3_calls import speak_like_the_saver
from .bucket_io import BucketIO, ReadCache, explain_boto3
from .direct import DirectTransport, NoCredentialsToSignWith
from .memory_bucket import MemoryBucket
from .probe import ConditionalWrites
from .watch import ClientWatch

logger = logging.getLogger("langgraph_s3_checkpoint")

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
    cache: ReadCache | None = None,
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


@dataclass(frozen=True)
class OpenBucket:
    """What :func:`open_bucket` made: the checked prefix, the client, the I/O shell and the per-call deadline."""

    prefix: str
    client: Any
    bucket_io: BucketIO
    deadline: float | None


def open_bucket(
    serves: str,
    *,
    bucket: str,
    prefix: str,
    client: Any,
    client_options: dict[str, Any],
    max_concurrency: int,
    create_bucket: bool,
    require_conditional_writes: bool,
    server_side_encryption: str | None,
    sse_kms_key_id: str | None,
    sse_customer_key: str | None,
    transport: str,
    extra_headers: Mapping[str, str] | str | None,
    operation_timeout: float | None,
    expiry_tag: str | None = None,
    cache: ReadCache | None = None,
    native_async: bool = False,
) -> OpenBucket:
    """The opening step every face (``serves``: ``"saver"``, ``"store"`` or ``"cache"``) shares: check the location,
    flags, encryption and headers; make the client with ``client_options`` (connection pool sized for
    ``max_concurrency``), or refuse them next to a ``client`` the caller made; make the I/O shell.

    Raises:
        InvalidConfigError: A malformed location or option, or client options beside a given client.
    """
    prefix = check_location(bucket, prefix)
    check_whole_numbers(max_concurrency=max_concurrency)
    check_flags(create_bucket=create_bucket, require_conditional_writes=require_conditional_writes)
    check_encryption(server_side_encryption, sse_kms_key_id, sse_customer_key)
    headers = check_extra_headers(extra_headers)
    deadline = None if operation_timeout is None else check_seconds("operation_timeout", operation_timeout)
    options = {name: value for name, value in client_options.items() if value is not None}
    if client is None:
        options.setdefault("max_pool_connections", max(64, max_concurrency * 2))
        client = make_client(**options)
    elif options:
        raise InvalidConfigError(
            f"client options {sorted(options)} only apply when the {serves} creates the client; set them on your "
            "client (botocore.config.Config) instead"
        )
    bucket_io = make_bucket_io(
        client,
        bucket,
        prefix=prefix,
        require_conditional_writes=require_conditional_writes,
        extra_headers=headers,
        max_concurrency=max_concurrency,
        server_side_encryption=server_side_encryption,
        sse_kms_key_id=sse_kms_key_id,
        sse_customer_key=sse_customer_key,
        transport=transport,
        expiry_tag=expiry_tag,
        cache=cache,
        deadline=deadline,
        native_async=native_async,
        serves=serves,
    )
    return OpenBucket(prefix, client, bucket_io, deadline)
