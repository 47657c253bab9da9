"""The direct transport (``transport="direct"``): same behaviour as boto3, on real servers.

The conformance suite and the fault suite run with both transports (test_conformance.py,
test_faults.py); the async saver's direct transport, which sends from the event loop, has its own module
(test_native_async.py). This module covers what those do not: server-side encryption headers, the retention
tag, keys that need percent-encoding, request counts equal to the boto3 path's (counted by a proxy in
front of the server, since these requests do not pass through botocore's hooks), where requests go
(botocore's endpoint rules, checked without a server) and the errors for clients the transport cannot
imitate.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from faultproxy import FaultProxy
from helpers import cfg, client_options, growing_graph
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_s3_checkpoint import (
    AsyncS3Saver,
    BucketNotFoundError,
    InvalidConfigError,
    S3AccessError,
    S3RequestError,
    S3Saver,
    make_client,
)
from langgraph_s3_checkpoint._protocol.requests import CREATE, Get, ListKeys, Put, Update
from langgraph_s3_checkpoint._transport.direct import DirectTransport
from langgraph_s3_checkpoint._transport.http1 import Exchange
from langgraph_s3_checkpoint.local import LocalS3Server

SSE_KEY = "0123456789abcdef0123456789abcdef"
BUCKET = "lgs3-test"


def _keys(server: LocalS3Server, bucket: str, prefix: str) -> list[str]:
    client = server.client()
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
    return [o["Key"] for page in pages for o in page.get("Contents", ())]


def test_graph_state_and_history_match_the_boto3_transport(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    states = {}
    for transport in ("boto3", "direct"):
        with contextlib.closing(
            S3Saver(bucket=bucket, prefix=f"{prefix}/{transport}", client=s3_server.client(), transport=transport)
        ) as saver:
            graph = growing_graph(saver)
            config: RunnableConfig = {"configurable": {"thread_id": "t"}}
            graph.invoke({"n": 0, "log": []}, config, durability="sync")
            history = [s.values for s in graph.get_state_history(config)]
            states[transport] = (graph.get_state(config).values, history)
    assert states["direct"] == states["boto3"]
    assert states["direct"][0]["n"] == 5 and len(states["direct"][1]) == 7
    # Both transports write the same objects (ids and versions are random, so compare their kinds).
    assert _shapes(s3_server, bucket, f"{prefix}/direct") == _shapes(s3_server, bucket, f"{prefix}/boto3")


def _shapes(server: LocalS3Server, bucket: str, prefix: str) -> Counter[str]:
    fixed = {"threads", "ns", "head", "c", "w", "b", "checkpoint", "name", "r", "runs"}
    keys = [k[len(prefix) + 1 :] for k in _keys(server, bucket, prefix)]
    return Counter("/".join(p if p in fixed else "*" for p in k.split("/")) for k in keys)


async def test_async_saver_with_the_direct_transport(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    saver = AsyncS3Saver(bucket=bucket, prefix=prefix, client=s3_server.client(), transport="direct")
    assert saver.bucket_io.native is not None  # GET, PUT and LIST go out from the event loop
    try:
        graph = growing_graph(saver)
        config: RunnableConfig = {"configurable": {"thread_id": "async"}}
        result = await graph.ainvoke({"n": 0, "log": []}, config)
        assert result["n"] == 5
        assert len([s async for s in graph.aget_state_history(config)]) == 7
    finally:
        saver.close()


@pytest.mark.parametrize(
    "thread_id", ["plain", "with space+plus&amp=eq", "ünïcødé/slash?query#hash", "%41 percent", "~tilde"]
)
def test_keys_that_need_percent_encoding(s3_server: LocalS3Server, bucket: str, thread_id: str) -> None:
    prefix = "direct odd+prefix/ü"
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client(), transport="direct")) as s:
        s.delete_thread(thread_id)
        first = s.put(cfg(thread_id), empty_checkpoint(), {"step": 0}, {})
        s.put_writes(first, [("ch", "value")], "task")
        second = s.put(first, empty_checkpoint(), {"step": 1}, {})
        latest = s.get_tuple(cfg(thread_id))
        assert latest is not None and latest.config == second
        assert [t.config for t in s.list(cfg(thread_id))] == [second, first]
        assert s.get_tuple(first).pending_writes == [("task", "ch", "value")]  # type: ignore[union-attr]
        s.delete_thread(thread_id)
        assert s.get_tuple(cfg(thread_id)) is None


@pytest.fixture
def counting_proxy(seaweedfs_server: LocalS3Server) -> Iterator[FaultProxy]:
    seaweedfs_server.create_bucket(BUCKET)
    with FaultProxy(seaweedfs_server.endpoint_url) as proxy:
        yield proxy


def test_request_counts_equal_the_boto3_transport(
    seaweedfs_server: LocalS3Server, prefix: str, counting_proxy: FaultProxy
) -> None:
    """Counted at the HTTP level by a proxy, so both transports are measured the same way."""
    client = make_client(**client_options(seaweedfs_server, counting_proxy.url))
    with S3Saver(bucket=BUCKET, prefix=prefix, client=client) as probing:
        probing.setup()  # the conditional-write probe, once for the proxy's endpoint: not counted below
    counts: dict[str, list[int]] = {}
    for transport in ("boto3", "direct"):
        with contextlib.closing(
            S3Saver(bucket=BUCKET, prefix=f"{prefix}/{transport}", client=client, transport=transport)
        ) as saver:
            graph = growing_graph(saver)
            config: RunnableConfig = {"configurable": {"thread_id": "t"}}
            steps = []
            for action in ("invoke", "get_state", "list"):
                before = counting_proxy.snapshot()["requests"]
                if action == "invoke":
                    graph.invoke({"n": 0, "log": []}, config, durability="sync")
                elif action == "get_state":
                    graph.get_state(config)
                else:
                    list(saver.list(cfg("t"), limit=3))
                steps.append(counting_proxy.snapshot()["requests"] - before)
            counts[transport] = steps
    assert counts["direct"] == counts["boto3"], counts
    assert counts["direct"][1] == 3  # get_state: head, the checkpoint's folder, the large log value


@pytest.mark.parametrize("sse", ["AES256", "customer-key"])
def test_server_side_encryption_headers(seaweedfs_server: LocalS3Server, prefix: str, sse: str) -> None:
    # The bucket on SeaweedFS itself: the session's `bucket` fixture makes it on each server of S3_SERVERS in turn,
    # and this test passed on moto's turn only when another test of the same worker had made it on SeaweedFS.
    seaweedfs_server.create_bucket(BUCKET)
    bucket = BUCKET
    options: dict[str, Any] = {"server_side_encryption": "AES256"} if sse == "AES256" else {"sse_customer_key": SSE_KEY}
    with contextlib.closing(
        S3Saver(bucket=bucket, prefix=prefix, client=seaweedfs_server.client(), transport="direct", **options)
    ) as saver:
        graph = growing_graph(saver)
        config: RunnableConfig = {"configurable": {"thread_id": "sse"}}
        graph.invoke({"n": 0, "log": []}, config)
        assert graph.get_state(config).values["n"] == 5
    client = seaweedfs_server.client()
    keys = _keys(seaweedfs_server, bucket, prefix)
    assert keys
    for key in keys:
        if sse == "AES256":
            assert client.head_object(Bucket=bucket, Key=key).get("ServerSideEncryption") == "AES256", key
        else:
            # Only readable with the customer key: the transport sent it, and the server enforced it.
            with pytest.raises(client.exceptions.ClientError):
                client.get_object(Bucket=bucket, Key=key)
            client.get_object(Bucket=bucket, Key=key, SSECustomerAlgorithm="AES256", SSECustomerKey=SSE_KEY)


def test_retention_tag_is_sent(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    with contextlib.closing(
        S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client(), transport="direct", ttl_days=30)
    ) as saver:
        saver.put(cfg("ttl"), empty_checkpoint(), {"step": 0}, {})
    client = s3_server.client()
    for key in _keys(s3_server, bucket, prefix):
        tags = client.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]
        assert tags == [{"Key": "langgraph-s3-ttl", "Value": "1"}], key


def test_wrong_credentials(seaweedfs_server: LocalS3Server) -> None:
    """SeaweedFS checks signatures (moto accepts any), so a wrong secret must surface as S3AccessError."""
    seaweedfs_server.create_bucket(BUCKET)
    client = make_client(
        endpoint_url=seaweedfs_server.endpoint_url,
        region_name=seaweedfs_server.region,
        aws_access_key_id=seaweedfs_server.access_key,
        aws_secret_access_key="not-the-secret",
    )
    with contextlib.closing(S3Saver(bucket=BUCKET, client=client, transport="direct")) as saver:
        with pytest.raises(S3AccessError, match=r"SignatureDoesNotMatch|AccessDenied") as raised:
            saver.get_tuple(cfg("t"))
        assert "not-the-secret" not in str(raised.value)


def test_missing_bucket(s3_server: LocalS3Server) -> None:
    with contextlib.closing(S3Saver(bucket="lgs3-no-such-bucket", client=s3_server.client(), transport="direct")) as s:
        with pytest.raises(BucketNotFoundError, match="lgs3-no-such-bucket"):
            s.get_tuple(cfg("t"))
        with pytest.raises(BucketNotFoundError):
            s.put(cfg("t"), empty_checkpoint(), {"step": 0}, {})


@pytest.mark.memory
@pytest.mark.parametrize("transport", ["direct", "boto3"])
def test_unreachable_endpoint(transport: str) -> None:
    """Both transports name the endpoint and the S3 call that could not be sent, alike."""
    client = make_client(
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        aws_access_key_id="AKIA",
        aws_secret_access_key="secret",
        max_attempts=2,
    )
    saver = S3Saver(bucket="b", client=client, transport=transport)
    named = r"Cannot reach the S3 endpoint http://127\.0\.0\.1:9 \(GetObject 'threads/t/ns/~/head'\)"
    with contextlib.closing(saver), pytest.raises(S3RequestError, match=named):
        saver.get_tuple(cfg("t"))


@pytest.mark.memory
def test_unsupported_settings_are_refused() -> None:
    with pytest.raises(InvalidConfigError, match="transport must be one of 'auto', 'boto3', 'direct', got 'http'"):
        S3Saver(bucket="b", endpoint_url="http://127.0.0.1:9", transport="http")
    proxied = make_client(
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        aws_access_key_id="AKIA",
        aws_secret_access_key="secret",
    )
    proxied.meta.config.proxies = {"http": "http://proxy:3128"}
    with pytest.raises(InvalidConfigError, match="proxies"):
        S3Saver(bucket="b", client=proxied, transport="direct")


@pytest.fixture
def no_aws_settings_around(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """botocore also reads endpoints, FIPS/dual-stack and addressing from the environment and config files."""
    for name in list(os.environ):
        if name.startswith("AWS_") and name not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))


@pytest.mark.memory
@pytest.mark.parametrize(
    ("options", "name", "url"),
    [
        ({"region_name": "us-west-2"}, "my-bucket", "https://my-bucket.s3.us-west-2.amazonaws.com"),
        ({"region_name": "us-east-1"}, "my-bucket", "https://my-bucket.s3.amazonaws.com"),
        ({"region_name": "us-west-2"}, "my.bucket", "https://s3.us-west-2.amazonaws.com/my.bucket"),
        (
            {"region_name": "us-west-2", "s3": {"addressing_style": "path"}},
            "b1",
            "https://s3.us-west-2.amazonaws.com/b1",
        ),
        (
            {"region_name": "us-west-2", "use_fips_endpoint": True},
            "agents",
            "https://agents.s3-fips.us-west-2.amazonaws.com",
        ),
        (
            {"region_name": "eu-west-1", "use_dualstack_endpoint": True},
            "agents",
            "https://agents.s3.dualstack.eu-west-1.amazonaws.com",
        ),
        (
            {"region_name": "us-west-2", "s3": {"use_accelerate_endpoint": True}},
            "agents",
            "https://agents.s3-accelerate.amazonaws.com",
        ),
        ({"endpoint_url": "http://127.0.0.1:8333"}, "agents", "http://127.0.0.1:8333/agents"),
        ({"endpoint_url": "http://127.0.0.1:8333/s3/"}, "agents", "http://127.0.0.1:8333/s3/agents"),
        (
            {"endpoint_url": "http://minio.local:9000", "s3": {"addressing_style": "virtual"}},
            "agents",
            "http://agents.minio.local:9000",
        ),
    ],
)
@pytest.mark.usefixtures("no_aws_settings_around")
def test_requests_go_where_botocore_sends_them(options: dict[str, Any], name: str, url: str) -> None:
    """Addressing style, FIPS, dual-stack and acceleration: botocore's endpoint rules decide, not a copy of them."""
    from botocore.config import Config

    settings = {k: v for k, v in options.items() if k not in ("region_name", "endpoint_url")}
    client = boto3.session.Session().client(
        "s3",
        region_name=options.get("region_name", "us-east-1"),
        endpoint_url=options.get("endpoint_url"),
        aws_access_key_id="AKIA",
        aws_secret_access_key="secret",
        config=Config(**settings),
    )
    direct = DirectTransport(client, name)
    sent = direct.exchanges(Get("some/key"))
    exchange = next(sent)
    assert isinstance(exchange, Exchange)
    scheme = "https" if direct.https else "http"
    assert f"{scheme}://{exchange.headers['host']}{exchange.target}" == f"{url}/some/key"
    signed_for = exchange.headers["authorization"].split("Credential=")[1].split("/")[2]
    assert signed_for == (options.get("region_name") or "us-east-1")
    direct.close()


