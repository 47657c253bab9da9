"""Shared fixtures: real local S3 servers (SeaweedFS and moto), a bucket, key prefixes, counters.

Servers are started once per session and stopped at its end.  ``S3_SERVERS=seaweedfs`` (a comma
list) restricts the run to those kinds.  Hung S3 requests fail through the client timeouts set by
``LocalS3Server.client()`` (connect 5 s, read 30 s, 3 attempts) rather than a pytest timeout.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any
from uuid import uuid4

import pytest
from helpers import RequestCounter, selected_server_kinds

from langgraph_s3_checkpoint import S3Saver, local

BUCKET = "lgs3-test"
SERVER_KINDS = selected_server_kinds()


LONGEST_FIRST = (
    "test_s3_savers_pass_every_langgraph_test_that_memory_passes",
    "test_eight_processes_hammering_one_thread_keep_history_linear",
    "test_random_operations_through_two_savers_read_as_in_memory_saver",
    "test_notebook_runs_without_errors",
    "test_the_scale_benchmark_measures_every_operation_at_toy_sizes",
    "test_sigkill_between_any_two_requests_then_resume",
    "test_s3_cache_passes_langgraphs_node_cache_tests_on_moto",
    "test_hundred_graph_runs_at_ten_percent_faults_match_fault_free_runs",
    "test_differential_live",
    "test_verify_reports_what_repair_would_fix",
    "test_differential_memory_bucket",
    "test_store_commands_roundtrip_with_the_api",
    "test_demo_crashes_and_resumes",
    "test_gc_costs_the_threads_and_what_changed_not_the_history",
    "test_two_puts_and_a_delete_of_one_key_in_every_order_of_their_round_trips",
    "test_rollback_writes_interleavings",
    "test_a_sweep_costs_what_came_due_not_what_is_stored",
    "test_a_checkpoint_and_its_writes_stored_at_once_both_survive",
    "test_sigkill_inside_maintenance_operations",
    "test_every_interleaving_of_two_parties",
    "test_interleavings",
)
"""Test functions that take 10 s to a few minutes each (``--durations`` of a full run), longest first.

