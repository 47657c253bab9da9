"""Release 0.1.0 and this one on one bucket (issue 40, item 7): a thread 0.1.x wrote reads and continues here
(migrated as it is next written: no offline step), and 0.1.x refuses, loudly, every thread this release has
written, for reads, puts, rollbacks and gc alike.

0.1.0 is not installed from an index: its source is taken from its commit (:data:`RELEASE_0_1_0`, which CI's
clone of main holds; a tag might not reach it) and put in front of ``sys.path`` of a worker process
(``workers/release_worker.py``), which runs one operation against the same server as this process.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from workers.common import RESULT_PREFIX, WORKERS_DIR, ops_graph, worker_env

from langgraph_s3_checkpoint import S3Saver
from langgraph_s3_checkpoint._protocol.codec import MAGIC
from langgraph_s3_checkpoint.gc import gc
from langgraph_s3_checkpoint.local import LocalS3Server

RELEASE_0_1_0 = "a7b90e1210ea4b4a19dea21c4c279f212ab17532"
"""The commit released as 0.1.0 (CHANGELOG.md; tag v0.1.0)."""
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def release_0_1_0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package's source as release 0.1.0 shipped it (fails, not skips, where the commit is missing)."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", RELEASE_0_1_0, "langgraph_s3_checkpoint"],
        capture_output=True,
        check=True,
    ).stdout
    root = tmp_path_factory.mktemp("release-0.1.0")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    return root


def old(release: Path, server: LocalS3Server, bucket: str, prefix: str, *args: str) -> dict[str, Any]:
    """Run one operation with release 0.1.0 (a fresh interpreter, its source first on the path)."""
    env = worker_env(server, bucket, prefix)
    env["PYTHONPATH"] = os.pathsep.join([str(release), str(WORKERS_DIR)])
    done = subprocess.run(
        [sys.executable, str(WORKERS_DIR / "release_worker.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    assert done.returncode == 0 and lines, done.stdout + done.stderr
    result: dict[str, Any] = json.loads(lines[-1][len(RESULT_PREFIX) :])
    assert result["package"].startswith(str(release)), "the worker must run release 0.1.0, not this checkout"
    return result


def turns(saver: S3Saver, thread: str, *runs: str) -> list[str]:
    graph = ops_graph(saver)
    config: dict[str, Any] = {"configurable": {"thread_id": thread}}
    for run in runs:
        graph.invoke({"log": [f"user:{run}"]}, {**config, "metadata": {"run_id": run}})
    log: list[str] = graph.get_state(config).values["log"]
    return log


def log_of(saver: S3Saver, thread: str) -> list[str] | None:
    state = ops_graph(saver).get_state({"configurable": {"thread_id": thread}})
    return state.values.get("log")


def format_of_head(saver: S3Saver, thread: str) -> int:
    body = saver.client.get_object(Bucket=saver.bucket, Key=saver.plans.layout.head(thread, ""))["Body"].read()
    assert body[:4] == MAGIC
    return body[4]


def keys(saver: S3Saver, prefix: str) -> list[str]:
    listed = saver.client.list_objects_v2(Bucket=saver.bucket, Prefix=prefix)
    return [o["Key"] for o in listed.get("Contents", ())]


def test_a_thread_of_0_1_reads_continues_and_rolls_back_here(
    s3_server: LocalS3Server, bucket: str, prefix: str, release_0_1_0: Path
) -> None:
    written = old(release_0_1_0, s3_server, bucket, prefix, "turns", "--thread=t", "--runs=old-1,old-2")
    assert "error" not in written, written
    with S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client()) as saver:
        layout = saver.plans.layout
        assert log_of(saver, "t") == written["log"]
        assert format_of_head(saver, "t") == 1
        assert keys(saver, f"{layout.thread('t')}r/"), "0.1.0 indexes a run under the thread too (its twin)"

        continued = turns(saver, "t", "new-3")
        assert continued[: len(written["log"])] == written["log"] and len(continued) > len(written["log"])
        assert format_of_head(saver, "t") == 2, "migrated as it is next written"
        assert keys(saver, layout.run_index("new-3")), "the new run is indexed"
        assert not keys(saver, f"{layout.thread('t')}r/new-3/"), "by its global entry alone"

        saver.delete_for_runs(["new-3"])
        assert log_of(saver, "t") == written["log"]
        saver.delete_for_runs(["old-2"])  # a run 0.1.0 wrote, indexed with its twin: both go with it
        assert log_of(saver, "t") == written["log"][: written["log"].index("user:old-2")]
        assert not keys(saver, layout.run_index("old-2")) and not keys(saver, f"{layout.thread('t')}r/old-2/")
        before = log_of(saver, "t")
        report = gc(saver, grace_seconds=0)
        assert log_of(saver, "t") == before, report
        assert keys(saver, layout.run_index("old-1")), "gc keeps the entry of a run with committed checkpoints"

    refused = old(release_0_1_0, s3_server, bucket, prefix, "read", "--thread=t")
    assert refused["error"] == "NewerFormatError", refused


def test_0_1_refuses_a_thread_written_here(
    s3_server: LocalS3Server, bucket: str, prefix: str, release_0_1_0: Path
) -> None:
    with S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client()) as saver:
        log = turns(saver, "t", "new-1", "new-2")
        gc(saver, grace_seconds=0)  # its seal, too, is in the new format
        assert format_of_head(saver, "t") == 2
        for args in (["read"], ["turns", "--runs=old-3"], ["rollback", "--runs=new-2"], ["gc"]):
            refused = old(release_0_1_0, s3_server, bucket, prefix, *args, "--thread=t")
            assert refused["error"] == "NewerFormatError", (args, refused)
            assert "newer release" in refused["message"], refused
        assert log_of(saver, "t") == log, "nothing 0.1.0 did changed the thread"
        assert keys(saver, saver.plans.layout.run_index("new-2")), "nor the run index"
