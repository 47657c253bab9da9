"""The options of saver, store and node cache: the location URL's table and the constructors' checks, in one place.

One URL serves every component (``S3Saver``, ``S3Store``, ``S3Cache``, the Agent Server's factories, the
``langgraph-s3`` command): :data:`URL_OPTIONS` says how each option is parsed and which components use it, and
:func:`parse_url` hands each component its own options, ignoring the others'. An option no component knows is an
error naming it and the valid ones.

Why at construction: a wrong option found later is found in the wrong place. A ``create_bucket="no"`` is
truthy and would create the bucket; a ``max_concurrency="4"`` fails as a ``TypeError`` inside the thread
pool; an ``sse_customer_key`` of the wrong length, or an ``sse_kms_key_id`` without ``aws:kms``, is only
refused by the server at the first write, after the graph has already run a step. Each check raises
:class:`InvalidConfigError` naming the option, what it got and what it accepts.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from .errors import InvalidConfigError

_RANGES: dict[str, tuple[int, int | None, str]] = {
    "max_concurrency": (1, None, ""),
    "max_attempts": (1, None, " (attempts per request, the first included)"),
    "inline_threshold": (0, None, " bytes"),
    "compress_threshold": (0, None, " bytes (None turns compression off)"),
    "read_cache_bytes": (0, None, " (0 turns the cache off)"),
    "memory_bytes": (0, None, " (0: remember no head, every put reads it first)"),
    "ttl_days": (1, None, " days (None: nothing expires)"),
    "vector_shards": (1, 256, ""),
}
"""Whole-number options: least and greatest value, and what the number counts."""

SSE_ALGORITHMS = ("AES256", "aws:kms", "aws:kms:dsse")
"""The values S3 accepts for ``x-amz-server-side-encryption``."""


_DIRECTORY_BUCKET = re.compile(r".+--[a-z0-9-]+--x-s3")
"""S3 Express One Zone directory buckets are named ``base--zone-id--x-s3``."""
_BUCKET_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,253}[A-Za-z0-9])?")
BUCKET_RULE = (
    "letters, digits, '.', '-' and '_', beginning and ending with a letter or digit, at most 255 characters, "
    "without '..' and not an IP address (AWS's rule for new buckets is stricter: 3 to 63 lowercase letters, digits, "
    "'.' and '-')"
)
"""What every S3 server accepts in a bucket name, or once accepted (AWS's legacy names in us-east-1, GCS's
underscores): botocore's own check plus the shape no server allows. A name outside it can never be a bucket."""


def check_location(bucket: Any, prefix: Any) -> str:
    """The bucket must be a name, the prefix a string (``None``: none); returns the prefix without surrounding
    slashes.

    A directory bucket (S3 Express One Zone) is refused: its ``ListObjectsV2`` returns keys in no particular
    order and without ``StartAfter``, and the saver finds a thread's newest records, a ``before=`` page of
    history and the store's namespaces by listing keys in order. Such a bucket would not fail; it would
    answer ``list`` with the wrong checkpoints."""
    if not isinstance(bucket, str) or not bucket:
        raise InvalidConfigError(f"bucket is required: the S3 bucket's name as a string, got {bucket!r}")
    if not _BUCKET_NAME.fullmatch(bucket) or ".." in bucket or _is_ip_address(bucket):
        raise InvalidConfigError(
            f"bucket {bucket!r} is not a valid S3 bucket name: bucket names are {BUCKET_RULE}. (A key prefix goes "
            "after the bucket: s3://bucket/prefix, or prefix=.)"
        )
    if _DIRECTORY_BUCKET.fullmatch(bucket):
        raise InvalidConfigError(
            f"bucket {bucket!r} is an S3 Express One Zone directory bucket, which lists keys out of order and "
            "without StartAfter; this package reads history and namespaces through ordered listings. Use a "
            "general purpose bucket."
        )
    if prefix is None:  # as if not given: the bucket's root
        return ""
    if not isinstance(prefix, str):
        raise InvalidConfigError(f"prefix must be a string (a key prefix such as 'prod/agents'), got {prefix!r}")
    cleaned = prefix.strip("/")
    segments = cleaned.split("/")
    if cleaned and ("" in segments or "\\" in cleaned or "." in segments or ".." in segments):
        # Servers that keep objects as files (SeaweedFS) store "a//b", "a/./b" and "a\\b" under a normalised
        # path, so a listing of the prefix as written finds nothing: writes would work, history would be empty.
        raise InvalidConfigError(
            f"prefix {prefix!r} has an empty, '.' or '..' segment or a backslash, which some S3 servers "
            "normalise (the objects then live under another prefix); use plain segments such as 'prod/agents'"
        )
    return cleaned


