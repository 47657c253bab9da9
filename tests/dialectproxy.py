"""A real HTTP proxy in front of a local S3 server that makes it answer the way another provider does.

Every provider row of docs/operations.md that this suite tests is a set of the behaviours below, each taken from
the provider's documentation or issue tracker (``/work/shared/reference/s3-providers.md`` collects them). The saver
is pointed at :attr:`DialectProxy.url` like at any endpoint; the server behind it is SeaweedFS. Requests the proxy
changes are signed again with the server's credentials (SigV4 covers the conditional headers), so the server
authenticates them as before.

``ignores_conditions``   GCS's XML API, Garage, OCI: ``If-None-Match``/``If-Match`` are dropped from every
                         request (PUT and DELETE), so the server applies it unconditionally.
``refuses_conditions``   Backblaze B2: a request carrying either header is answered ``501 NotImplemented``.
``conflict_bursts``      AWS under contention: each conditional request is answered ``409
                         ConditionalRequestConflict`` ``conflicts`` times in a row before it reaches the server.
``write_interval``       R2 and GCS: one write per key per ``write_interval`` seconds; a faster one is answered
                         ``429`` (``throttle_status``/``throttle_code``: GCS says ``503 SlowDown``, as Spaces).
``if_match_creates``     MinIO before its August 2025 fix: a PUT with ``If-Match`` on a missing key is applied as
                         a plain PUT (the key is created).
``strict_integrity``     Backblaze B2, older MinIO and GCS: a request with flexible checksums (``x-amz-checksum-*``,
                         ``x-amz-sdk-checksum-algorithm``) or an aws-chunked body (what botocore >= 1.36 sends over
                         https) is answered ``400``, and so is a DeleteObjects without ``Content-MD5``.
``drops_lifecycle_tags`` Garage: lifecycle rules come back without their tag filters.
``tls``                  the proxy speaks https (a self-signed certificate: clients pass ``verify=False``), as
                         every provider does; botocore sends PutObject bodies aws-chunked only over https.
``consistent_header``    Tigris: conditions are checked (on the leader) only for requests carrying this header
                         with the value ``true``; the others are applied as if the headers were absent (every
                         request without it is counted, conditional or not).

:attr:`DialectProxy.seen` counts what the proxy did, by name (``stripped``, ``501``, ``409``, ``429``,
``created on a missing If-Match``, ``rejected checksum``, ``rejected no Content-MD5``, ``lifecycle tags dropped``,
``without consistent header``).
"""

from __future__ import annotations

import collections
import re
import threading
import time
from dataclasses import dataclass
from urllib.parse import unquote

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from faultproxy import FaultProxy

from langgraph_s3_checkpoint.local import LocalS3Server

