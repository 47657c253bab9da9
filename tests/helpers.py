"""Test helpers shared by the test modules."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import io
import itertools
import json
import logging
import operator
import os
import socket
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import IO, Annotated, Any, Literal, TypedDict, TypeVar, cast
from unittest import mock

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple, create_checkpoint, empty_checkpoint
from langgraph.runtime import Runtime

from langgraph_s3_checkpoint import S3Saver
from langgraph_s3_checkpoint._protocol.requests import DeleteObjects, Put, Step

ALL_SERVER_KINDS = ("seaweedfs", "moto")
T = TypeVar("T")

_ids = itertools.count()


def selected_server_kinds() -> list[str]:
    """Server kinds to test against: ``S3_SERVERS`` (comma list) or all of them."""
    raw = os.environ.get("S3_SERVERS")
    if raw is None:
        return list(ALL_SERVER_KINDS)
    kinds = [kind.strip() for kind in raw.split(",") if kind.strip()]
    if not kinds or set(kinds) - set(ALL_SERVER_KINDS):
        raise pytest.UsageError(f"S3_SERVERS={raw!r}: expected a comma list of {ALL_SERVER_KINDS}")
    return kinds


def write_stats(variable: str, stats: Any) -> None:
    """With the environment variable ``variable`` set to a path, write ``stats`` there as JSON (what a simulation
    explored)."""
    path = os.environ.get(variable)
    if path:
        with open(path, "w") as f:
            json.dump(stats, f, indent=1, sort_keys=True)


def create_task_in(
    loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, T], context: contextvars.Context
) -> asyncio.Task[T]:
    """``loop.create_task(coroutine, context=context)``, which Python 3.10 lacks: there the task runs in a copy of
    ``context`` taken when it is created."""
    if sys.version_info >= (3, 11):
        return loop.create_task(coroutine, context=context)
    return context.run(loop.create_task, coroutine)


def requires_server(kind: str) -> pytest.MarkDecorator:
    """Skip a test that starts its own ``kind`` server when ``S3_SERVERS`` excludes it."""
    return pytest.mark.skipif(kind not in selected_server_kinds(), reason=f"{kind} not selected by S3_SERVERS")


class RequestCounter:
    """Counts S3 requests a boto3 client sends, by operation name, using botocore event hooks.

    ``counts`` is fed by ``before-send``, which fires once per HTTP attempt (retries included);
    ``calls`` is fed by ``before-call``, which fires once per API call.  Both are keyed by
    operation name (``"PutObject"``, ``"GetObject"``, ``"ListObjectsV2"``, ...).  Thread-safe:
    the saver sends requests from a thread pool.
    """

    def __init__(self, client: Any) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._events = client.meta.events
        uid = next(_ids)
        self._hooks = (
            ("before-send.s3", self._on_send, f"request-counter-send-{uid}"),
            ("before-call.s3", self._on_call, f"request-counter-call-{uid}"),
        )
        for event, handler, unique_id in self._hooks:
            self._events.register(event, handler, unique_id=unique_id)

    def _on_send(self, event_name: str, **kwargs: Any) -> None:
        # event_name is "before-send.s3.<OperationName>"
        operation = event_name.rsplit(".", 1)[-1]
        with self._lock:
            self.counts[operation] += 1

    def _on_call(self, model: Any, **kwargs: Any) -> None:
        with self._lock:
            self.calls[model.name] += 1

    def total(self) -> int:
        """Number of HTTP requests sent (all operations, retries included)."""
        with self._lock:
            return sum(self.counts.values())

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()
            self.calls.clear()

    def snapshot(self) -> dict[str, int]:
        """HTTP requests per operation so far, as a plain dict."""
        with self._lock:
            return dict(self.counts)

    def detach(self) -> None:
        """Stop counting; the counts stay readable.  Safe to call more than once."""
        for event, _handler, unique_id in self._hooks:
            self._events.unregister(event, unique_id=unique_id)


class Run:
    """A LangGraph run as the saver sees it: the ``Runtime`` object its loop passes with every checkpointer call
    (``config["configurable"]["__pregel_runtime"]``). Calls made with :meth:`of` are one run's, fenced by what that
    run read first and committed (``_protocol/fencing.py``); calls made without are outside any run."""

    def __init__(self) -> None:
        self.runtime = Runtime()

    def of(self, config: RunnableConfig) -> RunnableConfig:
        """``config`` as a call of this run makes it."""
        return {**config, "configurable": {**config["configurable"], "__pregel_runtime": self.runtime}}


def cfg(thread_id: str, checkpoint_ns: str = "", checkpoint_id: str | None = None) -> RunnableConfig:
    """A LangGraph config for a thread (and namespace, and checkpoint when given)."""
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def client_options(server: Any, endpoint_url: str | None = None) -> dict[str, Any]:
    """boto3 client settings for a local server (``endpoint_url`` overrides, e.g. a proxy in front of it)."""
    return {
        "endpoint_url": endpoint_url or server.endpoint_url,
        "region_name": server.region,
        "aws_access_key_id": server.access_key,
        "aws_secret_access_key": server.secret_key,
    }


def is_record_key(key: str) -> bool:
    """Whether a listed key is a checkpoint record (``.../c/{R}~/checkpoint``)."""
    return key.endswith("~/checkpoint")


def checkpoint_id_of(key: str) -> str:
    """The checkpoint id of a record or writes key."""
    from langgraph_s3_checkpoint._protocol.keys import revert_id

    parts = key.split("/")
    return revert_id(parts[parts.index("c") + 1])


def lose_first_answer(saver: Any, matches: Callable[[Any], bool]) -> list[str]:
    """Make the first request ``matches`` accepts land on the server but lose its answer: the saver sees the
    reply of a retry, which a conditional PUT that landed gets refused. Returns the keys it happened to
    (empty if it never did), for the test to assert on."""
    shell = saver.bucket_io
    original = shell._send
    lost: list[str] = []

    def send(request: Any, *deadline: Any) -> Any:
        reply = original(request, *deadline)
        if not lost and matches(request):
            lost.append(request.key)
            return original(request, *deadline)  # the retry, as S3 answers it after the first attempt landed
        return reply

    shell._send = send
    return lost


class Crash(Exception):
    """Where a test stops a plan, as a killed process would (raised by :func:`crash_at`)."""


def crash_at(saver: Any, matches: Callable[[Any], bool]) -> None:
    """Make the saver's first request that ``matches`` accepts raise :class:`Crash` instead of being sent:
    the plan stops there, with every earlier request applied, as when its process is killed."""
    shell = saver.bucket_io
    original = shell._send

    def send(request: Any, *deadline: Any) -> Any:
        if matches(request):
            raise Crash(request)
        return original(request, *deadline)

    shell._send = send


def deletes_records(request: Any) -> bool:
    """Whether a request deletes checkpoint records (``.../c/...``): where a test stops a delete or a rollback
    that has already removed the heads (with :func:`crash_at`)."""
    return isinstance(request, DeleteObjects) and any("/c/" in key for key in request.keys)


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts connections and never answers; yields its port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                accepted.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()


class GrowingState(TypedDict):
    n: int
    log: Annotated[list[str], operator.add]


def growing_graph(saver: Any) -> Any:
    """Five supersteps whose log grows by 2 KB each: it is stored as its own object after a few steps."""
    from langgraph.graph import END, START, StateGraph

    def step(state: GrowingState) -> dict[str, Any]:
        return {"n": state["n"] + 1, "log": [f"step {state['n']} " + "x" * 2000]}

    builder = StateGraph(GrowingState)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: "step" if s["n"] < 5 else END)
    return builder.compile(checkpointer=saver)


# -- savers standing in for processes, checkpoints put and plans stepped by hand -------------------------------
BIG = 6000
"""Characters of a value large enough to be stored as its own object."""
LONG_THREAD = "long-" + "x" * 300
"""A thread id too long to be a key segment (stored behind a digest and a ``name`` object)."""


OLD, PARENT, OTHER, NEW = 5, 10, 15, 20
"""Checkpoint numbers of the decision tables: an older checkpoint, the parent, another writer's, the one put
(newest)."""


def cid(n: int, sub: int = 0) -> str:
    """Checkpoint id number ``n`` (and ``sub``), shaped like LangGraph's (uuid6) ids: they sort by (n, sub), for
    ``n`` below a million. (``sim.cid`` is the simulation's own format, which its names are read back from.)"""
    return f"1f{n:06d}-{sub:04d}-6000-8000-000000000000"


def cid_number(checkpoint_id: str) -> int:
    """The ``n`` of ``cid(n, sub)``."""
    return int(checkpoint_id[2:8])


def checkpoint(n: int | str, parent: Checkpoint | None = None) -> Checkpoint:
    """Checkpoint :func:`cid` ``(n)`` (``n`` itself when it is a string): empty, or with ``parent``'s channel values
    and versions."""
    return create_checkpoint(parent or empty_checkpoint(), None, 0, id=cid(n) if isinstance(n, int) else n)


def ver(n: int, tag: str = "0") -> str:
    """A channel version in LangGraph's format (``{counter:032}.{random}``)."""
    return f"{n:032}.{tag}"


def put(
    saver: Any,
    thread: str,
    checkpoint_id: str,
    parent: str | None = None,
    *,
    ns: str = "",
    values: dict[str, Any] | None = None,
    versions: dict[str, str] | None = None,
    new: dict[str, str] | None = None,
    source: str = "loop",
    run: str | None = None,
    in_run: Run | None = None,
) -> Any:
    """Put one checkpoint: ``values``/``versions`` (default: a small ``n``), ``new`` the changed versions;
    ``run`` is the run id of its metadata, ``in_run`` the LangGraph run that makes the call (none: a direct call)."""
    values = {"n": checkpoint_id} if values is None else values
    versions = {ch: ver(1, checkpoint_id) for ch in values} if versions is None else versions
    checkpoint = empty_checkpoint()
    checkpoint["id"] = checkpoint_id
    checkpoint["channel_values"] = dict(values)
    checkpoint["channel_versions"] = dict(versions)
    metadata: dict[str, Any] = {"source": source, "step": 0}
    if run is not None:
        metadata["run_id"] = run
    config = cfg(thread, ns, parent)
    if in_run is not None:
        config = in_run.of(config)
    return saver.put(config, checkpoint, metadata, dict(versions if new is None else new))


def ids(tuples: Any) -> list[str]:
    """The checkpoint ids of checkpoint tuples, in their order."""
    return [t.checkpoint["id"] for t in tuples]


def latest_id(saver: S3Saver, thread: str, ns: str = "") -> str | None:
    """The id of the latest checkpoint of a thread's namespace, or None."""
    tup = saver.get_tuple(cfg(thread, ns))
    return None if tup is None else tup.checkpoint["id"]


def tuple_at(saver: Any, config: RunnableConfig) -> CheckpointTuple:
    """What ``saver.get_tuple(config)`` reads, where the test expects a checkpoint."""
    found: CheckpointTuple | None = saver.get_tuple(config)
    assert found is not None, f"no checkpoint at {config}"
    return found


def send(saver: S3Saver, requests: Step) -> list[Any]:
    """Send one batch of requests through the saver's I/O shell, as its drivers would."""

    def one_batch() -> Any:
        return (yield requests)

    return cast(list[Any], saver.bucket_io.run(one_batch()))


def drive(saver: S3Saver, plan: Any, on_batch: Callable[[list[Any]], list[Any] | None]) -> Any:
    """Run a plan, letting ``on_batch(requests)`` answer a batch itself (or return None to send it)."""
    reply: Any = None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration as stop:
            return stop.value
        answered = on_batch(step)
        reply = send(saver, step) if answered is None else answered


def run_plan(plan: Any, answer: Callable[[list[Any]], list[Any]]) -> tuple[Any, list[list[Any]]]:
    """Run a plan without a saver, ``answer(batch)`` replying to each of its batches: its result and its batches."""
    batches: list[list[Any]] = []
    reply: Any = None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration as done:
            return done.value, batches
        batches.append(step)
        reply = answer(step)


def head_put_of(saver: S3Saver, thread: str, ns: str = "") -> Callable[[Any], bool]:
    """Whether a request is the PUT of the head of ``thread``'s namespace ``ns``."""
    key = saver.plans.layout.head(thread, ns)
    return lambda request: isinstance(request, Put) and request.key == key


def put_plan(saver: S3Saver, thread: str, checkpoint_id: str, parent: str | None = None, **kw: Any) -> Any:
    """The plan of ``put`` (same arguments as :func:`put`), not yet started."""

    class Capture:
        plan: Any = None

        def put(self, *args: Any) -> None:
            self.plan = saver.plans.put(*args)

    capture = Capture()
    put(capture, thread, checkpoint_id, parent, **kw)
    return capture.plan


def crash_before_head(saver: S3Saver, thread: str, checkpoint_id: str, parent: str | None = None, **kw: Any) -> None:
    """A put that dies after everything but its head PUT landed: its record is an uncommitted leftover."""
    is_head = head_put_of(saver, thread, kw.get("ns", ""))

    def on_batch(step: list[Any]) -> list[Any] | None:
        if any(is_head(r) for r in step):
            send(saver, [r for r in step if not is_head(r)])
            raise Crash
        return None

    with pytest.raises(Crash):
        drive(saver, put_plan(saver, thread, checkpoint_id, parent, **kw), on_batch)


# -- the command line, as a user runs it ----------------------------------------------------------------------------
def fake_client_options(endpoint: str) -> dict[str, Any]:
    """boto3 client settings with made-up credentials, for an endpoint that is not a real S3 server."""
    return {
        "endpoint_url": endpoint,
        "region_name": "us-east-1",
        "aws_access_key_id": "AKIAEXAMPLE",
        "aws_secret_access_key": "secret",
    }


def run_cli(*args: str, env: dict[str, str], stdin: str | bytes | None = None) -> subprocess.CompletedProcess[str]:
    """``langgraph-s3 ARGS`` through the CLI's ``main`` in this process, seen as a process of its own: ``env`` is the
    whole environment, stdin a pipe holding ``stdin`` (or nothing), stdout and stderr pipes, the exit status what
    ``main`` returns or exits with (:func:`run_cli_binary`: stdout as bytes, for an archive). A process per call costs
    a second or two of CPU importing langgraph, langchain_core and boto3; :func:`run_cli_process` runs one, for what
    only a process shows."""
    done = _run_cli(args, env, stdin)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.text(), done.stderr.text())


