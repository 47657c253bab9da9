"""The direct transport's sync sender: each exchange written to a blocking socket and its reply read by
:class:`.http1.ReplyReader`, over a pool of keep-alive connections any thread may use.

Why not urllib3: its ``http.client`` underneath costs about twice the CPU per request of a signed exchange
written to a socket and read by ``http1`` (docs/benchmarks.md, "The direct transport"), and a checkpoint step is
three such requests, whose CPU under the GIL is on the step's critical path. What the saver needs of an HTTP client
is all here: connections reused by any thread, an idle connection the server has closed noticed before reuse,
connect and read timeouts (the read timeout runs between bytes received, as a socket timeout does), TLS with the
client's CA bundle or none.
"""

from __future__ import annotations

import os
import select
import socket
import ssl
import threading
from collections.abc import Callable

from .deadline import Deadline, DeadlinePassed
from .http1 import Exchange, Failure, ProtocolError, Reply, ReplyReader, Response, request_bytes

_RECEIVE = 256 * 1024


class BlockingSender:
    """Keep-alive connections to one host; each carries one request at a time, on the calling thread."""

    def __init__(
        self,
        hostname: str,
        port: int,
        *,
        tls: ssl.SSLContext | None,
        connect_timeout: float,
        read_timeout: float,
        max_idle: int,
    ) -> None:
        self._address = (hostname, port)
        self._tls = tls
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._max_idle = max_idle
        self._idle: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False

    def send(self, exchange: Exchange, deadline: Deadline | None = None) -> Response | Failure:
        """One attempt. With a ``deadline`` (see :mod:`.deadline`), connecting ends by its ``last_start`` and the
        attempt by its ``cut_at`` (:class:`DeadlinePassed`): every wait for the socket gets at most the time left,
        so a reply trickling in, whose every byte restarts the read timeout, is cut on time too."""
        try:
            data = request_bytes(exchange.method, exchange.target, exchange.headers, exchange.body)
        except ValueError as exc:
            return Failure(f"cannot send the request: {exc}", retryable=False)
        sock = self._reuse() or self._connect(deadline)
        if isinstance(sock, Failure):
            return sock
        try:
            reply = self._exchange(sock, data, exchange.method, deadline)
        except TimeoutError:
            sock.close()
            if deadline is not None and deadline.cut_left() <= 0:
                raise DeadlinePassed(sent=True) from None
            return Failure(f"read timed out ({self._read_timeout:g} s)", retryable=True)
        except ProtocolError as exc:
            sock.close()
            return Failure(f"not an HTTP/1.1 reply ({exc})", retryable=True)
        except OSError as exc:  # reset, broken pipe, TLS errors
            sock.close()
            return Failure(f"connection failed: {exc}", retryable=True)
        if reply is None:
            sock.close()
            return Failure("connection closed before the reply ended", retryable=True)
        if reply.reusable:
            self._release(sock)
        else:
            sock.close()
        return reply.status, reply.headers, reply.body

    def _exchange(self, sock: socket.socket, data: bytes, method: str, deadline: Deadline | None) -> Reply | None:
        if deadline is None:
            sock.sendall(data)
            return _read_reply(sock, method, None)
        sock.settimeout(self._wait_for(deadline))  # sendall's timeout bounds the whole send
        sock.sendall(data)
        reply = _read_reply(sock, method, lambda: self._wait_for(deadline))
        sock.settimeout(self._read_timeout)  # as an idle connection has it
        return reply

    def _wait_for(self, deadline: Deadline) -> float:
        """How long the next wait for the socket may take: the read timeout, or what is left before the cut."""
        left = deadline.cut_left()
        if left <= 0:
            raise TimeoutError
        return min(self._read_timeout, left)

    def close(self) -> None:
        """Close the idle connections now; those in use close when their request ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for sock in idle:
            sock.close()

    def _connect(self, deadline: Deadline | None) -> socket.socket | Failure:
        host, port = self._address
        timeout = self._connect_timeout
        if deadline is not None:
            left = deadline.start_left()
            if left <= 0:
                raise DeadlinePassed(sent=False)
            timeout = min(timeout, left)
        try:
            sock = socket.create_connection(self._address, timeout=timeout)
        except TimeoutError:
            if deadline is not None and deadline.start_left() <= 0:
                raise DeadlinePassed(sent=False) from None
            return Failure(f"connecting to {host}:{port} timed out", retryable=True)
        except OSError as exc:  # refused, unreachable, name resolution
            return Failure(f"cannot connect to {host}:{port}: {exc}", retryable=True)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_hostname=host)
        except OSError as exc:  # the TLS handshake or the certificate
            sock.close()
            return Failure(f"cannot connect to {host}:{port}: {exc}", retryable=True)
        sock.settimeout(self._read_timeout)
        return sock

    def _reuse(self) -> socket.socket | None:
        while True:
            with self._lock:
                if not self._idle:
                    return None
                sock = self._idle.pop()
            if not _dropped(sock):
                return sock
            sock.close()

    def _release(self, sock: socket.socket) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(sock)
                return
        sock.close()


def _read_reply(sock: socket.socket, method: str, wait: Callable[[], float] | None) -> Reply | None:
    """The reply to the request just sent; ``wait`` (if given) sets the socket's timeout before every ``recv``."""
    reader = ReplyReader()
    reader.expect(method)
    while True:
        if wait is not None:
            sock.settimeout(wait())
        data = sock.recv(_RECEIVE)
        if not data:
            return reader.end_of_stream()
        reply = reader.feed(data)
        if reply is not None:
            return reply


def _dropped(sock: socket.socket) -> bool:
    """Whether an idle connection can no longer carry a request: readable means the server closed it (or
    sent bytes nobody asked for), as urllib3 checks before reusing a connection. ``poll`` where there is one:
    ``select`` refuses descriptors above 1023, which a busy process has."""
    try:
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return bool(poller.poll(0))
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable)
    except (OSError, ValueError):  # closed meanwhile
        return True


def tls_context(ca_certs: str | bool | None, client_cert: str | tuple[str, str] | None = None) -> ssl.SSLContext:
    """TLS as botocore's ``verify`` and ``client_cert`` say: a CA bundle (file or folder), ``False`` (no
    verification), else the system's trust store; and the certificate (with its key, in the same file or a
    second one) to present to servers that ask for one. Both senders use it."""
    if ca_certs is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif isinstance(ca_certs, str) and os.path.isdir(ca_certs):
        context = ssl.create_default_context(capath=ca_certs)
    else:
        context = ssl.create_default_context(cafile=ca_certs if isinstance(ca_certs, str) else None)
    if isinstance(client_cert, str):
        context.load_cert_chain(client_cert)
    elif client_cert is not None:
        context.load_cert_chain(*client_cert)
    return context
