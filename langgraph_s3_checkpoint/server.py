"""Use the S3 checkpointer in the LangGraph Agent Server (``langgraph dev``, ``langgraph up``, platform).

Point ``langgraph.json`` at :func:`checkpointer` (and, for long-term memory, :func:`store`) and configure
the bucket with environment variables::

    {
      "graphs": {"agent": "./agent.py:graph"},
      "checkpointer": {"path": "langgraph_s3_checkpoint.server.checkpointer"},
      "store": {"path": "langgraph_s3_checkpoint.server.store"}
    }

The path is written with a dot before ``checkpointer``: langgraph-api 0.16 splits a module path at its
last dot, so the ``module:attribute`` spelling only works for file paths (``./file.py:attribute``).

Environment:

``LANGGRAPH_S3_URL`` (required)
    ``s3://bucket/prefix?option=value&...``; every option of the saver, the store and the node cache can be
    given in the query string, and each ignores the others' (see docs/operations.md).
``LANGGRAPH_S3_ENDPOINT_URL``
    S3 endpoint for non-AWS servers. boto3 also honours ``AWS_ENDPOINT_URL`` on its own.
``LANGGRAPH_S3_REGION``
    Region name (otherwise the boto3 chain: ``AWS_REGION``, ``AWS_DEFAULT_REGION``, config file).
``LANGGRAPH_S3_CREATE_BUCKET``
    ``true`` to create the bucket at startup when it is missing. Parsed like the URL's booleans
    (:func:`~langgraph_s3_checkpoint.options.parse_flag`): anything but true/false, 1/0, yes/no, on/off
    is an error.

Credentials come from the standard boto3 chain (environment, shared files, instance or task role).
The server enters :func:`checkpointer` once per event-loop thread; each saver has its own connection
pool, and they share the bucket safely because commits are conditional writes.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import InvalidConfigError
from .options import parse_flag
from .saver import AsyncS3Saver

if TYPE_CHECKING:
    from .store import AsyncS3Store

Opened = TypeVar("Opened", "AsyncS3Saver", "AsyncS3Store")
"""What the server opens: the checkpointer or the store."""

ENV_URL = "LANGGRAPH_S3_URL"
ENV_ENDPOINT_URL = "LANGGRAPH_S3_ENDPOINT_URL"
ENV_REGION = "LANGGRAPH_S3_REGION"
ENV_CREATE_BUCKET = "LANGGRAPH_S3_CREATE_BUCKET"


def options_from_env(environ: Mapping[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    """The URL and the keyword overrides that the environment asks for.

    Dedicated variables win over the same option in the URL's query string, so one URL can be shared
    between deployments that differ only in endpoint or region.

    Args:
        environ: The environment to read; ``None``: ``os.environ``.

    Returns:
        ``LANGGRAPH_S3_URL`` and the keyword arguments that ``LANGGRAPH_S3_ENDPOINT_URL``, ``LANGGRAPH_S3_REGION``
        and ``LANGGRAPH_S3_CREATE_BUCKET`` ask for.

    Raises:
        InvalidConfigError: ``LANGGRAPH_S3_URL`` is not set, or ``LANGGRAPH_S3_CREATE_BUCKET`` is not a boolean.
    """
    env = os.environ if environ is None else environ
    url = env.get(ENV_URL, "").strip()
    if not url:
        raise InvalidConfigError(
            f"{ENV_URL} is not set. Set it to the checkpoint location, e.g. "
            f"{ENV_URL}=s3://my-bucket/langgraph (see docs/operations.md)."
        )
    overrides: dict[str, Any] = {}
    if endpoint := env.get(ENV_ENDPOINT_URL, "").strip():
        overrides["endpoint_url"] = endpoint
    if region := env.get(ENV_REGION, "").strip():
        overrides["region_name"] = region
    if env.get(ENV_CREATE_BUCKET, "").strip():  # set but empty: as if unset
        overrides["create_bucket"] = parse_flag(ENV_CREATE_BUCKET, env[ENV_CREATE_BUCKET])
    return url, overrides


def saver_from_env(environ: Mapping[str, str] | None = None, **kwargs: Any) -> AsyncS3Saver:
    """An :class:`AsyncS3Saver` configured from the environment (not set up yet).

    Args:
        environ: The environment to read; ``None``: ``os.environ``.
        **kwargs: Saver options (e.g. ``serde=``) that override both the URL and the environment.

    Returns:
        The saver; the caller closes it.

    Raises:
        InvalidConfigError: ``LANGGRAPH_S3_URL`` is not set or not ``s3://bucket/...``, an option in it is unknown or
            malformed, or ``LANGGRAPH_S3_CREATE_BUCKET`` is not a boolean.
    """
    return _from_env(AsyncS3Saver, environ, kwargs)


@asynccontextmanager
async def checkpointer() -> AsyncIterator[AsyncS3Saver]:
    """Yield a ready :class:`AsyncS3Saver` (bucket checked, conditional writes probed); close it on exit.

    This is the object ``langgraph.json``'s ``checkpointer.path`` should name.

    Yields:
        The saver, set up.

    Raises:
        InvalidConfigError: ``LANGGRAPH_S3_URL`` is not set or not ``s3://bucket/...``, an option in it is unknown or
            malformed, or ``LANGGRAPH_S3_CREATE_BUCKET`` is not a boolean.
        BucketNotFoundError: The bucket does not exist and ``LANGGRAPH_S3_CREATE_BUCKET`` is not true.
        ConditionalWritesUnsupportedError: The server does not enforce conditional writes.
        S3CheckpointError: Any other error of ``setup()`` (see :meth:`.S3Saver.setup`).
    """
    async with _set_up(saver_from_env()) as saver:
        yield saver


def store_from_env(environ: Mapping[str, str] | None = None, **kwargs: Any) -> AsyncS3Store:
    """An :class:`~langgraph_s3_checkpoint.store.AsyncS3Store` on the checkpointer's location (same
    environment variables; URL options only the saver or the cache use are ignored), not set up yet.

    Args:
        environ: The environment to read; ``None``: ``os.environ``.
        **kwargs: Store options (``index=``, ``ttl=``, ``serde=``) that override the URL and the environment.

    Returns:
        The store; the caller closes it.

    Raises:
        InvalidConfigError: As :func:`saver_from_env`.
    """
    from .store import AsyncS3Store

    return _from_env(AsyncS3Store, environ, kwargs)


@asynccontextmanager
async def store() -> AsyncIterator[AsyncS3Store]:
    """Yield a ready long-term memory store (``langgraph.json``: ``"store": {"path":
    "langgraph_s3_checkpoint.server.store"}``, dotted like the checkpointer); close it on exit.
    ``tests/test_server.py`` runs it in ``langgraph dev`` beside :func:`checkpointer`.

    Yields:
        The store, set up.

    Raises:
        S3CheckpointError: As :func:`checkpointer` (the store's ``setup()``: :meth:`.S3Store.setup`).
    """
    async with _set_up(store_from_env()) as store:
        yield store


def _from_env(opened: type[Opened], environ: Mapping[str, str] | None, options: dict[str, Any]) -> Opened:
    """``opened`` (the saver's or the store's class) at the environment's location, ``options`` overriding both the
    URL's and the environment's."""
    url, overrides = options_from_env(environ)
    overrides.update(options)
    return opened._from_url(url, **overrides)


@asynccontextmanager
async def _set_up(opened: Opened) -> AsyncIterator[Opened]:
    """``opened`` once set up (the bucket checked, conditional writes probed), closed on exit."""
    try:
        await opened.setup()
        yield opened
    finally:
        opened.close()


__all__ = ["checkpointer", "options_from_env", "saver_from_env", "store", "store_from_env"]