def _is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_OWN_HEADERS = frozenset(
    {
        "host",
        "authorization",
        "content-length",
        "content-md5",
        "content-encoding",
        "transfer-encoding",
        "connection",
        "expect",
        "if-match",
        "if-none-match",
        "x-amz-date",
        "x-amz-content-sha256",
        "x-amz-security-token",
        "x-amz-tagging",
        "x-amz-checksum-mode",
        "x-amz-sdk-checksum-algorithm",
        "x-amz-trailer",
    }
)
"""Headers the transports set themselves (signing, framing, conditions, tagging, checksums)."""
_OWN_HEADER_PREFIXES = ("x-amz-checksum-", "x-amz-server-side-encryption")


def check_extra_headers(headers: Any) -> tuple[tuple[str, str], ...]:
    """``extra_headers``: a mapping of header names to values, or the URL's ``Name:value,Name:value``; returns the
    pairs. Refused: a name that is not an HTTP token, a value that is not one line of ASCII (both would change the
    request's framing or its signature), and the headers the transports set themselves (signing, conditions,
    checksums, encryption: use the options for those)."""
    pairs = _header_pairs(headers)
    for name, value in pairs:
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            raise InvalidConfigError(f"extra_headers: {name!r} is not an HTTP header name")
        if not isinstance(value, str) or not value.isascii() or not value.isprintable():
            raise InvalidConfigError(f"extra_headers: the value of {name} must be one line of ASCII, got {value!r}")
        lowered = name.lower()
        if lowered in _OWN_HEADERS or lowered.startswith(_OWN_HEADER_PREFIXES):
            raise InvalidConfigError(
                f"extra_headers: {name} is set by the saver itself (signing, conditions, checksums, encryption); "
                "use the matching option instead"
            )
    if len({name.lower() for name, _ in pairs}) != len(pairs):
        raise InvalidConfigError(f"extra_headers names a header twice: {headers!r}")
    return tuple((str(name), str(value)) for name, value in pairs)


def _header_pairs(headers: Any) -> list[tuple[Any, Any]]:
    if headers is None or headers == "":
        return []
    if isinstance(headers, Mapping):
        return list(headers.items())
    if isinstance(headers, (tuple, list)) and all(isinstance(p, tuple) and len(p) == 2 for p in headers):
        return list(headers)
    if not isinstance(headers, str):
        raise InvalidConfigError(f"extra_headers must map header names to values, got {headers!r}")
    pairs: list[tuple[Any, Any]] = []
    for item in headers.split(","):
        name, colon, value = item.partition(":")
        if not colon:
            raise InvalidConfigError(f"extra_headers={headers!r}: expected Name:value pairs separated by commas")
        pairs.append((name.strip(), value.strip()))
    return pairs


def check_whole_numbers(**values: Any) -> None:
    """Each value must be an ``int`` (not a ``bool``) within its option's range; ``None`` means "off"
    and is only passed for the options that have an off."""
    for name, value in values.items():
        if value is None:
            continue
        least, greatest, unit = _RANGES[name]
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidConfigError(f"{name} must be a whole number{unit}, got {value!r}")
        if value < least or (greatest is not None and value > greatest):
            bounds = f">= {least}" if greatest is None else f"between {least} and {greatest}"
            raise InvalidConfigError(f"{name} must be {bounds}{unit}, got {value!r}")


def check_flags(**flags: Any) -> None:
    for name, flag in flags.items():
        if not isinstance(flag, bool):
            raise InvalidConfigError(f"{name} must be True or False, got {flag!r}")


