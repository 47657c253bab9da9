"""A fault-injecting HTTP proxy that sits between a boto3 client and a real local S3 server.

The client is pointed at :attr:`FaultProxy.url`. Every request is forwarded byte for byte (same
method, path, headers and body, including the ``Host`` header the client signed), so SigV4 signatures
still verify upstream. Before or after forwarding, the proxy may instead:

``slowdown``  answer 503 SlowDown without forwarding (throttling; botocore backs off and retries)
``internal``  answer 500 InternalError without forwarding
``reset``     reset the connection without forwarding (the request never reached the server)
``lost``      forward, let the server apply the request, then reset the connection: the response is
              lost, the client cannot tell whether it was applied, and its retry meets the new state
``lost_500``  forward and apply, then replace the server's answer with 500 (same ambiguity, but an
              answer does arrive)
``redirect``  answer 301 PermanentRedirect naming another region (``x-amz-bucket-region: eu-central-1``),
              without forwarding, as S3 answers a request sent to the wrong region; queued only
``delay``     hold the request ``seconds`` (see :meth:`FaultProxy.inject`), then forward it and answer as the
              server did: a request still in flight when its caller's other requests are done; queued only.
              Held even if the client has closed its connection meanwhile, as a request already received is.

Faults are drawn at random (``rate``) or queued for specific requests with :meth:`FaultProxy.inject`.
``max_consecutive`` caps how many random faults in a row hit the same method and path, so a test at a
high fault rate never exhausts the client's retry budget by bad luck; queued faults ignore the cap.

Subclasses change what the server seems to be (``dialectproxy.py``) through :meth:`FaultProxy.intercept` (answer
a request instead of the server, or change it before it is forwarded) and :meth:`FaultProxy.rewrite` (change
the server's answer).
"""

from __future__ import annotations

import collections
import http.client
import random
import socket
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from typing_extensions import Self

ALL_FAULTS = ("slowdown", "internal", "reset", "lost", "lost_500")
QUEUED_FAULTS = (*ALL_FAULTS, "redirect", "delay")
"""Faults :meth:`FaultProxy.inject` queues; ``redirect`` and ``delay`` are never drawn at random."""
APPLIED_FAULTS = frozenset({"lost", "lost_500"})
"""Faults after which the server has applied the request."""

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection", "te", "upgrade"}

_ERROR_BODY = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    "<Error><Code>{code}</Code><Message>{message}</Message><RequestId>faultproxy</RequestId></Error>"
)


@dataclass
class _Rule:
    fault: str
    method: str | None
    key_suffix: str | None
    remaining: int
    alternate: bool
    seconds: float = 0.0
    resting: bool = False

    def matches(self, method: str, key: str) -> bool:
        return (self.method is None or self.method == method) and (
            self.key_suffix is None or key.endswith(self.key_suffix)
        )