def run_cli_binary(*args: str, env: dict[str, str], stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """:func:`run_cli` with stdout as the bytes written (stderr too)."""
    done = _run_cli(args, env, stdin)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.data(), done.stderr.data())


def _run_cli(args: Sequence[str], env: dict[str, str], stdin: str | bytes | None) -> subprocess.CompletedProcess[_Pipe]:
    from langgraph_s3_checkpoint import cli

    out, err = _Pipe(), _Pipe()
    stdout = io.TextIOWrapper(out, encoding="utf-8")
    stderr = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace")  # as Python's own stderr
    raw = stdin.encode() if isinstance(stdin, str) else stdin or b""
    with _as_a_process_of_its_own(env, raw, stdout, stderr):
        try:
            returncode = cli.main(list(args))
        except SystemExit as exit_:
            returncode = _exit_status(exit_.code, stderr)
        finally:
            for stream in (stdout, stderr):
                if not stream.closed:  # main closes stderr when its output pipe broke
                    stream.flush()
    return subprocess.CompletedProcess(["langgraph-s3", *args], returncode, out, err)


def run_cli_process(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``langgraph-s3 ARGS`` as a shell runs it: ``python -m langgraph_s3_checkpoint.cli`` in a process of its own,
    stdin empty. Only for what :func:`run_cli` cannot show (the exit status reaching the shell, a terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "langgraph_s3_checkpoint.cli", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


class _Pipe(io.BytesIO):
    """The reading end of a captured stream: what was written stays readable after the writer closed it."""

    written = b""

    def close(self) -> None:
        if not self.closed:
            self.written = self.getvalue()
        super().close()

    def data(self) -> bytes:
        return self.written if self.closed else self.getvalue()

    def text(self) -> str:
        """What a ``text=True`` subprocess reads: decoded, newlines made universal."""
        return self.data().decode().replace("\r\n", "\n").replace("\r", "\n")


PROCESS_WARNING_FILTERS: tuple[tuple[Literal["default", "ignore"], type[Warning], str], ...] = (
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, ""),
    ("ignore", PendingDeprecationWarning, ""),
    ("ignore", ImportWarning, ""),
    ("ignore", ResourceWarning, ""),
)
"""``warnings.filters`` of a fresh ``python -m`` process (no ``-W``, no ``PYTHONWARNINGS``)."""

NOT_THE_CLIS_LOGGERS = ("moto", "werkzeug")
"""Loggers of the S3 server some tests run in this process (moto): its records are not the CLI's output."""


@contextlib.contextmanager
def _as_a_process_of_its_own(env: dict[str, str], stdin: bytes, stdout: IO[str], stderr: IO[str]) -> Iterator[None]:
    """What a CLI process starts with, for the time of one call, and this process's own afterwards (also on error):
    the environment; stdin, stdout and stderr; no conditional-write verdicts and no warnings given "once per process"
    yet (so each call probes and warns as a process would, whatever this process did before); Python's default
    warning filters with warnings printed on stderr; and ``logging.lastResort``: a record at WARNING or above that
    no handler below the root takes (the CLI configures no logging) printed on stderr as its message."""
    from langgraph_s3_checkpoint._transport import bucket_io, probe

    def show_warning(
        message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
    ) -> None:
        stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    last_resort = _LastResort(stderr)
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, env, clear=True))
        stack.enter_context(
            mock.patch.multiple(
                sys, stdin=io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"), stdout=stdout, stderr=stderr
            )
        )
        stack.enter_context(mock.patch.object(probe, "_VERDICTS", {}))
        stack.enter_context(mock.patch.object(bucket_io, "_WARNED", set()))
        stack.enter_context(warnings.catch_warnings())
        warnings.resetwarnings()
        for action, category, module in PROCESS_WARNING_FILTERS:
            warnings.filterwarnings(action, category=category, module=module, append=True)
        warnings.showwarning = show_warning
        logging.root.addHandler(last_resort)
        stack.callback(logging.root.removeHandler, last_resort)
        yield


