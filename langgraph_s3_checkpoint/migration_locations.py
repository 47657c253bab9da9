"""Where a migration reads and writes: a location string (``sqlite:///...``, ``postgresql://...``, ``redis://...``,
``s3://bucket/prefix`` or ``module:factory``) opened as a checkpointer or a store, with a clear error naming the
package to install when a location's saver is missing (:mod:`langgraph_s3_checkpoint.migrate` copies between them).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore, IndexConfig

from .errors import InvalidConfigError
from .saver import S3Saver
from .store import S3Store


# ------------------------------------------------------------------------------------------------
# Opening a location
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Backend:
    """A database LangGraph has a checkpointer and a store for, and the package that brings them."""

    schemes: tuple[str, ...]
    package: str
    saver: tuple[str, str]
    store: tuple[str, str]
    takes_a_path: bool = False
    """``from_conn_string`` takes a file's path (SQLite), not the URL."""


_BACKENDS = (
    _Backend(
        ("sqlite",),
        "langgraph-checkpoint-sqlite",
        ("langgraph.checkpoint.sqlite", "SqliteSaver"),
        ("langgraph.store.sqlite", "SqliteStore"),
        takes_a_path=True,
    ),
    _Backend(
        ("postgresql", "postgres"),
        "langgraph-checkpoint-postgres",
        ("langgraph.checkpoint.postgres", "PostgresSaver"),
        ("langgraph.store.postgres", "PostgresStore"),
    ),
    _Backend(
        ("redis", "rediss"),
        "langgraph-checkpoint-redis",
        ("langgraph.checkpoint.redis", "RedisSaver"),
        ("langgraph.store.redis", "RedisStore"),
    ),
)
_FACTORY = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
"""``module:attr[.attr...]``: a factory (or a ready saver or store) named by its import path."""
LOCATIONS = "sqlite:///path.db, postgresql://..., redis://..., s3://bucket/prefix or module:factory"


def shown(location: str) -> str:
    """A location as it may be printed: a URL's password replaced by ``***``."""
    parts = urllib.parse.urlsplit(location)
    if not parts.password:
        return location
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


@contextlib.contextmanager
def open_checkpointer(location: str, *, must_exist: bool = False) -> Iterator[BaseCheckpointSaver[Any]]:
    """The checkpointer at ``location``, closed at the end of the ``with`` block (when this function opened it).

    Args:
        location: ``sqlite:///relative.db`` or ``sqlite:////absolute.db`` (SQLAlchemy's spelling),
            ``postgresql://user:password@host/db``, ``redis://host:port``, ``s3://bucket/prefix?options``, or
            ``module:factory``, an import path to a saver, or to a callable returning a saver or a context manager
            of one (called without arguments).
        must_exist: Refuse a SQLite file that does not exist (a source; SQLite would create an empty one).

    Raises:
        InvalidConfigError: The location is none of these, its package is not installed (the message names it),
            the SQLite file is missing, or the factory failed or returned no ``BaseCheckpointSaver``.
    """
    with _opened(location, "saver", must_exist=must_exist, index=None) as saver:
        if not isinstance(saver, BaseCheckpointSaver):
            raise InvalidConfigError(f"{shown(location)!r} is a {type(saver).__name__}, not a BaseCheckpointSaver")
        yield saver


@contextlib.contextmanager
def open_store(location: str, *, must_exist: bool = False, index: IndexConfig | None = None) -> Iterator[BaseStore]:
    """The long-term memory store at ``location`` (the forms of :func:`open_checkpointer`), closed at the end of
    the ``with`` block when this function opened it.

    Args:
        location: Where the store is.
        must_exist: Refuse a SQLite file that does not exist.
        index: The ``IndexConfig`` to open it with (a target that embeds the items it receives); not for
            factories, which build their store with their own.

    Raises:
        InvalidConfigError: As :func:`open_checkpointer`, for a ``BaseStore``.
    """
    with _opened(location, "store", must_exist=must_exist, index=index) as store:
        if not isinstance(store, BaseStore):
            raise InvalidConfigError(f"{shown(location)!r} is a {type(store).__name__}, not a BaseStore")
        yield store


