"""The direct transport's asyncio sender: GET, PUT and LIST sent from the event loop, without a thread hop.

:class:`AsyncioSender` drives the same conversation as the sync sender (:meth:`DirectTransport.exchanges`:
the signing, header mapping, reading of replies, error mapping and retry policy all live there) and only
sends differently: HTTP/1.1 over ``asyncio`` connections (framed by :mod:`.http1`), and ``asyncio.sleep`` between
attempts. Why this client rather than httpx or aiohttp is measured in docs/benchmarks.md ("The direct
transport").

Connections belong to one event loop, so the sender keeps one small pool per loop (created lazily, inside the
loop, at its first request); a saver used from several loops in sequence (``asyncio.run`` twice, pytest's
function-scoped loops) gets a fresh pool in each. A pool closes with its loop's shutdown (``asyncio.run`` closes
the loop's async generators first, and one of them holds the pool); pools of loops closed without it are
dropped when the next pool is made. ``close()`` closes every pool's connections, from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import AsyncGenerator
from typing import Any, cast

from .._protocol.plans import Steps
from .._protocol.requests import Get, ListKeys, Put
from .blocking_sender import tls_context
from .deadline import Attempts, Deadline, DeadlinePassed, within
from .direct import DirectTransport
from .http1 import Exchange, Failure, ProtocolError, Reply, ReplyReader, Response, request_bytes


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; at most one request in flight, its reply delivered by a future."""

    def __init__(self, loop: asyncio.AbstractEventLoop, read_timeout: float) -> None:
        self._loop = loop
        self._read_timeout = read_timeout
        self._timed_out = f"read timed out ({read_timeout:g} s)"
        self._reader = ReplyReader()
        self.transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[Response | Failure] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.alive = False

    # -- asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's transports are not subclasses)
        self.alive = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.alive = False
        self._fail(f"connection closed{f': {exc}' if exc else ''} before the reply ended")

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # nothing asked: the server is not speaking HTTP/1.1 keep-alive with us
            self.close()
            return
        try:
            reply = self._reader.feed(data)
        except ProtocolError as exc:
            self._fail(f"not an HTTP/1.1 reply ({exc})")
            return
        if reply is None:
            self._arm()  # the read timeout runs from the last bytes received, as a socket timeout does
        else:
            self._finish(reply)

    def eof_received(self) -> bool:
        self.alive = False
        if self._waiter is not None:
            reply = self._reader.end_of_stream()
            if reply is not None:
                self._finish(reply)
        return False  # the transport closes; connection_lost fails a reply cut short

    # -- one request ------------------------------------------------------------------------------
    def send(self, exchange: Exchange) -> asyncio.Future[Response | Failure]:
        assert self.transport is not None
        self._waiter = self._loop.create_future()
        try:
            data = request_bytes(exchange.method, exchange.target, exchange.headers, exchange.body)
        except ValueError as exc:
            self._waiter.set_result(Failure(f"cannot send the request: {exc}", retryable=False))
            return self._waiter
        self._reader.expect(exchange.method)
        self.transport.write(data)
        self._arm()
        return self._waiter

    def _finish(self, reply: Reply) -> None:
        waiter, self._waiter = self._waiter, None
        self._disarm()
        if not reply.reusable:
            self.close()
        if waiter is not None and not waiter.done():
            waiter.set_result((reply.status, reply.headers, reply.body))

    def _fail(self, detail: str) -> None:
        waiter, self._waiter = self._waiter, None
        self._disarm()
        self.close()
        if waiter is not None and not waiter.done():
            waiter.set_result(Failure(detail, retryable=True))

    def _arm(self) -> None:
        self._disarm()
        self._timer = self._loop.call_later(self._read_timeout, self._fail, self._timed_out)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        """Close at once, from the loop's thread or after the loop stopped or closed."""
        self.alive = False
        transport = self.transport
        if transport is None:
            return
        with contextlib.suppress(RuntimeError):  # its loop has closed
            transport.abort()
        if not self._loop.is_running():
            # The loop would close the socket on its next turn, which may never come.
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