class FaultProxy:
    """Forward to ``upstream`` (``http://host:port``), injecting faults."""

    def __init__(
        self,
        upstream: str,
        *,
        rate: float = 0.0,
        faults: Sequence[str] = ALL_FAULTS,
        seed: int | None = None,
        max_consecutive: int = 2,
    ) -> None:
        unknown = set(faults) - set(ALL_FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}")
        parts = urlsplit(upstream)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"upstream must look like http://host:port, got {upstream!r}")
        self.upstream_host = parts.hostname
        self.upstream_port = parts.port
        self.rate = rate
        self.faults = tuple(faults)
        self.max_consecutive = max_consecutive
        self.injected: collections.Counter[str] = collections.Counter()
        """Faults injected so far, by kind."""
        self.forwarded = 0
        """Requests that reached the server (including those whose answer was then dropped)."""
        self.requests = 0
        self.log: collections.deque[tuple[str, str, str]] = collections.deque(maxlen=100_000)
        """(method, key, what happened) per request, newest last: a fault name or the server's status."""
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []
        self._streak: dict[tuple[str, str], int] = {}
        self._local = threading.local()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    # -- control --------------------------------------------------------------------------------
    def inject(
        self,
        fault: str,
        *,
        method: str | None = None,
        key_suffix: str | None = None,
        times: int = 1,
        alternate: bool = False,
        seconds: float = 0.0,
    ) -> None:
        """Queue ``fault`` for the next ``times`` requests with this method whose key ends with ``key_suffix``.

        With ``alternate`` every other matching request passes, so each faulted request's retry succeeds.
        ``seconds``: how long ``delay`` holds each request.
        """
        if fault not in QUEUED_FAULTS:
            raise ValueError(f"unknown fault {fault!r}")
        with self._lock:
            self._rules.append(_Rule(fault, method, key_suffix, times, alternate, seconds))

    def snapshot(self) -> dict[str, int]:
        """Requests seen, requests forwarded, and faults injected by kind."""
        with self._lock:
            return {"requests": self.requests, "forwarded": self.forwarded, **self.injected}

    def pending_rules(self) -> int:
        """Queued faults not yet injected."""
        with self._lock:
            return sum(rule.remaining for rule in self._rules)

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._server.serve_forever, name="faultproxy", daemon=True)
        self._thread.start()
        return self

    # -- hooks for subclasses -------------------------------------------------------------------------
    def intercept(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[list[tuple[str, str]], bytes] | tuple[int, str, list[tuple[str, str]], bytes]:
        """The request to forward (headers, body), or an answer given instead of the server's (status, reason,
        headers, body). Called for every request no fault took."""
        return headers, body

    def rewrite(
        self, method: str, path: str, answer: tuple[int, str, list[tuple[str, str]], bytes]
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        """The server's answer (status, reason, headers, body) as the client gets it."""
        return answer

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- decisions ------------------------------------------------------------------------------
    def _choose(self, method: str, key: str) -> tuple[str | None, float]:
        """The fault for this request (``None``: forward it as it is), and how long a ``delay`` holds it."""
        with self._lock:
            self.requests += 1
            for rule in self._rules:
                if rule.matches(method, key):
                    if rule.alternate:
                        rule.resting = not rule.resting
                        if not rule.resting:
                            return None, 0.0
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._rules.remove(rule)
                    self.injected[rule.fault] += 1
                    return rule.fault, rule.seconds
            where = (method, key)
            streak = self._streak.get(where, 0)
            if streak < self.max_consecutive and self.faults and self._random.random() < self.rate:
                self._streak[where] = streak + 1
                fault = self._random.choice(self.faults)
                self.injected[fault] += 1
                return fault, 0.0
            self._streak.pop(where, None)
            return None, 0.0

    # -- forwarding -----------------------------------------------------------------------------
    def _upstream(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=60)
            self._local.conn = conn
        return conn

    def _forward(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        for attempt in (1, 2):
            conn = self._upstream()
            try:
                conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
                for name, value in headers:
                    conn.putheader(name, value)
                conn.endheaders(body)
                response = conn.getresponse()
                data = response.read()
                with self._lock:
                    self.forwarded += 1
                return response.status, response.reason, response.getheaders(), data
            except (ConnectionError, http.client.HTTPException):
                # A kept-alive upstream connection the server closed: reconnect once.
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _read_body(self) -> bytes:
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    chunks = []
                    while True:
                        size_line = self.rfile.readline()
                        size = int(size_line.split(b";")[0], 16)
                        if size == 0:
                            # The last chunk has no data: trailers follow, ended by an empty line.
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            break
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                    return b"".join(chunks)
                length = int(self.headers.get("Content-Length", "0") or 0)
                return self.rfile.read(length) if length else b""

            def _reset(self) -> None:
                # SO_LINGER 0 makes close() send RST: the client sees a reset, not a clean close.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
                self.close_connection = True

            def _reply(self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes) -> None:
                lines = [f"HTTP/1.1 {status} {reason}"]
                is_head = self.command == "HEAD"
                for name, value in headers:
                    if name.lower() in _HOP_BY_HOP or (name.lower() == "content-length" and not is_head):
                        continue
                    lines.append(f"{name}: {value}")
                if not is_head:
                    lines.append(f"Content-Length: {len(body)}")
                head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
                self.wfile.write(head + (b"" if is_head else body))
                self.wfile.flush()

            def _error(self, status: int, code: str, message: str) -> None:
                body = _ERROR_BODY.format(code=code, message=message).encode()
                reason = "Slow Down" if status == 503 else "Internal Server Error"
                self._reply(status, reason, [("Content-Type", "application/xml")], body)

            def _handle(self) -> None:
                body = self._read_body()
                key = self.path.split("?", 1)[0]
                fault, seconds = proxy._choose(self.command, key)
                if fault == "delay":
                    time.sleep(seconds)
                    fault = None
                if fault in ("slowdown", "internal", "reset", "redirect"):
                    proxy.log.append((self.command, key, fault))
                if fault == "redirect":
                    body = _ERROR_BODY.format(code="PermanentRedirect", message="Use the bucket's region.").encode()
                    headers = [("Content-Type", "application/xml"), ("x-amz-bucket-region", "eu-central-1")]
                    self._reply(301, "Moved Permanently", headers, body)
                    return
                if fault == "slowdown":
                    self._error(503, "SlowDown", "Please reduce your request rate.")
                    return
                if fault == "internal":
                    self._error(500, "InternalError", "We encountered an internal error. Please try again.")
                    return
                if fault == "reset":
                    self._reset()
                    return
                headers = [(k, v) for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP]
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    headers.append(("Content-Length", str(len(body))))
                request = proxy.intercept(self.command, self.path, headers, body)
                if len(request) == 4:
                    proxy.log.append((self.command, key, f"{request[0]} from the proxy"))
                    self._reply(*request)
                    return
                headers, body = request
                answer = proxy._forward(self.command, self.path, headers, body)
                status, reason, reply_headers, data = proxy.rewrite(self.command, self.path, answer)
                proxy.log.append((self.command, key, f"{status} then {fault}" if fault else str(status)))
                if fault == "lost":
                    self._reset()
                    return
                if fault == "lost_500":
                    self._error(500, "InternalError", "We encountered an internal error. Please try again.")
                    return
                self._reply(status, reason, reply_headers, data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        return Handler
