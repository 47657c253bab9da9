"""The default transport (``transport="auto"``): direct while nothing but botocore watches the client, boto3
as soon as something does, and boto3 for good once S3 redirects the bucket elsewhere.

Each test counts what the direct transport sent by wrapping its ``execute`` (our code, not boto3's), and
what went through boto3 by what is attached to the client: a hook, a patch, a stubber or moto. The rule
itself is ``watch.py``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Any
from unittest import mock

import boto3
import botocore.client
import pytest
from botocore.config import Config
from botocore.stub import Stubber
from faultproxy import FaultProxy
from helpers import RequestCounter, cfg, client_options
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_s3_checkpoint import (
    AsyncS3Saver,
    S3RequestError,
    S3Saver,
    S3Store,
    WrongRegionError,
)
from langgraph_s3_checkpoint.local import LocalS3Server


class DirectCount:
    """What the saver's direct transport sent (sync sender and event-loop sender), by request type."""

    def __init__(self, saver: Any) -> None:
        self.by_type: Counter[str] = Counter()
        io = saver.bucket_io
        assert io.direct is not None and io.watch is not None, "the default transport should be able to go direct"
        for sender in (io.direct, io.native):
            if sender is not None:
                self._wrap(sender)

    @property
    def sent(self) -> int:
        return self.by_type.total()

    def _wrap(self, sender: Any) -> None:
        original = sender.execute

        if asyncio.iscoroutinefunction(original):

            async def counted_async(request: Any, *deadline: Any) -> Any:
                self.by_type[type(request).__name__] += 1
                return await original(request, *deadline)

            sender.execute = counted_async
        else:

            def counted(request: Any, *deadline: Any) -> Any:
                self.by_type[type(request).__name__] += 1
                return original(request, *deadline)

            sender.execute = counted


@pytest.fixture
def saver(s3_server: LocalS3Server, bucket: str, prefix: str) -> Iterator[S3Saver]:
    with S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client()) as saver:
        yield saver


def _step(saver: S3Saver, thread: str) -> None:
    """One checkpoint and a read of it: PUTs, a GET and a LIST."""
    saver.put(cfg(thread), empty_checkpoint(), {}, {})
    assert saver.get_tuple(cfg(thread)) is not None


def test_nothing_attached_means_direct(saver: S3Saver) -> None:
    import moto  # noqa: F401 - moto's stubber is now on every client, disabled: it must not count as watching

    direct = DirectCount(saver)
    counter = RequestCounter(boto3.client("s3", region_name="us-east-1"))  # another client's hooks are not ours
    _step(saver, "t")
    assert direct.sent >= 4
    counter.detach()


def test_a_hook_sees_every_request_from_the_first_after_it_is_registered(saver: S3Saver) -> None:
    direct = DirectCount(saver)
    _step(saver, "before")
    sent_before = direct.sent
    counter = RequestCounter(saver.client)
    _step(saver, "hooked")
    assert direct.sent == sent_before
    assert counter.counts["PutObject"] >= 2 and counter.counts["GetObject"] + counter.counts["ListObjectsV2"] >= 1
    counter.detach()
    _step(saver, "after")
    assert direct.sent > sent_before


def test_a_hook_on_one_operation_takes_only_that_operation(saver: S3Saver) -> None:
    direct = DirectCount(saver)
    puts: list[str] = []
    saver.client.meta.events.register("before-send.s3.PutObject", lambda **kw: puts.append(kw["request"].url))
    _step(saver, "t")
    assert len(puts) >= 2
    assert direct.sent >= 1  # the GET and LIST of get_tuple still went direct


def test_patching_the_clients_method_or_botocores_call_takes_the_requests(saver: S3Saver) -> None:
    direct = DirectCount(saver)
    with mock.patch.object(saver.client, "put_object", wraps=saver.client.put_object) as put_object:
        saver.put(cfg("instance"), empty_checkpoint(), {}, {})
    assert put_object.call_count >= 2 and direct.by_type["Put"] == 0

    direct.by_type.clear()
    real = botocore.client.BaseClient._make_api_call
    with mock.patch.object(botocore.client.BaseClient, "_make_api_call", autospec=True, side_effect=real) as call:
        _step(saver, "class")
    assert {c.args[1] for c in call.call_args_list} >= {"PutObject", "ListObjectsV2"} and direct.sent == 0

    def instrumented(self: Any, operation: str, params: Any) -> Any:  # what tracing libraries install
        seen.append(operation)
        return real(self, operation, params)

    seen: list[str] = []
    with mock.patch.object(botocore.client.BaseClient, "_make_api_call", instrumented):
        _step(saver, "wrapper")
    assert "PutObject" in seen and direct.sent == 0
    _step(saver, "unpatched")
    assert direct.sent >= 4


