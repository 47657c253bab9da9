"""Objects under the prefix that the saver did not write are not the saver's.

Folder markers, foreign files, keys shaped like ours inside folders no id escapes to, a record filed under another
checkpoint's key: readers, maintenance (rollback, prune, expiry, gc, repair) and the CLI skip what is not theirs
and refuse a record that is not the one its key names, naming the key. On every server kind.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from helpers import BIG, cfg, cid, cli_env, ids, latest_id, put, run_cli, tuple_at, ver
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_s3_checkpoint import CorruptObjectError, S3Saver
from langgraph_s3_checkpoint.gc import gc as run_gc
from langgraph_s3_checkpoint.local import LocalS3Server


def test_folder_markers_and_foreign_keys_beside_records_are_skipped(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """Zero-byte folder markers (``c/``, ``c/{R}/``, which consoles and sync tools create) and a foreign key shaped like
    ours (``c/zzzz~/checkpoint``) are skipped by readers, delete_for_runs and prune instead of failing to parse."""
    saver = make_saver()
    put(saver, "t", cid(1), run="run-1")
    put(saver, "t", cid(2), cid(1), run="run-2")
    layout = saver.plans.layout
    records = layout.records("t", "")
    for key in (records, layout.checkpoint_dir("t", "", cid(1)), f"{records}zzzz~/checkpoint"):
        s3_client.put_object(Bucket=saver.bucket, Key=key, Body=b"" if key.endswith("/") else b"not ours")
    reader = make_saver()
    assert tuple_at(reader, cfg("t", "", cid(1))).checkpoint["id"] == cid(1)
    assert ids(reader.list(cfg("t"))) == [cid(2), cid(1)]
    assert ids(reader.list(None)) == [cid(2), cid(1)]
    reader.delete_for_runs(["run-2"])
    assert latest_id(reader, "t") == cid(1)
    reader.prune(["t"])
    assert ids(reader.list(cfg("t"))) == [cid(1)]


def test_a_record_filed_under_another_checkpoints_key_is_reported_as_corrupt(
    make_saver: Callable[[], S3Saver], s3_client: Any
) -> None:
    """A record copied under another checkpoint's key (a botched manual restore) must neither answer ``get_tuple`` for
    that id with another checkpoint nor hide committed ones from ``list``: readers check the id in the body against the
    key's, and raise CorruptObjectError naming the key."""
    saver = make_saver()
    for n in (1, 2, 3):
        put(saver, "t", cid(n), cid(n - 1) if n > 1 else None)
    layout = saver.plans.layout
    misfiled = layout.record("t", "", cid(2))
    s3_client.copy_object(
        Bucket=saver.bucket, Key=misfiled, CopySource={"Bucket": saver.bucket, "Key": layout.record("t", "", cid(1))}
    )
    reader = make_saver()
    with pytest.raises(CorruptObjectError, match="not the one its key names") as info:
        reader.get_tuple(cfg("t", "", cid(2)))
    assert misfiled in str(info.value)
    with pytest.raises(CorruptObjectError, match="not the one its key names"):
        ids(reader.list(cfg("t")))


def test_foreign_thread_folders_are_skipped(make_saver: Callable[[], S3Saver], s3_client: Any) -> None:
    """A folder under ``threads/`` whose name is not one of our escaped segments (``%ZZ``, ``~abc``) is no thread this
    saver could have written: list(None) skips it and expire_threads does not report it, rather than both raising
    ValueError."""
    saver = make_saver()
    put(saver, "t", cid(1))
    root = saver.plans.layout.threads_root
    for key in (f"{root}%ZZ/junk", f"{root}~abc/junk"):
        s3_client.put_object(Bucket=saver.bucket, Key=key, Body=b"not ours")
    reader = make_saver()
    assert [t.config["configurable"]["thread_id"] for t in reader.list(None)] == ["t"]
    assert reader.expire_threads(timedelta(days=1), dry_run=True) == []


