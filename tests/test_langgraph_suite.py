"""LangGraph's own test suites as a gate: every test of the sdist of the installed langgraph (and of
langgraph-prebuilt) that passes with InMemorySaver must pass with S3Saver (sync tests) and AsyncS3Saver (async
tests) on SeaweedFS, and every one that takes LangGraph's node cache fixture and passes with InMemoryCache must
pass with S3Cache.

Runs ``tests/langgraph_suite/run.py`` in-process (pytest itself runs in a subprocess, from the
extracted sdist in ``.langgraph-tests/<version>/``). Never skips: if the sdist cannot be fetched, if
pytest exits with anything but 0 or 1 (5: nothing collected), or if no memory / S3 test ran, this
fails. See docs/testing.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "langgraph_suite"))

from fetch import ensure_tests
from run import DEFAULT_WORKERS, SuiteResult, TestResult, cache_test_files, compare, run_suite

WORKERS = {"langgraph": DEFAULT_WORKERS, "langgraph-prebuilt": 0}
"""xdist workers per sdist: langgraph-prebuilt's ~50 tests take less time than starting two workers (8 s of CPU in
one process, 14 s with two, on a quiet machine)."""


@pytest.mark.parametrize("package", list(WORKERS))
def test_s3_savers_pass_every_langgraph_test_that_memory_passes(package: str) -> None:
    """``langgraph-prebuilt`` (``create_react_agent``, ``ToolNode``) ships the same checkpointer fixtures."""
    result = run_suite(package=package, workers=WORKERS[package])
    assert not result.problems, result.render()
    assert result.tests, "no LangGraph test ran"
    assert not result.regressions, result.render()


def test_s3_cache_passes_langgraphs_node_cache_tests_on_moto() -> None:
    """The node cache tests alone (they are few) on the other server: moto's dates and replies, not SeaweedFS's."""
    files = cache_test_files(ensure_tests())
    assert files, "no LangGraph test module takes the cache fixture"
    result = run_suite(
        workers=0, pytest_args=["--lgs3-server=moto", "--lgs3-cache-tests", *files], tag="moto-cache-", baselines="all"
    )
    assert not result.problems, result.render()
    ran = {cache for t in result.tests if t.outcome == "passed" for cache in [t.cache]}
    assert {"memory", "s3_cache"} <= ran, result.render()
    assert not result.regressions, result.render()


def test_a_memory_twin_not_run_is_judged_by_its_s3_test() -> None:
    """The gate's first run lists the memory twins without running them (run.py's doc): a twin whose S3 test passed
    decides nothing, one whose S3 test failed makes that test undecided (the twin runs beside it afterwards), and one
    with no S3 test at all is a regression, as when every twin ran."""

    def result(nodeid: str, saver: str, outcome: str, key: str = "") -> TestResult:
        return TestResult(nodeid, key or nodeid, saver, "sync", outcome)

    suite = SuiteResult(
        "1.0",
        Path("."),
        [],
        1,
        0.0,
        [
            result("t[memory]", "memory", "not run"),
            result("t[s3]", "s3", "passed", key="t[memory]"),
            result("u[memory]", "memory", "not run"),
            result("u[s3]", "s3", "failed", key="u[memory]"),
            result("v[memory]", "memory", "not run"),
        ],
    )
    compare(suite, ["memory", "s3"], complete=False)
    assert [(t.nodeid, t.baseline) for t in suite.undecided] == [("u[s3]", "u[memory]")]
    assert [(t.nodeid, t.outcome) for t in suite.regressions] == [("v[memory]", "missing")]
    assert suite.baseline_failures == []
