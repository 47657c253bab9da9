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
from run import cache_test_files, run_suite


@pytest.mark.parametrize("package", ["langgraph", "langgraph-prebuilt"])
def test_s3_savers_pass_every_langgraph_test_that_memory_passes(package: str) -> None:
    """``langgraph-prebuilt`` (``create_react_agent``, ``ToolNode``) ships the same checkpointer fixtures."""
    result = run_suite(package=package)
    assert not result.problems, result.render()
    assert result.tests, "no LangGraph test ran"
    assert not result.regressions, result.render()


def test_s3_cache_passes_langgraphs_node_cache_tests_on_moto() -> None:
    """The node cache tests alone (they are few) on the other server: moto's dates and replies, not SeaweedFS's."""
    files = cache_test_files(ensure_tests())
    assert files, "no LangGraph test module takes the cache fixture"
    result = run_suite(workers=0, pytest_args=["--lgs3-server=moto", "--lgs3-cache-tests", *files], tag="moto-cache-")
    assert not result.problems, result.render()
    ran = {cache for t in result.tests if t.outcome == "passed" for cache in [t.cache]}
    assert {"memory", "s3_cache"} <= ran, result.render()
    assert not result.regressions, result.render()