def check_serde(serde: Any) -> None:
    """A serializer LangGraph can use: ``dumps_typed``/``loads_typed`` (``SerializerProtocol``), or the older
    ``dumps``/``loads``, which LangGraph wraps (``maybe_add_typed_methods``)."""

    def has(*methods: str) -> bool:
        return all(callable(getattr(serde, method, None)) for method in methods)

    if serde is not None and not (has("dumps_typed", "loads_typed") or has("dumps", "loads")):
        raise InvalidConfigError(
            "serde must be a LangGraph serializer with dumps_typed/loads_typed (for example "
            f"JsonPlusSerializer(), or EncryptedSerializer), got {serde!r}"
        )


def check_encryption(server_side_encryption: Any, sse_kms_key_id: Any, sse_customer_key: Any) -> None:
    """Server-side encryption the way S3 accepts it, so that the first write is not the one to refuse it."""
    if server_side_encryption is not None and server_side_encryption not in SSE_ALGORITHMS:
        raise InvalidConfigError(
            f"server_side_encryption must be one of {', '.join(SSE_ALGORITHMS)}, got {server_side_encryption!r}"
        )
    if sse_kms_key_id is not None:
        if not isinstance(sse_kms_key_id, str) or not sse_kms_key_id:
            raise InvalidConfigError(f"sse_kms_key_id must be a KMS key id or ARN, got {sse_kms_key_id!r}")
        if server_side_encryption not in ("aws:kms", "aws:kms:dsse"):
            raise InvalidConfigError(
                "sse_kms_key_id needs server_side_encryption='aws:kms' (or 'aws:kms:dsse'); "
                f"got server_side_encryption={server_side_encryption!r}"
            )
    if sse_customer_key is not None:
        if server_side_encryption is not None:
            raise InvalidConfigError(
                "sse_customer_key (SSE-C, your key) and server_side_encryption (S3's or KMS's key) exclude each "
                "other; pass one of them"
            )
        key = sse_customer_key.encode() if isinstance(sse_customer_key, str) else sse_customer_key
        if not isinstance(key, bytes) or len(key) != 32:
            length = f"{len(key)} bytes" if isinstance(key, bytes) else type(sse_customer_key).__name__
            raise InvalidConfigError(
                f"sse_customer_key must be a 256-bit AES key: 32 bytes (or a string of 32 UTF-8 bytes), got {length}"
            )


def check_seconds(name: str, value: Any) -> float:
    """A positive, finite number of seconds (a URL string or a number)."""
    if isinstance(value, bool):
        raise InvalidConfigError(f"{name}={value!r} must be a number of seconds")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{name}={value!r} must be a number of seconds") from None
    if not seconds > 0 or seconds == float("inf"):
        raise InvalidConfigError(f"{name}={value!r} must be a positive number of seconds")
    return seconds


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def parse_flag(name: str, value: str) -> bool:
    """A boolean option, strictly: ``true/false``, ``1/0``, ``yes/no``, ``on/off`` (any case), nothing else.

    Shared by the location URL and the Agent Server's environment, so ``create_bucket=ture`` is an error
    everywhere rather than a silent ``False``.
    """
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise InvalidConfigError(f"{name}={value!r}: expected true/false (or 1/0, yes/no, on/off)")


# ------------------------------------------------------------------------------------------------
# The location URL: s3://bucket/prefix?option=value&...
# ------------------------------------------------------------------------------------------------
TRANSPORTS = ("auto", "boto3", "direct")
"""Who sends GET, PUT and LIST: by default (``auto``) the direct transport unless something watches the
boto3 client (:mod:`._transport.watch`), else always boto3 or always direct."""
CHECKSUM_SETTINGS = ("when_required", "when_supported")
"""botocore's ``request_checksum_calculation`` / ``response_checksum_validation``. The clients the saver makes use
``when_required``: botocore >= 1.36 otherwise adds CRC32 checksums to every PutObject (over https an aws-chunked body
with a trailer) and asks for them on every GetObject, which several S3 providers reject (GCS, B2, older MinIO and
Ceph); the direct transport does what the client's setting says, so both transports send the same headers."""

SAVER, STORE, CACHE = "saver", "store", "cache"
"""The components a location URL configures (the Agent Server and the CLI build them from it)."""


def _text(name: str, value: str) -> str:
    if not value:
        raise InvalidConfigError(f"URL option {name} needs a value")
    return value


