"""LangGraph's own InMemoryStore tests, run against S3Store and AsyncS3Store on every selected server.

The ``tests/test_store.py`` of the sdist of the installed ``langgraph-checkpoint`` is fetched (see
``tests/langgraph_suite/fetch.py``; a fetch failure fails collection, it never skips) and loaded as a
module without editing it. Every test of it that builds an ``InMemoryStore`` is collected here, and
an autouse fixture rebinds that module's ``InMemoryStore`` name to a subclass of ``S3Store`` or
``AsyncS3Store`` bound to the server's bucket (a fresh prefix per store), so ``InMemoryStore()`` and
``InMemoryStore(index=...)`` build our store and ``mocker.spy(InMemoryStore, "batch")`` spies on it.

A few async tests call blocking methods on the event loop's thread (``store.put`` inside an ``async
def``, or the upstream ``MockAsyncBatchedStore`` whose ``abatch`` calls ``batch``). Both stores allow
that, as InMemoryStore does (their blocking methods drive their own I/O and never wait on the loop),
so every collected test runs, with no expected failures, against both classes.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "langgraph_suite"))

from fetch import ensure_tests
from upstream import bound_to_bucket, load_test_module

from langgraph_s3_checkpoint import AsyncS3Store, S3Store
from langgraph_s3_checkpoint.local import LocalS3Server

ROOT = ensure_tests(package="langgraph-checkpoint", required="test_store.py")


upstream = load_test_module(ROOT, "test_store.py", "langgraph_checkpoint_sdist_test_store")

UPSTREAM_TESTS = {
    name: fn
    for name, fn in vars(upstream).items()
    if name.startswith("test_")
    and inspect.isfunction(fn)
    and any(word in inspect.getsource(fn) for word in ("InMemoryStore", "MockAsyncBatchedStore"))
}
globals().update(UPSTREAM_TESTS)
fake_embeddings = upstream.fake_embeddings


@pytest.fixture(autouse=True, params=["S3Store", "AsyncS3Store"])
def _store_class(
    request: pytest.FixtureRequest, s3_server: LocalS3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[type[Any]]:
    base: type[Any] = S3Store if request.param == "S3Store" else AsyncS3Store
    name = f"{base.__name__}On{s3_server.kind}"
    with bound_to_bucket(base, client=s3_server.client(), bucket=bucket, prefix="t", name=name) as bound:
        monkeypatch.setattr(upstream, "InMemoryStore", bound)
        yield bound


def test_upstream_suite_was_collected() -> None:
    """Guard against a vacuous run: the sdist's store tests are here."""
    assert len(UPSTREAM_TESTS) >= 20, sorted(UPSTREAM_TESTS)
    assert "test_search_pages_match_full_listing" in UPSTREAM_TESTS
