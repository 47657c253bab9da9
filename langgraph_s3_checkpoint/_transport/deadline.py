"""The operation deadline (``operation_timeout``) as each request of a call carries it.

The rule (docs/safety.md, "Deadlines and requests in flight"): a call returns or raises only once every request it
sent has ended, and it ends by its deadline. So the deadline cannot stay the driver's business (a driver that stops
waiting leaves its requests running: a PUT lands after the caller was told the put failed); each request carries a
:class:`Deadline`, and whoever sends it ends it on time:

* no attempt of a request (a connection, a retry, a wait between attempts) starts after the call's deadline;
* an attempt still unanswered is cut at ``cut_at``: the deadline itself for a read, the deadline plus the client's
  read timeout for a write. An answer that arrives in that grace says whether the write was applied; a write cut
  off is of unknown outcome, and the error says so and how to find out.

How each sender keeps it. The direct transport's blocking sender bounds connect and every ``recv`` by the time left,
so a reply trickling in byte by byte (each byte restarts the read timeout) still ends at ``cut_at``
(:mod:`.blocking_sender`); the asyncio sender runs each attempt under a timeout (:mod:`.asyncio_sender`). A boto3
request cannot be bounded from outside except by closing its connection: :func:`follow_connections` makes the client's
connections report to the call on their thread, and one watchdog thread shuts a call's connection down at ``cut_at``
(:func:`cut_at_deadline`). botocore then retries, and the next attempt is refused before it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

logger = logging.getLogger(__name__)
T = TypeVar("T")


class DeadlinePassed(Exception):
    """A request ended by its call's deadline. Internal: :class:`.bucket_io.BucketIO` raises ``S3RequestError`` for it.

    ``sent``: an attempt went out and was not answered (or was answered with an error worth retrying), so a write's
    outcome is unknown; otherwise the request never reached the server."""

    def __init__(self, *, sent: bool) -> None:
        super().__init__("the operation's deadline passed")
        self.sent = sent


class Deadline:
    """When one request of a bounded call must be over (``time.monotonic`` instants)."""

    __slots__ = ("_attempts", "_connections", "_state", "cut_at", "last_start")

    def __init__(self, last_start: float, cut_at: float) -> None:
        self.last_start = last_start
        """No attempt starts after this instant: the call's deadline."""
        self.cut_at = cut_at
        """An attempt still unanswered at this instant is cut (the deadline, plus the grace for a write)."""
        self._connections: list[Any] = []
        """The boto3 connections this request has used (:func:`follow_connections`)."""
        self._state = _RUNNING
        self._attempts = 0
        """Attempts sent through boto3 so far."""

    def start_left(self) -> float:
        """Seconds left to start an attempt (or to wait before one); zero or less: none may start."""
        return self.last_start - time.monotonic()

    def cut_left(self) -> float:
        """Seconds left before an attempt in flight is cut."""
        return self.cut_at - time.monotonic()

    def check_start(self, *, sent: bool) -> None:
        """Raise :class:`DeadlinePassed` if no attempt may start any more (``sent``: whether one already went out)."""
        if self.start_left() <= 0:
            raise DeadlinePassed(sent=sent)

    # -- cutting a boto3 request ----------------------------------------------------------------
    @property
    def was_cut(self) -> bool:
        return self._state is _CUT

    def _attach(self, connection: Any) -> None:
        """``connection`` carries an attempt of this request; refused once the request was cut or its time is up."""
        with _CUTTING:
            if self._state is not _RUNNING or self.start_left() <= 0:
                raise _Refused
            self._connections.append(connection)
            self._attempts += 1

    def _cut(self) -> None:
        """Shut down the connections of the request, unless it has ended meanwhile."""
        with _CUTTING:
            if self._state is not _RUNNING:
                return
            self._state = _CUT
            connections, self._connections = self._connections, []
        for connection in connections:
            _shut_down(getattr(connection, "sock", None))

    def _end(self) -> None:
        with _CUTTING:
            if self._state is _RUNNING:
                self._state = _ENDED
            self._connections = []