@pytest.mark.memory
@pytest.mark.usefixtures("no_aws_settings_around")
def test_a_bucket_botocore_signs_otherwise_is_refused() -> None:
    client = boto3.session.Session().client(
        "s3", region_name="us-west-2", aws_access_key_id="AKIA", aws_secret_access_key="secret"
    )
    with pytest.raises(InvalidConfigError, match="sigv4-s3express"):
        DirectTransport(client, "agents--usw2-az1--x-s3")


@pytest.mark.memory
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_proxy_from_the_environment_is_refused_not_bypassed(monkeypatch: pytest.MonkeyPatch, scheme: str) -> None:
    """boto3 sends through HTTP_PROXY/HTTPS_PROXY; the direct transport would silently go around it."""
    for name in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(f"{scheme.upper()}_PROXY", "http://someone:hunter2@proxy.invalid:3128")
    options: dict[str, Any] = {
        "endpoint_url": f"{scheme}://127.0.0.1:9",
        "region_name": "us-east-1",
        "aws_access_key_id": "AKIA",
        "aws_secret_access_key": "secret",
    }
    with pytest.raises(InvalidConfigError, match=r"through the proxy http://proxy\.invalid:3128") as refused:
        S3Saver(bucket="b", transport="direct", **options)
    assert "hunter2" not in str(refused.value) and "NO_PROXY" in str(refused.value)
    S3Saver(bucket="b", **options).close()  # boto3 goes through the proxy: nothing to refuse
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    S3Saver(bucket="b", transport="direct", **options).close()  # exempted: boto3 would not use it either


