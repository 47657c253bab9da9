"""What the worker scripts share: a saver opened from the environment, kill switches, the test graphs.

The parent test passes the server and key prefix through ``LGS3_*`` environment variables (see
:func:`worker_env`) and reads a worker's outcome from the last stdout line starting with ``RESULT ``.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import operator
import os
import random
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from langgraph_s3_checkpoint import S3Saver, make_client

WORKERS_DIR = Path(__file__).resolve().parent
RESULT_PREFIX = "RESULT "


# -- the parent side ----------------------------------------------------------------------------
# A worker is a fork of a fork server that imported the heavy modules once per test process: a fresh
# interpreter spends 1.5-2 s importing them for ~0.3 s of work. The fork server only imports (no client,
# thread or event loop exists there to be copied into a fork), and each worker is forked from it, never
# from another worker or from the test process (which has threads: a fork of it would be unsafe). What a module
# reads from the environment while it is imported (langsmith caches two LANGSMITH_ variables) comes from the
# test process's environment when the fork server started; a worker's env adds only LGS3_*, read at run time.
_FORK_SERVER = multiprocessing.get_context("forkserver")
# What the workers import, and what creating an S3 client imports (boto3.s3.inject).
_FORK_SERVER.set_forkserver_preload(["boto3", "boto3.s3.inject", "langgraph.graph", "langgraph_s3_checkpoint"])


def worker_env(server: Any, bucket: str, prefix: str, **extra: str) -> dict[str, str]:
    """Environment for a worker: where the bucket is and how to sign in."""
    env = dict(os.environ)
    env.update(
        LGS3_ENDPOINT=server.endpoint_url,
        LGS3_ACCESS_KEY=server.access_key,
        LGS3_SECRET_KEY=server.secret_key,
        LGS3_REGION=server.region,
        LGS3_BUCKET=bucket,
        LGS3_PREFIX=prefix,
        **extra,
    )
    return env


@dataclass
class Worker:
    """A running worker script; its stdout and stderr go to files in ``output``."""

    args: list[str]
    """The script and its arguments."""
    process: BaseProcess
    output: tempfile.TemporaryDirectory[str]

    def poll(self) -> int | None:
        """The exit code if the worker has ended (minus the signal number if a signal ended it), else None."""
        return self.process.exitcode


def spawn(script: str, args: Sequence[str], env: dict[str, str]) -> Worker:
    """Start ``python tests/workers/SCRIPT ARGS...`` with environment ``env`` (forked from the fork server)."""
    output = tempfile.TemporaryDirectory(prefix="lgs3-worker-")
    for name in ("stdout", "stderr"):
        Path(output.name, name).touch()  # there to read even if the worker dies before it opens them
    path = str(WORKERS_DIR / script)
    process = _FORK_SERVER.Process(
        target=_run_script,
        args=(path, list(args), env, output.name),
        name=script,
        daemon=True,  # a test process that ends stops its workers instead of waiting for them
    )
    process.start()
    return Worker([path, *args], process, output)


def finish(worker: Worker, timeout: float = 180) -> tuple[int, dict[str, Any] | None, str]:
    """Wait for a worker: its return code, its RESULT (if it printed one) and its stderr.

    A worker still running after ``timeout`` seconds is killed, and ``subprocess.TimeoutExpired`` raised.
    """
    process = worker.process
    process.join(timeout)
    timed_out = process.exitcode is None
    if timed_out:
        process.kill()
        process.join()
    code = process.exitcode
    assert code is not None
    process.close()
    with worker.output as directory:
        out = Path(directory, "stdout").read_text(errors="replace")
        err = Path(directory, "stderr").read_text(errors="replace")
    if timed_out:
        raise subprocess.TimeoutExpired(worker.args, timeout, output=out, stderr=err)
    result = None
    for line in out.splitlines():
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX) :])
    return code, result, err


def run(script: str, args: Sequence[str], env: dict[str, str], timeout: float = 180) -> dict[str, Any]:
    """Run a worker that must succeed and return its RESULT."""
    code, result, err = finish(spawn(script, args, env), timeout)
    if code != 0 or result is None:
        raise AssertionError(f"worker {script} {list(args)} exited {code}:\n{err[-4000:]}")
    return result


def _run_script(path: str, args: list[str], env: dict[str, str], output: str) -> None:
    """In the forked worker: what ``python -u PATH ARGS...`` with environment ``env`` would do."""
    os.environ.clear()
    os.environ.update(env)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        file = os.open(Path(output, name), os.O_WRONLY)
        os.dup2(file, fd)
        os.close(file)
    # Unbuffered, as with -u: what a worker printed before it killed itself is in the file.
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), errors="backslashreplace", write_through=True)
    sys.argv = [path, *args]
    sys.path.insert(0, str(Path(path).parent))  # as for a script: its own directory first (`from common import`)
    runpy.run_path(path, run_name="__main__")  # SystemExit and exceptions: multiprocessing exits as Python does


# -- the worker side ----------------------------------------------------------------------------
def client_from_env() -> Any:
    return make_client(
        endpoint_url=os.environ["LGS3_ENDPOINT"],
        region_name=os.environ["LGS3_REGION"],
        aws_access_key_id=os.environ["LGS3_ACCESS_KEY"],
        aws_secret_access_key=os.environ["LGS3_SECRET_KEY"],
    )


def saver_from_env(client: Any = None, **kwargs: Any) -> S3Saver:
    return S3Saver(
        bucket=os.environ["LGS3_BUCKET"],
        prefix=os.environ["LGS3_PREFIX"],
        client=client if client is not None else client_from_env(),
        **kwargs,
    )


def report(result: dict[str, Any]) -> None:
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def barrier(directory: str | None, name: str, timeout: float = 120) -> None:
    """Announce readiness as ``directory/name.ready`` and wait for the parent's ``directory/go``."""
    if not directory:
        return
    Path(directory, f"{name}.ready").touch()
    go = Path(directory, "go")
    deadline = time.monotonic() + timeout
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{name}: nobody said go")
        time.sleep(0.005)


