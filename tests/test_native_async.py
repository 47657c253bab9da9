"""The async saver's native transport: ``AsyncS3Saver(transport="direct")`` sends GET, PUT and LIST from the
event loop (``_transport/asyncio_sender.py``), with the sync direct transport's signing, replies, errors and retries.

What is checked here, on real servers and real sockets: that the requests really go out on the loop
(the saver's thread pool is never created and the blocking sender never called), that they are the same requests as
the boto3 path's (counted by a proxy), the error mapping (silent server, refused port, 412, 404, a web
server that is not S3, TLS with and without verification), retries of 503, the operation deadline,
several event loops in sequence, and ``close()``. The conformance, fault and crash suites run the async
saver with this transport too.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import shutil
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from faultproxy import FaultProxy
from helpers import cfg, client_options, growing_graph, silent_server
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_s3_checkpoint import (
    AsyncS3Saver,
    CheckpointConflictError,
    S3RequestError,
    S3Saver,
    SaverMisuseError,
    make_client,
    without_expect_continue,
)
from langgraph_s3_checkpoint._protocol.requests import CREATE, PRECONDITION_FAILED, Get, ListKeys, Put, Update, Written
from langgraph_s3_checkpoint._transport import asyncio_sender as native_module
from langgraph_s3_checkpoint._transport.asyncio_sender import AsyncioSender
from langgraph_s3_checkpoint._transport.blocking_sender import BlockingSender
from langgraph_s3_checkpoint.errors import NotS3EndpointError
from langgraph_s3_checkpoint.local import LocalS3Server
from langgraph_s3_checkpoint.memory import MemoryBucket

BUCKET = "lgs3-test"


def _native(saver: AsyncS3Saver) -> AsyncioSender:
    native = saver.bucket_io.native
    assert native is not None
    return native


def _no_blocking_sender(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: BlockingSender, exchange: Any, *deadline: Any) -> Any:
        raise AssertionError("a request went through the blocking sender")

    monkeypatch.setattr(BlockingSender, "send", refuse)


async def test_requests_go_out_on_the_event_loop(
    s3_server: LocalS3Server, bucket: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_blocking_sender(monkeypatch)
    saver = AsyncS3Saver(bucket=bucket, prefix=prefix, client=s3_server.client(), transport="direct")
    try:
        graph = growing_graph(saver)
        config: RunnableConfig = {"configurable": {"thread_id": "native"}}
        result = await graph.ainvoke({"n": 0, "log": []}, config, durability="sync")
        assert result["n"] == 5
        assert (await graph.aget_state(config)).values["n"] == 5
        assert len([s async for s in graph.aget_state_history(config)]) == 7
        assert len([t async for t in saver.alist(cfg("native"), limit=3)]) == 3
        # put, put_writes, get_tuple and list: not one request needed the thread pool.
        assert saver.bucket_io._pool is None
        assert _native(saver).pools == 1  # (moto closes each connection after its reply; SeaweedFS keeps them)
    finally:
        saver.close()


async def test_the_sync_saver_and_the_boto3_transport_do_not_use_it(s3_server: LocalS3Server, bucket: str) -> None:
    with contextlib.closing(S3Saver(bucket=bucket, client=s3_server.client(), transport="direct")) as sync:
        assert sync.bucket_io.native is None and sync.bucket_io.direct is not None
    with contextlib.closing(AsyncS3Saver(bucket=bucket, client=s3_server.client(), transport="boto3")) as boto3_saver:
        assert boto3_saver.bucket_io.native is None and boto3_saver.bucket_io.direct is None


@pytest.mark.memory
async def test_memory_bucket_ignores_the_transport() -> None:
    saver = AsyncS3Saver(bucket="memory", client=MemoryBucket(), transport="direct")
    try:
        assert saver.bucket_io.native is None
        result = await growing_graph(saver).ainvoke({"n": 0, "log": []}, {"configurable": {"thread_id": "m"}})
        assert result["n"] == 5
    finally:
        saver.close()


@pytest.fixture
def counting_proxy(seaweedfs_server: LocalS3Server) -> Iterator[FaultProxy]:
    seaweedfs_server.create_bucket(BUCKET)
    with FaultProxy(seaweedfs_server.endpoint_url) as proxy:
        yield proxy


async def test_request_counts_equal_the_boto3_transport(
    seaweedfs_server: LocalS3Server, prefix: str, counting_proxy: FaultProxy
) -> None:
    """Counted at the HTTP level by a proxy, so both transports are measured the same way."""
    client = make_client(**client_options(seaweedfs_server, counting_proxy.url))
    probing = AsyncS3Saver(bucket=BUCKET, prefix=prefix, client=client)
    await probing.setup()  # the conditional-write probe, once for the proxy's endpoint: not counted below
    probing.close()
    counts: dict[str, list[int]] = {}
    for transport in ("boto3", "direct"):
        saver = AsyncS3Saver(bucket=BUCKET, prefix=f"{prefix}/{transport}", client=client, transport=transport)
        try:
            graph = growing_graph(saver)
            config: RunnableConfig = {"configurable": {"thread_id": "t"}}
            steps = []
            for action in ("invoke", "get_state", "list"):
                before = counting_proxy.snapshot()["requests"]
                if action == "invoke":
                    await graph.ainvoke({"n": 0, "log": []}, config, durability="sync")
                elif action == "get_state":
                    await graph.aget_state(config)
                else:
                    assert len([t async for t in saver.alist(cfg("t"), limit=3)]) == 3
                steps.append(counting_proxy.snapshot()["requests"] - before)
            counts[transport] = steps
        finally:
            saver.close()
    assert counts["direct"] == counts["boto3"], counts
    assert counts["direct"][1] == 3  # get_state: head, the checkpoint's folder, the large log value


async def test_requests_in_flight_are_bounded_by_the_connection_pool(
    seaweedfs_server: LocalS3Server, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More than the thread pool's ``max_concurrency`` go out at once (they cost no thread), never more than the
    connection pool holds (twice ``max_concurrency``, or the client's ``max_pool_connections`` if larger)."""
    seaweedfs_server.create_bucket(BUCKET)
    in_flight, peak = 0, 0
    send = native_module._Connection.send

    def counted(self: Any, exchange: Any) -> Any:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        waiter = send(self, exchange)

        def done(_: Any) -> None:
            nonlocal in_flight
            in_flight -= 1

        waiter.add_done_callback(done)
        return waiter

    monkeypatch.setattr(native_module._Connection, "send", counted)
    client = make_client(**client_options(seaweedfs_server), max_pool_connections=10)
    saver = AsyncS3Saver(bucket=BUCKET, prefix=prefix, client=client, transport="direct", max_concurrency=3)
    try:
        native = _native(saver)
        assert native.max_in_flight == 10
        await asyncio.gather(*(native.execute(Get(f"{prefix}/missing-{i}")) for i in range(40)))
        assert peak == 10
    finally:
        saver.close()


