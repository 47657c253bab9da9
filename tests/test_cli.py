"""``langgraph-s3`` against SeaweedFS, on threads written by real graphs.

Each command is checked against what the saver itself reads back, and against the bucket's objects. Commands run
through the CLI's ``main`` in the test process, as a process of its own would see it (``helpers.run_cli``); the few
things only a real process shows (the exit status reaching the shell, questions on a terminal) run one.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import operator
import os
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from helpers import (
    assert_one_error_line,
    cfg,
    chat,
    cli_env,
    is_record_key,
    run_cli,
    run_cli_binary,
    run_cli_process,
)
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

from langgraph_s3_checkpoint import S3Saver, local
from langgraph_s3_checkpoint._protocol.keys import Layout
from langgraph_s3_checkpoint.cli.context import Progress, clip, jsonable
from langgraph_s3_checkpoint.local import LocalS3Server

CLI_BUCKET = "lgs3-cli"
BIG = 6000
"""Characters in the ``report`` channel: above the inline threshold, so it is stored as a blob."""


class State(TypedDict, total=False):
    messages: Annotated[list[Any], add_messages]
    notes: Annotated[list[str], operator.add]
    report: str
    verdict: str


class Review(TypedDict, total=False):
    report: str
    verdict: str


def _draft(state: State) -> State:
    return {"messages": [AIMessage("draft ready")], "report": "r" * BIG, "notes": ["draft"]}


def _check(state: Review) -> Review:
    return {"verdict": f"{len(state.get('report', ''))} characters reviewed"}


def _approve(state: State) -> State:
    answer = interrupt("approve?")
    return {"notes": [f"approved:{answer}"]}


def _build() -> Any:
    review = StateGraph(Review)
    review.add_node("check", _check)
    review.add_edge(START, "check")
    review.add_edge("check", END)
    builder = StateGraph(State)
    builder.add_node("draft", _draft)
    builder.add_node("review", review.compile())
    builder.add_node("approve", _approve)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("review", "approve")
    builder.add_edge("approve", END)
    return builder


class Env:
    """One CLI configuration: a bucket prefix, the saver that writes it, and a runner for the command."""

    def __init__(self, server: local.LocalS3Server, prefix: str) -> None:
        self.server = server
        self.prefix = prefix
        self.url = f"s3://{CLI_BUCKET}/{prefix}?endpoint_url={server.endpoint_url}&region={server.region}"
        self.client = server.client()
        self.saver = S3Saver(bucket=CLI_BUCKET, prefix=prefix, client=server.client())
        self.graph = _build().compile(checkpointer=self.saver)
        self.layout = Layout(prefix)
        self.environ = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LANGGRAPH_S3_"))}
        self.environ.update(
            AWS_ACCESS_KEY_ID=server.access_key,
            AWS_SECRET_ACCESS_KEY=server.secret_key,
            LANGGRAPH_S3_URL=self.url,
        )

    def run(
        self, *args: str, env: dict[str, str] | None = None, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, env=self.environ if env is None else env, stdin=stdin)

    def json(self, *args: str) -> Any:
        done = self.run("--json", *args)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        return json.loads(done.stdout)

    def json_problems(self, *args: str) -> list[dict[str, str]]:
        """The problems ``verify`` reports as JSON (it exits 1 when there are some)."""
        done = self.run("--json", *args)
        assert done.returncode == 1, (done.stdout, done.stderr)
        problems: list[dict[str, str]] = json.loads(done.stdout)["problems"]
        return problems

    def paused(self, thread_id: str) -> None:
        self.graph.invoke({"messages": [HumanMessage("write the report")]}, _config(thread_id))

    def finished(self, thread_id: str) -> None:
        self.paused(thread_id)
        self.graph.invoke(Command(resume="yes"), _config(thread_id))

    def keys(self, thread_id: str) -> list[str]:
        keys: list[str] = []
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=CLI_BUCKET, Prefix=self.layout.thread(thread_id)
        )
        for page in pages:
            keys.extend(o["Key"] for o in page.get("Contents", ()))
        return keys

    def history_ids(self, thread_id: str, ns: str | None = None) -> list[str]:
        config = _config(thread_id)
        if ns is not None:
            config["configurable"]["checkpoint_ns"] = ns
        return [t.config["configurable"]["checkpoint_id"] for t in self.saver.list(config)]


def _config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


@pytest.fixture(scope="module")
def cli_server(seaweedfs_server: local.LocalS3Server) -> local.LocalS3Server:
    seaweedfs_server.create_bucket(CLI_BUCKET)
    return seaweedfs_server


@pytest.fixture
def env(cli_server: local.LocalS3Server, prefix: str) -> Iterator[Env]:
    e = Env(cli_server, prefix)
    try:
        yield e
    finally:
        e.saver.close()


# ------------------------------------------------------------------------------------------------
def test_threads_counts_what_the_graph_wrote(env: Env) -> None:
    env.finished("done")
    env.paused("waiting")
    stats = {s["thread_id"]: s for s in env.json("threads")}
    assert sorted(stats) == ["done", "waiting"]
    for thread_id, s in stats.items():
        keys = env.keys(thread_id)
        assert s["objects"] == len(keys)
        assert s["bytes"] == sum(
            o["Size"]
            for o in env.client.list_objects_v2(Bucket=CLI_BUCKET, Prefix=env.layout.thread(thread_id))["Contents"]
        )
        assert s["namespaces"] == 2  # the root graph and the review subgraph
        assert s["checkpoints"] == len(env.history_ids(thread_id))
        assert s["blobs"] >= 1
        assert s["writes"] >= 1
        assert s["last_modified"]
    assert stats["done"]["checkpoints"] > stats["waiting"]["checkpoints"]

    text = env.run("threads")
    assert text.returncode == 0
    header, *rows, total = text.stdout.splitlines()
    assert header.split()[:3] == ["THREAD", "NS", "CHECKPOINTS"]
    assert [r.split()[0] for r in rows] == ["done", "waiting"]
    assert total.startswith("2 thread(s)")


def test_history_matches_the_saver(env: Env) -> None:
    env.finished("h")
    everything = env.json("history", "h")
    assert [i["checkpoint_id"] for i in everything] == env.history_ids("h")
    root = env.json("history", "h", "--ns", "")
    assert [i["checkpoint_id"] for i in root] == env.history_ids("h", "")
    assert {i["checkpoint_ns"] for i in root} == {""}
    subgraph_ns = {i["checkpoint_ns"] for i in everything} - {""}
    assert len(subgraph_ns) == 1
    (ns,) = subgraph_ns
    assert ns.startswith("review:")
    sub = env.json("history", "h", "--ns", ns)
    assert [i["checkpoint_id"] for i in sub] == env.history_ids("h", ns)
    assert [i["checkpoint_id"] for i in env.json("history", "h", "--ns", "", "--limit", "2")] == env.history_ids(
        "h", ""
    )[:2]
    steps = [i["step"] for i in root]
    assert steps == sorted(steps, reverse=True)
    assert root[-1]["source"] == "input"

    text = env.run("history", "h", "--limit", "3", "--ns", "")
    assert text.returncode == 0
    lines = text.stdout.splitlines()
    assert lines[0].split()[:3] == ["CHECKPOINT", "NS", "STEP"]
    assert [line.split()[0] for line in lines[1:]] == env.history_ids("h", "")[:3]

    missing = env.run("history", "no-such-thread")
    assert missing.returncode == 1
    assert "not found" in missing.stderr


def test_show_renders_channel_values(env: Env) -> None:
    env.paused("s")
    latest = env.saver.get_tuple(_config("s"))
    assert latest is not None
    shown = env.json("show", "s")
    assert shown["checkpoint_id"] == latest.config["configurable"]["checkpoint_id"]
    assert shown["channel_values"] == jsonable(latest.checkpoint["channel_values"])
    assert shown["channel_values"]["report"] == "r" * BIG
    assert [m["content"] for m in shown["channel_values"]["messages"]] == ["write the report", "draft ready"]
    assert shown["channel_values"]["notes"] == ["draft"]
    assert shown["channel_values"]["verdict"] == f"{BIG} characters reviewed"
    interrupts = [w for w in shown["pending_writes"] if w["channel"] == "__interrupt__"]
    assert interrupts and interrupts[0]["value"][0]["value"] == "approve?"

    oldest = env.history_ids("s", "")[-1]
    first = env.json("show", "s", oldest)
    assert first["checkpoint_id"] == oldest
    assert first["source"] == "input"

    text = env.run("show", "s")
    assert text.returncode == 0
    assert f"checkpoint  {shown['checkpoint_id']}" in text.stdout
    assert '"draft ready"' in text.stdout
    assert "more characters; --full shows all" in text.stdout
    full = env.run("show", "s", "--full")
    assert "r" * BIG in full.stdout

    for args in (("show", "nobody"), ("show", "s", "1f000000-0000-6000-8000-000000000000")):
        missing = env.run(*args)
        assert missing.returncode == 1, args
        assert "not found" in missing.stderr


def test_delete(env: Env) -> None:
    env.finished("gone")
    env.finished("kept")
    done = env.json("delete", "gone")
    assert done["ok"] is True and done["deleted"] == "gone"
    assert env.keys("gone") == []
    assert env.saver.get_tuple(_config("gone")) is None
    assert env.saver.get_tuple(_config("kept")) is not None
    again = env.run("delete", "gone")
    assert again.returncode == 1
    assert "not found" in again.stderr


def test_expire(env: Env) -> None:
    env.finished("idle-a")
    env.paused("idle b")
    assert env.json("expire", "--days", "1")["threads"] == []
    bad = env.run("expire", "--days=-1")
    assert bad.returncode == 2 and "--days must be positive" in bad.stderr
    time.sleep(1.5)  # 0.00001 days is 0.86 s: both threads are now idle for longer than that
    listed = env.json("expire", "--days", "0.00001", "--dry-run")
    assert listed["dry_run"] is True and sorted(listed["threads"]) == ["idle b", "idle-a"]
    assert env.saver.get_tuple(_config("idle-a")) is not None
    done = env.run("expire", "--days", "0.00001")
    assert done.returncode == 0, done.stderr
    assert "deleted 'idle b'" in done.stdout and "deleted 'idle-a'" in done.stdout
    assert env.keys("idle-a") == [] and env.keys("idle b") == []


def test_copy(env: Env) -> None:
    env.paused("src")
    done = env.json("copy", "src", "dst")
    assert done["objects"] == len(env.keys("dst"))
    source = env.saver.get_tuple(_config("src"))
    copy = env.saver.get_tuple(_config("dst"))
    assert source is not None and copy is not None
    assert copy.checkpoint == source.checkpoint
    assert copy.pending_writes == source.pending_writes
    assert env.history_ids("dst") == env.history_ids("src")
    # The copy is a live thread: it resumes independently of its source.
    env.graph.invoke(Command(resume="from the copy"), _config("dst"))
    assert env.graph.get_state(_config("dst")).values["notes"][-1] == "approved:from the copy"
    assert env.graph.get_state(_config("src")).next == ("approve",)

    onto_existing = env.run("copy", "src", "dst")
    assert onto_existing.returncode == 1
    assert "already has checkpoints" in onto_existing.stderr
    assert env.run("copy", "nobody", "dst2").returncode == 1


def test_prune_keeps_the_latest_checkpoint(env: Env) -> None:
    for thread_id in ("p1", "p2", "p3"):
        env.finished(thread_id)
    before = {t: env.saver.get_tuple(_config(t)) for t in ("p1", "p2", "p3")}
    assert len(env.history_ids("p1", "")) > 1

    named = env.json("prune", "--keep-latest", "p1")
    assert [r["thread_id"] for r in named["threads"]] == ["p1"]
    assert named["threads"][0]["removed_objects"] > 0
    assert len(env.history_ids("p1", "")) == 1
    assert len(env.history_ids("p2", "")) > 1

    everything = env.json("prune", "--keep-latest", "--all")
    assert sorted(r["thread_id"] for r in everything["threads"]) == ["p1", "p2", "p3"]
    for thread_id, tup in before.items():
        assert tup is not None
        assert len(env.history_ids(thread_id, "")) == 1
        after = env.saver.get_tuple(_config(thread_id))
        assert after is not None
        assert after.checkpoint == tup.checkpoint
    assert env.json("verify")["problems"] == []

    usage = env.run("prune")
    assert usage.returncode == 2
    assert env.run("prune", "--all").returncode == 2  # the strategy must be named
    assert env.run("prune", "--keep-latest", "--all", "p1").returncode == 2
    assert env.run("prune", "--keep-latest", "nobody").returncode == 1


def test_export_import_roundtrip(env: Env, tmp_path: Path, cli_server: local.LocalS3Server) -> None:
    env.paused("orig")
    archive = tmp_path / "orig.tar"
    done = env.json("export", "orig", str(archive))
    assert done["objects"] == len(env.keys("orig"))
    assert not (tmp_path / "orig.tar.partial").exists()
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    assert names[0] == "manifest.json"
    assert manifest["thread_id"] == "orig"
    heads = [n for n in names if n.endswith("/head")]
    assert len(heads) == 2 and names[-3:-1] == heads and names[-1] == "end.json"
    assert all(n.startswith("objects/ns/") or n.startswith("objects/r/") for n in names[1:-1])

    imported = env.json("import", str(archive), "--thread", "restored")
    assert imported == {"ok": True, "thread_id": "restored", "source_thread_id": "orig", "objects": done["objects"]}
    assert env.history_ids("restored") == env.history_ids("orig")
    original = env.saver.get_tuple(_config("orig"))
    restored = env.saver.get_tuple(_config("restored"))
    assert original is not None and restored is not None
    assert restored.checkpoint == original.checkpoint
    assert restored.pending_writes == original.pending_writes
    env.graph.invoke(Command(resume="restored ok"), _config("restored"))
    assert env.graph.get_state(_config("restored")).values["notes"][-1] == "approved:restored ok"
    # The run index of the new thread exists too, so deleting its runs works like for any thread.
    run_ids = {t.metadata.get("run_id") for t in env.saver.list(_config("restored"))} - {None}
    for run_id in run_ids:
        assert env.client.list_objects_v2(Bucket=CLI_BUCKET, Prefix=env.layout.run_index(str(run_id)))["KeyCount"] >= 1

    clash = env.run("import", str(archive), "--thread", "restored")
    assert clash.returncode == 1
    assert "already exists" in clash.stderr
    # An empty thread id is a thread id (the saver takes it): not "the exported one"
    assert env.json("import", str(archive), "--thread", "")["thread_id"] == ""
    assert env.history_ids("") == env.history_ids("orig")

    # Portable: the same archive restores under its own id in another prefix.
    elsewhere = Env(cli_server, f"{env.prefix}-elsewhere")
    try:
        assert elsewhere.json("import", str(archive))["thread_id"] == "orig"
        assert elsewhere.history_ids("orig") == env.history_ids("orig")
        assert elsewhere.json("verify")["problems"] == []
    finally:
        elsewhere.saver.close()

    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tar archive")
    assert env.run("import", str(junk)).returncode == 1
    hostile = tmp_path / "hostile.tar"
    with tarfile.open(hostile, "w") as tar:
        for name, body in (("manifest.json", json.dumps(manifest).encode()), ("objects/../../x/head", b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    refused = env.run("import", str(hostile), "--thread", "hostile")
    assert refused.returncode == 1
    assert env.keys("hostile") == []


def test_export_import_and_copy_carry_the_threads_objects_not_foreign_ones(env: Env, tmp_path: Path) -> None:
    """Defect: export carried every object under a thread's folder, and import refuses an archive holding an
    object that is not part of a thread, so a foreign object in the folder (a note dropped there, a key shaped
    like a write whose task segment no id escapes to, a ``head`` in a folder no namespace escapes to) made the
    backup impossible to restore. copy_thread copied them too (that ``head`` as a head of the copy), and gave a
    foreign key under ``r/`` a twin in the global run index. Both now carry the kinds ``keys.COPIED`` names, as
    ``keys.classify`` tells them, and take heads only from the folders ``plans.own_folders_under`` lists."""
    env.paused("fo")
    layout = env.layout
    thread = layout.thread("fo")
    first = env.history_ids("fo")[-1]
    foreign = [
        f"{layout.writes('fo', '', first)}x.y",
        f"{thread}r/x.y/~",
        f"{layout.ns('fo', '')}b/x.y/1",
        f"{thread}notes.txt",
    ]
    for key in foreign:
        env.client.put_object(Bucket=CLI_BUCKET, Key=key, Body=b"not ours")
    # A folder no namespace escapes to, holding a copy of a real head: not a head of the thread.
    head = env.client.get_object(Bucket=CLI_BUCKET, Key=layout.head("fo", ""))["Body"].read()
    foreign.append(f"{layout.namespaces('fo')}a.b/head")
    env.client.put_object(Bucket=CLI_BUCKET, Key=foreign[-1], Body=head)
    archive = tmp_path / "fo.tar"
    exported = env.json("export", "fo", str(archive))
    assert exported["objects"] == len(env.keys("fo")) - len(foreign)
    assert env.json("import", str(archive), "--thread", "fo-restored")["objects"] == exported["objects"]
    env.saver.copy_thread("fo", "fo-copied")
    for target in ("fo-restored", "fo-copied"):
        assert env.history_ids(target) == env.history_ids("fo")
        relative = {k[len(layout.thread(target)) :] for k in env.keys(target)}
        assert relative.isdisjoint(k[len(thread) :] for k in foreign), target
    assert env.client.list_objects_v2(Bucket=CLI_BUCKET, Prefix=f"{layout.prefix}runs/x.y/")["KeyCount"] == 0


def test_verify_finds_damaged_objects(env: Env) -> None:
    # A thread named "c", like the layout's folder of records: a missing large value under it is still named one.
    env.paused("c")
    env.finished("fine")
    clean = env.json("verify")
    assert clean["problems"] == []
    assert clean["threads"] == 2
    assert clean["objects"] == len(env.keys("c")) + len(env.keys("fine"))
    assert env.run("verify", "c").stdout.strip().endswith(": OK")

    keys = env.keys("c")
    record = sorted(k for k in keys if is_record_key(k) and f"/ns/{'~'}/c/" in k)[-1]
    body = env.client.get_object(Bucket=CLI_BUCKET, Key=record)["Body"].read()
    env.client.put_object(Bucket=CLI_BUCKET, Key=record, Body=body[: len(body) // 2])
    blob = next(k for k in keys if "/b/" in k)
    env.client.delete_object(Bucket=CLI_BUCKET, Key=blob)

    damaged = env.run("--json", "verify", "c")
    assert damaged.returncode == 1
    problems = {p["key"]: p["problem"] for p in json.loads(damaged.stdout)["problems"]}
    assert set(problems) == {record, blob}
    assert "truncated" in problems[record]
    assert "missing channel value" in problems[blob]

    text = env.run("verify")
    assert text.returncode == 1
    assert f"PROBLEM {record}: " in text.stdout
    assert text.stdout.strip().endswith("2 problem(s)")
    assert env.run("verify", "fine").returncode == 0


def test_gc_removes_leftovers_only(env: Env) -> None:
    env.finished("g")
    history = env.history_ids("g")
    ns_prefix = env.layout.ns("g", "")
    orphan_blob = f"{ns_prefix}b/report/{'9' * 32}"
    probe = env.layout.probe("left-by-a-crash")
    for key in (orphan_blob, probe):
        env.client.put_object(Bucket=CLI_BUCKET, Key=key, Body=b"LGS3\x01\x00\x90")

    kept = env.json("gc")  # default grace: everything here is too young to go
    assert kept["deleted_objects"] == 0 and kept["young"] >= 2
    assert kept["records_read"] == len(history) and kept["threads_unchanged"] == 0  # the first gc reads them all
    dry = env.json("gc", "--grace-seconds", "0", "--dry-run")
    assert dry["dry_run"] is True
    assert dry["deleted"] == {"orphan_blob": 1, "setup_probe": 1}
    assert set(dry["sample"]) == {orphan_blob, probe}
    assert orphan_blob in env.keys("g")

    text = env.run("gc", "--grace-seconds", "0")
    assert text.returncode == 0
    assert "deleted 2" in text.stdout
    assert "orphan_blob: 1" in text.stdout
    assert orphan_blob not in env.keys("g")
    assert env.client.list_objects_v2(Bucket=CLI_BUCKET, Prefix=probe)["KeyCount"] == 0
    assert env.history_ids("g") == history
    assert env.json("verify", "g")["problems"] == []
    assert env.run("gc", "--grace-seconds", "-1").returncode == 2


def test_exit_codes_for_configuration_and_s3_errors(env: Env) -> None:
    no_url = {k: v for k, v in env.environ.items() if k != "LANGGRAPH_S3_URL"}
    missing = env.run("threads", env=no_url)
    assert missing.returncode == 2
    assert "LANGGRAPH_S3_URL" in missing.stderr
    assert env.run("no-such-command").returncode == 2
    assert env.run("threads", "--url", "http://not-s3").returncode == 2
    assert env.run("threads", "--url", f"s3://{CLI_BUCKET}/x?inline_threshold=lots").returncode == 2

    # Options given after the command work like those before it.
    via_options = env.run(
        "threads",
        "--json",
        "--url",
        f"s3://{CLI_BUCKET}/{env.prefix}",
        "--endpoint-url",
        env.server.endpoint_url,
        "--region",
        env.server.region,
        env=no_url,
    )
    assert via_options.returncode == 0, via_options.stderr
    assert json.loads(via_options.stdout) == []

    no_bucket = env.run(
        "threads", "--url", f"s3://lgs3-missing-{uuid.uuid4().hex[:8]}?endpoint_url={env.server.endpoint_url}"
    )
    assert no_bucket.returncode == 3
    assert "does not exist" in no_bucket.stderr
    wrong_key = dict(env.environ, AWS_SECRET_ACCESS_KEY="wrong")
    refused = env.run("threads", env=wrong_key)
    assert refused.returncode == 3
    assert "wrong" not in refused.stderr


# -- in-process pieces --------------------------------------------------------------------------
@pytest.mark.memory
def test_progress_draws_only_when_enabled() -> None:
    shown = io.StringIO()
    bar = Progress("verify", total=4, enabled=True, stream=shown)
    for _ in range(4):
        bar.advance(detail="t1")
    bar.close()
    assert "\rverify" in shown.getvalue().replace("\x1b[K", "")
    assert "4/4" in shown.getvalue()
    assert shown.getvalue().endswith("\r\x1b[K")
    silent = io.StringIO()
    quiet = Progress("verify", enabled=False, stream=silent)
    quiet.advance(10)
    quiet.close()
    assert silent.getvalue() == ""
    assert quiet.done == 10


@pytest.mark.memory
def test_values_render_as_json() -> None:
    message = AIMessage("hi", id="m1")
    assert jsonable({"m": [message], "b": b"\x00", "t": (1, 2)}) == {
        "m": [message.model_dump()],
        "b": {"bytes_base64": "AA=="},
        "t": [1, 2],
    }
    assert jsonable(object).startswith("<class")
    assert clip({"s": "x" * 10, "n": [1]}, 4) == {"s": "xxxx... (6 more characters; --full shows all)", "n": [1]}


# -- the long-term memory store ---------------------------------------------------------------------
def test_store_commands_roundtrip_with_the_api(env: Env) -> None:
    """``store put/get/ls/search/rm/sweep`` through the real entry point, checked against S3Store itself."""
    from langgraph_s3_checkpoint import S3Store

    memory = S3Store(bucket=CLI_BUCKET, prefix=env.prefix, client=env.server.client())
    try:
        memory.put(("memories", "ada"), "city", {"fact": "lives in Lisbon", "kind": "place"})
        memory.put(("memories", "ada", "work"), "job", {"fact": "engineer", "kind": "job"})
        env.finished("thread-beside-the-store")  # the saver's objects do not show up as memories

        assert env.json("store", "ls") == [["memories", "ada"], ["memories", "ada", "work"]]
        assert env.json("store", "ls", "memories", "--max-depth", "1") == [["memories"]]
        plain = env.run("store", "ls", "memories.ada")
        assert plain.returncode == 0, plain.stderr
        assert plain.stdout.splitlines() == ["memories.ada", "memories.ada.work"]

        put = env.run("store", "put", "memories.ada", "color", '{"fact": "likes teal", "kind": "pref", "n": 3}')
        assert put.returncode == 0, put.stderr
        item = memory.get(("memories", "ada"), "color")
        assert item is not None and item.value == {"fact": "likes teal", "kind": "pref", "n": 3}
        got = env.json("store", "get", "memories.ada", "color")
        assert (got["namespace"], got["key"], got["value"]) == (["memories", "ada"], "color", item.value)
        assert json.loads(env.run("store", "get", "memories.ada", "color").stdout) == item.value

        everything = env.json("store", "search", "memories")
        assert sorted(i["key"] for i in everything) == ["city", "color", "job"]
        assert [i["key"] for i in env.json("store", "search", "memories", "--filter", '{"n": {"$gt": 2}}')] == ["color"]
        table = env.run("store", "search", "memories.ada.work")
        assert table.returncode == 0 and "job" in table.stdout and "engineer" in table.stdout

        dry = env.run("store", "rm", "memories.ada", "city", "--dry-run")
        assert dry.returncode == 0 and "would delete" in dry.stdout
        assert memory.get(("memories", "ada"), "city") is not None
        assert env.json("store", "rm", "memories.ada", "city")["key"] == "city"
        assert memory.get(("memories", "ada"), "city") is None
        piped = env.run("store", "put", "memories.ada", "piped", "-", stdin='{"fact": "read from stdin"}')
        assert piped.returncode == 0, piped.stderr
        assert memory.get(("memories", "ada"), "piped").value == {"fact": "read from stdin"}  # type: ignore[union-attr]

        memory.put(("memories", "old"), "gone", {"fact": "x"}, ttl=0.001)
        short = env.run("store", "put", "memories.old", "brief", '{"fact": "y"}', "--ttl", "0.001")
        assert short.returncode == 0, short.stderr
        time.sleep(0.2)
        assert env.run("store", "get", "memories.old", "brief").returncode == 1  # expired: invisible to reads
        assert env.json("store", "sweep")["deleted"] == 2
        assert env.json("store", "ls", "memories.old") == []
    finally:
        memory.close()


CLI_INDEX_MODULE = """
from langchain_core.embeddings import DeterministicFakeEmbedding

