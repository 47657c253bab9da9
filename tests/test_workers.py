"""The worker processes of the process tests (tests/workers/common.py): each one is forked from a fork server that
preloaded the heavy imports, and must behave as ``python tests/workers/SCRIPT ARGS`` did: its own environment,
arguments and module state, its exit code (-9 when SIGKILLed), its output, and no threads, clients or event loops
carried over from the fork server. No S3 server: the probe only looks at itself."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest
from workers.common import WORKERS_DIR, finish, release, run, spawn

import langgraph_s3_checkpoint
from langgraph_s3_checkpoint._protocol import plans

pytestmark = pytest.mark.memory
"""No S3 server: every test of this module runs in memory (``pytest -m memory``)."""

PROBE = "probe_worker.py"


def test_a_worker_starts_as_fresh_as_a_new_interpreter() -> None:
    env = {key: value for key, value in os.environ.items() if key != "PATH"} | {"LGS3_PROBE": "given"}
    # A thread in the test process, as the moto server is: a fork of this process would copy a process with two.
    stop = threading.Event()
    busy = threading.Thread(target=stop.wait)
    busy.start()
    try:
        first = run(PROBE, ["report", "an argument"], env)
    finally:
        stop.set()
        busy.join()
    assert first["argv"] == [str(WORKERS_DIR / PROBE), "report", "an argument"]
    assert first["path0"] == str(WORKERS_DIR)
    assert first["env"] == env, "the environment is the one given, not the test process's"
    assert os.getpid() not in (first["pid"], first["ppid"]), "forked from the fork server, not the test process"
    assert first["package"] == langgraph_s3_checkpoint.__file__, "the package the tests import"
    # The fork server only imported: nothing ran there that a fork would copy half-way.
    assert first["fork_server_threads"] == 1
    assert first["threads"] == 1
    assert not first["boto3_default_session"] and not first["deadline_watchdog"]
    # The first worker changed DELETE_BATCH; the next is forked from the server, not from the first.
    second = run(PROBE, ["report"], env)
    assert first["delete_batch"] == second["delete_batch"] == plans.DELETE_BATCH
    assert second["pid"] != first["pid"]


def test_a_worker_ends_as_a_python_process_would() -> None:
    env = dict(os.environ)
    code, result, err = finish(spawn(PROBE, ["report"], env))
    assert (code, err) == (0, "to stderr\n") and result is not None
    assert finish(spawn(PROBE, ["exit", "3"], env))[0] == 3
    assert finish(spawn(PROBE, ["say", "a message"], env)) == (1, None, "a message\n")
    code, _, err = finish(spawn(PROBE, ["fail"], env))
    assert code == 1 and "RuntimeError: the probe failed on purpose" in err
    killed = spawn(PROBE, ["kill"], env)
    # Its output is unbuffered (as with `python -u`): what it wrote before SIGKILL is there.
    assert finish(killed)[:2] == (-signal.SIGKILL, {"last words": "written"})
    assert killed.output.name and not Path(killed.output.name).exists(), "finish removes the output files"


def test_a_worker_that_outlives_its_timeout_is_killed() -> None:
    worker = spawn(PROBE, ["sleep"], dict(os.environ))
    pid = worker.process.pid
    assert pid is not None
    with pytest.raises(subprocess.TimeoutExpired):
        finish(worker, timeout=1)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped


def test_release_notices_a_worker_that_died_before_it_got_ready(tmp_path: Path) -> None:
    worker = spawn(PROBE, ["exit", "0"], dict(os.environ))
    with pytest.raises(AssertionError, match="did not get ready"):
        release(tmp_path, 1, [worker], timeout=60)
    finish(worker)