_CONDITIONS = ("if-match", "if-none-match")
_SIGNATURE = ("authorization", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token")
_ERROR = '<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message></Error>'


@dataclass(frozen=True)
class Dialect:
    """What the server behind the proxy seems to be (see the module's doc); the default is SeaweedFS itself."""

    ignores_conditions: bool = False
    refuses_conditions: bool = False
    conflicts: int = 0
    write_interval: float = 0.0
    throttle_status: int = 429
    throttle_code: str = "TooManyRequests"
    if_match_creates: bool = False
    strict_integrity: bool = False
    drops_lifecycle_tags: bool = False
    consistent_header: str | None = None
    tls: bool = False


class DialectProxy(FaultProxy):
    """Forward to ``server`` (its bucket ``bucket``, path-style), answering as ``dialect`` says."""

    def __init__(self, server: LocalS3Server, dialect: Dialect, bucket: str) -> None:
        super().__init__(server.endpoint_url)
        self.dialect = dialect
        self.bucket = bucket
        self.seen: collections.Counter[str] = collections.Counter()
        self._credentials = Credentials(server.access_key, server.secret_key)
        self._region = server.region
        self._upstream_client = server.client()
        self._dialect_lock = threading.Lock()
        self._conflicts: dict[tuple[str, str, str], int] = {}
        self._last_write: dict[str, float] = {}
        if dialect.tls:
            self._serve_tls()

    @property
    def url(self) -> str:
        return super().url.replace("http://", "https://") if self.dialect.tls else super().url

    def _serve_tls(self) -> None:
        """Wrap the listening socket in TLS with a certificate made here for 127.0.0.1."""
        import datetime
        import ipaddress
        import ssl
        import tempfile

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .sign(key, hashes.SHA256())
        )
        with tempfile.NamedTemporaryFile("wb", suffix=".pem", delete=False) as pem:
            pem.write(cert.public_bytes(serialization.Encoding.PEM))
            pem.write(
                key.private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                )
            )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(pem.name)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)

    def _count(self, what: str) -> None:
        with self._dialect_lock:
            self.seen[what] += 1

    # -- requests ---------------------------------------------------------------------------------
    def intercept(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[list[tuple[str, str]], bytes] | tuple[int, str, list[tuple[str, str]], bytes]:
        d = self.dialect
        named = {name.lower(): value for name, value in headers}
        key = self._key(path)
        conditional = [name for name in _CONDITIONS if name in named]
        if d.strict_integrity and (refused := self._integrity_refusal(method, path, named)):
            self._count(refused)
            return _error(400, "InvalidArgument", f"this server does not accept the request: {refused}")
        if conditional and d.refuses_conditions:
            self._count("501")
            return _error(501, "NotImplemented", "A header you provided implies functionality that is not implemented")
        if conditional and d.conflicts and (answer := self._conflict(method, key, named, body)):
            return answer
        if method in ("PUT", "DELETE") and key and (answer := self._throttled(key)):
            return answer
        drop = set()
        if conditional and d.ignores_conditions:
            drop.update(conditional)
            self._count("stripped")
        if d.consistent_header and named.get(d.consistent_header.lower()) != "true":
            drop.update(conditional)  # checked by a follower, as if the conditions were absent
            self._count("without consistent header")
        if "if-match" in named and d.if_match_creates and method == "PUT" and not self._exists(key):
            drop.add("if-match")
            self._count("created on a missing If-Match")
        if not drop:
            return headers, body
        kept = [(name, value) for name, value in headers if name.lower() not in drop]
        return self._signed_again(method, path, kept, body), body

    @staticmethod
    def _integrity_refusal(method: str, path: str, named: dict[str, str]) -> str | None:
        if "aws-chunked" in named.get("content-encoding", "") or named.get("x-amz-trailer"):
            return "rejected aws-chunked"
        if any(name.startswith("x-amz-checksum-") or name == "x-amz-sdk-checksum-algorithm" for name in named):
            return "rejected checksum"
        if method == "POST" and re.search(r"[?&]delete(=|&|$)", path) and "content-md5" not in named:
            return "rejected no Content-MD5"
        return None

    def _conflict(
        self, method: str, key: str, named: dict[str, str], body: bytes
    ) -> tuple[int, str, list[tuple[str, str]], bytes] | None:
        """The first ``conflicts`` attempts of each conditional request get 409; the next one goes through."""
        request = (method, key, f"{named.get('if-match')}|{named.get('if-none-match')}|{hash(body)}")
        with self._dialect_lock:
            answered = self._conflicts.get(request, 0)
            if answered >= self.dialect.conflicts:
                del self._conflicts[request]
                return None
            self._conflicts[request] = answered + 1
            self.seen["409"] += 1
        return _error(409, "ConditionalRequestConflict", "A conflicting conditional operation is in progress")

    def _throttled(self, key: str) -> tuple[int, str, list[tuple[str, str]], bytes] | None:
        """A write of ``key`` within ``write_interval`` of the last one let through (all are timed, so that a
        test may start throttling midway) is answered ``throttle_status``."""
        now = time.monotonic()
        with self._dialect_lock:
            last = self._last_write.get(key)
            if last is not None and now - last < self.dialect.write_interval:
                self.seen[str(self.dialect.throttle_status)] += 1
                return _error(self.dialect.throttle_status, self.dialect.throttle_code, "Reduce your request rate")
            self._last_write[key] = now
        return None

    def _key(self, path: str) -> str:
        """The object key of a path-style request (``""`` for bucket requests)."""
        raw = path.split("?", 1)[0]
        prefix = f"/{self.bucket}/"
        return unquote(raw[len(prefix) :]) if raw.startswith(prefix) else ""

    def _exists(self, key: str) -> bool:
        try:
            self._upstream_client.head_object(Bucket=self.bucket, Key=key)
        except ClientError:
            return False
        return True

    def _signed_again(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> list[tuple[str, str]]:
        """``headers`` signed with the server's credentials (SigV4 over the request as it is now forwarded)."""
        host = next(value for name, value in headers if name.lower() == "host")
        unsigned = {name: value for name, value in headers if name.lower() not in _SIGNATURE}
        request = AWSRequest(method=method, url=f"http://{host}{path}", headers=unsigned, data=body)
        request.context["client_config"] = Config(s3={"payload_signing_enabled": True})
        S3SigV4Auth(self._credentials, "s3", self._region).add_auth(request)
        return list(request.headers.items())

    # -- answers ----------------------------------------------------------------------------------
    def rewrite(
        self, method: str, path: str, answer: tuple[int, str, list[tuple[str, str]], bytes]
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        status, reason, headers, data = answer
        if (
            self.dialect.drops_lifecycle_tags
            and method == "GET"
            and re.search(r"[?&]lifecycle", path)
            and status == 200
        ):
            stripped = re.sub(rb"<Tag>.*?</Tag>", b"", data, flags=re.S)
            stripped = re.sub(rb"<And>\s*(<Prefix>.*?</Prefix>)\s*</And>", rb"\1", stripped, flags=re.S)
            if stripped != data:
                self._count("lifecycle tags dropped")
            data = stripped
        return status, reason, headers, data


def _error(status: int, code: str, message: str) -> tuple[int, str, list[tuple[str, str]], bytes]:
    body = _ERROR.format(code=code, message=message).encode()
    headers = [("Content-Type", "application/xml"), ("x-amz-request-id", "dialectproxy")]
    return status, "Dialect", headers, body