class _Pool:
    """The connections of one event loop; at most ``limit`` requests in flight."""

    def __init__(self, loop: asyncio.AbstractEventLoop, direct: DirectTransport, limit: int) -> None:
        self.loop = loop
        self._direct = direct
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        self._slots = asyncio.Semaphore(limit)
        self._ssl = tls_context(direct.ca_certs, direct.client_cert) if direct.https else None
        self.lifetime: AsyncGenerator[None, None] | None = None

    async def send(self, exchange: Exchange, deadline: Deadline | None) -> Response | Failure:
        async with self._slots:
            if deadline is not None:
                deadline.check_start(sent=False)  # it waited for a slot until its time was up
            connection = self._reuse() or await self._connect(deadline)
            if isinstance(connection, Failure):
                return connection
            try:
                answer = await connection.send(exchange)
            except BaseException:  # cancelled (the operation's deadline): the connection is mid-reply
                self._drop(connection)
                raise
            if connection.alive and len(self._idle) < self._direct.max_connections:
                self._idle.append(connection)
            else:
                self._drop(connection)
            return answer

    def _reuse(self) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if connection.alive:
                return connection
            self._drop(connection)
        return None

    async def _connect(self, deadline: Deadline | None) -> _Connection | Failure:
        direct = self._direct
        timeout = direct.connect_timeout if deadline is None else min(direct.connect_timeout, deadline.start_left())
        try:
            _, connection = await asyncio.wait_for(
                self.loop.create_connection(
                    lambda: _Connection(self.loop, direct.read_timeout),
                    direct.hostname,
                    direct.port,
                    ssl=self._ssl,
                    server_hostname=direct.hostname if self._ssl else None,
                ),
                timeout,
            )
        except asyncio.TimeoutError:
            if deadline is not None and deadline.start_left() <= 0:
                raise DeadlinePassed(sent=False) from None
            return Failure(f"connecting to {direct.hostname}:{direct.port} timed out", retryable=True)
        except OSError as exc:  # refused, unreachable, TLS handshake or certificate
            return Failure(f"cannot connect to {direct.hostname}:{direct.port}: {exc}", retryable=True)
        self._open.add(connection)
        return connection

    def _drop(self, connection: _Connection) -> None:
        connection.close()
        self._open.discard(connection)

    def close(self) -> None:
        connections = list(self._open)
        self._open.clear()
        self._idle.clear()
        try:
            on_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            on_loop = False
        if not on_loop and self.loop.is_running():
            with contextlib.suppress(RuntimeError):  # closed meanwhile: close from here
                self.loop.call_soon_threadsafe(_close_all, connections)
                return
        _close_all(connections)


def _close_all(connections: list[_Connection]) -> None:
    for connection in connections:
        connection.close()


class AsyncioSender:
    """Sends :class:`Get`, :class:`Put` and :class:`ListKeys` from the running event loop.

    ``direct`` supplies everything but the sending (see :meth:`DirectTransport.exchanges`). Each request in
    flight holds one connection, so at most ``direct.max_connections`` requests of one loop are in flight at
    once, the size of the sync sender's connection pool. It is not the thread pool's ``max_concurrency``: a
    request waiting here costs no thread, and a limit of 32 kept requests waiting for a slot longer than for the
    server (docs/benchmarks.md, "How many requests the event-loop sender lets out at once")."""

    def __init__(self, direct: DirectTransport) -> None:
        self.direct = direct
        self.max_in_flight = direct.max_connections
        self._pools: dict[asyncio.AbstractEventLoop, _Pool] = {}
        self._registry = threading.Lock()
        """Guards ``_pools`` when loops in several threads open or close pools at once."""
        self._closed = False

    async def execute(self, request: Get | Put | ListKeys, deadline: Deadline | None = None) -> Any:
        """Send ``request``; with a ``deadline`` (:mod:`.deadline`) no attempt or wait between attempts starts
        after its ``last_start``, and an attempt in flight is cancelled at its ``cut_at`` (its connection dropped)."""
        steps = Steps(self.direct.exchanges(request))
        attempts = Attempts(deadline)
        for step in steps:
            if isinstance(step, Exchange):
                with attempts.attempt():
                    steps.answer(await self._send_within(step, deadline))
            else:
                attempts.wait(step)
                await asyncio.sleep(step)
        return steps.result

    async def _send_within(self, exchange: Exchange, deadline: Deadline | None) -> Response | Failure:
        """One attempt, cut at the deadline's ``cut_at`` (then it went out: :class:`DeadlinePassed`)."""
        if deadline is None:
            return await self._send(exchange, None)
        try:
            return await within(self._send(exchange, deadline), deadline.cut_left())
        except asyncio.TimeoutError:
            raise DeadlinePassed(sent=True) from None

    async def _send(self, exchange: Exchange, deadline: Deadline | None) -> Response | Failure:
        if self._closed:
            return Failure("the saver was closed", retryable=False)
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop) or await self._open_pool(loop)
        return await pool.send(exchange, deadline)

    async def _open_pool(self, loop: asyncio.AbstractEventLoop) -> _Pool:
        """The running loop's pool, made at its first request and closed when the loop shuts down."""
        with self._registry:
            stale = [p for p in self._pools.values() if p.loop.is_closed()]
            for old in stale:
                del self._pools[old.loop]
            pool = self._pools[loop] = _Pool(loop, self.direct, self.max_in_flight)
        for old in stale:
            old.close()
        # An async generator suspended in the loop: ``asyncio.run`` (and every runner that calls
        # ``loop.shutdown_asyncgens()``) closes it before closing the loop, which closes the pool while the
        # loop can still close its sockets.
        pool.lifetime = self._lifetime(pool)
        await pool.lifetime.asend(None)
        return pool

    async def _lifetime(self, pool: _Pool) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            pool.close()
            with self._registry:
                if self._pools.get(pool.loop) is pool:
                    del self._pools[pool.loop]

    @property
    def pools(self) -> int:
        """How many event loops have a pool (for tests)."""
        return len(self._pools)

    def open_connections(self) -> int:
        """Connections open in every pool (for tests)."""
        with self._registry:
            return sum(len(p._open) for p in self._pools.values())

    def close(self) -> None:
        with self._registry:
            self._closed = True
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()