def release(directory: Path, count: int, procs: Sequence[Worker], timeout: float = 120) -> None:
    """Parent side of :func:`barrier`: wait until ``count`` workers are ready, then let them go."""
    deadline = time.monotonic() + timeout
    while len(list(directory.glob("*.ready"))) < count:
        dead = [p.args for p in procs if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            raise AssertionError(f"workers did not get ready (exited: {dead})")
        time.sleep(0.01)
    (directory / "go").touch()


def kill_at_request(client: Any, n: int, operation: str = "") -> Callable[[], int]:
    """SIGKILL this process just before the client sends its ``n``-th HTTP request (``n <= 0``: never).

    With ``operation`` (e.g. ``"DeleteObjects"``) only requests of that operation are counted.
    Returns a function giving the number of counted requests sent so far.
    """
    lock = threading.Lock()
    sent = 0

    def before_send(**_: Any) -> None:
        nonlocal sent
        with lock:
            sent += 1
            if sent == n:
                os.kill(os.getpid(), signal.SIGKILL)

    event = f"before-send.s3.{operation}" if operation else "before-send.s3"
    client.meta.events.register(event, before_send, unique_id="lgs3-kill-at-request")

    def count() -> int:
        with lock:
            return sent

    return count


# -- the fencing graph: every successful run appends its input marker to `steps` ----------------------
class FenceState(TypedDict, total=False):
    pending: str
    steps: Annotated[list[str], operator.add]


def fence_graph(saver: Any, *, jitter: float = 0.0, on_step: Callable[[], None] | None = None) -> Any:
    def step(state: FenceState) -> FenceState:
        if on_step is not None:
            on_step()
        if jitter:
            time.sleep(random.uniform(0, jitter))
        return {"steps": [state["pending"]]}

    builder = StateGraph(FenceState)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=saver)


