"""The saver's own boto3 client sends PutObject without ``Expect: 100-continue`` (one round trip per PUT).

Checked at the request level with a botocore ``before-send`` hook (the last point before the bytes go out),
on SeaweedFS and moto, including an empty body (SeaweedFS never answered an empty-body PUT that carried the
header), and end to end through a saver built from options.
"""

from __future__ import annotations

import contextlib
from typing import Any

from helpers import cfg, client_options
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_s3_checkpoint import S3Saver, make_client
from langgraph_s3_checkpoint.local import LocalS3Server


class _Headers:
    """Records the headers of every request the client sends."""

    def __init__(self, client: Any) -> None:
        self.sent: list[tuple[str, dict[str, str]]] = []
        client.meta.events.register("before-send.s3", self._on_send)

    def _on_send(self, request: Any, **_: Any) -> None:
        headers = {k.lower(): v.decode() if isinstance(v, bytes) else str(v) for k, v in request.headers.items()}
        self.sent.append((request.method, headers))

    def puts(self) -> list[dict[str, str]]:
        return [h for method, h in self.sent if method == "PUT"]


def test_put_object_has_no_expect_header(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    client = make_client(**client_options(s3_server), connect_timeout=5, read_timeout=10, max_attempts=1)
    seen = _Headers(client)
    for body in (b"", b"x" * 1024, b"y" * 300_000):
        client.put_object(Bucket=bucket, Key=f"{prefix}/{len(body)}", Body=body)
        assert client.get_object(Bucket=bucket, Key=f"{prefix}/{len(body)}")["Body"].read() == body
    puts = seen.puts()
    assert len(puts) == 3
    assert all("expect" not in h for h in puts), puts


def test_other_clients_keep_botocore_default(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    """Only the saver's client changes: a client of the same process still sends the header."""
    make_client(**client_options(s3_server))
    other = s3_server.client()
    seen = _Headers(other)
    other.put_object(Bucket=bucket, Key=f"{prefix}/other", Body=b"z" * 10)
    assert seen.puts()[0].get("expect") == "100-continue"


def test_saver_from_options_puts_without_expect(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, **client_options(s3_server))) as saver:
        seen = _Headers(saver.client)
        config = saver.put(cfg("t1"), empty_checkpoint(), {"source": "input", "step": -1, "parents": {}}, {})
        saver.put_writes(config, [("ch", "v")], "task-1")
        assert saver.get_tuple(config) is not None
    puts = seen.puts()
    assert puts and all("expect" not in h for h in puts), puts
