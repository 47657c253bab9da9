"""LangGraph's own InMemorySaver tests, run against S3Saver on every selected server.

The ``tests/test_memory.py`` of the sdist of the installed ``langgraph-checkpoint`` is fetched (see
``tests/langgraph_suite/fetch.py``; a fetch failure fails collection, it never skips) and loaded without
editing it, under its own name ``tests.test_memory``: its serializer tests allow-list
``("tests.test_memory", "MemoryPydantic")``, so that module path must resolve. An autouse fixture rebinds the
module's ``InMemorySaver`` name to a subclass of :class:`S3Saver` bound to the server's bucket (a fresh prefix
per saver), so ``InMemorySaver()`` and ``InMemorySaver(serde=...)`` build our saver.

Collected: every test that uses the saver through LangGraph's public API (``put``, ``list`` with filters across
namespaces, metadata from the config, ``with``/``async with``, ``serde`` allow-lists and ``with_allowlist``,
``get_delta_channel_history``). Left out, by a rule rather than by name: the tests that write InMemorySaver's
private dictionaries (``saver.storage``, ``saver.writes[...]``, ``saver.blobs``) or call its private
``_load_blobs``, or that subclass it to delete its methods; they test that class's internals. S3Saver is the
twin of InMemorySaver here (one class, sync and async methods); AsyncS3Saver refuses blocking calls on the
event loop's thread, as AsyncPostgresSaver does, which the upstream async tests make.
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

from langgraph_s3_checkpoint import S3Saver
from langgraph_s3_checkpoint.local import LocalS3Server

ROOT = ensure_tests(package="langgraph-checkpoint", required="test_memory.py")
UPSTREAM_NAME = "tests.test_memory"
PRIVATE_PARTS = (".storage", ".writes[", ".blobs", "_load_blobs", "__mro__")


# Kept registered as ``tests.test_memory``: the serializer imports allow-listed classes by module path.
upstream = load_test_module(ROOT, "test_memory.py", UPSTREAM_NAME)


def _public(test: Any, private_helpers: frozenset[str] = frozenset()) -> bool:
    source = inspect.getsource(test)
    return not any(part in source for part in PRIVATE_PARTS) and not any(
        f"self.{h}(" in source for h in private_helpers
    )


UPSTREAM_TESTS: dict[str, Any] = {
    name: fn
    for name, fn in vars(upstream).items()
    if name.startswith("test_") and inspect.isfunction(fn) and _public(fn)
}
for class_name, cls in vars(upstream).items():
    if class_name.startswith("Test") and inspect.isclass(cls):
        helpers = {name: fn for name, fn in vars(cls).items() if not name.startswith(("test_", "__"))}
        private_helpers = frozenset(name for name, fn in helpers.items() if callable(fn) and not _public(fn))
        tests = {
            name: fn for name, fn in vars(cls).items() if name.startswith("test_") and _public(fn, private_helpers)
        }
        if tests:
            UPSTREAM_TESTS[class_name] = type(class_name, (), {**helpers, **tests})
globals().update(UPSTREAM_TESTS)
_reset_warned_types = upstream._reset_warned_types


@pytest.fixture(autouse=True)
def _saver_class(s3_server: LocalS3Server, bucket: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Any]]:
    name = f"S3SaverOn{s3_server.kind}"
    with bound_to_bucket(S3Saver, client=s3_server.client(), bucket=bucket, prefix="m", name=name) as bound:
        monkeypatch.setattr(upstream, "InMemorySaver", bound)
        yield bound


def test_upstream_suite_was_collected() -> None:
    """Guard against a vacuous run: the sdist's public-API saver tests are here, the private ones are not."""
    collected = set(UPSTREAM_TESTS)
    assert {
        "TestMemorySaver",
        "test_memory_saver",
        "test_memory_saver_with_allowlist_proxy_isolated",
        "test_memory_saver_strict_blocks_unregistered",
        "TestInMemorySaverDeltaChannel",
    } <= collected, sorted(collected)
    assert set(vars(UPSTREAM_TESTS["TestMemorySaver"])) >= {"test_search", "test_asearch", "test_combined_metadata"}
    assert "test_get_channel_writes_without_checkpoint_id_reads_the_latest" in vars(
        UPSTREAM_TESTS["TestInMemorySaverDeltaChannel"]
    )
    assert "test_load_blobs_omits_delta_channel" not in vars(UPSTREAM_TESTS["TestInMemorySaverDeltaChannel"])
    assert "TestPreDeltaBlobTerminator" not in collected  # every test of it builds InMemorySaver's private dicts