# -- the crash graph: rounds of fan-out to three parallel nodes, with a blob-sized channel ----------
BIG = 6000
"""Characters of the `big` channel: above the default inline threshold, so it is stored as a blob."""


CRASH_INLINE = 32
"""inline_threshold of the crash graph's savers: its ``log`` of markers is a large list from about its sixth marker,
so that kills land among bases written, extended and written anew (codec.Appended) on a real server."""
CRASH_TAIL = 40
"""appended_tail_bytes of the crash graph's savers: about six markers appended, then a new base."""


def crash_saver(saver: S3Saver) -> S3Saver:
    """``saver`` with the crash graph's thresholds (:data:`CRASH_INLINE`, :data:`CRASH_TAIL`)."""
    saver.plans.inline_threshold = CRASH_INLINE
    saver.plans.appended_tail_bytes = CRASH_TAIL
    return saver


class CrashState(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    round: int
    big: str


def crash_input() -> CrashState:
    return {"log": [], "round": 0, "big": ""}


def crash_graph(saver: Any, *, rounds: int, execlog: Path | None, join_barrier: bool = False) -> Any:
    """fan -> (a | b | c) -> join, ``rounds`` times. Each node execution appends a line to ``execlog``.

    ``join_barrier=True`` joins with ``add_edge([a, b, c], join)`` (a NamedBarrierValue channel).
    """

    def executed(marker: str) -> None:
        if execlog is not None:
            # O_APPEND writes of one short line are atomic, and the page cache survives SIGKILL.
            with open(execlog, "a") as f:
                f.write(marker + "\n")

    def node(name: str) -> Callable[..., CrashState]:
        def run(state: CrashState) -> CrashState:
            marker = f"{name}:{state['round']}"
            executed(marker)
            update: CrashState = {"log": [marker]}
            if name == "a":
                update["big"] = f"{state['round']}" * BIG
            if name == "join":
                update["round"] = state["round"] + 1
            return update

        return run

    builder = StateGraph(CrashState)
    for name in ("fan", "a", "b", "c", "join"):
        builder.add_node(name, node(name))
    builder.add_edge(START, "fan")
    for name in ("a", "b", "c"):
        builder.add_edge("fan", name)
    if join_barrier:
        builder.add_edge(["a", "b", "c"], "join")
    else:
        # Plain edges by default: LangGraph's join barrier hands the saver a set it keeps mutating
        # (test_crash.py::test_async_durability_stores_each_steps_own_barrier).
        for name in ("a", "b", "c"):
            builder.add_edge(name, "join")
    builder.add_conditional_edges("join", lambda s: "fan" if s["round"] < rounds else END, ["fan", END])
    return builder.compile(checkpointer=saver)


def crash_markers(rounds: int) -> list[str]:
    """Every node execution of one complete run, one marker each."""
    return [f"{n}:{r}" for r in range(rounds) for n in ("fan", "a", "b", "c", "join")]


def drive(graph: Any, config: RunnableConfig, first_input: Any, durability: str) -> Any:
    """Start the thread, or continue it from its latest checkpoint if it has one."""
    state = graph.get_state(config)
    start = first_input if state.created_at is None else None
    return graph.invoke(start, config, durability=durability)


# -- a graph with a subgraph, several runs and blobs, for the delete/copy/prune crash tests --------
class OpsState(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    big: str


def ops_graph(saver: Any) -> Any:
    def inner(state: OpsState) -> OpsState:
        return {"log": [f"inner:{len(state['log'])}"], "big": str(len(state["log"])) * BIG}

    sub = StateGraph(OpsState)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")
    sub.add_edge("inner", END)

    def outer(state: OpsState) -> OpsState:
        return {"log": [f"outer:{len(state['log'])}"]}

    builder = StateGraph(OpsState)
    builder.add_node("outer", outer)
    builder.add_node("sub", sub.compile())
    builder.add_edge(START, "outer")
    builder.add_edge("outer", "sub")
    builder.add_edge("sub", END)
    return builder.compile(checkpointer=saver)
