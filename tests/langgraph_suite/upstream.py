"""Running a test module of a fetched sdist (see ``fetch.py``) in our suite, with our classes standing in for
LangGraph's: ``tests/test_store_suite.py`` (InMemoryStore's tests) and ``tests/test_memory_saver_suite.py``
(InMemorySaver's tests) both load an upstream module unedited and rebind one name in it."""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from uuid import uuid4


def _tests_modules() -> dict[str, Any]:
    return {name: module for name, module in sys.modules.items() if name == "tests" or name.startswith("tests.")}


def load_test_module(root: Path, filename: str, name: str) -> types.ModuleType:
    """Import ``<root>/tests/<filename>`` as the module ``name``, which stays registered.

    While it runs, ``tests`` is the sdist's tests folder, so its own imports (``tests.embed_test_utils``)
    resolve there; afterwards every other ``tests`` module is as it was before."""
    saved = _tests_modules()
    for key in saved:
        del sys.modules[key]
    package = types.ModuleType("tests")
    package.__path__ = [str(root / "tests")]
    sys.modules["tests"] = package
    try:
        spec = importlib.util.spec_from_file_location(name, root / "tests" / filename)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        for key in _tests_modules():
            if key != name:
                del sys.modules[key]
        sys.modules.update(saved)


@contextmanager
def bound_to_bucket(base: type[Any], *, client: Any, bucket: str, prefix: str, name: str) -> Iterator[type[Any]]:
    """A subclass of ``base`` (a saver or store class) whose every instance lives under a fresh
    ``<prefix>/<random>`` of ``bucket``, through ``client``; the upstream test's own keyword arguments pass
    through. Every instance made is closed when the block ends."""
    opened: list[Any] = []

    class Bound(base):  # type: ignore[misc]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(bucket=bucket, prefix=f"{prefix}/{uuid4().hex[:12]}", client=client, **kwargs)
            opened.append(self)

    Bound.__name__ = Bound.__qualname__ = name
    try:
        yield Bound
    finally:
        for made in opened:
            made.close()
