"""Fetch LangGraph's own test suite: the ``tests/`` of the sdist of exactly the installed ``langgraph``.

``python tests/langgraph_suite/fetch.py`` prints the directory it extracted to (``.langgraph-tests/<version>``
at the repository root, git-ignored; ``LANGGRAPH_TESTS_CACHE`` overrides the parent folder). A second
call finds the extracted tree and downloads nothing. Any failure (no network, no sdist for the version,
no ``tests/`` in it) raises: callers must not treat it as "nothing to test".
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CACHE = REPO / ".langgraph-tests"
COMPLETE_MARKER = ".complete"


class FetchError(RuntimeError):
    """The sdist could not be downloaded or did not contain the expected tests."""


def installed_version(package: str = "langgraph") -> str:
    return importlib.metadata.version(package)


def cache_root() -> Path:
    return Path(os.environ.get("LANGGRAPH_TESTS_CACHE") or DEFAULT_CACHE)


def ensure_tests(
    version: str | None = None, cache: Path | None = None, *, package: str = "langgraph", required: str = "conftest.py"
) -> Path:
    """Return ``<cache>/<version>``, holding the sdist's ``tests/`` package; download it first if needed.

    Another package's sdist (e.g. ``package="langgraph-checkpoint"``, whose ``tests/`` has no conftest:
    ``required="test_store.py"``) goes to ``<cache>/<package>-<version>``."""
    version = version or installed_version(package)
    dest = (cache or cache_root()) / (version if package == "langgraph" else f"{package}-{version}")
    if (dest / COMPLETE_MARKER).is_file() and (dest / "tests" / required).is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{package}-sdist-", dir=dest.parent) as tmp:
        sdist = _download(version, Path(tmp) / "download", package)
        staging = Path(tmp) / "staging"
        _extract_tests(sdist, staging, required)
        (staging / COMPLETE_MARKER).write_text(f"{package}=={version} from {sdist.name}\n")
        if dest.exists():  # a partial tree from an interrupted run, or another process won the race
            if (dest / COMPLETE_MARKER).is_file():
                return dest
            shutil.rmtree(dest)
        staging.rename(dest)
    return dest


def _download(version: str, into: Path, package: str = "langgraph") -> Path:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-binary",
        ":all:",
        "--no-deps",
        "--disable-pip-version-check",
        f"{package}=={version}",
        "-d",
        str(into),
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise FetchError(
            f"{' '.join(command)} exited {result.returncode}:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
        )
    names = {f"{package}-*.tar.gz", f"{package.replace('-', '_')}-*.tar.gz"}
    sdists = sorted({p for name in names for p in into.glob(name)})
    if len(sdists) != 1:
        raise FetchError(f"expected one {package} sdist in {into}, found {[p.name for p in into.iterdir()]}")
    return sdists[0]


def _extract_tests(sdist: Path, staging: Path, required: str = "conftest.py") -> None:
    """Extract ``<top>/tests/**`` of the sdist to ``staging/tests/**`` (and nothing else)."""
    staging.mkdir()
    with tarfile.open(sdist) as archive:
        members = []
        for member in archive.getmembers():
            parts = Path(member.name).parts
            if len(parts) >= 2 and parts[1] == "tests" and (member.isfile() or member.isdir()):
                member.name = str(Path(*parts[1:]))
                members.append(member)
        if not any(m.name == f"tests/{required}" for m in members):
            raise FetchError(f"{sdist.name} has no tests/{required}")
        if hasattr(tarfile, "data_filter"):
            archive.extractall(staging, members=members, filter="data")
        else:  # pragma: no cover - Python without PEP 706 (names were checked to stay under tests/)
            if any(".." in Path(m.name).parts or Path(m.name).is_absolute() for m in members):
                raise FetchError(f"{sdist.name} has unsafe paths")
            archive.extractall(staging, members=members)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", help="langgraph version (default: the installed one)")
    args = parser.parse_args()
    print(ensure_tests(args.version))


if __name__ == "__main__":
    main()