class Attempts:
    """One request's attempts held to its deadline (``None``: unbounded), as both direct senders send them: no attempt,
    and no wait before one, starts after the deadline's ``last_start``, and the :class:`DeadlinePassed` an attempt ends
    with (its connection came after its time was up, or it was cut) says whether any attempt went out."""

    __slots__ = ("deadline", "sent")

    def __init__(self, deadline: Deadline | None) -> None:
        self.deadline = deadline
        self.sent = False
        """Whether an attempt went out (a write's outcome is then unknown)."""

    @contextlib.contextmanager
    def attempt(self) -> Iterator[None]:
        """Around one attempt: refused past the last start; a :class:`DeadlinePassed` it raises counts the attempts
        before it as sent."""
        if self.deadline is not None:
            self.deadline.check_start(sent=self.sent)
        earlier, self.sent = self.sent, True
        try:
            yield
        except DeadlinePassed as late:
            raise DeadlinePassed(sent=late.sent or earlier) from None

    def wait(self, seconds: float) -> None:
        """Before waiting ``seconds`` for the next attempt: refused if that attempt could not start after the wait."""
        if self.deadline is not None and seconds >= self.deadline.start_left():
            raise DeadlinePassed(sent=self.sent)


def _shut_down(sock: Any) -> None:
    """Wake a thread blocked reading ``sock`` with end of stream. For a TLS socket, socket.socket's own shutdown:
    SSLSocket's would also drop the TLS object under the reading thread. (TLS through an HTTPS proxy is an object of
    urllib3's around a socket, not a socket: such a connection is left to the client's timeouts.)"""
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


_RUNNING, _ENDED, _CUT = object(), object(), object()
_CUTTING = threading.Lock()
"""Guards the state and connections of every :class:`Deadline` (held for a few instructions at a time)."""


class _Refused(BaseException):
    """Raised inside botocore when a request that was cut (or whose time is up) starts another attempt. A
    ``BaseException``: botocore and urllib3 wrap and retry ``Exception``\\ s, and this must end the call."""


# ------------------------------------------------------------------------------------------------
# asyncio
# ------------------------------------------------------------------------------------------------
if sys.version_info >= (3, 11):

    async def within(work: Awaitable[T], seconds: float) -> T:
        """``work``'s result, cancelled after ``seconds`` (``asyncio.TimeoutError``); cheaper than ``wait_for``."""
        async with asyncio.timeout(seconds):
            return await work

else:

    async def within(work: Awaitable[T], seconds: float) -> T:
        return await asyncio.wait_for(work, timeout=seconds)


# ------------------------------------------------------------------------------------------------
# boto3: following connections, and the watchdog that cuts them
# ------------------------------------------------------------------------------------------------
_current = threading.local()
"""``deadline``: the :class:`Deadline` of the boto3 request running on this thread, if it has one."""


@contextlib.contextmanager
def cut_at_deadline(deadline: Deadline) -> Iterator[None]:
    """Run one boto3 request (on this thread) under ``deadline``: refused if its time is up, its connections
    shut down at ``deadline.cut_at``; it ends with :class:`DeadlinePassed` once cut."""
    deadline.check_start(sent=False)
    _current.deadline = deadline
    _WATCHDOG.watch(deadline)
    try:
        yield
        if deadline.was_cut:  # botocore may take a reply cut short for a whole one (headers end at end of stream)
            raise DeadlinePassed(sent=True)
    except _Refused:
        raise DeadlinePassed(sent=deadline._attempts > 0) from None
    except Exception as failure:
        if deadline.was_cut:  # what botocore made of the closed connection
            raise DeadlinePassed(sent=True) from failure
        raise
    finally:
        _current.deadline = None
        deadline._end()
        _WATCHDOG.forget(deadline)