INDEX = {"dims": 12, "embed": DeterministicFakeEmbedding(size=12), "fields": ["text"]}


def make_index():
    return dict(INDEX)


NOT_AN_INDEX = {"dims": 12}
"""


def test_store_put_with_an_index_embeds_the_item(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """``store put --index module:attr`` writes the item's vectors, as the application's store would;
    without ``--index`` the item gets none and ranks unscored."""
    from langchain_core.embeddings import DeterministicFakeEmbedding

    from langgraph_s3_checkpoint import S3Store

    (tmp_path / "cli_index_config.py").write_text(CLI_INDEX_MODULE)
    # The application's module is importable, as PYTHONPATH makes it for a process of its own. The CLI runs in
    # this process, which imports it once for every call (the module only defines constants) and forgets it after.
    monkeypatch.syspath_prepend(str(tmp_path))
    request.addfinalizer(lambda: sys.modules.pop("cli_index_config", None))
    doc = '{"text": "apple pie"}'
    for key, extra in [
        ("embedded", ["--index", "cli_index_config:INDEX"]),
        ("factory", ["--index", "cli_index_config:make_index"]),
        ("plain", []),
    ]:
        done = env.run("store", "put", "docs", key, doc, *extra)
        assert done.returncode == 0, done.stderr
    index = {"dims": 12, "embed": DeterministicFakeEmbedding(size=12), "fields": ["text"]}
    memory = S3Store(bucket=CLI_BUCKET, prefix=env.prefix, client=env.server.client(), index=index)  # type: ignore[arg-type]
    try:
        scores = {r.key: r.score for r in memory.search(("docs",), query="apple pie", limit=10)}
    finally:
        memory.close()
    assert scores["embedded"] == pytest.approx(1.0) and scores["factory"] == pytest.approx(1.0)
    assert scores["plain"] is None

    for extra, text in [
        (["--index", "cli_index_config:NOT_AN_INDEX"], "is not an IndexConfig"),
        (["--index", "cli_index_config:MISSING"], "AttributeError"),
        (["--index", "cli_index_config"], "expected MODULE:ATTR"),
        (["--index", "cli_index_config:INDEX", "--no-index"], "exclude each other"),
    ]:
        done = env.run("store", "put", "docs", "bad", doc, *extra)
        assert done.returncode == 2 and text in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (("store", "get", "memories.ada", "nothing"), 1, "item 'nothing' not found in namespace 'memories.ada'"),
        (("store", "rm", "memories.ada", "nothing"), 1, "not found"),
        (("store", "put", "memories.ada", "k", "[1, 2]"), 2, "expected a JSON object"),
        (("store", "put", "memories.ada", "k", "{nope"), 2, "not valid JSON"),
        (("store", "put", "", "k", "{}"), 2, "at least one label"),
        (("store", "get", "memories..ada", "k"), 2, "empty label"),
        (("store", "search", "--filter", "3"), 2, "expected a JSON object"),
        (("store", "frobnicate"), 2, "invalid choice"),
    ],
)
def test_store_command_failures(env: Env, args: tuple[str, ...], code: int, text: str) -> None:
    done = env.run(*args)
    assert done.returncode == code, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and text in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_store_on_a_missing_bucket_is_an_s3_error(env: Env) -> None:
    url = (
        f"s3://lgs3-missing-{uuid.uuid4().hex[:8]}/p?endpoint_url={env.server.endpoint_url}&region={env.server.region}"
    )
    done = env.run("store", "ls", "--url", url)
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith("langgraph-s3: error: ") and len(done.stderr.strip().splitlines()) == 1


def test_verify_reports_what_repair_would_fix(env: Env) -> None:
    """A thread whose head was deleted reads as empty; ``verify`` used to print OK and exit 0 while
    ``repair --dry-run`` knew the head was missing and which checkpoint to restore. Now verify reports exactly what
    repair would fix (one decision, repair's), and is clean once repair has run. A damaged head: both the damage
    and the checkpoint repair would rebuild it from. A long thread id whose name object is gone: the name."""
    env.finished("lost-head")
    env.finished("kept")
    head = env.layout.head("lost-head", "")
    newest = env.history_ids("lost-head")[0]
    env.client.delete_object(Bucket=CLI_BUCKET, Key=head)
    assert env.saver.get_tuple(_config("lost-head")) is None  # what made it look fine: it reads as empty

    planned = env.json("repair", "--dry-run", "lost-head")
    repairs = [(n["checkpoint_ns"], n["status"], n["head_id"]) for n in planned["namespaces"] if n["status"] != "ok"]
    assert repairs == [("", "would-repair", newest)]  # the root namespace; the subgraph's head is there
    found = env.run("--json", "verify", "lost-head")
    assert found.returncode == 1, found.stdout
    [problem] = json.loads(found.stdout)["problems"]
    assert problem["key"] == head and newest in problem["problem"] and "the head is missing" in problem["problem"]
    everything = env.run("verify")
    assert everything.returncode == 1 and everything.stdout.strip().endswith("1 problem(s)")
    assert f"PROBLEM {head}: " in everything.stdout and "langgraph-s3 repair lost-head" in everything.stdout

    env.run("repair", "--yes", "lost-head")
    assert env.run("verify").returncode == 0
    assert env.saver.get_tuple(_config("lost-head")).config["configurable"]["checkpoint_id"] == newest  # type: ignore[union-attr]

    body = env.client.get_object(Bucket=CLI_BUCKET, Key=head)["Body"].read()
    env.client.put_object(Bucket=CLI_BUCKET, Key=head, Body=body[: len(body) // 2])
    damaged = [p for p in env.json_problems("verify", "lost-head") if p["key"] == head]
    assert len(damaged) == 2 and any("truncated" in p["problem"] for p in damaged)
    assert any(f"make checkpoint {newest!r} the head" in p["problem"] for p in damaged)

    long_id = "L" * 200
    env.finished(long_id)
    name = env.layout.thread_name(long_id)
    env.client.delete_object(Bucket=CLI_BUCKET, Key=name)
    assert env.json("repair", "--dry-run", long_id)["name_restored"] is True
    assert [p["key"] for p in env.json_problems("verify", long_id)] == [name]
    assert env.run("verify", "kept").returncode == 0


def _on_a_terminal(args: Sequence[str], env: dict[str, str], answer: str) -> tuple[int, str]:
    """Run the CLI with stdin, stdout and stderr on a pseudo-terminal, answering its question. A process of its own:
    the terminal is what the CLI asks ``isatty()`` of, and what a user answers on."""
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # the child
        os.execvpe(sys.executable, [sys.executable, "-m", "langgraph_s3_checkpoint.cli", *args], env)
    output = b""
    answered = False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
        if not answered and b"[y/N]" in output:
            os.write(fd, answer.encode() + b"\n")
            answered = True
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")


def test_destructive_commands_ask_on_a_terminal(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        chat(saver, "asked", 2)
        environ = cli_env(
            s3_server, f"s3://{bucket}/{prefix}?endpoint_url={s3_server.endpoint_url}&region={s3_server.region}"
        )
        code, output = _on_a_terminal(["delete", "asked"], environ, "n")
        assert code == 1 and "Delete thread 'asked'" in output and "aborted" in output
        assert saver.get_tuple(cfg("asked")) is not None
        code, output = _on_a_terminal(["prune", "--keep-latest", "asked"], environ, "no")
        assert code == 1 and len(list(saver.list(cfg("asked")))) > 1

        dry = run_cli("delete", "asked", "--dry-run", env=environ)
        assert dry.returncode == 0 and "would delete" in dry.stdout
        assert saver.get_tuple(cfg("asked")) is not None
        dry = run_cli("prune", "--keep-latest", "asked", "--dry-run", env=environ)
        assert dry.returncode == 0 and len(list(saver.list(cfg("asked")))) > 1

        code, output = _on_a_terminal(["delete", "asked", "--yes"], environ, "")
        assert code == 0 and "[y/N]" not in output and "deleted thread 'asked'" in output
        assert saver.get_tuple(cfg("asked")) is None


def test_import_over_an_existing_thread_needs_replace(
    s3_server: LocalS3Server, bucket: str, prefix: str, tmp_path: Path
) -> None:
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())) as saver:
        chat(saver, "src", 2)
        chat(saver, "dst", 1)
        environ = cli_env(
            s3_server, f"s3://{bucket}/{prefix}?endpoint_url={s3_server.endpoint_url}&region={s3_server.region}"
        )
        archive = str(tmp_path / "src.tar")
        assert run_cli("export", "src", archive, env=environ).returncode == 0
        refused = run_cli("import", archive, "--thread", "dst", env=environ)
        assert "--replace" in assert_one_error_line(refused, 1)
        dry = run_cli("--json", "import", archive, "--thread", "dst", "--replace", "--dry-run", env=environ)
        assert dry.returncode == 0 and json.loads(dry.stdout)["replaces"] is True
        assert len(list(saver.list(cfg("dst")))) == 3  # the dry run changed nothing (one turn: 3 checkpoints)
        done = run_cli("import", archive, "--thread", "dst", "--replace", "--yes", env=environ)
        assert done.returncode == 0, done.stderr
        assert [t.checkpoint["id"] for t in saver.list(cfg("dst"))] == [
            t.checkpoint["id"] for t in saver.list(cfg("src"))
        ]


def test_cli_failures_are_one_line_with_the_documented_code(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    base = f"s3://{bucket}/{prefix}?endpoint_url={s3_server.endpoint_url}&region={s3_server.region}"
    environ = cli_env(s3_server, base)
    assert "unknown URL option 'inline_treshold'" in assert_one_error_line(
        run_cli("threads", "--url", base + "&inline_treshold=3", env=environ), 2
    )
    assert "create_bucket" in assert_one_error_line(
        run_cli("threads", "--url", base + "&create_bucket=ture", env=environ), 2
    )
    assert_one_error_line(run_cli("show", "nobody", env=environ), 1)
    assert_one_error_line(run_cli("prune", "--bogus", env=environ), 2)
    assert_one_error_line(run_cli("no-such-command", env=environ), 2)
    assert_one_error_line(run_cli("prune", "--all", env=environ), 2)
    silent = run_cli(
        "threads", "--url", f"s3://{bucket}/{prefix}?endpoint_url=http://127.0.0.1:9&max_attempts=1", env=environ
    )
    assert_one_error_line(silent, 3)


def test_the_entry_point_exits_with_the_documented_code(env: Env) -> None:
    """``python -m langgraph_s3_checkpoint.cli`` in a process of its own (every other test calls ``main`` in this
    one): the exit status reaches the shell, whether ``main`` returns it (0 with the output, 1 for problems found) or
    exits with it (2 for a usage error, 3 for an S3 error), and a failure says one ``error:`` line without a
    traceback."""
    env.paused("t")
    done = run_cli_process("--json", "threads", env=env.environ)
    assert done.returncode == 0, done.stderr
    assert [t["thread_id"] for t in json.loads(done.stdout)] == ["t"] and done.stderr == ""
    env.client.delete_object(Bucket=CLI_BUCKET, Key=env.layout.head("t", ""))
    found = run_cli_process("verify", env=env.environ)
    assert found.returncode == 1 and "PROBLEM" in found.stdout and found.stderr == "", found
    assert "invalid choice" in assert_one_error_line(run_cli_process("no-such-command", env=env.environ), 2)
    missing = f"s3://lgs3-missing-{uuid.uuid4().hex[:8]}?endpoint_url={env.server.endpoint_url}"
    assert "does not exist" in assert_one_error_line(run_cli_process("threads", "--url", missing, env=env.environ), 3)


def test_long_ids_are_shortened_in_tables(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    long_id = "customer-" + "x" * 300 + "-end"
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())) as saver:
        chat(saver, long_id, 1)
    environ = cli_env(
        s3_server, f"s3://{bucket}/{prefix}?endpoint_url={s3_server.endpoint_url}&region={s3_server.region}"
    )
    table = run_cli("threads", env=environ)
    assert table.returncode == 0, table.stderr
    assert max(len(line) for line in table.stdout.splitlines()) < 140
    assert "customer-xxx" in table.stdout and "\u2026" in table.stdout and "x-end" in table.stdout
    assert [t["thread_id"] for t in json.loads(run_cli("--json", "threads", env=environ).stdout)] == [long_id]


def test_export_to_stdout_imports_from_stdin(env: Env) -> None:
    """``export THREAD -`` writes the archive on stdout and nothing else there; ``import - --thread NEW`` reads it
    from stdin: the copy reads as the original (``export - | import -`` between two buckets)."""
    env.paused("piped")
    exported = run_cli_binary("export", "piped", "-", env=env.environ)
    assert exported.returncode == 0 and exported.stderr == b"", exported.stderr
    with tarfile.open(fileobj=io.BytesIO(exported.stdout)) as tar:
        assert tar.getnames()[0] == "manifest.json"
    imported = run_cli_binary("--json", "import", "-", "--thread", "piped-copy", env=env.environ, stdin=exported.stdout)
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["objects"] == len(env.keys("piped"))
    assert env.history_ids("piped-copy") == env.history_ids("piped")
    original, copy = env.saver.get_tuple(_config("piped")), env.saver.get_tuple(_config("piped-copy"))
    assert original is not None and copy is not None
    assert (copy.checkpoint, copy.pending_writes) == (original.checkpoint, original.pending_writes)

    # Cut short: inside a member (tar notices), or at a member's edge (only the missing end.json tells).
    with tarfile.open(fileobj=io.BytesIO(exported.stdout)) as tar:
        members = tar.getmembers()
    last_head = next(m for m in reversed(members) if m.name.endswith("/head"))
    inside = next(m for m in members if m.size > 1)
    for cut, error in (
        (inside.offset_data + inside.size // 2, b"unreadable archive"),
        (last_head.offset, b"incomplete"),
    ):
        cut_short = run_cli_binary("import", "-", "--thread", "cut", env=env.environ, stdin=exported.stdout[:cut])
        assert cut_short.returncode == 1 and error in cut_short.stderr, cut_short.stderr
        assert cut_short.stderr.count(b"\n") == 1, cut_short.stderr
        assert env.saver.get_tuple(_config("cut")) is None  # no head was written: nothing of it is visible
        assert list(env.saver.list(_config("cut"))) == []


def test_export_to_a_pipe_closed_early_is_an_error_not_a_backup(env: Env) -> None:
    """``export THREAD -`` into a reader that stops (a full disk under ``aws s3 cp -``, a killed consumer): the archive
    is incomplete, so the command fails (exit 1, one error line that says so), where a listing cut off by ``| head``
    is not an error."""
    saver = env.saver
    big = base64.b64encode(os.urandom(300_000)).decode()  # past a pipe buffer, compressed or not
    checkpoint = {**empty_checkpoint(), "channel_values": {"v": big}, "channel_versions": {"v": 1}}
    config = saver.put(cfg("big"), checkpoint, {}, {"v": 1})  # type: ignore[arg-type]
    assert config["configurable"]["checkpoint_id"]
    process = subprocess.Popen(
        [sys.executable, "-m", "langgraph_s3_checkpoint.cli", "export", "big", "-"],
        env=env.environ,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.read(512)  # the reader takes a little and goes away
    process.stdout.close()
    error = process.stderr.read().decode()
    assert process.wait(timeout=60) == 1, error
    assert error.count("\n") == 1 and error.startswith("langgraph-s3: error: "), error
    assert "export" in error and "incomplete" in error, error
