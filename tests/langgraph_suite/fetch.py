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


def installed_version() -> str:
    return importlib.metadata.version("langgraph")


def cache_root() -> Path:
    return Path(os.environ.get("LANGGRAPH_TESTS_CACHE") or DEFAULT_CACHE)


def ensure_tests(version: str | None = None, cache: Path | None = None) -> Path:
    """Return ``<cache>/<version>``, holding the sdist's ``tests/`` package; download it first if needed."""
    version = version or installed_version()
    dest = (cache or cache_root()) / version
    if (dest / COMPLETE_MARKER).is_file() and (dest / "tests" / "conftest.py").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="langgraph-sdist-", dir=dest.parent) as tmp:
        sdist = _download(version, Path(tmp) / "download")
        staging = Path(tmp) / "staging"
        _extract_tests(sdist, staging)
        (staging / COMPLETE_MARKER).write_text(f"langgraph=={version} from {sdist.name}\n")
        if dest.exists():  # a partial tree from an interrupted run, or another process won the race
            if (dest / COMPLETE_MARKER).is_file():
                return dest
            shutil.rmtree(dest)
        staging.rename(dest)
    return dest


def _download(version: str, into: Path) -> Path:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-binary",
        ":all:",
        "--no-deps",
        "--disable-pip-version-check",
        f"langgraph=={version}",
        "-d",
        str(into),
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise FetchError(
            f"{' '.join(command)} exited {result.returncode}:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
        )
    sdists = sorted(into.glob("langgraph-*.tar.gz"))
    if len(sdists) != 1:
        raise FetchError(f"expected one langgraph sdist in {into}, found {[p.name for p in into.iterdir()]}")
    return sdists[0]


def _extract_tests(sdist: Path, staging: Path) -> None:
    """Extract ``<top>/tests/**`` of the sdist to ``staging/tests/**`` (and nothing else)."""
    staging.mkdir()
    with tarfile.open(sdist) as archive:
        members = []
        for member in archive.getmembers():
            parts = Path(member.name).parts
            if len(parts) >= 2 and parts[1] == "tests" and (member.isfile() or member.isdir()):
                member.name = str(Path(*parts[1:]))
                members.append(member)
        if not any(m.name == "tests/conftest.py" for m in members):
            raise FetchError(f"{sdist.name} has no tests/conftest.py")
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