async def test_replies_404_and_412(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    saver = AsyncS3Saver(bucket=bucket, prefix=prefix, client=s3_server.client(), transport="direct")
    other = AsyncS3Saver(bucket=bucket, prefix=prefix, client=s3_server.client(), transport="direct")
    native = _native(saver)
    try:
        key = f"{prefix}/raw/object"
        assert await native.execute(Get(key)) is None  # 404
        stored = await native.execute(Put(key, b"one", mode=CREATE))
        assert isinstance(stored, Written)
        assert await native.execute(Put(key, b"two", mode=CREATE)) is PRECONDITION_FAILED  # 412
        assert await native.execute(Put(key, b"two", mode=Update('"not-the-etag"'))) is PRECONDITION_FAILED
        obj = await native.execute(Get(key))
        assert obj is not None and obj.body == b"one" and obj.etag == stored.etag
        page = await native.execute(ListKeys(prefix=f"{prefix}/raw/"))
        assert page.keys == [key]

        assert await saver.aget_tuple(cfg("missing")) is None
        base = await saver.aput(cfg("contested"), empty_checkpoint(), {"step": 0}, {})
        await saver.aget_tuple(cfg("contested"))
        await other.aget_tuple(cfg("contested"))
        winner = await other.aput(base, empty_checkpoint(), {"step": 1}, {})
        with pytest.raises(CheckpointConflictError):
            await saver.aput(base, empty_checkpoint(), {"step": 1}, {})
        assert (await saver.aget_tuple(cfg("contested"))).config == winner  # type: ignore[union-attr]
    finally:
        saver.close()
        other.close()


def _client(endpoint: str, **kwargs: Any) -> Any:
    return make_client(
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="AKIA",
        aws_secret_access_key="secret",
        **kwargs,
    )


@pytest.mark.memory
async def test_a_silent_server_fails_within_the_timeouts() -> None:
    with silent_server() as port:
        client = _client(f"http://127.0.0.1:{port}", read_timeout=0.5, max_attempts=2)
        saver = AsyncS3Saver(bucket="b", client=client, transport="direct")
        try:
            started = time.monotonic()
            with pytest.raises(S3RequestError, match=r"Cannot reach the S3 endpoint .*read timed out"):
                await saver.aget_tuple(cfg("t"))
            assert time.monotonic() - started < 3  # 2 attempts x 0.5 s, plus a short backoff
        finally:
            saver.close()


@pytest.mark.memory
async def test_the_operation_deadline_abandons_native_requests() -> None:
    with silent_server() as port:
        client = _client(f"http://127.0.0.1:{port}", read_timeout=30)
        saver = AsyncS3Saver(bucket="b", client=client, transport="direct", operation_timeout=0.5)
        try:
            started = time.monotonic()
            with pytest.raises(S3RequestError, match=r"did not finish within 0\.5 s"):
                await saver.aget_tuple(cfg("t"))
            assert time.monotonic() - started < 2
            assert _native(saver).open_connections() == 0  # the connection left mid-reply is dropped
        finally:
            saver.close()


@pytest.mark.memory
async def test_a_refused_port() -> None:
    saver = AsyncS3Saver(bucket="b", client=_client("http://127.0.0.1:9", max_attempts=2), transport="direct")
    try:
        with pytest.raises(S3RequestError, match="Cannot reach the S3 endpoint"):
            await saver.aput(cfg("t"), empty_checkpoint(), {"step": 0}, {})
    finally:
        saver.close()


class _WebPage(http.server.BaseHTTPRequestHandler):
    def _page(self) -> None:
        body = b"<html><body>Not found</body></html>"
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = _page

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _web_server(tls: ssl.SSLContext | None = None) -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _WebPage)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.memory
async def test_a_web_server_that_is_not_s3() -> None:
    with _web_server() as port:
        saver = AsyncS3Saver(bucket="b", client=_client(f"http://127.0.0.1:{port}"), transport="direct")
        try:
            with pytest.raises(NotS3EndpointError, match="text/html"):
                await saver.aget_tuple(cfg("t"))
            with pytest.raises(NotS3EndpointError):
                await saver.aput(cfg("t"), empty_checkpoint(), {"step": 0}, {})
        finally:
            saver.close()


