"""Every Python block of the README runs as written, saved as a file, against a local S3 server.

Each block runs in a process of its own, as a reader who copies it into a file would run it: credentials and the
endpoint come from the environment (the boto3 chain, ``AWS_ENDPOINT_URL``), as the README says.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from helpers import run_python_file

from langgraph_s3_checkpoint import S3Saver
from langgraph_s3_checkpoint.local import LocalS3Server

README = Path(__file__).parent.parent / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", README.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)


def test_every_python_block_of_the_readme_runs_as_a_file(s3_server: LocalS3Server, tmp_path: Path) -> None:
    quickstart, store, *others = _python_blocks()
    assert not others, "a new README block: run it here too"
    with contextlib.suppress(Exception):  # a fresh bucket: the quickstart must create it
        s3_server.client().delete_bucket(Bucket="agent-checkpoints")
    done = run_python_file(quickstart, s3_server, tmp_path / "quickstart.py")
    assert done.returncode == 0, done.stderr
    with S3Saver.from_conn_string(
        "s3://agent-checkpoints/prod",
        endpoint_url=s3_server.endpoint_url,
        region_name=s3_server.region,
        aws_access_key_id=s3_server.access_key,
        aws_secret_access_key=s3_server.secret_key,
    ) as saver:
        for thread_id in ("t-1", "t-2"):
            state = saver.get_tuple({"configurable": {"thread_id": thread_id}})
            assert state is not None and state.checkpoint["channel_values"]["count"] == 1, thread_id

    s3_server.create_bucket("agent-state")  # the store block opens an existing bucket, as most deployments do
    done = run_python_file(store, s3_server, tmp_path / "store.py")
    assert done.returncode == 0, done.stderr
    assert "prefers short answers" in done.stdout
    # The cached node's answer is served to the second user who asks the same question (the node's input, the whole
    # conversation, differs; its cache key, the question, does not): one entry, written by the first.
    assert "u-1-chat: computed" in done.stdout and "u-2-chat: cached" in done.stdout, done.stdout
    listed = s3_server.client().list_objects_v2(Bucket="agent-state", Prefix="prod/cache/")
    assert listed.get("KeyCount", 0) == 1, listed