def _whole_number(name: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise InvalidConfigError(f"URL option {name}={value!r} must be a whole number") from None
    check_whole_numbers(**{name: number})
    return number


def _one_of(*choices: str) -> Callable[[str, str], str]:
    def parse(name: str, value: str) -> str:
        if value not in choices:
            raise InvalidConfigError(f"URL option {name}={value!r} must be one of {', '.join(choices)}")
        return value

    return parse


def _headers(name: str, value: str) -> tuple[tuple[str, str], ...]:
    return check_extra_headers(value)


@dataclass(frozen=True)
class UrlOption:
    """How a URL option's text becomes its value, which components use it, and their keyword for it."""

    parse: Callable[[str, str], Any]
    used_by: frozenset[str]
    keyword: str = ""
    """The constructors' keyword argument, when it is not the option's name."""


_ALL = frozenset({SAVER, STORE, CACHE})
_SAVER_AND_CACHE = frozenset({SAVER, CACHE})

URL_OPTIONS: dict[str, UrlOption] = {
    "endpoint_url": UrlOption(_text, _ALL),
    "region": UrlOption(_text, _ALL, keyword="region_name"),
    "addressing_style": UrlOption(_one_of("path", "virtual", "auto"), _ALL),
    "connect_timeout": UrlOption(check_seconds, _ALL),
    "read_timeout": UrlOption(check_seconds, _ALL),
    "operation_timeout": UrlOption(check_seconds, _ALL),
    "max_attempts": UrlOption(_whole_number, _ALL),
    "inline_threshold": UrlOption(_whole_number, frozenset({SAVER})),
    "compress_threshold": UrlOption(_whole_number, _ALL),
    "max_concurrency": UrlOption(_whole_number, _ALL),
    "ttl_days": UrlOption(_whole_number, _SAVER_AND_CACHE),
    "read_cache_bytes": UrlOption(_whole_number, frozenset({SAVER})),
    "memory_bytes": UrlOption(_whole_number, frozenset({SAVER})),
    "vector_shards": UrlOption(_whole_number, frozenset({STORE})),
    "create_bucket": UrlOption(parse_flag, _ALL),
    "require_conditional_writes": UrlOption(parse_flag, _ALL),
    "server_side_encryption": UrlOption(_text, _ALL),
    "sse_kms_key_id": UrlOption(_text, _ALL),
    "sse_customer_key": UrlOption(_text, _ALL),
    "transport": UrlOption(_one_of(*TRANSPORTS), _ALL),
    "extra_headers": UrlOption(_headers, _ALL),
    "request_checksum_calculation": UrlOption(_one_of(*CHECKSUM_SETTINGS), _ALL),
    "response_checksum_validation": UrlOption(_one_of(*CHECKSUM_SETTINGS), _ALL),
}
"""Every option the location URL accepts (docs/operations.md, "The location URL"): its parser and its users.
A component ignores the options it does not use, so one URL configures saver, store and cache alike."""


def parse_url(url: str, *, used_by: str | None = None) -> tuple[str, str, dict[str, Any]]:
    """Split ``s3://bucket/prefix?option=value`` into bucket, prefix and typed options, keyed by the
    constructors' keyword arguments (``region`` becomes ``region_name``).

    Every option is parsed to its type (booleans strictly, see :func:`parse_flag`) and checked, whichever
    component uses it; with ``used_by`` (``"saver"``, ``"store"`` or ``"cache"``) only that component's options
    are returned, the others' are dropped. An option no component knows raises :class:`InvalidConfigError`
    naming it and the valid ones.
    """
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise InvalidConfigError(f"expected a URL like 's3://bucket/prefix', got {url!r}")
    options: dict[str, Any] = {}
    for name, text in parse_qsl(parts.query, keep_blank_values=True):
        option = URL_OPTIONS.get(name)
        if option is None:
            raise InvalidConfigError(f"unknown URL option {name!r}; valid options: {', '.join(sorted(URL_OPTIONS))}")
        value = option.parse(name, text)
        if used_by is None or used_by in option.used_by:
            options[option.keyword or name] = value
    return parts.netloc, parts.path.strip("/"), options


# -- defaults -----------------------------------------------------------------------------------------------
DEFAULT_INLINE_THRESHOLD = 4096
DEFAULT_COMPRESS_THRESHOLD = 4096
DEFAULT_READ_CACHE_BYTES = 32 * 1024 * 1024

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
