"""The direct transport: GET, PUT and LIST sent as plain signed HTTP requests, without botocore's pipeline.

Why it exists. A checkpoint step is three small requests, and on a fast local S3 server the client's
CPU, not the network, sets the pace: one boto3 ``PutObject`` costs several times the CPU of the same request
signed here and sent over a socket (docs/benchmarks.md, "The direct transport"). Under the GIL that
CPU is also what caps the async saver's throughput. botocore spends it on its event hooks, parameter
validation, the flexible-checksum and ``Expect: 100-continue`` handshakes and generic XML parsing, none of
which a checkpoint's small, single-shot objects need.

What it keeps from the boto3 client it is built from: credentials (refreshable ones are re-read for every
request), the bucket's URL and signing region as botocore's endpoint rules resolve them, timeouts, the
retry budget (:mod:`.retries`, shared with the boto3 path: 5xx, throttling, 409 conflicts and connection
errors), the CA bundle and the client's checksum settings. Everything other than the three hot requests
(deletes, copies, bucket and lifecycle calls) still goes through boto3.

Two senders share everything but the sending: :meth:`DirectTransport.exchanges` signs each attempt, reads each
answer and decides retries and backoff, without I/O; :meth:`DirectTransport.execute` sends over blocking sockets
(:mod:`.blocking_sender`: the sync saver, and the async saver's worker threads),
:class:`.asyncio_sender.AsyncioSender` from the event loop (the async saver).

What it gives up: event hooks, stubbers and patches on the client do not see these requests, it follows no
redirects (:class:`WrongRegionError`), and clients it cannot faithfully imitate (a proxy, from the client's
setting or from ``HTTP_PROXY``/``HTTPS_PROXY``; unsigned or non-SigV4 signing; S3 access-point or Outposts
ARNs) are refused with :class:`InvalidConfigError` rather than half-supported or silently bypassed. The
default transport (``"auto"``) therefore uses it only while nothing watches the client (:mod:`.watch`), for
clients it accepts, until a redirect; ``transport="direct"`` uses it always.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Callable, Generator, Mapping
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, unquote_plus, urlsplit

from botocore.httpsession import get_cert_path

from .._protocol.plans import Steps
from .._protocol.requests import (
    PRECONDITION_FAILED,
    Create,
    Get,
    ListKeys,
    Page,
    Put,
    StoredObject,
    Update,
    Written,
    condition_failed,
    named_in_errors,
)
from ..errors import InvalidConfigError, NotS3EndpointError, WrongRegionError, unreachable
from .blocking_sender import BlockingSender, tls_context
from .deadline import Attempts, Deadline
from .http1 import Exchange, Failure, Response
from .retries import RETRY_STATUS, Kind, Retries, final_error, kind_of

_ERROR_CODE = re.compile(rb"<Code>([^<]*)</Code>")
_ERROR_REGION = re.compile(rb"<Region>([^<]*)</Region>")
_REDIRECT_CODES = {"PermanentRedirect", "TemporaryRedirect", "AuthorizationHeaderMalformed"}
"""What S3 answers a request sent or signed for the wrong region (301, 307; 400 naming the right region)."""
_S3_HEADERS = ("x-amz-request-id", "x-amz-id-2", "x-amz-bucket-region")
"""Headers every S3 implementation sends; an error reply with neither these nor an S3 error body is not S3."""

_HEADER_OF = {
    "IfNoneMatch": "if-none-match",
    "IfMatch": "if-match",
    "Tagging": "x-amz-tagging",
    "ServerSideEncryption": "x-amz-server-side-encryption",
    "SSEKMSKeyId": "x-amz-server-side-encryption-aws-kms-key-id",
    "SSECustomerAlgorithm": "x-amz-server-side-encryption-customer-algorithm",
    "ContentMD5": "content-md5",
}


def put_arguments(request: Put, extra: Mapping[str, Any], expiry_tag: str | None) -> dict[str, Any]:
    """PutObject arguments (boto3 names) beyond bucket, key and body; both transports send these.

    ``Content-MD5`` on every PUT: a body cut short (a process killed while sending it, a connection reset) is then
    refused by the server instead of stored short. SeaweedFS stored a truncated head PUT as an empty object, which
    left the thread unreadable after a crash; Content-MD5 is the integrity check every S3 implementation knows
    (botocore's CRC32 checksums, which also caught it, are off: several providers reject them)."""
    args = dict(extra)
    args["ContentMD5"] = base64.b64encode(hashlib.md5(request.body, usedforsecurity=False).digest()).decode()
    if isinstance(request.mode, Create):
        args["IfNoneMatch"] = "*"
    elif isinstance(request.mode, Update):
        args["IfMatch"] = request.mode.etag
    if expiry_tag and request.expires:
        args["Tagging"] = expiry_tag
    return args


_QUERY_OF = {
    "Prefix": "prefix",
    "MaxKeys": "max-keys",
    "Delimiter": "delimiter",
    "ContinuationToken": "continuation-token",
    "StartAfter": "start-after",
}


def list_arguments(request: ListKeys) -> dict[str, Any]:
    """ListObjectsV2 arguments (boto3 names) beyond the bucket; both transports send these."""
    args: dict[str, Any] = {"Prefix": request.prefix, "MaxKeys": request.max_keys}
    if request.delimiter:
        args["Delimiter"] = request.delimiter
    if request.token:
        args["ContinuationToken"] = request.token
    elif request.start_after:
        args["StartAfter"] = request.start_after
    return args


def headers_for(args: Mapping[str, Any]) -> dict[str, str]:
    """The HTTP headers for boto3-style request arguments (conditions, tagging, server-side encryption)."""
    headers: dict[str, str] = {}
    for name, value in args.items():
        if name in _HEADER_OF:
            headers[_HEADER_OF[name]] = str(value)
        elif name == "SSECustomerKey":
            # boto3 does this for its callers: the key travels base64-encoded, with its MD5.
            key = value.encode() if isinstance(value, str) else bytes(value)
            headers["x-amz-server-side-encryption-customer-key"] = base64.b64encode(key).decode()
            headers["x-amz-server-side-encryption-customer-key-md5"] = base64.b64encode(
                hashlib.md5(key).digest()
            ).decode()
        else:
            raise InvalidConfigError(f"transport='direct' does not support the request argument {name!r}")
    return headers


Exchanges = Generator["Exchange | float", "Response | Failure | None", Any]
"""What :meth:`DirectTransport.exchanges` yields: an :class:`Exchange` to send (answer: the response, or the
:class:`Failure` that sending it met), or seconds to wait before the next attempt (answer: ``None``). Its
return value is the request's reply; it raises the package's error when the request fails for good."""


class NoCredentialsToSignWith(InvalidConfigError):
    """The client has no credentials (botocore resolved none when it was made, and does not look again).

    Not a reason to log that ``transport="auto"`` falls back to boto3: every request then fails with botocore's
    NoCredentialsError, which the I/O shell turns into an error that says how to provide them."""


class DirectTransport:
    """Sends :class:`Get`, :class:`Put` and :class:`ListKeys` for one bucket as signed HTTP requests.

    Everything but the sending is pure and shared with the asyncio sender (:mod:`.asyncio_sender`):
    :meth:`exchanges` signs each attempt, reads each answer into a reply or a failure and decides the
    backoff; :meth:`execute` only sends over blocking sockets (:mod:`.blocking_sender`) and sleeps with
    ``time.sleep``."""

    def __init__(
        self,
        client: Any,
        bucket: str,
        *,
        put_args: Mapping[str, Any] | None = None,
        get_args: Mapping[str, Any] | None = None,
        expiry_tag: str | None = None,
        max_connections: int = 64,
        contention_seconds: float = 60.0,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        config = client.meta.config
        self._credentials: Any = _check_client(client, bucket)
        url, region = bucket_endpoint(client, bucket)
        endpoint = urlsplit(url)
        self.hostname = str(endpoint.hostname)
        self._host = self.hostname if endpoint.port is None else f"{self.hostname}:{endpoint.port}"
        self._path = endpoint.path.rstrip("/")
        self._endpoint = f"{endpoint.scheme}://{self._host}"
        """As errors name the endpoint (boto3's ``endpoint_url``, for both transports)."""
        self._region = region
        self.https = endpoint.scheme == "https"
        self.port = endpoint.port or (443 if self.https else 80)
        self.max_attempts = int((config.retries or {}).get("total_max_attempts") or 3)
        self.connect_timeout = float(config.connect_timeout)
        self.read_timeout = float(config.read_timeout)
        self.max_connections = max(config.max_pool_connections or 10, max_connections)
        self.ca_certs: str | bool = get_cert_path(client._endpoint.http_session._verify)
        """botocore's ``verify`` as it applies it: a CA bundle path (by default the one botocore uses, certifi's)
        or ``False`` (no verification)."""
        self.client_cert: str | tuple[str, str] | None = config.client_cert
        """botocore's ``client_cert``: the certificate presented to servers that ask for one (mutual TLS)."""
        self._connections = BlockingSender(
            self.hostname,
            self.port,
            tls=tls_context(self.ca_certs, self.client_cert) if self.https else None,
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
            max_idle=self.max_connections,
        )
        self._put_args = dict(put_args or {})
        self._get_headers = headers_for(get_args or {})
        headers_for(self._put_args)  # refuse unsupported arguments now, not at the first put
        self.expiry_tag = expiry_tag
        self.contention_seconds = contention_seconds
        """How long a throttled or 409-conflicting request keeps trying (:class:`.retries.Retries`)."""
        self._extra_headers = {name.lower(): value for name, value in (extra_headers or {}).items()}
        """Sent with every request (``extra_headers``: Tigris's ``X-Tigris-Consistent``), signed like the rest."""
        self.checksums = getattr(config, "request_checksum_calculation", None) == "when_supported"
        """Whether PUTs carry a CRC32 (``x-amz-checksum-crc32``), as botocore sends them for this client."""
        self.validates = getattr(config, "response_checksum_validation", None) == "when_supported"
        """Whether GETs ask for the object's checksum (``x-amz-checksum-mode``) and check the body against it."""
        self._bucket = bucket
        self._signing_keys: dict[tuple[str, str], bytes] = {}

    def close(self) -> None:
        self._connections.close()

    # -- the sync sender: blocking sockets and time.sleep ---------------------------------------
    def execute(self, request: Get | Put | ListKeys, deadline: Deadline | None = None) -> Any:
        """Send ``request``; with a ``deadline`` (:mod:`.deadline`) no attempt or wait between attempts starts
        after its ``last_start``, and an attempt in flight ends by its ``cut_at`` (:class:`DeadlinePassed`)."""
        steps = Steps(self.exchanges(request))
        attempts = Attempts(deadline)
        for step in steps:
            if isinstance(step, Exchange):
                with attempts.attempt():
                    steps.answer(self._connections.send(step, deadline))
            else:
                attempts.wait(step)
                time.sleep(step)
        return steps.result

    # -- the pure part, shared by both senders --------------------------------------------------
    def exchanges(self, request: Get | Put | ListKeys) -> Exchanges:
        """The request as a conversation with a sender (see :data:`Exchanges`)."""
        if isinstance(request, Get):
            headers = {**self._extra_headers, **self._get_headers}
            if self.validates:
                headers["x-amz-checksum-mode"] = "ENABLED"
            return self._get_reply((yield from self._attempts(request, {}, b"", headers, validate=self.validates)))
        if isinstance(request, Put):
            headers = {**self._extra_headers, **headers_for(put_arguments(request, self._put_args, self.expiry_tag))}
            if self.checksums:
                headers["x-amz-checksum-crc32"] = _crc32(request.body)
                headers["x-amz-sdk-checksum-algorithm"] = "CRC32"
            answer = yield from self._attempts(request, {}, request.body, headers)
            return self._put_reply(request, answer)
        query = {_QUERY_OF[name]: str(value) for name, value in list_arguments(request).items()}
        query.update({"list-type": "2", "encoding-type": "url"})
        return self._list_reply((yield from self._attempts(request, query, b"", dict(self._extra_headers))))

    def _get_reply(self, answer: Response) -> StoredObject | None:
        status, headers, body = answer
        if status == 404:
            return None
        if "etag" not in headers:
            raise self._not_s3(status, headers, body)
        modified, date = headers.get("last-modified"), headers.get("date")
        return StoredObject(
            body,
            headers["etag"],
            parsedate_to_datetime(modified) if modified else None,
            parsedate_to_datetime(date) if date else None,
        )

    def _put_reply(self, request: Put, answer: Response) -> Any:
        status, reply, _ = answer
        if condition_failed(request, refused=status == 412, missing=status == 404):
            return PRECONDITION_FAILED
        if "etag" not in reply:
            raise self._not_s3(status, reply, b"")
        return Written(reply["etag"])

    def _list_reply(self, answer: Response) -> Page:
        status, headers, body = answer
        try:
            root = ET.fromstring(body)
        except ET.ParseError:
            root = None
        if root is None or not root.tag.endswith("ListBucketResult"):
            raise self._not_s3(status, headers, body)
        keys: list[str] = []
        modified: list[datetime] = []
        etags: list[str] = []
        sizes: list[int] = []
        # Asked for url-encoded keys; decoded only when the server says it encoded them (as botocore does): a
        # server that ignores the parameter sends them raw, and decoding a raw "a%2Fb" or "a+b" would change it.
        encoded = (root.findtext("{*}EncodingType") or "").strip().lower() == "url"
        decode = unquote_plus if encoded else str
        for item in root.iterfind("{*}Contents"):
            keys.append(decode(item.findtext("{*}Key", "")))
            modified.append(_iso_time(item.findtext("{*}LastModified", "")))
            etags.append(item.findtext("{*}ETag", ""))
            sizes.append(int(item.findtext("{*}Size", "0") or 0))
        prefixes = [decode(p.findtext("{*}Prefix", "")) for p in root.iterfind("{*}CommonPrefixes")]
        truncated = root.findtext("{*}IsTruncated", "false").strip().lower() == "true"
        token = root.findtext("{*}NextContinuationToken") if truncated else None
        date = headers.get("date")
        return Page(
            keys=keys,
            prefixes=prefixes,
            token=token,
            modified=modified,
            etags=etags,
            sizes=sizes,
            served=parsedate_to_datetime(date) if date else None,
        )

    def _attempts(
        self,
        request: Get | Put | ListKeys,
        query: dict[str, str],
        body: bytes,
        headers: dict[str, str],
        *,
        validate: bool = False,
    ) -> Generator[Exchange | float, Response | Failure | None, Response]:
        """One HTTP exchange, retried (:mod:`.retries`): the answer that settles it, or the package's error. With
        ``validate``, a body that does not match the checksum its answer carries is a failed attempt."""
        method = "PUT" if isinstance(request, Put) else "GET"
        key = None if isinstance(request, ListKeys) else request.key
        # A virtual-hosted bucket's LIST is sent to "/" (the request line and SigV4's canonical URI need one).
        path = self._path + ("" if key is None else "/" + quote(key, safe="/~")) or "/"
        what = named_in_errors(request, self._bucket)
        query_string = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(query.items()))
        target = path + ("?" + query_string if query_string else "")
        retries = Retries(self.max_attempts, self.contention_seconds)
        while True:
            signed = dict(headers)
            self._sign(method, path, query_string, signed, body)
            answer = yield Exchange(method, target, signed, body)
            try:
                if isinstance(answer, Failure):
                    raise answer
                assert answer is not None
                settled = self._judge(*answer)
                if validate and settled[0] == 200:
                    _check_body(settled[1], settled[2])
                return settled
            except Failure as failure:
                wait = retries.wait_after(_kind(failure))
                if wait is None:
                    if not failure.code:
                        raise unreachable(f"{self._endpoint} ({what})", failure) from None
                    status, code, tried = failure.status, failure.code, sum(retries.failed.values())
                    raise final_error(request, self._bucket, what, status, code, str(failure), tried) from None
                yield wait

    def _judge(self, status: int, headers: Mapping[str, str], data: bytes) -> Response:
        """An answer that settles the request, or a :class:`Failure` (a non-S3 answer raises at once)."""
        match = _ERROR_CODE.search(data or b"") if status >= 300 else None
        html = str(headers.get("content-type", "")).startswith("text/html")
        foreign = html or (match is None and not any(h in headers for h in _S3_HEADERS) and status != 403)
        if status >= 300 and foreign and status not in RETRY_STATUS:  # a proxy's 5xx page is retried as before
            raise self._not_s3(status, headers, data)
        code = match.group(1).decode() if match else str(status)
        if status < 300 or _is_answer(status, code):
            return status, headers, data
        if status in (301, 307) or code in _REDIRECT_CODES:
            self._refuse_redirect(status, code, headers, data)
        retryable = kind_of(status, code) is not None
        raise Failure(f"HTTP {status} {code}", retryable=retryable, code=code, status=status)

    def _refuse_redirect(self, status: int, code: str, headers: Mapping[str, str], data: bytes) -> None:
        """A redirect to another region is final here (boto3 would follow it, see :class:`WrongRegionError`);
        an ``AuthorizationHeaderMalformed`` that names no other region is an ordinary failure."""
        named = _ERROR_REGION.search(data or b"")
        region = headers.get("x-amz-bucket-region") or (named.group(1).decode() if named else None)
        if code == "AuthorizationHeaderMalformed" and region in (None, self._region):
            return
        raise WrongRegionError(
            f"S3 redirected a request for bucket {self._bucket!r} (HTTP {status} {code}): the bucket is in region "
            f"{region or '(not named)'}, and requests are sent to {self._host} signed for {self._region}. Set "
            "region= (or AWS_REGION) to the bucket's region, or use the default transport, which follows "
            "redirects through boto3."
        )

    def _not_s3(self, status: int, headers: Mapping[str, str], body: bytes) -> NotS3EndpointError:
        answer = f"HTTP {status}"
        for name in ("content-type", "server"):
            if headers.get(name):
                answer += f", {name} {headers[name]!r}"
        if body:
            answer += f", body {body[:80]!r}"
        return NotS3EndpointError(
            f"The endpoint {'https' if self.https else 'http'}://{self._host} does not answer like S3: it "
            f"answered {answer}. Check endpoint_url (the host and port of the S3 API, e.g. SeaweedFS's S3 "
            "port 8333, not its filer or master port)."
        )

    def _sign(self, method: str, path: str, query_string: str, headers: dict[str, str], body: bytes) -> None:
        credentials = self._credentials.get_frozen_credentials()
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        day = stamp[:8]
        payload = "UNSIGNED-PAYLOAD" if self.https else hashlib.sha256(body).hexdigest()
        headers.update({"host": self._host, "x-amz-date": stamp, "x-amz-content-sha256": payload})
        if credentials.token:
            headers["x-amz-security-token"] = credentials.token
        names = sorted(headers)
        canonical = "\n".join(
            (
                method,
                path,
                query_string,
                "".join(f"{name}:{str(headers[name]).strip()}\n" for name in names),
                ";".join(names),
                payload,
            )
        )
        scope = f"{day}/{self._region}/s3/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(self._signing_key(credentials.secret_key, day), to_sign.encode(), hashlib.sha256)
        headers["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
            f"SignedHeaders={';'.join(names)}, Signature={signature.hexdigest()}"
        )

    def _signing_key(self, secret: str, day: str) -> bytes:
        key = self._signing_keys.get((secret, day))
        if key is None:
            key = hmac.new(("AWS4" + secret).encode(), day.encode(), hashlib.sha256).digest()
            for part in (self._region, "s3", "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            self._signing_keys = {(secret, day): key}  # only the current day and secret are ever needed
        return key


def _kind(failure: Failure) -> Kind | None:
    """What a failed attempt was for the retry budget: an S3 answer by its status and code, a connection that
    failed (no answer) transient when the sender says another attempt may succeed."""
    if not failure.retryable:
        return None
    return kind_of(failure.status or None, failure.code) or Kind.TRANSIENT


def _crc32(body: bytes) -> str:
    """``x-amz-checksum-crc32``: the CRC32 of the body, big-endian, base64."""
    return base64.b64encode(zlib.crc32(body).to_bytes(4, "big")).decode()


_CHECKSUMS: dict[str, Callable[[bytes], str]] = {
    "x-amz-checksum-crc32": _crc32,
    "x-amz-checksum-sha1": lambda body: base64.b64encode(hashlib.sha1(body).digest()).decode(),
    "x-amz-checksum-sha256": lambda body: base64.b64encode(hashlib.sha256(body).digest()).decode(),
}
"""The full-object checksums a GET can be checked against without extra packages (botocore needs awscrt for
CRC32C and CRC64NVME; those, and multipart composites ``...-N``, are not checked, as botocore skips them)."""


def _check_body(headers: Mapping[str, str], body: bytes) -> None:
    """A body that differs from the checksum the server sent with it was damaged on the way: a failed attempt."""
    for name, checksum_of in _CHECKSUMS.items():
        expected = headers.get(name)
        if expected and "-" not in expected:
            if checksum_of(body) != expected:
                raise Failure(f"the body does not match its {name} ({expected})", retryable=True)
            return


def _check_client(client: Any, bucket: str) -> Any:
    """The client's credentials; refuses clients the transport cannot faithfully imitate."""
    config = client.meta.config
    proxy = _proxy_of(client)
    if proxy is not None:
        raise InvalidConfigError(
            f"transport='direct' does not go through proxies, and this client sends to {client.meta.endpoint_url} "
            f"through the proxy {proxy} (the client's proxies setting, or HTTP_PROXY/HTTPS_PROXY in the "
            "environment). Use transport='boto3', or exempt the endpoint's host with NO_PROXY."
        )
    if config.signature_version not in (None, "s3v4", "v4"):
        raise InvalidConfigError(
            f"transport='direct' signs with SigV4 only, the client uses {config.signature_version!r}"
        )
    if bucket.startswith("arn:"):
        raise InvalidConfigError("transport='direct' does not support bucket ARNs; use transport='boto3'")
    credentials = getattr(getattr(client, "_request_signer", None), "_credentials", None)
    if credentials is None:
        raise NoCredentialsToSignWith("transport='direct' needs credentials; the client has none")
    return credentials


def bucket_endpoint(client: Any, bucket: str) -> tuple[str, str]:
    """Where botocore sends this bucket's object requests, and the region it signs them for.

    botocore decides per request from S3's endpoint rules: virtual-hosted or path-style addressing (``auto``:
    virtual on AWS for DNS-compatible names, path for IP addresses and custom endpoints), FIPS, dual-stack and
    Transfer Acceleration endpoints, S3 Express One Zone zonal endpoints. Asking its resolver, rather than
    imitating it, sends the direct transport's requests exactly where boto3's would go; a bucket botocore
    signs with anything but SigV4 (S3 Express sessions, SigV4a) is refused."""
    try:
        resolved = client._ruleset_resolver.construct_endpoint(
            operation_model=client.meta.service_model.operation_model("PutObject"),
            call_args={"Bucket": bucket, "Key": "key"},
            request_context={},
        )
    except Exception as exc:  # botocore's endpoint errors have no common base worth naming
        raise InvalidConfigError(f"botocore cannot resolve an endpoint for bucket {bucket!r}: {exc}") from None
    schemes = resolved.properties.get("authSchemes") or [{}]
    scheme = schemes[0].get("name", "sigv4")
    if scheme != "sigv4" or schemes[0].get("signingName", "s3") != "s3":
        raise InvalidConfigError(
            f"transport='direct' signs with SigV4, and botocore signs requests to bucket {bucket!r} with {scheme} "
            "(S3 Express One Zone directory buckets, multi-region access points); use transport='boto3'"
        )
    return resolved.url, schemes[0].get("signingRegion") or client.meta.region_name or "us-east-1"


def _proxy_of(client: Any) -> str | None:
    """The proxy botocore sends this client's requests through, without its credentials; ``None``: none.

    The client's ``proxies`` setting, else what its HTTP session resolved from the environment
    (``HTTP_PROXY``/``HTTPS_PROXY``, unless ``NO_PROXY`` exempts the endpoint's host)."""
    endpoint = client.meta.endpoint_url
    configured = client.meta.config.proxies
    if configured:
        url = configured.get(urlsplit(endpoint).scheme)
    else:
        url = client._endpoint.http_session._proxy_config.proxy_url_for(endpoint)
    if not url:
        return None
    parts = urlsplit(url if "://" in url else "http://" + url)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


def _is_answer(status: int, code: str) -> bool:
    """A missing object and a failed condition are answers to the request, not failures (a 409
    ConditionalRequestConflict is neither: the request is sent again, :mod:`.retries`)."""
    return (status == 404 and code != "NoSuchBucket") or status == 412


def _iso_time(text: str) -> datetime:
    return datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
