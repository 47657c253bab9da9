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

import importlib.util
import inspect
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "langgraph_suite"))

from fetch import ensure_tests

from langgraph_s3_checkpoint import AsyncS3Store, S3Store
from langgraph_s3_checkpoint.local import LocalS3Server

ROOT = ensure_tests(package="langgraph-checkpoint", required="test_store.py")


def _load_upstream() -> types.ModuleType:
    """Import the sdist's ``tests/test_store.py`` (it imports ``tests.embed_test_utils``) under its own name."""
    saved = {name: sys.modules.get(name) for name in ("tests", "tests.embed_test_utils")}
    package = types.ModuleType("tests")
    package.__path__ = [str(ROOT / "tests")]
    sys.modules["tests"] = package
    sys.modules.pop("tests.embed_test_utils", None)
    try:
        name = "langgraph_checkpoint_sdist_test_store"
        spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "test_store.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        for key, value in saved.items():
            if value is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = value


upstream = _load_upstream()

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
    client = s3_server.client()
    opened: list[Any] = []

    class Bound(base):  # type: ignore[misc, valid-type]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(bucket=bucket, prefix=f"t/{uuid4().hex[:12]}", client=client, **kwargs)
            opened.append(self)

    Bound.__name__ = Bound.__qualname__ = f"{base.__name__}On{s3_server.kind}"
    monkeypatch.setattr(upstream, "InMemoryStore", Bound)
    yield Bound
    for store in opened:
        store.close()


def test_upstream_suite_was_collected() -> None:
    """Guard against a vacuous run: the sdist's store tests are here."""
    assert len(UPSTREAM_TESTS) >= 20, sorted(UPSTREAM_TESTS)
    assert "test_search_pages_match_full_listing" in UPSTREAM_TESTS
