"""Moving threads and long-term memory into the bucket and out of it (``langgraph_s3_checkpoint.migrate``, the
``import-from`` / ``export-to`` commands), against SeaweedFS (and moto where the server kind matters).

A graph with a subgraph, an interrupt inside it, two tasks in one superstep, a large value and a branch made by
time travel runs on a source checkpointer; it is copied into the bucket, compared checkpoint by checkpoint (ids,
parents, values, metadata, pending writes in their order and with their task paths), resumed there and on the
source with the same result, and copied back out. Around that: a copy that dies part-way resumes, a dry run
writes nothing, a thread written while it is copied is copied again, the stores move both ways, and PostgreSQL
when the machine has its server binaries.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import operator
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from helpers import LONG_THREAD, assert_one_error_line, cli_env, run_cli, run_python_file
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore
from langgraph.types import Command, interrupt

from langgraph_s3_checkpoint import InvalidConfigError, MigrationError, S3Saver, S3Store, local
from langgraph_s3_checkpoint.migrate import (
    ThreadStatus,
    copy_store,
    copy_threads,
    open_checkpointer,
    open_store,
    shown,
)

BUCKET = "lgs3-migrate"
BIG = 6000
"""Characters of the ``report`` channel: above the inline threshold, so the bucket stores it as its own object."""
THIS = __name__
"""This module's import path, for the factories the commands load (``test_migrate:factory``)."""


# ------------------------------------------------------------------------------------------------
# The graph: a subgraph with an interrupt, two tasks in one superstep, a large value
# ------------------------------------------------------------------------------------------------
class State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    report: str
    verdict: str


class Review(TypedDict, total=False):
    report: str
    verdict: str


def _draft(state: State) -> State:
    return {"log": ["draft"], "report": "r" * BIG}


def _side(state: State) -> State:
    return {"log": ["side"]}


def _check(state: Review) -> Review:
    return {"verdict": f"{len(state.get('report', ''))} characters"}


def _ask(state: Review) -> Review:
    answer = interrupt("approve?")
    return {"verdict": f"{state['verdict']}, approved: {answer}"}


def _finish(state: State) -> State:
    return {"log": [f"finished ({state.get('verdict')})"]}


def graph(saver: BaseCheckpointSaver[Any]) -> Any:
    review = StateGraph(Review)
    review.add_sequence([("check", _check), ("ask", _ask)])
    review.add_edge(START, "check")
    review.add_edge("ask", END)
    builder = StateGraph(State)
    builder.add_node("draft", _draft)
    builder.add_node("review", review.compile())
    builder.add_node("side", _side)
    builder.add_node("finish", _finish)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("draft", "side")
    builder.add_edge(["review", "side"], "finish")
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=saver)