def test_objects_in_folders_no_id_escapes_to_are_foreign(make_saver: Callable[[], S3Saver], s3_client: Any) -> None:
    """Objects shaped like ours inside a folder whose name no id escapes to (``a.b``, ``%zz``: ``escape`` writes ``.``
    and ``%`` as ``%2E`` and ``%25``) are foreign to every reader and tool, by one rule (``keys.is_own_segment``): gc
    does not take them for headless leftovers to delete, repair_thread rebuilds no head in such a namespace folder, and
    a writes-shaped key whose task segment no task id escapes to does not make ``get_tuple`` raise."""
    saver = make_saver()
    put(saver, "t", cid(1), values={"big": "v" * BIG}, versions={"big": ver(1)})
    layout = saver.plans.layout
    record = s3_client.get_object(Bucket=saver.bucket, Key=layout.record("t", "", cid(1)))["Body"].read()
    root, namespaces = layout.threads_root, layout.namespaces("t")
    in_records = layout.record("t", "", cid(1))[len(layout.records("t", "")) :]  # c/{R}/checkpoint's "{R}/checkpoint"
    foreign = {
        f"{root}a.b/ns/~/b/big/1": b"not ours",
        f"{root}a.b/name": b"a.b",
        f"{root}%zz/ns/~/c/{in_records}": record,
        f"{namespaces}x.y/c/{in_records}": record,
        f"{namespaces}x.y/b/big/1": b"not ours",
        f"{layout.writes('t', '', cid(1))}x.y": b"not ours",
    }
    for key, body in foreign.items():
        s3_client.put_object(Bucket=saver.bucket, Key=key, Body=body)
    time.sleep(1.1)  # LastModified and the server's Date have a one-second resolution

    reader = make_saver()
    assert [t.config["configurable"]["thread_id"] for t in reader.list(None)] == ["t"]
    tup = reader.get_tuple(cfg("t"))
    assert tup is not None and tup.checkpoint["id"] == cid(1) and tup.pending_writes == []
    assert [n.status for n in reader.repair_thread("t").namespaces] == ["ok"]
    report = run_gc(reader, grace_seconds=0)
    assert report.total == 0 and report.foreign >= len(foreign), report
    listed = {o["Key"] for o in s3_client.list_objects_v2(Bucket=saver.bucket, Prefix=root)["Contents"]}
    assert set(foreign) <= listed and f"{namespaces}x.y/head" not in listed


def test_foreign_files_under_the_prefix_leave_the_saver_and_every_command_working(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """Files anywhere under the prefix (a readme, odd folders) leave the saver's reads and every CLI command working;
    verify reports only the foreign object inside a thread (exit 1)."""
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        saver.put(cfg("t"), empty_checkpoint(), {"step": 0}, {})
        for key in ("threads/a%zz/x", "threads/%FF/x", "runs/readme", "threads/t/ns/~/c/readme", "readme.txt"):
            client.put_object(Bucket=bucket, Key=f"{prefix}/{key}", Body=b"hello")
        assert [t.config["configurable"]["thread_id"] for t in saver.list(None)] == ["t"]
        assert len(list(saver.list(cfg("t")))) == 1
    environ = cli_env(
        s3_server, f"s3://{bucket}/{prefix}?endpoint_url={s3_server.endpoint_url}&region={s3_server.region}"
    )
    for args in (
        ("threads",),
        ("history", "t"),
        ("gc", "--dry-run"),
        ("gc", "--grace-seconds", "0", "--yes"),
        ("prune", "--keep-latest", "--all", "--yes"),
        ("expire", "--days", "1", "--yes"),
    ):
        done = run_cli(*args, env=environ)
        assert done.returncode == 0, (args, done.stderr)
        assert "Traceback" not in done.stderr
    # verify reports the foreign object inside the thread (exit 1), without failing on the others.
    done = run_cli("verify", env=environ)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "threads/t/ns/~/c/readme" in done.stdout and "a%zz" not in done.stdout