class _LastResort(logging.Handler):
    """``logging.lastResort`` of a process that configured no logging, writing on ``stream``."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(logging.WARNING)
        self.stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.split(".")[0] in NOT_THE_CLIS_LOGGERS:
            return
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None and logger is not logging.root:
            if logger.handlers:
                return  # a library's own handler (botocore's NullHandler ...) takes it: lastResort is not asked
            logger = logger.parent
        self.stream.write(self.format(record) + "\n")


def _exit_status(code: object, stderr: IO[str]) -> int:
    """The status Python exits with on ``SystemExit(code)``: ``None`` is 0, an int itself, anything else is printed
    on stderr and is 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=stderr)
    return 1


def run_python_file(code: str, server: Any, path: Path) -> subprocess.CompletedProcess[str]:
    """``code`` written to ``path`` and run there as a user runs a script (``python FILE`` in its folder), with the
    local server's address and credentials as the only AWS settings."""
    path.write_text(code, encoding="utf-8")
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LANGGRAPH_"))}
    environ.update(
        AWS_ENDPOINT_URL=server.endpoint_url,
        AWS_ACCESS_KEY_ID=server.access_key,
        AWS_SECRET_ACCESS_KEY=server.secret_key,
        AWS_DEFAULT_REGION=server.region,
    )
    return subprocess.run(
        [sys.executable, path.name], cwd=path.parent, env=environ, capture_output=True, text=True, timeout=180
    )