They run first: xdist hands out tests in collection order, so a long test collected late keeps one worker busy
after the others have run out of work; with ``--dist worksteal`` (pyproject's addopts) a worker that is done takes
half of what another still holds. Only the order changes: a name missing here merely runs in its usual place."""


def pytest_configure(config: pytest.Config) -> None:
    """Bytecode caches on, even where the machine turns them off (``PYTHONDONTWRITEBYTECODE``, as on the CI
    machine): otherwise every process the suite starts (xdist workers, LangGraph's suite and its workers, notebook
    kernels, CLI and worker subprocesses) compiles this package, the test modules and LangGraph's test files again.
    Collecting the suite took 7.5 s of CPU per process without them and 2.8 s with them (2026-12-04). Set here,
    before xdist starts its workers, so that they and every subprocess inherit it; the caches go to
    ``__pycache__`` folders, which git ignores."""
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the tests of ``LONGEST_FIRST`` to the front, in its order (a stable sort keeps the rest in place); refuse
    a test marked ``memory`` that takes a server fixture."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    last = len(rank)
    items.sort(key=lambda item: rank.get(getattr(item, "originalname", item.name), last))
    served = [item.nodeid for item in items if _in_memory(item) and "_server_pool" in getattr(item, "fixturenames", ())]
    if served:
        raise pytest.UsageError(f"marked memory, yet they take a server fixture: {served}")


def _in_memory(item: pytest.Item | None) -> bool:
    """Whether a test is marked ``memory``: it needs no S3 server (pyproject's markers)."""
    return item is not None and item.get_closest_marker("memory") is not None


_RUNNING: list[pytest.Item] = []
"""The test this process is running (for :class:`_ServerPool` to refuse a server to a ``memory`` test)."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _RUNNING.append(item)
    try:
        return (yield)
    finally:
        _RUNNING.remove(item)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (pyproject's addopts): one worker more than the cores this process may use, at most
    ``--maxprocesses``. A worker waits on sockets, timeouts and child processes for about a fifth of its time,
    which a third worker fills on two cores: the whole suite took 11:16 there with three workers, 15:09 with two
    and 11:43 with four (2026-12-03)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores + 1


class _ServerPool:
    """Starts each server kind at most once per session, on first use."""

    def __init__(self) -> None:
        self._servers: dict[str, local.LocalS3Server] = {}
        self._lock = threading.Lock()

    def get(self, kind: str) -> local.LocalS3Server:
        if _RUNNING and _in_memory(_RUNNING[-1]):
            pytest.fail(f"{_RUNNING[-1].nodeid} is marked memory, yet it asks for the {kind} server")
        with self._lock:
            if kind not in self._servers:
                self._servers[kind] = local.start(kind)
            return self._servers[kind]

    def stop_all(self) -> None:
        with self._lock:
            servers = list(self._servers.values())
            self._servers.clear()
        for server in servers:
            server.stop()


@pytest.fixture(scope="session")
def _server_pool() -> Iterator[_ServerPool]:
    pool = _ServerPool()
    try:
        yield pool
    finally:
        pool.stop_all()


@pytest.fixture(scope="session", params=SERVER_KINDS, ids=SERVER_KINDS)
def s3_server(request: pytest.FixtureRequest, _server_pool: _ServerPool) -> local.LocalS3Server:
    """Each selected server kind in turn (tests using it run once per kind)."""
    kind: str = request.param
    return _server_pool.get(kind)


@pytest.fixture(scope="session")
def seaweedfs_server(_server_pool: _ServerPool) -> local.LocalS3Server:
    """The SeaweedFS server only (the same instance ``s3_server`` uses for that kind)."""
    if "seaweedfs" not in SERVER_KINDS:
        pytest.skip("seaweedfs not selected by S3_SERVERS")
    return _server_pool.get("seaweedfs")


@pytest.fixture(scope="session")
def bucket(s3_server: local.LocalS3Server) -> str:
    """One bucket per server per session; tests isolate themselves with ``prefix``.

    The conditional-write probe runs here, once per server: a saver probes before the first write of the process
    to an endpoint and bucket, and tests that count requests or stop a plan at a request must not meet it."""
    s3_server.create_bucket(BUCKET)
    with S3Saver(bucket=BUCKET, prefix="probed-by-conftest", client=s3_server.client()) as saver:
        saver.setup()
    return BUCKET


@pytest.fixture
def s3_client(s3_server: local.LocalS3Server) -> Any:
    return s3_server.client()


@pytest.fixture
def make_saver(s3_server: local.LocalS3Server, bucket: str, prefix: str) -> Iterator[Callable[[], S3Saver]]:
    """``make_saver()`` opens another saver (another process, with its own memory) on the same bucket and prefix;
    every saver made is closed at the end of the test."""
    savers: list[S3Saver] = []

    def make() -> S3Saver:
        saver = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
        savers.append(saver)
        return saver

    try:
        yield make
    finally:
        for saver in savers:
            saver.close()


@pytest.fixture
def weed(seaweedfs_server: local.LocalS3Server, prefix: str) -> Iterator[tuple[local.LocalS3Server, S3Saver]]:
    """SeaweedFS with the suite's bucket, and a saver on this test's prefix (for tests whose child processes the
    test gives the server's address)."""
    seaweedfs_server.create_bucket(BUCKET)
    saver = S3Saver(bucket=BUCKET, prefix=prefix, client=seaweedfs_server.client())
    yield seaweedfs_server, saver
    saver.close()


@pytest.fixture
def prefix() -> str:
    """A key prefix unique to this test."""
    return f"t/{uuid4().hex[:12]}"


@pytest.fixture
def count_requests() -> Iterator[Callable[[Any], RequestCounter]]:
    """Return ``attach(client) -> RequestCounter``; counters are detached after the test."""
    counters: list[RequestCounter] = []

    def attach(client: Any) -> RequestCounter:
        counter = RequestCounter(client)
        counters.append(counter)
        return counter

    yield attach
    for counter in counters:
        counter.detach()