def test_url_option(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    with S3Saver.from_conn_string(f"s3://{bucket}/{prefix}?transport=direct", **client_options(s3_server)) as saver:
        assert saver.bucket_io.direct is not None
        saver.put(cfg("url"), empty_checkpoint(), {"step": 0}, {})
        assert saver.get_tuple(cfg("url")) is not None


class _Captured(Exception):
    """Raised by a ``before-send`` hook once it has the request boto3 would send."""


def _what_boto3_sends(client: Any, request: Any, direct: DirectTransport) -> Any:
    """The prepared request boto3 sends for ``request``, with the same arguments the direct transport sends."""
    from langgraph_s3_checkpoint._transport.direct import list_arguments, put_arguments

    captured: list[Any] = []

    def capture(request: Any, **_: Any) -> None:
        captured.append(request)
        raise _Captured

    client.meta.events.register("before-send.s3", capture)
    with contextlib.suppress(_Captured):
        if isinstance(request, Get):
            client.get_object(Bucket="agents", Key=request.key)
        elif isinstance(request, Put):
            extra = put_arguments(request, direct._put_args, direct.expiry_tag)
            client.put_object(Bucket="agents", Key=request.key, Body=request.body, **extra)
        else:
            client.list_objects_v2(Bucket="agents", **list_arguments(request))
    return captured[0]


@pytest.mark.memory
@pytest.mark.parametrize(
    ("region", "endpoint_url"),
    [("eu-west-1", None), ("us-east-1", None), ("us-east-1", "http://127.0.0.1:8333")],
)
@pytest.mark.parametrize(
    "request_",
    [
        Get("threads/a b+c=d~e%f/ü/checkpoint"),
        Put("threads/x/c/1~/checkpoint", b"body", mode=CREATE),
        Put("threads/x/head", b"{}", mode=Update('"etag"')),
        ListKeys("threads/a b+/", start_after="threads/a b+/c~", delimiter="/"),
        ListKeys("ns/", token="opaque+token/=="),
    ],
    ids=["get", "put-if-none-match", "put-if-match", "list-start-after", "list-token"],
)
@pytest.mark.usefixtures("no_aws_settings_around")
def test_the_request_and_its_signature_are_botocores(
    monkeypatch: pytest.MonkeyPatch, region: str, endpoint_url: str | None, request_: Any
) -> None:
    """AWS itself cannot be reached from here, so the wire request is compared with botocore's: the URL
    boto3 would send the same request to (path and query encoding), and SigV4 as botocore computes it for
    the exact method, URL, headers and body we send, at the same instant, with a session token. The
    canonical request is where a hand-written signer goes wrong."""
    from datetime import datetime, timezone
    from urllib.parse import urlsplit

    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.config import Config
    from botocore.credentials import Credentials

    import langgraph_s3_checkpoint._transport.direct as transport_module

    instant = datetime(2026, 12, 1, 12, 34, 56, tzinfo=timezone.utc)

    class FrozenClock(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return instant

    monkeypatch.setattr(transport_module, "datetime", FrozenClock)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: instant.replace(tzinfo=None))
    client = boto3.session.Session().client(
        "s3",
        region_name=region,
        endpoint_url=endpoint_url,
        aws_access_key_id="AKIAEXAMPLE",
        aws_secret_access_key="secret/key+",
        aws_session_token="session-token",
    )
    direct = DirectTransport(client, "agents", put_args={"ServerSideEncryption": "AES256"}, expiry_tag="ttl=1")
    exchange = next(direct.exchanges(request_))
    assert isinstance(exchange, Exchange)
    url = f"{'https' if direct.https else 'http'}://{exchange.headers['host']}{exchange.target}"

    boto3_url = urlsplit(_what_boto3_sends(client, request_, direct).url)
    ours = urlsplit(url)
    assert (ours.scheme, ours.netloc, ours.path) == (boto3_url.scheme, boto3_url.netloc, boto3_url.path)
    assert sorted(filter(None, ours.query.split("&"))) == sorted(filter(None, boto3_url.query.split("&")))

    sent = {k: v for k, v in exchange.headers.items() if k not in ("authorization", "x-amz-date")}
    reference = AWSRequest(method=exchange.method, url=url, headers=sent, data=exchange.body)
    reference.context["client_config"] = Config(s3={"payload_signing_enabled": not direct.https})
    credentials = Credentials("AKIAEXAMPLE", "secret/key+", "session-token")
    botocore.auth.S3SigV4Auth(credentials, "s3", direct._region).add_auth(reference)
    assert reference.headers["X-Amz-Date"] == exchange.headers["x-amz-date"]
    assert reference.headers["Authorization"] == exchange.headers["authorization"]
    direct.close()


@pytest.mark.memory
@pytest.mark.parametrize(
    ("status", "headers", "body", "redirect"),
    [
        (301, {"x-amz-bucket-region": "eu-west-1"}, b"<Error><Code>PermanentRedirect</Code></Error>", True),
        (307, {"x-amz-request-id": "1"}, b"<Error><Code>TemporaryRedirect</Code></Error>", True),
        (400, {}, b"<Error><Code>AuthorizationHeaderMalformed</Code><Region>eu-west-1</Region></Error>", True),
        (400, {}, b"<Error><Code>AuthorizationHeaderMalformed</Code><Region>us-west-2</Region></Error>", False),
        (400, {}, b"<Error><Code>AuthorizationHeaderMalformed</Code></Error>", False),
    ],
)
@pytest.mark.usefixtures("no_aws_settings_around")
def test_a_redirect_to_another_region_is_named(
    status: int, headers: dict[str, str], body: bytes, redirect: bool
) -> None:
    """What S3 answers a request for a bucket in another region; a malformed authorization that names the
    region we signed for (or none) is an ordinary failure."""
    from langgraph_s3_checkpoint import WrongRegionError

    client = boto3.session.Session().client(
        "s3", region_name="us-west-2", aws_access_key_id="AKIA", aws_secret_access_key="secret"
    )
    direct = DirectTransport(client, "agents")
    steps = direct.exchanges(Get("k"))
    next(steps)
    with pytest.raises(S3RequestError) as raised:
        steps.send((status, headers, body))
    assert isinstance(raised.value, WrongRegionError) is redirect
    if redirect:
        assert "Set region=" in str(raised.value)
    direct.close()