def cli_env(server: Any, url: str) -> dict[str, str]:
    """The environment of a CLI run on ``url`` with a local server's credentials, and no other AWS settings."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LANGGRAPH_S3_"))}
    environ.update(AWS_ACCESS_KEY_ID=server.access_key, AWS_SECRET_ACCESS_KEY=server.secret_key, LANGGRAPH_S3_URL=url)
    return environ


def assert_one_error_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    """A CLI failure exits with ``code`` and says one ``error:`` line, without a traceback; returns the line."""
    assert done.returncode == code, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "error: " in lines[0], done.stderr
    return lines[0]


# -- a small conversation graph ------------------------------------------------------------------------------------
class Chat(TypedDict):
    turns: Annotated[list[str], operator.add]


def chat_graph(saver: Any) -> Any:
    """One node that replies to each user turn."""
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(Chat)
    builder.add_node("reply", lambda state: {"turns": [f"reply {len(state['turns'])}"]})
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


def chat(saver: Any, thread_id: str, turns: int) -> Any:
    """``turns`` turns of :func:`chat_graph` on a thread (three checkpoints each); returns the graph."""
    graph = chat_graph(saver)
    for i in range(turns):
        graph.invoke({"turns": [f"user {i}"]}, cfg(thread_id))
    return graph


def root_head_key(saver: S3Saver, thread_id: str) -> str:
    """The key of the head of a thread's root namespace."""
    return saver.plans.layout.head(thread_id, "")