@pytest.fixture(scope="module")
def tls_context(tmp_path_factory: pytest.TempPathFactory) -> ssl.SSLContext:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    folder: Path = tmp_path_factory.mktemp("tls")
    key, cert = str(folder / "key.pem"), str(folder / "cert.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
        check=True,
        capture_output=True,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    context.cert_file = str(folder / "cert.pem")  # type: ignore[attr-defined]
    return context


@pytest.mark.memory
@pytest.mark.parametrize("sender", ["native", "blocking"])
@pytest.mark.parametrize("verify", ["default", "bundle", "off"])
async def test_https(tls_context: ssl.SSLContext, verify: str, sender: str) -> None:
    """A self-signed server: refused by default, spoken to with its certificate as the CA bundle or without
    verification (it then answers like a web server, which proves the TLS conversation worked). Both senders:
    the event loop's, and the blocking one of the sync saver (on the event loop's thread here, as a sync
    call is)."""
    with _web_server(tls_context) as port:
        cert_file = tls_context.cert_file  # type: ignore[attr-defined]
        option: dict[str, Any] = {"default": {}, "bundle": {"verify": cert_file}, "off": {"verify": False}}[verify]
        client = _client(f"https://127.0.0.1:{port}", max_attempts=1, **option)
        saver = (AsyncS3Saver if sender == "native" else S3Saver)(bucket="b", client=client, transport="direct")

        async def read() -> Any:
            return await saver.aget_tuple(cfg("t")) if sender == "native" else saver.get_tuple(cfg("t"))

        try:
            if verify == "default":
                with pytest.raises(S3RequestError, match=r"(?i)certificate"):
                    await read()
            else:
                with pytest.raises(NotS3EndpointError, match=r"https://127\.0\.0\.1"):
                    await read()
        finally:
            saver.close()


@pytest.mark.memory
@pytest.mark.parametrize("sender", ["native", "blocking"])
@pytest.mark.parametrize("presented", [False, True])
async def test_mutual_tls_presents_the_clients_certificate(
    tls_context: ssl.SSLContext, sender: str, presented: bool
) -> None:
    """A server that demands a client certificate: the one botocore's ``client_cert`` names is presented."""
    from botocore.config import Config

    cert = tls_context.cert_file  # type: ignore[attr-defined]
    demanding = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    demanding.load_cert_chain(cert, str(Path(cert).with_name("key.pem")))
    demanding.verify_mode = ssl.CERT_REQUIRED
    demanding.load_verify_locations(cert)  # the self-signed certificate is its own CA
    with _web_server(demanding) as port:
        client = boto3.session.Session().client(
            "s3",
            endpoint_url=f"https://127.0.0.1:{port}",
            region_name="us-east-1",
            aws_access_key_id="AKIA",
            aws_secret_access_key="secret",
            verify=cert,
            config=Config(
                retries={"total_max_attempts": 1},
                client_cert=(cert, str(Path(cert).with_name("key.pem"))) if presented else None,
            ),
        )
        saver = (AsyncS3Saver if sender == "native" else S3Saver)(bucket="b", client=client, transport="direct")
        try:
            read = saver.aget_tuple(cfg("t")) if sender == "native" else asyncio.to_thread(saver.get_tuple, cfg("t"))
            if presented:  # the TLS conversation worked; then the web server answers like one
                with pytest.raises(NotS3EndpointError, match=r"https://127\.0\.0\.1"):
                    await read
            else:
                with pytest.raises(S3RequestError, match="Cannot reach"):
                    await read
        finally:
            saver.close()


async def test_503_is_retried_and_the_budget_is_kept(
    seaweedfs_server: LocalS3Server, prefix: str, counting_proxy: FaultProxy
) -> None:
    client = make_client(**client_options(seaweedfs_server, counting_proxy.url), max_attempts=4)
    saver = AsyncS3Saver(bucket=BUCKET, prefix=prefix, client=client, transport="direct")
    try:
        counting_proxy.inject("slowdown", method="PUT", times=2)
        counting_proxy.inject("internal", method="GET", times=1)
        stored = await saver.aput(cfg("retried"), empty_checkpoint(), {"step": 0}, {})
        assert (await saver.aget_tuple(cfg("retried"))).config == stored  # type: ignore[union-attr]
        counts = counting_proxy.snapshot()
        assert counts["slowdown"] == 2 and counts["internal"] == 1
        counting_proxy.inject("internal", method="GET", key_suffix="/head", times=4)
        with pytest.raises(S3RequestError, match="InternalError"):
            await saver.aget_tuple(cfg("retried"))
        assert counting_proxy.pending_rules() == 0
        counting_proxy.inject("reset", method="GET", key_suffix="/head", times=1)
        assert (await saver.aget_tuple(cfg("retried"))).config == stored  # type: ignore[union-attr]
    finally:
        saver.close()


def test_several_event_loops_in_sequence(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    saver = AsyncS3Saver(bucket=bucket, prefix=prefix, client=s3_server.client(), transport="direct")
    native = _native(saver)
    try:

        async def step(n: int) -> int:
            parent = await saver.aget_tuple(cfg("loops"))
            await saver.aput(parent.config if parent else cfg("loops"), empty_checkpoint(), {"step": n}, {})
            assert native.pools == 1
            return len([t async for t in saver.alist(cfg("loops"))])

        # asyncio.run shuts the loop's async generators down first: the pool closes with its loop.
        assert asyncio.run(step(0)) == 1
        assert native.pools == 0
        assert asyncio.run(step(1)) == 2
        assert native.pools == 0
        # A loop closed without that shutdown: its pool is dropped when the next loop makes its own.
        for n in (2, 3):
            loop = asyncio.new_event_loop()
            assert loop.run_until_complete(step(n)) == n + 1
            loop.close()
            assert native.pools == 1
    finally:
        saver.close()
    assert native.pools == 0


def test_one_saver_across_event_loops(s3_server: LocalS3Server, bucket: str) -> None:
    """Each pytest-asyncio test (as each ``asyncio.run``) runs on its own loop, closed after it: a saver kept between
    them must keep working, with the connection pool of the loop it runs on only. Three loops in one test, so that
    the rounds cannot land on different test workers."""
    saver = AsyncS3Saver(
        bucket=bucket, prefix=f"shared-loops/{uuid.uuid4().hex[:12]}", client=s3_server.client(), transport="direct"
    )

    async def step(number: int) -> None:
        parent = await saver.aget_tuple(cfg("shared"))
        await saver.aput(parent.config if parent else cfg("shared"), empty_checkpoint(), {"step": number}, {})
        assert len([t async for t in saver.alist(cfg("shared"))]) == number
        assert _native(saver).pools == 1

    try:
        for number in (1, 2, 3):
            asyncio.run(step(number))
    finally:
        saver.close()


async def test_close_closes_the_connections(seaweedfs_server: LocalS3Server, prefix: str) -> None:
    """(On SeaweedFS, which keeps connections open between requests; moto closes each after its reply.)"""
    seaweedfs_server.create_bucket(BUCKET)
    saver = AsyncS3Saver(bucket=BUCKET, prefix=prefix, client=seaweedfs_server.client(), transport="direct")
    native = _native(saver)
    await asyncio.gather(*(saver.aput(cfg(f"t{i}"), empty_checkpoint(), {"step": 0}, {}) for i in range(8)))
    pool = native._pools[asyncio.get_running_loop()]
    connections = list(pool._open)
    assert connections and all(c.transport is not None and not c.transport.is_closing() for c in connections)
    saver.close()
    assert native.pools == 0 and native.open_connections() == 0
    assert all(c.transport is not None and c.transport.is_closing() for c in connections)
    await asyncio.sleep(0.01)
    assert not any(c.alive for c in connections)
    with pytest.raises(SaverMisuseError):
        await saver.aget_tuple(cfg("t0"))


def test_close_from_another_thread(seaweedfs_server: LocalS3Server, prefix: str) -> None:
    """close() called while the loop runs in another thread hands the closing to that loop."""
    seaweedfs_server.create_bucket(BUCKET)
    saver = AsyncS3Saver(bucket=BUCKET, prefix=prefix, client=seaweedfs_server.client(), transport="direct")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(saver.aput(cfg("t"), empty_checkpoint(), {"step": 0}, {}), loop).result()
        connections = list(_native(saver)._pools[loop]._open)
        assert connections
        saver.close()
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0.01), loop).result()
        assert all(c.transport is not None and c.transport.is_closing() for c in connections)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


@pytest.mark.memory
def test_without_expect_continue_is_exported() -> None:
    client = _client("http://127.0.0.1:9")
    assert without_expect_continue(client) is client


def test_uvloop(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    """The Agent Server runs on uvloop, whose transports are not asyncio's classes."""
    uvloop = pytest.importorskip("uvloop")
    saver = AsyncS3Saver(bucket=bucket, prefix=prefix, client=s3_server.client(), transport="direct")
    try:

        async def run() -> int:
            assert type(asyncio.get_running_loop()).__module__.startswith("uvloop")
            result = await growing_graph(saver).ainvoke({"n": 0, "log": []}, {"configurable": {"thread_id": "uv"}})
            return int(result["n"])

        assert uvloop.run(run()) == 5
        assert saver.bucket_io._pool is None and _native(saver).pools == 0
    finally:
        saver.close()
