"""Errors are part of the API: one hierarchy, the right diagnosis, misuse named as LangGraph's savers name it.

What a user meets when something is wrong around the saver: no credentials, a web server or a broken server on
the endpoint, objects written by a newer release, a closed saver or store, a sync call on an async saver. Each test
goes through the public API (or the CLI's real entry point) and, where a server is involved, runs on every selected
S3 server. Option errors are in test_url_options.py, bad values and damaged objects in test_bad_input.py, timeouts
in test_in_flight.py.
"""

from __future__ import annotations

import asyncio
import http.server
import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers import (
    assert_one_error_line,
    cfg,
    chat_graph,
    cid,
    client_options,
    fake_client_options,
    put,
    run_cli,
)
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_s3_checkpoint import (
    AsyncS3Saver,
    AsyncS3Store,
    CorruptObjectError,
    InvalidConfigError,
    NewerFormatError,
    S3AccessError,
    S3Cache,
    S3CheckpointError,
    S3Saver,
    S3Store,
    SaverMisuseError,
)
from langgraph_s3_checkpoint._transport import bucket_io
from langgraph_s3_checkpoint.errors import NotS3EndpointError
from langgraph_s3_checkpoint.gc import gc as run_gc
from langgraph_s3_checkpoint.local import LocalS3Server