def test_an_active_stubber_answers_and_an_inactive_one_does_not(saver: S3Saver) -> None:
    direct = DirectCount(saver)
    stubber = Stubber(saver.client)
    stubber.add_client_error("get_object", service_error_code="InternalError", http_status_code=500)
    with stubber, pytest.raises(S3RequestError, match="InternalError"):
        saver.get_tuple(cfg("stubbed"))
    assert direct.sent == 0
    _step(saver, "t")
    assert direct.sent >= 4


def test_moto_mock_aws_sees_the_default_savers_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    moto = pytest.importorskip("moto")
    for name, value in {
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "y",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    with moto.mock_aws():
        boto3.client("s3").create_bucket(Bucket="mocked")
        with S3Saver.from_conn_string("s3://mocked/p") as saver:
            direct = DirectCount(saver)
            saver.setup()
            _step(saver, "t")
            assert direct.sent == 0
            keys = [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket="mocked")["Contents"]]
            assert any(key.endswith("/head") for key in keys)


def test_a_client_the_direct_transport_cannot_imitate_keeps_boto3(s3_server: LocalS3Server, bucket: str) -> None:
    proxied = boto3.session.Session().client(
        "s3", config=Config(proxies={"http": "http://127.0.0.1:9"}), **client_options(s3_server)
    )
    with S3Saver(bucket=bucket, client=proxied) as saver:
        assert saver.bucket_io.direct is None and saver.bucket_io.watch is None
    with S3Store(bucket=bucket, client=proxied) as store:
        assert store.bucket_io.direct is None


def _behind(proxy: FaultProxy, s3_server: LocalS3Server) -> Any:
    return boto3.session.Session().client("s3", **client_options(s3_server, proxy.url))


def test_a_redirected_request_is_sent_again_through_boto3_and_so_are_the_rest(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """S3 answers 301 (or 400 naming the region) when a bucket is not where the client signs for; boto3
    follows, the direct transport cannot. By default the refused request goes again through boto3 (it was
    not applied), and every later one too."""
    with (
        FaultProxy(s3_server.endpoint_url) as proxy,
        S3Saver(bucket=bucket, prefix=prefix, client=_behind(proxy, s3_server)) as saver,
    ):
        direct = DirectCount(saver)
        RequestCounter(saver.client).detach()  # a hook come and gone must not undo the decision
        proxy.inject("redirect", times=1)
        _step(saver, "t")
        assert [what for _, _, what in proxy.log].count("redirect") == 1
        assert direct.sent == 1  # the redirected request; it and the rest went through boto3
        _step(saver, "later")
        assert direct.sent == 1


def test_transport_direct_raises_the_redirect(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    with (
        FaultProxy(s3_server.endpoint_url) as proxy,
        S3Saver(bucket=bucket, prefix=prefix, client=_behind(proxy, s3_server), transport="direct") as saver,
        pytest.raises(WrongRegionError, match=r"region eu-central-1.*Set region="),
    ):
        proxy.inject("redirect", times=1)
        saver.put(cfg("t"), empty_checkpoint(), {}, {})


async def test_the_async_saver_goes_direct_from_the_loop_and_falls_back_the_same_way(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    with FaultProxy(s3_server.endpoint_url) as proxy:
        with S3Saver(bucket=bucket, prefix=prefix, client=_behind(proxy, s3_server)) as probing:
            probing.setup()  # the conditional-write probe's deletes go through boto3, on a thread pool
        async with AsyncS3Saver(bucket=bucket, prefix=prefix, client=_behind(proxy, s3_server)) as saver:
            direct = DirectCount(saver)
            await saver.aput(cfg("before"), empty_checkpoint(), {}, {})
            sent = direct.sent
            assert sent >= 2 and saver.bucket_io._pool is None  # from the event loop, no thread pool
            counter = RequestCounter(saver.client)
            await saver.aput(cfg("hooked"), empty_checkpoint(), {}, {})
            assert direct.sent == sent and counter.counts["PutObject"] >= 2
            counter.detach()
            proxy.inject("redirect", times=1)
            await saver.aput(cfg("redirected"), empty_checkpoint(), {}, {})
            assert await saver.aget_tuple(cfg("redirected")) is not None
            assert direct.sent == sent + 1
            await saver.aput(cfg("later"), empty_checkpoint(), {}, {})
            assert direct.sent == sent + 1
