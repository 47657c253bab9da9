"""A call ends on time, and never while a request it sent is still in flight (docs/safety.md, "Deadlines and requests
in flight"; issue 27, items c and d).

* In flight (c): an async batch raised on its first failed request and left the others running, so an ``aput`` whose
  record PUT failed raised while its head PUT was on its way: the head landed after the caller was told the put
  failed (``get_tuple`` right after the error showed the old state, later the new one). A batch still in flight at
  the deadline was abandoned the same way, sync and async. Now every request of a batch has ended before the call
  returns or raises. Behind :class:`FaultProxy` on SeaweedFS, which fails one request and holds another.
* Deadline (d): the read timeout counts from the last byte received, and a one-request batch carried no deadline,
  so a reply trickling in byte by byte kept a sync ``get_tuple`` for 8-9 s against a 3 s deadline (and the stores
  had no deadline at all). Now a read ends at the deadline and a write at the deadline plus the client's read
  timeout, on both transports, for both savers and both stores. Against a socket server here that answers every
  request correctly but one byte every 50 ms (a reply takes over 10 s).

Times are the behaviour under test here, so they are asserted, with wide margins: a deadline of 1 s and a read
timeout of 1 s, and a call must end before 3 s where the old code took more than 10.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import boto3
import pytest
from faultproxy import FaultProxy
from helpers import cfg, client_options, fake_client_options, silent_server
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.store.base import PutOp

from langgraph_s3_checkpoint import (
    AsyncS3Saver,
    AsyncS3Store,
    S3RequestError,
    S3Saver,
    S3Store,
    make_client,
)
from langgraph_s3_checkpoint.local import LocalS3Server

BUCKET = "lgs3-test"


# ------------------------------------------------------------------------------------------------
# c. Nothing lands after the call has ended
# ------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def behind_a_fault_proxy(server: LocalS3Server) -> Iterator[tuple[FaultProxy, Any, str]]:
    """A proxy in front of SeaweedFS, a client through it (one attempt per request), and a fresh prefix."""
    server.create_bucket(BUCKET)
    with FaultProxy(server.endpoint_url) as proxy:
        yield proxy, make_client(**client_options(server, proxy.url), max_attempts=1), f"t/{uuid4().hex[:12]}"


def latest_id(reader: S3Saver) -> str | None:
    tup = reader.get_tuple(cfg("t"))
    return None if tup is None else str(tup.checkpoint["id"])


@pytest.mark.parametrize("transport", ["boto3", "direct"])
def test_a_failed_aput_raises_only_once_its_head_put_has_ended(seaweedfs_server: LocalS3Server, transport: str) -> None:
    """The record PUT fails at once, the head PUT (sent beside it) is held 0.5 s: ``aput`` raises only after the head
    has landed, so what ``get_tuple`` shows right after the error is what it shows a second later."""
    with (
        behind_a_fault_proxy(seaweedfs_server) as (proxy, client, prefix),
        contextlib.closing(S3Saver(bucket=BUCKET, prefix=prefix, client=seaweedfs_server.client())) as reader,
    ):
        first, second = empty_checkpoint(), empty_checkpoint()

        async def fail_the_second_put() -> tuple[str | None, str | None]:
            saver = AsyncS3Saver(bucket=BUCKET, prefix=prefix, client=client, transport=transport)
            try:
                parent = await saver.aput(cfg("t"), first, {"source": "input", "step": -1}, {})
                proxy.inject("internal", method="PUT", key_suffix="/checkpoint")
                proxy.inject("delay", method="PUT", key_suffix="/head", seconds=0.5)
                with pytest.raises(S3RequestError, match="InternalError"):
                    await saver.aput(parent, second, {"source": "loop", "step": 0}, {})
                right_after = latest_id(reader)
                await asyncio.sleep(1.0)  # more than the held head PUT needs to land
                return right_after, latest_id(reader)
            finally:
                saver.close()

        right_after, later = asyncio.run(fail_the_second_put())
        assert proxy.pending_rules() == 0
        assert right_after == later == second["id"]  # the head PUT landed, before the error was raised


@pytest.mark.parametrize("transport", ["boto3", "direct"])
@pytest.mark.parametrize("saver_class", [S3Saver, AsyncS3Saver])
def test_a_put_whose_head_is_in_flight_at_the_deadline_waits_for_its_answer(
    seaweedfs_server: LocalS3Server, saver_class: type[Any], transport: str
) -> None:
    """The head PUT is held 1.5 s against a deadline of 1 s: the put waits for its answer (a write unanswered at the
    deadline is given the client's read timeout to answer) and returns, committed; it used to raise at 1 s while the
    head was on its way, and the head landed after the error."""
    with (
        behind_a_fault_proxy(seaweedfs_server) as (proxy, client, prefix),
        contextlib.closing(S3Saver(bucket=BUCKET, prefix=prefix, client=seaweedfs_server.client())) as reader,
    ):
        # The conditional-write probe (five round trips, once per process and endpoint) runs here, on the default
        # deadline: on a loaded machine it can take more than the 1 s the put under test gets.
        with contextlib.closing(S3Saver(bucket=BUCKET, prefix=prefix, client=client)) as warm:
            warm.setup()
        saver = saver_class(bucket=BUCKET, prefix=prefix, client=client, transport=transport, operation_timeout=1)
        first, second = empty_checkpoint(), empty_checkpoint()
        try:
            parent = run(saver.aput if saver_class is AsyncS3Saver else saver.put, cfg("t"), first, {"step": -1}, {})
            proxy.inject("delay", method="PUT", key_suffix="/head", seconds=1.5)
            outcome = "returned"
            try:
                run(saver.aput if saver_class is AsyncS3Saver else saver.put, parent, second, {"step": 0}, {})
            except S3RequestError as error:
                outcome = f"raised {error}"
            right_after = latest_id(reader)
            time.sleep(1.0)
            assert (right_after, outcome) == (latest_id(reader), "returned")
            assert right_after == second["id"]
        finally:
            saver.close()


def run(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``, awaited in a new event loop if it is a coroutine function."""
    result = call(*args)
    return asyncio.run(result) if asyncio.iscoroutine(result) else result


@pytest.mark.parametrize("transport", ["boto3", "direct"])
def test_a_store_abatch_whose_middle_put_fails_raises_once_the_others_have_ended(
    seaweedfs_server: LocalS3Server, transport: str
) -> None:
    """``abatch`` of three puts; the second fails at once, the third is held 0.5 s: the error comes once the third
    has landed (it used to come first, and the item appeared afterwards)."""
    with behind_a_fault_proxy(seaweedfs_server) as (proxy, client, prefix):
        reader = S3Store(bucket=BUCKET, prefix=prefix, client=seaweedfs_server.client())

        async def fail_the_middle_put() -> tuple[bool, bool]:
            store = AsyncS3Store(bucket=BUCKET, prefix=prefix, client=client, transport=transport)
            try:
                proxy.inject("internal", method="PUT", key_suffix="/~/b")
                proxy.inject("delay", method="PUT", key_suffix="/~/c", seconds=0.5)
                with pytest.raises(S3RequestError, match="InternalError"):
                    await store.abatch([PutOp(("n",), key, {"v": key}) for key in "abc"])
                right_after = reader.get(("n",), "c") is not None
                await asyncio.sleep(1.0)
                return right_after, reader.get(("n",), "c") is not None
            finally:
                store.close()

        with contextlib.closing(reader):
            assert asyncio.run(fail_the_middle_put()) == (True, True)
            assert reader.get(("n",), "a") is not None and reader.get(("n",), "b") is None


# ------------------------------------------------------------------------------------------------
# d. A reply trickling in does not outlive the deadline
# ------------------------------------------------------------------------------------------------
_EMPTY_LISTING = (
    b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    b"<Name>b</Name><Prefix></Prefix><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>"
    b"</ListBucketResult>"
)
_NO_SUCH_KEY = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code>'
    b"<Message>The specified key does not exist.</Message><RequestId>trickle</RequestId></Error>"
)
TRICKLE_GAP = 0.05
"""Seconds between two bytes of a reply: far below any read timeout, so no timeout between bytes fires."""