def _config(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    configurable = {"thread_id": thread_id}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def run_to_interrupt(saver: BaseCheckpointSaver[Any], thread_id: str) -> None:
    """Run the graph to its interrupt, then branch by time travel: new input on the first checkpoint after the
    input (a run's ``input`` step on a parent that is no longer the latest), run to the interrupt again."""
    app = graph(saver)
    app.invoke({"log": ["start"]}, _config(thread_id))
    history = list(app.get_state_history(_config(thread_id)))
    older = history[-2].config["configurable"]["checkpoint_id"]
    app.invoke({"log": ["again"]}, _config(thread_id, older))


def history(saver: BaseCheckpointSaver[Any], thread_id: str) -> list[tuple[Any, ...]]:
    """Every checkpoint of every namespace of a thread, oldest first, as ``list`` shows it: what a copy keeps."""
    rows = [_row(tup) for tup in saver.list({"configurable": {"thread_id": thread_id}})]
    return sorted(rows, key=lambda row: (row[1], row[0]))


def _row(tup: CheckpointTuple) -> tuple[Any, ...]:
    checkpoint = tup.checkpoint
    return (
        tup.config["configurable"].get("checkpoint_ns", ""),
        checkpoint["id"],
        (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
        checkpoint["channel_values"],
        checkpoint["channel_versions"],
        tup.metadata,
        tup.pending_writes,
    )


def states(saver: BaseCheckpointSaver[Any], thread_id: str) -> list[tuple[Any, ...]]:
    """The graph's own view: ``get_state_history`` with its tasks and interrupts."""
    return [
        (
            s.config["configurable"]["checkpoint_id"],
            (s.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
            s.values,
            s.next,
            s.metadata,
            [(t.name, t.interrupts, t.error) for t in s.tasks],
        )
        for s in graph(saver).get_state_history(_config(thread_id))
    ]


def task_paths(saver: InMemorySaver, thread_id: str) -> dict[tuple[str, str], list[tuple[Any, ...]]]:
    """Every pending write an ``InMemorySaver`` holds for a thread, with its index and task path."""
    return {
        key[1:]: sorted(
            (task, idx, channel, saver.serde.loads_typed(value), path)
            for (task, idx), (_, channel, value, path) in writes.items()
        )
        for key, writes in saver.writes.items()
        if key[0] == thread_id and writes
    }


# ------------------------------------------------------------------------------------------------
# Where things are
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(seaweedfs_server: local.LocalS3Server) -> local.LocalS3Server:
    seaweedfs_server.create_bucket(BUCKET)
    return seaweedfs_server


class Location:
    """A bucket prefix: its URL for the commands, a saver and a store on it, and the environment of a command."""

    def __init__(self, server: local.LocalS3Server, bucket: str, prefix: str) -> None:
        self.server = server
        self.url = f"s3://{bucket}/{prefix}?endpoint_url={server.endpoint_url}&region={server.region}"
        self.saver = S3Saver(bucket=bucket, prefix=prefix, client=server.client())
        self.env = cli_env(server, self.url)
        self.bucket = bucket
        self.prefix = prefix

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, env=self.env)

    def json(self, *args: str, code: int = 0) -> Any:
        done = self.run("--json", *args)
        assert done.returncode == code, (done.stdout, done.stderr)
        return json.loads(done.stdout)

    def store(self, **options: Any) -> S3Store:
        return S3Store(bucket=self.bucket, prefix=self.prefix, client=self.server.client(), **options)

    def keys(self) -> list[str]:
        client = self.server.client()
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=f"{self.prefix}/")
        return [o["Key"] for page in pages for o in page.get("Contents", ())]


@pytest.fixture
def here(server: local.LocalS3Server, prefix: str) -> Iterator[Location]:
    location = Location(server, BUCKET, prefix)
    try:
        yield location
    finally:
        location.saver.close()


@pytest.fixture
def sqlite_file(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoints.db")


# The factories the commands load by import path (``test_migrate:memory_source`` ...): the test puts the saver or
# store the command is to use here first.
FACTORY: dict[str, Any] = {}


def memory_source() -> Any:
    return FACTORY["source"]


def memory_target() -> Any:
    return FACTORY["target"]


# ------------------------------------------------------------------------------------------------
# Threads
# ------------------------------------------------------------------------------------------------
def test_a_graph_moved_from_sqlite_to_the_bucket_and_back_resumes_with_the_same_result(
    here: Location, sqlite_file: str, tmp_path: Path
) -> None:
    with SqliteSaver.from_conn_string(sqlite_file) as sqlite:
        run_to_interrupt(sqlite, "t-1")
        run_to_interrupt(sqlite, "t-2")
        before = {t: history(sqlite, t) for t in ("t-1", "t-2")}
        namespaces = {row[0] for row in before["t-1"]}
        assert "" in namespaces and len(namespaces) == 3  # the subgraph's, on each branch
        assert any(row[5]["source"] == "input" and row[2] for row in before["t-1"][1:])  # the time-travel branch

    done = here.run("import-from", f"sqlite:///{sqlite_file}")
    assert done.returncode == 0, done.stderr
    assert "verified: OK" in done.stdout
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["THREAD", "STATUS", "CHECKPOINTS", "WRITES", "ROUNDS"]
    assert [line.split()[:2] for line in lines[1:3]] == [["t-1", "copied"], ["t-2", "copied"]]
    assert here.run("verify", "t-1").stdout.endswith(": OK\n")

    with SqliteSaver.from_conn_string(sqlite_file) as sqlite:
        for thread_id in ("t-1", "t-2"):
            assert history(here.saver, thread_id) == before[thread_id]
            assert states(here.saver, thread_id) == states(sqlite, thread_id)
        # Resumed on each side: the same final state.
        on_sqlite = graph(sqlite).invoke(Command(resume="yes"), _config("t-1"))
        on_s3 = graph(here.saver).invoke(Command(resume="yes"), _config("t-1"))
    assert on_s3 == on_sqlite
    assert on_s3["log"][-1] == f"finished ({BIG} characters, approved: yes)"

    # And back out, into a SQLite file that does not exist yet.
    fresh = tmp_path / "fresh.db"
    done = here.run("export-to", f"sqlite:///{fresh}")
    assert done.returncode == 0, done.stderr
    with SqliteSaver.from_conn_string(str(fresh)) as back:
        for thread_id in ("t-1", "t-2"):
            assert history(back, thread_id) == history(here.saver, thread_id)
        assert graph(back).get_state(_config("t-1")).values == on_s3


def test_an_in_memory_prototype_moves_through_a_factory_and_back_with_its_task_paths(
    s3_server: local.LocalS3Server, bucket: str, prefix: str
) -> None:
    """Both server kinds: ``module:factory`` locations, the task paths of pending writes kept both ways, a thread id
    too long to be a key segment, and a copy from one prefix to another (``s3://`` as the target)."""
    here = Location(s3_server, bucket, prefix)
    elsewhere = Location(s3_server, bucket, f"{prefix}-copy")
    source, target = InMemorySaver(), InMemorySaver()
    threads = ("proto", LONG_THREAD)
    for thread_id in threads:
        run_to_interrupt(source, thread_id)
    FACTORY.update(source=source, target=target)
    try:
        assert here.json("import-from", f"{THIS}:memory_source")["ok"]
        assert here.json("export-to", f"{THIS}:memory_target")["ok"]
        assert here.json("export-to", elsewhere.url)["ok"]
        for thread_id in threads:
            assert history(here.saver, thread_id) == history(source, thread_id)
            assert history(elsewhere.saver, thread_id) == history(source, thread_id)
    finally:
        FACTORY.clear()
        here.saver.close()
        elsewhere.saver.close()
    for thread_id in threads:
        assert history(target, thread_id) == history(source, thread_id)
        paths = task_paths(source, thread_id)
        assert any(path for writes in paths.values() for *_, path in writes)  # the writes have task paths to keep
        assert task_paths(target, thread_id) == paths
        assert states(target, thread_id) == states(source, thread_id)


class ForeignSaver(BaseCheckpointSaver[str]):
    """A checkpointer the migration knows nothing of (its threads come from ``list(None)``, its writes have no task
    paths): an ``InMemorySaver`` behind the four methods a copy calls."""

    def __init__(self, inner: InMemorySaver) -> None:
        super().__init__()
        self.inner = inner

    def list(self, config: Any, **kwargs: Any) -> Iterator[CheckpointTuple]:
        return self.inner.list(config, **kwargs)

    def get_tuple(self, config: Any) -> CheckpointTuple | None:
        return self.inner.get_tuple(config)

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return self.inner.put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        self.inner.put_writes(config, writes, task_id, task_path)


def test_a_checkpointer_the_migration_does_not_know_is_copied_without_task_paths(here: Location) -> None:
    inner = InMemorySaver()
    for thread_id in ("x", "y"):
        run_to_interrupt(inner, thread_id)
    report = copy_threads(ForeignSaver(inner), here.saver)
    assert [(t.thread_id, t.status) for t in report.threads] == [("x", ThreadStatus.COPIED), ("y", ThreadStatus.COPIED)]
    assert report.ok, report
    for thread_id in ("x", "y"):
        copied, source = history(here.saver, thread_id), history(inner, thread_id)
        assert [row[:6] for row in copied] == [row[:6] for row in source]
        # The same writes; without their task paths the bucket orders them by task id.
        assert [sorted(map(repr, row[6])) for row in copied] == [sorted(map(repr, row[6])) for row in source]


def _concat(state: list[str] | None, writes: Any) -> list[str]:
    return [*(state or []), *(w for batch in writes for w in batch)]


class DeltaState(TypedDict):
    log: Annotated[list[str], DeltaChannel(_concat, snapshot_frequency=3)]


def delta_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """Two tasks appending to a ``DeltaChannel`` in one superstep: between its snapshots the channel is rebuilt from
    the pending writes of the checkpoints before, replayed in their task paths' order."""
    builder = StateGraph(DeltaState)
    builder.add_node("left", lambda s: {"log": [f"left {len(s['log'])}"]})
    builder.add_node("right", lambda s: {"log": [f"right {len(s['log'])}"]})
    builder.add_edge(START, "left")
    builder.add_edge(START, "right")
    return builder.compile(checkpointer=saver)


def test_a_delta_channel_reads_the_same_after_the_copy(here: Location) -> None:
    source = InMemorySaver()
    for turn in range(5):
        delta_graph(source).invoke({"log": [f"turn {turn}"]}, _config("delta"))
    assert copy_threads(source, here.saver).ok
    for saver in (source, here.saver):
        delta_graph(saver).invoke({"log": ["after"]}, _config("delta"))
    values = [
        [s.values for s in delta_graph(saver).get_state_history(_config("delta"))] for saver in (source, here.saver)
    ]
    assert values[0] == values[1] and len(values[0]) > 10
    final = [delta_graph(saver).get_state(_config("delta")).values for saver in (source, here.saver)]
    assert final[0] == final[1] and len(final[0]["log"]) == 5 * 3 + 3


def test_progress_is_told_after_each_checkpoint_and_thread(here: Location) -> None:
    source = InMemorySaver()
    for thread_id in ("a", "b"):
        run_to_interrupt(source, thread_id)
    told: list[tuple[str, int, int, int]] = []
    report = copy_threads(
        source,
        here.saver,
        on_progress=lambda p: told.append((p.thread_id, p.threads_done, p.threads_total, p.checkpoints)),
    )
    per_thread = len(history(source, "a"))
    assert told[0] == ("a", 0, 2, 1) and told[per_thread - 1] == ("a", 0, 2, per_thread)
    assert told[per_thread] == ("a", 1, 2, per_thread)  # the thread is done
    assert told[-1] == ("b", 2, 2, per_thread) and len(told) == 2 * (per_thread + 1)
    assert report.checkpoints == 2 * per_thread


def test_a_second_run_copies_nothing_and_a_dry_run_writes_nothing(here: Location, tmp_path: Path) -> None:
    source = InMemorySaver()
    run_to_interrupt(source, "d")
    total = len(history(source, "d"))
    FACTORY.update(source=source)
    try:
        dry = here.json("import-from", f"{THIS}:memory_source", "--dry-run")
        assert here.keys() == []  # not even the conditional-write probe's objects
        assert dry["dry_run"] and dry["checkpoints"] == total and dry["threads"][0]["status"] == "would copy"
        first = here.json("import-from", f"{THIS}:memory_source")
        assert first["checkpoints"] == total and first["writes"] == dry["writes"] > 0
        again = here.json("import-from", f"{THIS}:memory_source")
        assert again["checkpoints"] == again["writes"] == 0 and again["threads"][0]["status"] == "complete"
        assert here.json("import-from", f"{THIS}:memory_source", "--dry-run")["threads"][0]["status"] == "complete"
    finally:
        FACTORY.clear()
    missing = tmp_path / "never.db"
    dry_out = here.json("export-to", f"sqlite:///{missing}", "--dry-run")
    assert dry_out["checkpoints"] == total and not missing.exists()


def test_the_bucket_side_serializer_encrypts_what_is_imported(here: Location) -> None:
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    from langgraph_s3_checkpoint import DecryptionError

    key = "0123456789abcdef0123456789abcdef"
    source = InMemorySaver()
    run_to_interrupt(source, "secret")
    FACTORY.update(source=source)
    serde = "--serde=langgraph.checkpoint.serde.encrypted:EncryptedSerializer.from_pycryptodome_aes"
    try:
        done = run_cli(serde, "import-from", f"{THIS}:memory_source", env={**here.env, "LANGGRAPH_AES_KEY": key})
    finally:
        FACTORY.clear()
    assert done.returncode == 0, done.stderr
    encrypted = EncryptedSerializer.from_pycryptodome_aes(key=key.encode())
    with S3Saver(bucket=here.bucket, prefix=here.prefix, client=here.server.client(), serde=encrypted) as reader:
        assert history(reader, "secret") == history(source, "secret")
    with pytest.raises(DecryptionError):
        history(here.saver, "secret")


class FailingSaver(InMemorySaver):
    """An ``InMemorySaver`` whose ``get_tuple`` by id fails after ``reads`` more calls (``None``: never): a source
    that dies mid-copy."""

    reads: int | None = None

    def get_tuple(self, config: Any) -> CheckpointTuple | None:
        if config["configurable"].get("checkpoint_id") and self.reads is not None:
            if self.reads == 0:
                raise ConnectionError("the database went away")
            self.reads -= 1
        return super().get_tuple(config)


class WritesFailingSaver(S3Saver):
    """An ``S3Saver`` whose ``put_writes`` fails at its ``calls``-th call: a copy that dies between a checkpoint and
    its pending writes."""

    def __init__(self, calls: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls = calls

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        self.calls -= 1
        if self.calls == 0:
            raise ConnectionError("the network went away")
        super().put_writes(config, writes, task_id, task_path)


def test_an_interrupted_copy_resumes_where_it_stopped(here: Location) -> None:
    source = FailingSaver()
    run_to_interrupt(source, "r")
    expected = history(source, "r")
    source.reads = 3  # the source's database goes away after 3 checkpoints were read
    FACTORY.update(source=source)
    try:
        line = assert_one_error_line(here.run("import-from", f"{THIS}:memory_source"), 1)
    finally:
        FACTORY.clear()
    assert "the database went away" in line and "run the same migration again" in line
    # What was copied is a prefix of the history, oldest first, each checkpoint committed with its writes.
    assert history(here.saver, "r") == expected[:3]

    source.reads = None  # the database is back; now the network fails between a checkpoint and its writes
    failing = WritesFailingSaver(2, bucket=here.bucket, prefix=here.prefix, client=here.server.client())
    try:
        with pytest.raises(MigrationError, match="network went away"):
            copy_threads(source, failing)
    finally:
        failing.close()
    wanted = {row[:2]: row for row in expected}
    partial = [row for row in history(here.saver, "r") if row != wanted[row[:2]]]
    assert len(partial) == 1 and len(partial[0][6]) < len(wanted[partial[0][:2]][6])  # a checkpoint lacking writes

    report = copy_threads(source, here.saver)
    assert report.ok, report
    (thread,) = report.threads
    assert 0 < thread.checkpoints < len(expected) - 3
    assert history(here.saver, "r") == expected
    assert here.run("verify", "r").returncode == 0
    assert copy_threads(source, here.saver).threads[0].status is ThreadStatus.COMPLETE

    done = here.run("import-from", f"{THIS}:nothing_here")
    assert "nothing_here" in assert_one_error_line(done, 2)


class MovingSaver(InMemorySaver):
    """An ``InMemorySaver`` a graph keeps writing: the next ``strikes`` listings of ``thread`` are each followed by
    one more run of the graph on it (a writer at work while the copy runs)."""

    def __init__(self, thread: str) -> None:
        super().__init__()
        self.thread, self.strikes = thread, 0

    def list(self, config: Any, **kwargs: Any) -> Iterator[CheckpointTuple]:
        listed = list(super().list(config, **kwargs))
        if config is not None and config["configurable"]["thread_id"] == self.thread and self.strikes:
            self.strikes -= 1
            graph(self).invoke({"log": [f"meanwhile {self.strikes}"]}, _config(self.thread))
        yield from listed


def test_a_thread_written_while_it_is_copied_is_copied_again_or_reported(here: Location) -> None:
    source = MovingSaver("busy")
    run_to_interrupt(source, "busy")
    source.strikes = 1  # the writer strikes once, right after the copy's first listing
    report = copy_threads(source, here.saver)
    (thread,) = report.threads
    assert thread.status is ThreadStatus.COPIED and thread.rounds == 3 and thread.ok, thread
    assert history(here.saver, "busy") == history(source, "busy")

    restless = MovingSaver("restless")
    run_to_interrupt(restless, "restless")
    restless.strikes = 1000  # it never stops
    FACTORY.update(source=restless)
    try:
        done = here.run("import-from", f"{THIS}:memory_source", "--rounds", "2")
    finally:
        FACTORY.clear()
    restless.strikes = 0
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[1].split()[:2] == ["restless", "changed"]
    assert "kept changing while it was copied (2 rounds)" in done.stdout
    assert done.stdout.count("PROBLEM") == 1  # what it copied is verified and complete
    now = {row[:2]: row for row in history(restless, "restless")}
    copied = history(here.saver, "restless")
    assert all(now[row[:2]] == row for row in copied) and len(copied) < len(now)


def test_a_target_thread_with_a_history_of_its_own_is_left_alone(here: Location) -> None:
    source = InMemorySaver()
    run_to_interrupt(source, "mine")
    graph(here.saver).invoke({"log": ["elsewhere"]}, _config("mine"))
    theirs = history(here.saver, "mine")
    report = copy_threads(source, here.saver, thread_ids=["mine", "nobody"])
    assert [t.status for t in report.threads] == [ThreadStatus.CONFLICT, ThreadStatus.NOT_FOUND]
    assert not report.ok and "a graph ran on it" in report.threads[0].problems[0]
    assert history(here.saver, "mine") == theirs


# ------------------------------------------------------------------------------------------------
# Locations
# ------------------------------------------------------------------------------------------------
@pytest.mark.memory
def test_locations_are_parsed_and_refused_with_what_to_do(tmp_path: Path) -> None:
    assert shown("postgresql://app:s3cret@db:5432/agents") == "postgresql://app:***@db:5432/agents"
    assert shown("sqlite:///x.db") == "sqlite:///x.db"
    with (
        pytest.raises(InvalidConfigError, match="no SQLite database at"),
        open_checkpointer(f"sqlite:///{tmp_path}/missing.db", must_exist=True),
    ):
        pass
    with pytest.raises(InvalidConfigError, match="three or four slashes"), open_checkpointer("sqlite://x.db"):
        pass
    with pytest.raises(InvalidConfigError, match="not a location"), open_checkpointer("mysql://db/x"):
        pass
    with pytest.raises(InvalidConfigError, match="not a BaseCheckpointSaver"), open_checkpointer(f"{THIS}:BIG"):
        pass
    FACTORY.update(source=InMemorySaver())
    try:
        with pytest.raises(InvalidConfigError, match="not a BaseStore"), open_store(f"{THIS}:memory_source"):
            pass
    finally:
        FACTORY.clear()
    relative = os.path.relpath(tmp_path / "rel.db")
    with open_checkpointer(f"sqlite:///{relative}") as saver:
        assert isinstance(saver, SqliteSaver)
    assert (tmp_path / "rel.db").exists()


def test_a_location_whose_package_is_missing_names_the_package(here: Location) -> None:
    if importlib.util.find_spec("langgraph.checkpoint.redis") is not None:
        pytest.skip("langgraph-checkpoint-redis is installed here")
    line = assert_one_error_line(here.run("import-from", "redis://127.0.0.1:1"), 2)
    assert "pip install langgraph-checkpoint-redis" in line
    line = assert_one_error_line(here.run("store", "export-to", "redis://127.0.0.1:1"), 2)
    assert "langgraph.store.redis" in line and "pip install langgraph-checkpoint-redis" in line


# ------------------------------------------------------------------------------------------------
# Long-term memory
# ------------------------------------------------------------------------------------------------
INDEX = {"dims": 12, "embed": DeterministicFakeEmbedding(size=12), "fields": ["text"]}
ITEMS: dict[tuple[str, ...], dict[str, dict[str, Any]]] = {
    ("users", "u-1", "memories"): {"m-1": {"text": "prefers short answers"}, "m-2": {"text": "likes tea"}},
    ("users", "u-2", "memories"): {"m-1": {"text": "writes in French"}},
    ("users", "u-2"): {"profile": {"text": "a profile", "age": 41}},
    ("docs",): {f"d-{i}": {"text": f"document {i}"} for i in range(7)},
}


def store_items(store: Any) -> dict[tuple[str, ...], dict[str, Any]]:
    found: dict[tuple[str, ...], dict[str, Any]] = {}
    for item in store.search((), limit=1000):
        found.setdefault(tuple(item.namespace), {})[item.key] = item.value
    return found


def test_long_term_memory_moves_from_sqlite_to_the_bucket_and_out_to_memory(here: Location, sqlite_file: str) -> None:
    with SqliteStore.from_conn_string(sqlite_file) as sqlite:
        sqlite.setup()
        for namespace, items in ITEMS.items():
            for key, value in items.items():
                sqlite.put(namespace, key, value)
    dry = here.json("store", "import-from", f"sqlite:///{sqlite_file}", "--dry-run")
    assert (dry["items"], dry["namespaces"]) == (11, 4) and here.keys() == []
    done = here.run("store", "import-from", f"sqlite:///{sqlite_file}", "--index", f"{THIS}:INDEX")
    assert done.returncode == 0, done.stderr
    assert "copied 11 item(s) of 4 namespace(s)" in done.stdout and "verified: OK" in done.stdout
    with here.store(index=INDEX) as s3:
        assert store_items(s3) == ITEMS
        # Embedded by the target's index on the way in: semantic search finds them.
        best = s3.search(("users",), query="prefers short answers", limit=1)
        assert best[0].key == "m-1" and best[0].score == pytest.approx(1.0)
    again = here.json("store", "import-from", f"sqlite:///{sqlite_file}", "--namespace", "users")
    assert (again["items"], again["unchanged"], again["namespaces"]) == (0, 4, 3)

    target = InMemoryStore()
    FACTORY.update(target=target)
    try:
        out = here.json("store", "export-to", f"{THIS}:memory_target", "--namespace", "docs")
        assert (out["items"], out["namespaces"]) == (7, 1)
    finally:
        FACTORY.clear()
    assert store_items(target) == {("docs",): ITEMS[("docs",)]}
    missing = Path(sqlite_file).with_name("never.db")
    assert here.json("store", "export-to", f"sqlite:///{missing}", "--dry-run")["items"] == 11
    assert not missing.exists()


def test_copy_store_resumes_by_value(here: Location) -> None:
    source, target = InMemoryStore(), InMemoryStore()
    for namespace, items in ITEMS.items():
        for key, value in items.items():
            source.put(namespace, key, value)
    first = copy_store(source, target)
    assert (first.items, first.unchanged, first.ok) == (11, 0, True)
    source.put(("docs",), "d-0", {"text": "changed"})
    second = copy_store(source, target)
    assert (second.items, second.unchanged) == (1, 10)
    assert store_items(target) == store_items(source)


def test_the_api_example_of_the_migration_guide_runs_as_a_file(server: local.LocalS3Server, tmp_path: Path) -> None:
    """docs/migration.md's Python block, saved as a file and run in a process of its own on a SQLite file holding a
    thread and a memory, with the bucket's endpoint and credentials in the environment (as test_readme does)."""
    guide = Path(__file__).parent.parent / "docs" / "migration.md"
    (block,) = re.findall(r"^```python\n(.*?)^```$", guide.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.db")) as sqlite:
        run_to_interrupt(sqlite, "guide")
        checkpoints = len(history(sqlite, "guide"))
    with SqliteStore.from_conn_string(str(tmp_path / "checkpoints.db")) as store:
        store.setup()
        store.put(("users", "u-1"), "m-1", {"text": "prefers short answers"})
    server.create_bucket("agent-state")
    done = run_python_file(block, server, tmp_path / "guide.py")
    assert done.returncode == 0, done.stderr
    assert f"guide copied {checkpoints} " in done.stdout or "guide complete 0 " in done.stdout, done.stdout
    assert "items copied," in done.stdout


# ------------------------------------------------------------------------------------------------
# PostgreSQL, when the machine has its server
# ------------------------------------------------------------------------------------------------
def _postgres_binaries() -> tuple[str, str] | None:
    for directory in [os.path.dirname(shutil.which("initdb") or ""), *sorted(glob.glob("/usr/lib/postgresql/*/bin"))]:
        initdb, pg_ctl = os.path.join(directory, "initdb"), os.path.join(directory, "pg_ctl")
        if directory and os.access(initdb, os.X_OK) and os.access(pg_ctl, os.X_OK):
            return initdb, pg_ctl
    return None


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server of this test module's own, on 127.0.0.1, stopped at the end: the machine's ``initdb`` and
    ``pg_ctl``, run as the ``postgres`` user when the tests run as root (PostgreSQL refuses root). Skipped, saying
    why, on a machine without them or where they cannot start a server."""
    binaries = _postgres_binaries()
    if binaries is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
    initdb, pg_ctl = binaries
    as_user: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("runuser") is None or not _has_user("postgres"):
            pytest.skip("running as root without a postgres user (or runuser) to start PostgreSQL as")
        as_user = ["runuser", "-u", "postgres", "--"]
    folder = tempfile.mkdtemp(prefix="lgs3-pg-")  # not under pytest's root-only folder: postgres must reach it
    if as_user:
        shutil.chown(folder, "postgres")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data = os.path.join(folder, "data")
    options = f"-k {folder} -p {port} -c listen_addresses=127.0.0.1 -c fsync=off"
    try:
        for command in (
            [initdb, "-D", data, "-U", "postgres", "--auth=trust", "--no-sync"],
            [pg_ctl, "-D", data, "-o", options, "-l", os.path.join(folder, "log"), "-w", "start"],
        ):
            done = subprocess.run([*as_user, *command], capture_output=True, text=True, timeout=120, check=False)
            if done.returncode != 0:
                pytest.skip(f"PostgreSQL did not start ({os.path.basename(command[0])}: {done.stderr.strip()})")
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_user, pg_ctl, "-D", data, "-m", "immediate", "stop"], capture_output=True, timeout=60, check=False
        )
        shutil.rmtree(folder, ignore_errors=True)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def test_postgres_threads_and_store_move_to_the_bucket_and_back(here: Location, postgres_url: str) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore

    with PostgresSaver.from_conn_string(postgres_url) as postgres:
        postgres.setup()
        run_to_interrupt(postgres, "pg")
        before = history(postgres, "pg")
        paths = _postgres_paths(postgres, "pg")
    assert any(paths)
    assert here.json("import-from", postgres_url)["ok"]
    assert history(here.saver, "pg") == before
    with PostgresSaver.from_conn_string(postgres_url) as postgres:
        postgres.delete_thread("pg")
    assert here.json("export-to", postgres_url)["ok"]
    with PostgresSaver.from_conn_string(postgres_url) as postgres:
        assert history(postgres, "pg") == before
        assert _postgres_paths(postgres, "pg") == paths
        assert graph(postgres).invoke(Command(resume="ok"), _config("pg")) == graph(here.saver).invoke(
            Command(resume="ok"), _config("pg")
        )

    with PostgresStore.from_conn_string(postgres_url) as store:
        store.setup()
        for namespace, items in ITEMS.items():
            for key, value in items.items():
                store.put(namespace, key, value)
    assert here.json("store", "import-from", postgres_url)["items"] == 11
    with here.store() as s3:
        assert store_items(s3) == ITEMS


def _postgres_paths(postgres: Any, thread_id: str) -> list[tuple[Any, ...]]:
    with postgres._cursor() as cur:
        cur.execute(
            "SELECT checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path FROM checkpoint_writes "
            "WHERE thread_id = %s ORDER BY 1, 2, 3, 4",
            (thread_id,),
        )
        return [tuple(row.values()) for row in cur.fetchall()]
