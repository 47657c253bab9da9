"""LangGraph's node cache tests that build their cache themselves, run against S3Cache on every selected server.

The tests taking LangGraph's ``cache`` fixture run in the gate (``tests/test_langgraph_suite.py``, the ``s3_cache``
param). ``tests/test_delta_channel_node_cache.py`` of the sdist of the installed ``langgraph`` builds
``InMemoryCache()`` and a subclass of it instead, so it is loaded here, unedited, while the name
``langgraph.cache.memory.InMemoryCache`` is a subclass of :class:`S3Cache` bound to the current test's server and
bucket (a fresh prefix per cache): its ``_CountsSets`` then counts the sets of an S3Cache (``aset`` too, which an
async graph calls and InMemoryCache implements by calling ``set``), and ``InMemoryCache()`` makes one. A fetch
failure fails collection; it never skips.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import langgraph.cache.memory
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "langgraph_suite"))

from fetch import ensure_tests
from upstream import load_test_module

from langgraph_s3_checkpoint import S3Cache
from langgraph_s3_checkpoint.local import LocalS3Server

_bound: dict[str, Any] = {}
"""Where caches made by the upstream module live while a test runs (set by ``_on_the_test_bucket``)."""


class InMemoryCacheOnS3(S3Cache[Any]):
    """What the upstream module gets for ``InMemoryCache``: an S3Cache on the running test's bucket."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            bucket=_bound["bucket"], prefix=f"{_bound['prefix']}/{uuid4().hex[:12]}", client=_bound["client"], **kwargs
        )
        _bound["opened"].append(self)


def _load_on_s3(filename: str) -> Any:
    real = langgraph.cache.memory.InMemoryCache
    langgraph.cache.memory.InMemoryCache = InMemoryCacheOnS3  # type: ignore[misc, assignment]
    try:
        return load_test_module(ensure_tests(), filename, f"langgraph_sdist_{filename.removesuffix('.py')}")
    finally:
        langgraph.cache.memory.InMemoryCache = real  # type: ignore[misc]


upstream = _load_on_s3("test_delta_channel_node_cache.py")


async def _counted_aset(self: Any, pairs: Any) -> None:
    """``_CountsSets`` counts ``set`` calls, which InMemoryCache's ``aset`` makes (it is ``set``); S3Cache's ``aset``
    writes on its own, asynchronously, so an async graph's writes are counted here, where they happen."""
    self.sets += 1
    await S3Cache.aset(self, pairs)


upstream._CountsSets.aset = _counted_aset
UPSTREAM_TESTS = {
    name: fn for name, fn in vars(upstream).items() if name.startswith("test_") and inspect.isfunction(fn)
}
globals().update(UPSTREAM_TESTS)


@pytest.fixture(params=["sync", "async", "exit"])
def durability(request: pytest.FixtureRequest) -> str:
    """LangGraph's conftest fixture of the same name."""
    return str(request.param)


@pytest.fixture(autouse=True)
def _on_the_test_bucket(s3_server: LocalS3Server, bucket: str, prefix: str) -> Iterator[None]:
    _bound.update(bucket=bucket, prefix=prefix, client=s3_server.client(), opened=[])
    yield
    for cache in _bound["opened"]:
        cache.close()


def test_upstream_module_was_collected_on_s3_cache() -> None:
    """Guard against a vacuous run: the sdist's tests are here, and their caches are ours."""
    assert len(UPSTREAM_TESTS) >= 4, sorted(UPSTREAM_TESTS)
    assert issubclass(upstream._CountsSets, S3Cache)
    assert upstream.InMemoryCache is InMemoryCacheOnS3