def test_objects_of_a_newer_release_stop_readers_repair_and_gc_and_change_nothing(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """A head and records in a newer format (a rolling upgrade, then a rollback of the upgrade) are not damage: every
    reader, repair and gc stop at such an object with NewerFormatError, not a CorruptObjectError whose advice
    (repair_thread) would move the head back to the newest record this release can read; and nothing in the bucket
    changes (gc must not take the newer release's commits for uncommitted leftovers)."""
    saver = make_saver()
    for n in (1, 2, 3):
        put(saver, "t", cid(n), cid(n - 1) if n > 1 else None)
    layout = saver.plans.layout
    newer = [layout.head("t", ""), layout.record("t", "", cid(3)), layout.record("t", "", cid(2))]
    for key in newer:
        body = s3_client.get_object(Bucket=saver.bucket, Key=key)["Body"].read()
        s3_client.put_object(Bucket=saver.bucket, Key=key, Body=body[:4] + bytes((body[4] + 1,)) + body[5:])
    before = sorted(o["Key"] for o in s3_client.list_objects_v2(Bucket=saver.bucket, Prefix=saver.prefix)["Contents"])
    old = make_saver()
    with pytest.raises(NewerFormatError, match="newer release"):
        old.get_tuple(cfg("t"))
    with pytest.raises(NewerFormatError):
        old.repair_thread("t")
    with pytest.raises(NewerFormatError):
        run_gc(old, grace_seconds=0)
    after = sorted(o["Key"] for o in s3_client.list_objects_v2(Bucket=saver.bucket, Prefix=saver.prefix)["Contents"])
    assert after == before
    assert not isinstance(NewerFormatError("k", 2, 1), CorruptObjectError)


def test_no_credentials_is_an_access_error(
    s3_server: LocalS3Server,
    bucket: str,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(bucket_io, "_WARNED", set())  # logged once per process: as if this were the first time
    with (
        caplog.at_level(logging.WARNING, logger="langgraph_s3_checkpoint"),
        S3Saver.from_conn_string(
            f"s3://{bucket}/{prefix}?max_attempts=1",
            endpoint_url=s3_server.endpoint_url,
            region_name=s3_server.region,
        ) as saver,
    ):
        with pytest.raises(S3AccessError, match="No usable AWS credentials"):
            saver.setup()
        with pytest.raises(S3AccessError):
            saver.get_tuple(cfg("t"))
    # The error is the whole story: no note that transport='auto' fell back to boto3 ahead of it.
    assert [r.getMessage() for r in caplog.records] == []


@pytest.fixture
def unknown_aws_profile(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> str:
    """``AWS_PROFILE`` naming a profile the AWS config files do not have (they have ``[profile other]``)."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    config = tmp_path / "config"
    config.write_text("[profile other]\nregion = us-east-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_PROFILE", "lgs3-no-such-profile")
    return "lgs3-no-such-profile"


@pytest.mark.memory
def test_an_aws_profile_that_does_not_exist_is_a_config_error_naming_it(unknown_aws_profile: str) -> None:
    """botocore raises ProfileNotFound when the client is made; every way of opening the saver, store or cache (and
    the CLI) says instead which profile is missing and what to do, as a package error, before anything is sent."""
    url = "s3://lgs3-test/p?endpoint_url=http://127.0.0.1:9"
    wanted = rf"AWS_PROFILE.*{unknown_aws_profile}.*does not exist.*other"

    for opened in (
        lambda: S3Saver.from_conn_string(url),
        lambda: S3Store.from_conn_string(url),
        lambda: S3Cache.from_conn_string(url),
    ):
        with pytest.raises(InvalidConfigError, match=wanted), opened():
            pass
    for cls in (S3Saver, AsyncS3Saver, S3Store, AsyncS3Store, S3Cache):
        with pytest.raises(InvalidConfigError, match=wanted):
            cls(bucket="lgs3-test", endpoint_url="http://127.0.0.1:9")

    async def main() -> None:
        for opened in (
            lambda: AsyncS3Saver.from_conn_string(url),
            lambda: AsyncS3Store.from_conn_string(url),
            lambda: S3Cache.from_conn_string(url),
        ):
            with pytest.raises(InvalidConfigError, match=wanted):
                async with opened():
                    pass

    asyncio.run(main())
    line = assert_one_error_line(run_cli("--url", url, "threads", env=dict(os.environ)), 2)
    assert unknown_aws_profile in line and "AWS_PROFILE" in line


class _WebPage(http.server.BaseHTTPRequestHandler):
    """Any web server on the wrong port: HTML for every request."""

    def _page(self, status: int) -> None:
        body = b"<html><body>Welcome to the filer</body></html>"
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        self._page(404 if "missing" in self.path else 200)

    def do_HEAD(self) -> None:
        self._page(404)

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
        self._page(200)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def web_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _WebPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.memory
@pytest.mark.parametrize("transport", ["boto3", "direct"])
def test_a_web_server_on_the_endpoint_does_not_answer_like_s3(web_server: str, transport: str) -> None:
    url = f"s3://bucket/p?max_attempts=1&transport={transport}"
    with S3Saver.from_conn_string(url, **fake_client_options(web_server)) as saver:
        with pytest.raises(NotS3EndpointError, match="does not answer like S3") as raised:
            saver.setup()
        assert "text/html" in str(raised.value) and "does not exist" not in str(raised.value)
        for call in (
            lambda: saver.get_tuple(cfg("missing")),
            lambda: list(saver.list(cfg("t"))),
            lambda: saver.put(cfg("t"), empty_checkpoint(), {"step": 0}, {}),
        ):
            with pytest.raises(NotS3EndpointError):
                call()
    done = run_cli(
        "threads",
        env={
            **os.environ,
            "LANGGRAPH_S3_URL": f"s3://bucket/p?endpoint_url={web_server}",
            "AWS_ACCESS_KEY_ID": "a",
            "AWS_SECRET_ACCESS_KEY": "b",
        },
    )
    assert "does not answer like S3" in assert_one_error_line(done, 3)


class _BrokenXml(http.server.BaseHTTPRequestHandler):
    """A server that claims XML and sends something botocore cannot parse (ResponseParserError)."""

    def do_GET(self) -> None:
        body = b"<ListBucketResult><Contents><Key>truncated"
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.memory
def test_an_unparsable_reply_is_not_s3() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _BrokenXml)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        url = "s3://bucket/p?max_attempts=1"
        with (
            S3Saver.from_conn_string(url, **fake_client_options(endpoint)) as saver,
            pytest.raises(NotS3EndpointError, match="does not answer like S3"),
        ):
            # botocore turns the unparsable listing into a ResponseParserError or (1.44) a synthetic 500
            list(saver.list(None))
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.memory
def test_everything_derives_from_the_package_error() -> None:
    import langgraph_s3_checkpoint
    import langgraph_s3_checkpoint.errors as errors

    classes = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, Exception)]
    assert all(issubclass(c, S3CheckpointError) for c in classes)
    # ... and every one can be caught by its name from the package.
    assert {c.__name__ for c in classes} <= set(langgraph_s3_checkpoint.__all__)


def test_a_closed_saver_refuses_every_call_naming_it(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    with S3Saver.from_conn_string(f"s3://{bucket}/{prefix}", **client_options(s3_server)) as saver:
        saver.put(cfg("t"), empty_checkpoint(), {"step": 0}, {})
    for name, call in (
        ("get_tuple", lambda: saver.get_tuple(cfg("t"))),
        ("list", lambda: list(saver.list(cfg("t")))),
        ("put", lambda: saver.put(cfg("t"), empty_checkpoint(), {}, {})),
        ("delete_thread", lambda: saver.delete_thread("t")),
    ):
        with pytest.raises(SaverMisuseError, match=rf"{name}\(\) was called on a saver that was closed"):
            call()
    saver.close()  # idempotent

    async def main() -> None:
        async with AsyncS3Saver.from_conn_string(f"s3://{bucket}/{prefix}", **client_options(s3_server)) as asaver:
            assert await asaver.aget_tuple(cfg("t")) is not None
        with pytest.raises(SaverMisuseError, match=r"aget_tuple\(\)"):
            await asaver.aget_tuple(cfg("t"))

    asyncio.run(main())


@pytest.mark.parametrize("cls", [S3Saver, AsyncS3Saver, S3Store, AsyncS3Store], ids=lambda c: c.__name__)
def test_with_and_async_with_close_the_saver_or_store_at_the_block_end(
    s3_server: LocalS3Server, bucket: str, prefix: str, cls: type[Any]
) -> None:
    """Both block forms work on all four classes, as on InMemorySaver, and close what they opened: later calls
    are refused naming the call, whichever block form was used."""
    kind = "store" if "Store" in cls.__name__ else "saver"

    def refused(target: Any) -> None:
        read = target.aget(("ns",), "k") if kind == "store" else target.aget_tuple(cfg("t"))
        with pytest.raises(SaverMisuseError, match=rf"\(\) was called on a {kind} that was closed"):
            asyncio.run(read)

    opened = cls(bucket=bucket, prefix=prefix, client=s3_server.client())
    with opened as entered:
        assert entered is opened
    refused(opened)

    async def main() -> Any:
        async with cls(bucket=bucket, prefix=prefix, client=s3_server.client()) as entered:
            if kind == "saver":
                assert await entered.aget_tuple(cfg("absent")) is None
            else:
                assert await entered.aget(("ns",), "absent") is None
        return entered

    refused(asyncio.run(main()))
    opened.close()  # idempotent


@pytest.mark.parametrize("cls", [S3Saver, AsyncS3Saver, S3Store, AsyncS3Store, S3Cache], ids=lambda c: c.__name__)
def test_from_conn_string_works_with_and_without_a_block(
    s3_server: LocalS3Server, bucket: str, prefix: str, cls: type[Any]
) -> None:
    """``from_conn_string`` returns the saver, store or cache itself: usable at once (closed by ``close()``), and in
    ``with`` and ``async with`` (LangGraph's documented pattern), which close it at the block's end. The saver's and
    the store's returned a context manager, which failed without ``with`` ("... object has no attribute 'put'")."""
    url = f"s3://{bucket}/{prefix}"
    kind = "store" if "Store" in cls.__name__ else "cache" if cls is S3Cache else "saver"

    def use(target: Any, n: int) -> None:
        if kind == "saver":
            target.put(cfg(f"t{n}"), empty_checkpoint(), {"step": 0}, {})
            assert target.get_tuple(cfg(f"t{n}")) is not None
        elif kind == "store":
            target.put(("ns",), f"k{n}", {"v": n})
            assert target.get(("ns",), f"k{n}").value == {"v": n}
        else:
            target.set({(("ns",), f"k{n}"): (n, None)})
            assert target.get([(("ns",), f"k{n}")]) == {(("ns",), f"k{n}"): n}

    async def ause(target: Any, n: int) -> None:
        if kind == "saver":
            await target.aput(cfg(f"t{n}"), empty_checkpoint(), {"step": 0}, {})
            assert await target.aget_tuple(cfg(f"t{n}")) is not None
        elif kind == "store":
            await target.aput(("ns",), f"k{n}", {"v": n})
            assert (await target.aget(("ns",), f"k{n}")).value == {"v": n}
        else:
            await target.aset({(("ns",), f"k{n}"): (n, None)})
            assert await target.aget([(("ns",), f"k{n}")]) == {(("ns",), f"k{n}"): n}

    def closed(target: Any) -> None:
        with pytest.raises(SaverMisuseError, match=rf"was called on a {kind} that was closed"):
            use(target, 99)

    opened = cls.from_conn_string(url, **client_options(s3_server))
    assert isinstance(opened, cls)
    if cls in (AsyncS3Saver, AsyncS3Store):
        asyncio.run(ause(opened, 1))
    else:
        use(opened, 1)
    opened.close()
    closed(opened)

    if cls not in (AsyncS3Saver, AsyncS3Store):
        with cls.from_conn_string(url, **client_options(s3_server)) as entered:
            assert isinstance(entered, cls)
            use(entered, 2)
        closed(entered)

    async def main() -> Any:
        async with cls.from_conn_string(url, **client_options(s3_server)) as entered:
            assert isinstance(entered, cls)
            await ause(entered, 3)
        return entered

    closed(asyncio.run(main()))


@pytest.mark.parametrize("cls", [S3Store, AsyncS3Store], ids=lambda c: c.__name__)
def test_a_closed_store_refuses_every_call_naming_it(
    s3_server: LocalS3Server, bucket: str, prefix: str, cls: type[Any]
) -> None:
    """As the saver and the cache: the error names the method the user called (``get``, not the ``batch`` that
    BaseStore's ``get`` runs), for every method of BaseStore and their async forms, on both store classes."""
    from langgraph.store.base import GetOp

    store = cls(bucket=bucket, prefix=prefix, client=s3_server.client())
    with store:
        store.put(("ns",), "k", {"v": 1})
    calls: dict[str, Callable[[], Any]] = {
        "get": lambda: store.get(("ns",), "k"),
        "put": lambda: store.put(("ns",), "k", {"v": 2}),
        "delete": lambda: store.delete(("ns",), "k"),
        "search": lambda: store.search(("ns",)),
        "list_namespaces": lambda: store.list_namespaces(),
        "batch": lambda: store.batch([GetOp(("ns",), "k")]),
        "setup": lambda: asyncio.run(store.setup()) if cls is AsyncS3Store else store.setup(),
        "start_ttl_sweeper": lambda: (
            asyncio.run(store.start_ttl_sweeper()) if cls is AsyncS3Store else store.start_ttl_sweeper()
        ),
        "sweep_ttl": lambda: asyncio.run(store.sweep_ttl()) if cls is AsyncS3Store else store.sweep_ttl(),
        "aget": lambda: asyncio.run(store.aget(("ns",), "k")),
        "aput": lambda: asyncio.run(store.aput(("ns",), "k", {"v": 2})),
        "adelete": lambda: asyncio.run(store.adelete(("ns",), "k")),
        "asearch": lambda: asyncio.run(store.asearch(("ns",))),
        "alist_namespaces": lambda: asyncio.run(store.alist_namespaces()),
        "abatch": lambda: asyncio.run(store.abatch([GetOp(("ns",), "k")])),
        "asweep_ttl": lambda: asyncio.run(store.asweep_ttl()),
    }
    for name, call in calls.items():
        with pytest.raises(SaverMisuseError, match=rf"^{name}\(\) was called on a store that was closed"):
            call()


def test_misuse_errors_name_the_method_the_user_called(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    async def main() -> None:
        saver = AsyncS3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
        try:
            graph = chat_graph(saver)
            await graph.ainvoke({"turns": ["hi"]}, cfg("loop"))
            with pytest.raises(SaverMisuseError) as raised:
                graph.get_state(cfg("loop"))
            assert "graph.get_state()" in str(raised.value) and "aget_state" in str(raised.value)
            with pytest.raises(SaverMisuseError) as raised:
                saver.get_delta_channel_history(config=cfg("loop"), channels=["turns"])
            message = str(raised.value)
            assert "aget_delta_channel_history" in message and "adelta_history" not in message
            with pytest.raises(SaverMisuseError, match=r"saver\.alist\("):
                saver.list(cfg("loop"))
        finally:
            saver.close()

    asyncio.run(main())
