"""A latency-injecting TCP proxy for benchmarks: a fixed one-way delay in each direction, like netem.

    with LatencyProxy("127.0.0.1", 8333, one_way_ms=10) as proxy:   # 20 ms round trip
        client = boto3.client("s3", endpoint_url=proxy.url, ...)

Each connection accepted on 127.0.0.1 gets its own upstream connection. Every chunk read from either
side is stamped with its arrival time and written to the other side no earlier than ``one_way_ms`` after
it: chunks keep their order, and the delay does not serialize bandwidth (a chunk waits for its own
deadline only, not for the previous chunk's delay to elapse again). ``TCP_NODELAY`` is set on every
socket. A half-close (EOF) is forwarded after the same delay.

Bounded: at most ``max_connections`` connections at a time (further ones wait in the listen backlog),
and the proxy stops itself after ``lifetime`` seconds (default one hour) if nobody calls :meth:`stop`.
The handshake itself is not delayed (the upstream connect is local); benchmarks reuse connections.
"""

from __future__ import annotations

import collections
import contextlib
import socket
import threading
import time
from types import TracebackType


def _nodelay(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Pipe:
    """One direction of one connection: a reader thread stamps chunks, a writer thread releases them."""

    def __init__(self, src: socket.socket, dst: socket.socket, delay: float, stopped: threading.Event) -> None:
        self.src, self.dst, self.delay, self.stopped = src, dst, delay, stopped
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.cond = threading.Condition()
        self.done = threading.Event()
        self.bytes = 0

    def start(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=f, daemon=True) for f in (self._read, self._write)]
        for t in threads:
            t.start()
        return threads

    def _read(self) -> None:
        try:
            while not self.stopped.is_set():
                chunk = self.src.recv(65536)
                with self.cond:
                    self.queue.append((time.monotonic() + self.delay, chunk))
                    self.cond.notify()
                if not chunk:
                    return
        except OSError:
            with self.cond:
                self.queue.append((time.monotonic() + self.delay, b""))
                self.cond.notify()

    def _write(self) -> None:
        try:
            while not self.stopped.is_set():
                with self.cond:
                    while not self.queue and not self.stopped.is_set():
                        self.cond.wait(0.5)
                    if not self.queue:
                        return
                    due, chunk = self.queue.popleft()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if not chunk:
                    with contextlib.suppress(OSError):
                        self.dst.shutdown(socket.SHUT_WR)
                    return
                self.dst.sendall(chunk)
                self.bytes += len(chunk)
        except OSError:
            pass
        finally:
            self.done.set()


class LatencyProxy:
    """Forward ``127.0.0.1:<port>`` to ``upstream_host:upstream_port`` with ``one_way_ms`` each way."""

    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        *,
        one_way_ms: float,
        max_connections: int = 256,
        lifetime: float = 3600.0,
    ) -> None:
        if one_way_ms < 0:
            raise ValueError("one_way_ms must be >= 0")
        self.upstream = (upstream_host, upstream_port)
        self.delay = one_way_ms / 1000.0
        self.connections = 0
        self._slots = threading.BoundedSemaphore(max_connections)
        self._stopped = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._listener.settimeout(0.5)
        self.port: int = self._listener.getsockname()[1]
        self._socks: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._deadline = time.monotonic() + lifetime
        self._thread = threading.Thread(target=self._serve, name="latencyproxy", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while not self._stopped.is_set():
            if time.monotonic() > self._deadline:
                self._stopped.set()
                break
            if not self._slots.acquire(timeout=0.5):
                continue
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                self._slots.release()
                continue
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()
        self._close_all()

    def _handle(self, client: socket.socket) -> None:
        upstream = None
        try:
            upstream = socket.create_connection(self.upstream, timeout=10)
            upstream.settimeout(None)
            for s in (client, upstream):
                _nodelay(s)
            with self._lock:
                self.connections += 1
                self._socks.update((client, upstream))
            pipes = [
                _Pipe(client, upstream, self.delay, self._stopped),
                _Pipe(upstream, client, self.delay, self._stopped),
            ]
            for p in pipes:
                p.start()
            for p in pipes:
                while not p.done.wait(0.5) and not self._stopped.is_set():
                    pass
        except OSError:
            pass
        finally:
            for s in (client, upstream):
                if s is not None:
                    with contextlib.suppress(OSError):
                        s.close()
                    with self._lock:
                        self._socks.discard(s)
            self._slots.release()

    def _close_all(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)

    def __enter__(self) -> LatencyProxy:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
