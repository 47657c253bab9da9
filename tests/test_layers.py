"""The package's layers, as its folders show them, and the imports that keep them apart: every module has a layer.

The ground (errors, options, the embedded server) imports nothing of the package above it. ``_protocol/`` is the
pure core: what to read and write for each operation, as plans (the saver's, the store's, the cache's). It does no
I/O, so it imports no HTTP client, no event loop and no socket; ``_transport/`` performs the requests plans ask for;
the faces (saver, store, cache, the in-memory bucket's public path) put the two together behind LangGraph's
interfaces, each on its own (none imports another); the tools (gc, effects, migration, the Agent Server factories,
the demo, the CLI, the package's root) are built on the faces. An import that ran the other way (a plan reaching
for a transport, a transport for the saver, the store for the saver) would make the layering a comment instead of a
fact, so every import statement of the package is checked here, including those inside functions and under
``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import langgraph_s3_checkpoint

pytestmark = pytest.mark.memory
"""No S3 server: every test of this module runs in memory (``pytest -m memory``)."""

PACKAGE = Path(langgraph_s3_checkpoint.__file__).parent
NAME = "langgraph_s3_checkpoint"

# Each layer, and the layers of this package it may import (besides itself).
GROUND = {f"{NAME}.errors", f"{NAME}.options", f"{NAME}.local"}
FACES = {f"{NAME}.saver", f"{NAME}.store", f"{NAME}.cache", f"{NAME}.memory"}
LAYER_OF_PREFIX = {
    f"{NAME}._protocol": "protocol",
    f"{NAME}._transport": "transport",
}
MAY_IMPORT = {
    "ground": {"ground"},
    "protocol": {"protocol", "ground"},
    "transport": {"transport", "protocol", "ground"},
    "face": {"transport", "protocol", "ground"},
    "tool": {"tool", "face", "transport", "protocol", "ground"},
}
SAME_LAYER_ALLOWED = {"ground": False, "protocol": True, "transport": True, "face": False, "tool": True}
"""Whether a module may import another of its own layer: a face may not (none is built on another)."""
# What the pure core never imports: I/O libraries and the modules that block or wait on the network.
NOT_IN_THE_CORE = ("boto3", "botocore", "urllib3", "asyncio", "socket", "ssl", "select", "http", "aiohttp")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> str:
    if module in GROUND or module == NAME + ".errors":
        return "ground"
    for prefix, layer in LAYER_OF_PREFIX.items():
        if module == prefix or module.startswith(prefix + "."):
            return layer
    if any(module == face or module.startswith(face + ".") for face in FACES):
        return "face"
    return "tool"


def _face_of(module: str) -> str:
    """The face a module belongs to (its top-level module or package)."""
    return ".".join(module.split(".")[:2])


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module one file imports (absolute names), with its line."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if node.level and not node.module:
                # from . import x: x may be a module of that package
                found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, target))
    return found


def _files(layer: str) -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if _layer(_module_name(p)) == layer)


def test_every_layer_has_its_modules() -> None:
    assert len(_files("protocol")) >= 10
    assert len(_files("transport")) >= 5
    assert {_module_name(p) for p in _files("ground")} == GROUND
    assert {_face_of(_module_name(p)) for p in _files("face")} == FACES
    assert len(_files("tool")) >= 8


@pytest.mark.parametrize("path", _files("protocol"), ids=lambda p: p.name)
def test_the_pure_core_imports_no_io(path: Path) -> None:
    io = [
        f"{path.name}:{line} imports {name}" for line, name in _imports(path) if name.split(".")[0] in NOT_IN_THE_CORE
    ]
    assert not io


EVERY_MODULE = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", EVERY_MODULE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_import_runs_up_a_layer(path: Path) -> None:
    module = _module_name(path)
    own = _layer(module)
    upward = [
        f"{path.name}:{line} ({own}) imports {name} ({_layer(name)})"
        for line, name in _imports(path)
        if name.startswith(NAME + ".")
        and _layer(name) not in MAY_IMPORT[own]
        and not (_layer(name) == own and (SAME_LAYER_ALLOWED[own] or _face_of(name) == _face_of(module)))
    ]
    assert not upward


def test_the_checker_resolves_relative_imports() -> None:
    """The checks above would pass on nothing if relative imports were resolved wrongly."""
    protocol = PACKAGE / "_protocol" / "chain.py"
    names = [name for _, name in _imports(protocol)]
    plans = PACKAGE / "_protocol" / "checkpoint_plans.py"
    assert f"{NAME}._protocol.committing" in [name for _, name in _imports(plans)]
    assert all(name.split(".")[0] not in NOT_IN_THE_CORE for name in names)
    bucket_io = PACKAGE / "_transport" / "bucket_io.py"
    assert any(name.startswith("botocore") for _, name in _imports(bucket_io))
    assert f"{NAME}.errors" in [name for _, name in _imports(bucket_io)]