@contextlib.contextmanager
def _opened(location: str, kind: str, *, must_exist: bool, index: IndexConfig | None) -> Iterator[Any]:
    scheme = location.partition("://")[0].lower() if "://" in location else ""
    if scheme == "s3":
        opener: Any = (
            S3Saver.from_conn_string(location) if kind == "saver" else S3Store.from_conn_string(location, index=index)
        )
        with opener as opened:
            yield opened
        return
    backend = next((b for b in _BACKENDS if scheme in b.schemes), None)
    if backend is not None:
        with _from_backend(backend, location, kind, must_exist=must_exist, index=index) as opened:
            yield opened
        return
    if not scheme and _FACTORY.fullmatch(location):
        if index is not None:
            raise InvalidConfigError(f"{location!r}: a factory builds its store with its own index; drop --index")
        with _from_factory(location) as opened:
            yield opened
        return
    raise InvalidConfigError(f"{shown(location)!r} is not a location this can open: use {LOCATIONS}")


@contextlib.contextmanager
def _from_backend(
    backend: _Backend, location: str, kind: str, *, must_exist: bool, index: IndexConfig | None
) -> Iterator[Any]:
    module_name, class_name = backend.saver if kind == "saver" else backend.store
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except ImportError as exc:
        raise InvalidConfigError(
            f"{shown(location)!r} needs {module_name}.{class_name}, from the package {backend.package} "
            f"({exc}): pip install {backend.package}"
        ) from None
    conn = location
    if backend.takes_a_path:
        conn = _sqlite_path(location)
        if must_exist and not os.path.exists(conn):
            raise InvalidConfigError(f"no SQLite database at {conn!r} ({location!r}); check the path")
    options: dict[str, Any] = {} if index is None else {"index": index}
    with cls.from_conn_string(conn, **options) as opened:
        yield opened


def would_create(location: str) -> bool:
    """Whether opening ``location`` would create it: a SQLite file that does not exist yet (a dry run into it
    compares with nothing instead, since opening it makes the file)."""
    scheme = location.partition("://")[0].lower()
    return "://" in location and scheme == "sqlite" and not os.path.exists(_sqlite_path(location))


def _sqlite_path(location: str) -> str:
    """The file of ``sqlite:///relative.db`` or ``sqlite:////absolute.db`` (SQLAlchemy's spelling)."""
    path = location.split("://", 1)[1]
    if not path.startswith("/") or path == "/":
        raise InvalidConfigError(
            f"{location!r}: write sqlite:///relative/path.db or sqlite:////absolute/path.db (three or four slashes)"
        )
    return path[1:]


@contextlib.contextmanager
def _from_factory(spec: str) -> Iterator[Any]:
    """What ``module:attr`` names: a saver or store as it is, or what a callable returns, entered if it is a
    context manager. Whatever the user's code raises while making it is a configuration problem, named."""
    module_name, _, path = spec.partition(":")
    try:
        value: Any = importlib.import_module(module_name)
        for attr in path.split("."):
            value = getattr(value, attr)
        if callable(value) and not isinstance(value, BaseCheckpointSaver | BaseStore):
            value = value()
    except Exception as exc:
        raise InvalidConfigError(f"factory {spec!r}: {type(exc).__name__}: {exc}") from exc
    if isinstance(value, BaseCheckpointSaver | BaseStore) or not isinstance(value, contextlib.AbstractContextManager):
        yield value
        return
    with value as entered:
        yield entered


def prepare_target(saver_or_store: BaseCheckpointSaver[Any] | BaseStore) -> None:
    """Prepare a target to be written (``PostgresSaver`` creates its tables, ``S3Saver`` checks the bucket and its
    conditional writes); nothing for one without ``setup``."""
    prepare = getattr(saver_or_store, "setup", None)
    if callable(prepare):
        prepare()