def _reply_to(method: str, target: str) -> bytes:
    """What an S3 server with an empty bucket answers: PUT stored, an empty listing, no such key."""
    if method == "PUT":
        return b'HTTP/1.1 200 OK\r\nETag: "0123456789abcdef"\r\nx-amz-request-id: trickle\r\nContent-Length: 0\r\n\r\n'
    status, body = ("200 OK", _EMPTY_LISTING) if "list-type=2" in target else ("404 Not Found", _NO_SUCH_KEY)
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nx-amz-request-id: trickle\r\n"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


@contextlib.contextmanager
def trickling_server(slow_methods: frozenset[str]) -> Iterator[str]:
    """An HTTP server that answers like S3 over an empty bucket, the replies to ``slow_methods`` one byte at a time
    (each over 10 s), the others at once; yields its URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.1)
    stop = threading.Event()

    def answer(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            buffered = b""
            while not stop.is_set():
                while b"\r\n\r\n" not in buffered:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffered += data
                head, _, buffered = buffered.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                length = next(
                    (int(v) for k, _, v in (x.partition(":") for x in lines) if k.lower() == "content-length"), 0
                )
                while len(buffered) < length:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffered += data
                buffered = buffered[length:]
                reply = _reply_to(method, target)
                if method not in slow_methods:
                    conn.sendall(reply)
                    continue
                for at in range(len(reply)):
                    if stop.is_set():
                        return
                    conn.sendall(reply[at : at + 1])
                    time.sleep(TRICKLE_GAP)

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                threading.Thread(target=answer, args=(listener.accept()[0],), daemon=True).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        acceptor.join()
        listener.close()


Call = Callable[[Any], "Any | Awaitable[Any]"]

READS: dict[str, tuple[type[Any], Call]] = {
    "S3Saver.get_tuple": (S3Saver, lambda saver: saver.get_tuple(cfg("t"))),
    "AsyncS3Saver.aget_tuple": (AsyncS3Saver, lambda saver: saver.aget_tuple(cfg("t"))),
    "S3Store.get": (S3Store, lambda store: store.get(("n",), "k")),
    "AsyncS3Store.asearch": (AsyncS3Store, lambda store: store.asearch(("n",))),
}
WRITES: dict[str, tuple[type[Any], Call]] = {
    "S3Saver.put": (S3Saver, lambda saver: saver.put(cfg("t"), empty_checkpoint(), {"step": -1}, {})),
    "AsyncS3Saver.aput": (AsyncS3Saver, lambda saver: saver.aput(cfg("t"), empty_checkpoint(), {"step": -1}, {})),
    "S3Store.put": (S3Store, lambda store: store.put(("n",), "k", {"v": 1})),
    "AsyncS3Store.aput": (AsyncS3Store, lambda store: store.aput(("n",), "k", {"v": 1})),
    # Its expiry marker first (store/ttl/), then the item: two round trips of writes within the one deadline.
    "S3Store.put with a TTL": (S3Store, lambda store: store.put(("n",), "k", {"v": 1}, ttl=5)),
}


def _ended_by(kind: type[Any], call: Call, endpoint: str, transport: str) -> tuple[float, str]:
    """Seconds the call took against ``endpoint`` (deadline 1 s, read timeout 1 s), and the error it raised."""
    url = f"s3://b/p?read_timeout=1&operation_timeout=1&transport={transport}"
    opened = kind._from_url(url, **fake_client_options(endpoint))
    started = time.monotonic()
    try:
        result = call(opened)
        if asyncio.iscoroutine(result):
            asyncio.run(result)
        raised = "nothing"
    except S3RequestError as error:
        raised = str(error)
    finally:
        took = time.monotonic() - started
        opened.close()
    return took, raised


@pytest.mark.memory
@pytest.mark.parametrize("transport", ["boto3", "direct"])
@pytest.mark.parametrize("what", list(READS))
def test_a_read_whose_reply_trickles_in_ends_at_the_deadline(what: str, transport: str) -> None:
    with trickling_server(frozenset({"GET", "PUT"})) as endpoint:
        took, raised = _ended_by(*READS[what], endpoint, transport)
    assert took < 3, f"{what} took {took:.1f} s against a deadline of 1 s"
    assert "did not finish within 1 s (operation_timeout" in raised


@pytest.mark.memory
@pytest.mark.parametrize("transport", ["boto3", "direct"])
@pytest.mark.parametrize("what", list(WRITES))
def test_a_write_whose_answer_trickles_in_ends_a_read_timeout_after_the_deadline(what: str, transport: str) -> None:
    """Reads are answered at once, PUTs a byte at a time: the write is given the read timeout (1 s) after the deadline
    to answer, then cut; the error says its outcome is unknown and how to find out."""
    with trickling_server(frozenset({"PUT"})) as endpoint:
        took, raised = _ended_by(*WRITES[what], endpoint, transport)
    assert took < 3, f"{what} took {took:.1f} s against a deadline of 1 s and a read timeout of 1 s"
    assert "had no answer 1 s after the deadline and were cut off" in raised and "No request" in raised, raised


def test_the_watchdog_of_boto3_requests_keeps_only_those_running(seaweedfs_server: LocalS3Server) -> None:
    """Every boto3 request of a bounded call is watched until its cut; those that ended are dropped from the
    watchdog as more are watched, so that a busy process does not hold one entry per request of the last minute."""
    from langgraph_s3_checkpoint._transport import deadline

    seaweedfs_server.create_bucket(BUCKET)
    with S3Saver(
        bucket=BUCKET, prefix=f"t/{uuid4().hex[:12]}", client=seaweedfs_server.client(), transport="boto3"
    ) as saver:
        for _ in range(300):
            assert saver.get_tuple(cfg("t")) is None
        assert len(deadline._WATCHDOG._due) <= 65


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """A TCP server that accepts connections and never answers."""
    with silent_server() as port:
        yield f"http://127.0.0.1:{port}"


_SILENT_OPTIONS = "read_timeout=0.5&connect_timeout=0.5&max_attempts=2"
_SILENT_BOUND = 8.0
"""Seconds: 2 attempts x 0.5 s read timeout, backoff and client creation, with a wide margin."""


@pytest.mark.memory
@pytest.mark.parametrize("transport", ["boto3", "direct"])
def test_a_silent_endpoint_fails_within_the_timeouts(silent_endpoint: str, transport: str) -> None:
    url = f"s3://b/p?{_SILENT_OPTIONS}&transport={transport}"
    with S3Saver.from_conn_string(url, **fake_client_options(silent_endpoint)) as saver:
        for call in (
            lambda: saver.get_tuple(cfg("t")),
            lambda: saver.put(cfg("t"), empty_checkpoint(), {"step": 0}, {}),
            lambda: list(saver.list(cfg("t"), limit=2)),
            saver.setup,
        ):
            started = time.monotonic()
            with pytest.raises(S3RequestError):
                call()
            assert time.monotonic() - started < _SILENT_BOUND


@pytest.mark.memory
@pytest.mark.parametrize("transport", ["boto3", "direct"])
def test_a_silent_endpoint_fails_within_the_timeouts_async(silent_endpoint: str, transport: str) -> None:
    async def main() -> None:
        url = f"s3://b/p?{_SILENT_OPTIONS}&transport={transport}"
        async with AsyncS3Saver.from_conn_string(url, **fake_client_options(silent_endpoint)) as saver:
            for call in (
                lambda: saver.aget_tuple(cfg("t")),
                lambda: saver.aput(cfg("t"), empty_checkpoint(), {"step": 0}, {}),
                saver.setup,
            ):
                started = time.monotonic()
                with pytest.raises(S3RequestError):
                    await call()
                assert time.monotonic() - started < _SILENT_BOUND

    asyncio.run(main())


@pytest.mark.memory
@pytest.mark.parametrize("saver_class", [S3Saver, AsyncS3Saver])
def test_operation_deadline_caps_a_slow_operation(silent_endpoint: str, saver_class: type[Any]) -> None:
    # Each request alone may take up to 3 x 2 s here; the operation's deadline ends the call at 1 s.
    url = "s3://b/p?read_timeout=2&max_attempts=3&operation_timeout=1"
    by_id = cfg("t")
    by_id["configurable"]["checkpoint_id"] = "1f000000-0000-6000-8000-000000000000"
    saver = saver_class._from_url(url, **fake_client_options(silent_endpoint))
    started = time.monotonic()
    with pytest.raises(S3RequestError, match="operation_timeout"):
        if saver_class is S3Saver:
            saver.get_tuple(by_id)  # its first step is a parallel batch of three requests
        else:
            asyncio.run(saver.aget_tuple(by_id))
    assert time.monotonic() - started < 4
    saver.close()


@pytest.mark.memory
def test_default_timeouts_are_bounded() -> None:
    with S3Saver.from_conn_string("s3://b/p", endpoint_url="http://127.0.0.1:9") as saver:
        config = saver.client.meta.config
        worst = config.retries["total_max_attempts"] * (config.connect_timeout + config.read_timeout)
        assert worst <= 60
        assert saver.operation_timeout is not None and saver.operation_timeout <= 120


@pytest.mark.parametrize("transport", ["boto3", "direct"])
def test_a_cancelled_aput_leaves_no_write_in_flight(
    s3_server: LocalS3Server, bucket: str, prefix: str, transport: str
) -> None:
    """A cancelled ``aput`` must not leave its record and head PUTs in flight (the server applies a request already
    sent; a boto3 request on the thread pool runs on regardless): its checkpoint could commit after the cancelled task
    had ended, and the next run on the thread, started meanwhile, be refused as another writer's. A batch of writes runs
    to its end before the cancellation goes on: once the task has ended, the head no longer moves. Behind a proxy adding
    150 ms each way, so that the PUTs are in flight when the task is cancelled."""
    from botocore.config import Config

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from latencyproxy import LatencyProxy

    port = int(s3_server.endpoint_url.rsplit(":", 1)[1])
    reader = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())

    def latest_id() -> str:
        tup = reader.get_tuple(cfg("t"))
        assert tup is not None
        return str(tup.checkpoint["id"])

    with LatencyProxy("127.0.0.1", port, one_way_ms=150, lifetime=60) as proxy, contextlib.closing(reader):
        slow = boto3.session.Session().client(
            "s3",
            endpoint_url=proxy.url,
            region_name=s3_server.region,
            aws_access_key_id=s3_server.access_key,
            aws_secret_access_key=s3_server.secret_key,
            config=Config(s3={"addressing_style": "path"}, retries={"mode": "standard", "total_max_attempts": 1}),
        )
        first, second = empty_checkpoint(), empty_checkpoint()
        assert first["id"] < second["id"]  # uuid6: later is larger

        async def cancel_the_second_put() -> tuple[str, str]:
            saver = AsyncS3Saver(bucket=bucket, prefix=prefix, client=slow, transport=transport)
            try:
                parent = await saver.aput(cfg("t"), first, {"source": "input", "step": -1}, {})
                putting = asyncio.create_task(saver.aput(parent, second, {"source": "loop", "step": 0}, {}))
                await asyncio.sleep(0.1)  # its record and head PUTs are on their way
                putting.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await putting
                when_cancelled = latest_id()
                await asyncio.sleep(0.8)  # more than the PUTs in flight need to land
                return when_cancelled, latest_id()
            finally:
                saver.close()  # (closing waits for the thread pool: the heads are read before)

        when_cancelled, later = asyncio.run(cancel_the_second_put())
        assert later == when_cancelled


@pytest.mark.memory
def test_a_batch_of_writes_settles_once_and_is_abandoned_on_a_second_cancellation() -> None:
    """The rule behind the test above, without a server: cancelled once, the caller waits for the batch (whose
    error, if any, is retrieved, not reported at exit); cancelled again while waiting, it stops waiting and the
    batch is cancelled too, as every batch was before."""
    from langgraph_s3_checkpoint._transport.bucket_io import _settled_if_cancelled

    finished: list[str] = []

    async def batch(outcome: str) -> str:
        try:
            await asyncio.sleep(0.2)
        except asyncio.CancelledError:
            finished.append(f"{outcome}: cancelled")
            raise
        finished.append(f"{outcome}: done")
        if outcome == "fails":
            raise RuntimeError("the batch failed")
        return outcome

    async def cancel(outcome: str, times: int) -> None:
        caller = asyncio.create_task(_settled_if_cancelled(batch(outcome)))
        for _ in range(times):
            await asyncio.sleep(0.05)
            caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await asyncio.sleep(0.3)  # anything still running would finish now

    async def scenario() -> None:
        await cancel("lands", 1)
        await cancel("fails", 1)
        await cancel("abandoned", 2)

    asyncio.run(scenario())
    assert finished == ["lands: done", "fails: done", "abandoned: cancelled"]