class _Watchdog:
    """One daemon thread that cuts boto3 requests still running at their ``cut_at``."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, Deadline]] = []
        self._watched = 0
        """Requests in ``_due`` still running (the rest are dropped lazily)."""
        self._order = itertools.count()
        self._wake = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None

    def forked(self) -> None:
        """In a forked child the thread is gone (and the lock may be held by a thread that no longer exists)."""
        self._due, self._watched, self._thread = [], 0, None
        self._wake = threading.Condition(threading.Lock())

    def watch(self, deadline: Deadline) -> None:
        with self._wake:
            if len(self._due) > 64 and len(self._due) > 2 * self._watched:
                # Ended requests stay in the heap until their time comes; a busy process drops them here.
                self._due = [entry for entry in self._due if entry[2]._state is _RUNNING]
                heapq.heapify(self._due)
            heapq.heappush(self._due, (deadline.cut_at, next(self._order), deadline))
            self._watched += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lgs3-deadline", daemon=True)
                self._thread.start()
            elif self._due[0][2] is deadline:
                self._wake.notify()

    def forget(self, deadline: Deadline) -> None:
        with self._wake:
            self._watched -= 1

    def _run(self) -> None:
        while True:
            with self._wake:
                while True:
                    while self._due and self._due[0][2]._state is not _RUNNING:
                        heapq.heappop(self._due)
                    now = time.monotonic()
                    if self._due and self._due[0][0] <= now:
                        due = heapq.heappop(self._due)[2]
                        break
                    self._wake.wait(self._due[0][0] - now if self._due else None)
            due._cut()


_WATCHDOG = _Watchdog()


def _after_fork_in_child() -> None:
    global _CUTTING
    _CUTTING = threading.Lock()
    _WATCHDOG.forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def follow_connections(client: Any) -> bool:
    """Let a boto3 client's requests be cut at their deadline: its HTTP session makes connections that attach
    themselves to the request on their thread (:func:`cut_at_deadline`), and refuse to start an attempt after
    it was cut or its time is up. Returns whether the client's requests can be cut.

    botocore's ``URLLib3Session`` keeps one dict of connection-pool classes for its pool managers (private, stable
    since botocore 1.11); its two classes are replaced by subclasses whose connections do the above, and pools made
    before are dropped (their idle connections closed) so that the next request makes a followed one. For anything
    else than botocore's own classes (a client made by other means) nothing changes, and a boto3 request is bounded
    by the client's own timeouts only. Calls without a deadline (and other users of the client) are unaffected."""
    try:
        session = client._endpoint.http_session
        classes = session._pool_classes_by_scheme
        managers = [session._manager, *session._proxy_managers.values()]
    except (AttributeError, TypeError):
        return False
    if not isinstance(classes, dict):
        return False
    followed = _followed_pool_classes()
    if all(cls in followed.values() for cls in classes.values()):
        return True
    if any(cls not in followed for cls in classes.values()):
        logger.debug("boto3 requests are bounded by the client's timeouts only: unknown pool classes %r", classes)
        return False
    for scheme, cls in list(classes.items()):
        classes[scheme] = followed[cls]
    for manager in managers:
        manager.clear()
    return True


_FOLLOWED: dict[Any, Any] = {}


def _followed_pool_classes() -> dict[Any, Any]:
    """botocore's pool classes -> subclasses whose connections attach to the current request (made once)."""
    if not _FOLLOWED:
        from botocore.awsrequest import AWSHTTPConnectionPool, AWSHTTPSConnectionPool

        for pool_class in (AWSHTTPConnectionPool, AWSHTTPSConnectionPool):
            connection_class = type(
                f"Followed{pool_class.ConnectionCls.__name__}", (_FollowedConnection, pool_class.ConnectionCls), {}
            )
            _FOLLOWED[pool_class] = type(
                f"Followed{pool_class.__name__}", (pool_class,), {"ConnectionCls": connection_class}
            )
    return _FOLLOWED


class _FollowedConnection:
    """Mixed into botocore's connection classes: each request sent on the connection attaches it to the
    :class:`Deadline` of the boto3 request on this thread, and a new connection connects within the time left."""

    sock: Any
    timeout: Any

    def request(self, *args: Any, **kwargs: Any) -> Any:
        deadline: Deadline | None = getattr(_current, "deadline", None)
        if deadline is not None:
            deadline._attach(self)
        return super().request(*args, **kwargs)  # type: ignore[misc]

    def connect(self) -> Any:
        deadline: Deadline | None = getattr(_current, "deadline", None)
        if deadline is not None:
            left = deadline.start_left()
            if left <= 0:
                raise _Refused
            if not isinstance(self.timeout, (int, float)) or self.timeout > left:
                self.timeout = left
        connected = super().connect()  # type: ignore[misc]
        if deadline is not None and deadline.was_cut:
            self.close()  # type: ignore[attr-defined]
            raise _Refused
        return connected
