"""The checks of a batch's operations and of the ``index`` and ``ttl`` options, made before any request."""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Integral
from typing import Any

from langgraph.store.base import (
    GetOp,
    Op,
    PutOp,
    SearchOp,
)

from ...errors import (
    InvalidArgumentTypeError,
    InvalidConfigError,
)
from ..keys import has_lone_surrogate
from .objects import DISTANCES

# ------------------------------------------------------------------------------------------------
# The stores
# ------------------------------------------------------------------------------------------------
_TTL_KEYS = frozenset({"default_ttl", "refresh_on_read", "omit_expired", "sweep_interval_minutes"})
"""TTLConfig's keys. ``omit_expired`` is accepted and always in effect for ``get`` and ``search``, which never
return an expired item; ``list_namespaces`` reads keys only and lists a namespace until its items are swept."""


_OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})
"""The filter operators of InMemoryStore and PostgresStore."""


def check_op(op: Op) -> None:
    """What LangGraph's namespace check leaves to each store: a str where a tuple belongs (it would be
    taken letter by letter), a key that is not a str, a per-item ``ttl`` that is not a positive number
    of minutes, and a filter operator that does not exist (it would silently match nothing)."""
    namespace = op.namespace_prefix if isinstance(op, SearchOp) else getattr(op, "namespace", ())
    if isinstance(namespace, str):
        raise InvalidArgumentTypeError(
            f"a namespace is a tuple of labels, not the str {namespace!r}: write ({namespace!r},)"
        )
    if isinstance(op, (GetOp, PutOp)) and not isinstance(op.key, str):
        raise InvalidArgumentTypeError(f"an item's key must be a str, got {type(op.key).__name__} {op.key!r}")
    if isinstance(op, PutOp):
        _check_put(op)
    if isinstance(op, SearchOp) and op.filter:
        _check_filter(op.filter)


def _check_put(op: PutOp) -> None:
    for text in (*op.namespace, op.key):
        if isinstance(text, str) and has_lone_surrogate(text):
            raise InvalidConfigError(
                f"{text!r} (in namespace {tuple(op.namespace)!r}, key {op.key!r}) holds a lone surrogate, "
                "which is not text an item can be stored under; decode the bytes it came from properly"
            )
    if op.ttl is not None and (
        isinstance(op.ttl, bool) or not isinstance(op.ttl, (int, float)) or not 0 < op.ttl < math.inf
    ):
        raise InvalidConfigError(f"ttl of item {op.key!r} must be a positive number of minutes or None, got {op.ttl!r}")


def _check_filter(filter: Mapping[str, Any]) -> None:
    for field_name, wanted in filter.items():
        if not isinstance(wanted, Mapping):
            continue
        if any(str(k).startswith("$") for k in wanted):
            unknown = sorted(str(k) for k in wanted if k not in _OPERATORS)
            if unknown:
                raise InvalidConfigError(
                    f"Unsupported operator: {unknown[0]} (filter on {field_name!r}); "
                    f"the operators are {', '.join(sorted(_OPERATORS))}"
                )
        else:
            _check_filter(wanted)


def check_ttl(ttl: Any) -> None:
    """``ttl`` is LangGraph's ``TTLConfig``: minutes, a flag and minutes again; nothing else."""
    if ttl is None:
        return
    if not isinstance(ttl, Mapping):
        raise InvalidConfigError(f"ttl must be a TTLConfig dict ({', '.join(sorted(_TTL_KEYS))}), got {ttl!r}")
    unknown = sorted(set(ttl) - _TTL_KEYS)
    if unknown:
        raise InvalidConfigError(f"unknown ttl key(s) {unknown}; TTLConfig has {', '.join(sorted(_TTL_KEYS))}")
    for name in ("default_ttl", "sweep_interval_minutes"):
        minutes = ttl.get(name)
        if minutes is not None and (
            isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or not minutes > 0
        ):
            raise InvalidConfigError(f"ttl[{name!r}] must be a positive number of minutes (or None), got {minutes!r}")
    for name in ("refresh_on_read", "omit_expired"):
        if not isinstance(ttl.get(name, True), bool):
            raise InvalidConfigError(f"ttl[{name!r}] must be True or False, got {ttl[name]!r}")


# LangGraph's IndexConfig, and the keys of LangGraph's other stores that mean something here: SqliteStore's
# "text_fields" (its name for "fields"), PostgresStore's "distance_type" (see DISTANCES) and "ann_index_config"
# (it tunes pgvector's approximate index; S3Store scores every vector of the namespaces searched exactly, so there
# is nothing to tune and it is ignored). A store's own index_config also holds "__tokenized_fields" (recomputed
# from the fields), so one store's index_config can configure another.
_INDEX_KEYS = frozenset({"embed", "dims", "fields", "text_fields", "distance_type", "ann_index_config"})


def check_index(index: Any) -> None:
    """``index`` is LangGraph's ``IndexConfig``: an embedder, the vectors' size, the fields to embed."""
    if index is None:
        return
    if not isinstance(index, Mapping):
        raise InvalidConfigError(f"index must be an IndexConfig dict (embed, dims, fields), got {index!r}")
    unknown = sorted(str(name) for name in index if name not in _INDEX_KEYS and name != "__tokenized_fields")
    if unknown:
        raise InvalidConfigError(f"index has keys S3Store does not know: {unknown}; it takes {sorted(_INDEX_KEYS)}")
    if index.get("distance_type", "cosine") not in DISTANCES:
        raise InvalidConfigError(
            f"index['distance_type'] must be one of {', '.join(map(repr, DISTANCES))} (as for PostgresStore's "
            f"float vectors), got {index['distance_type']!r}"
        )
    embed = index.get("embed")
    if embed is None or not (isinstance(embed, str) or callable(embed) or hasattr(embed, "embed_documents")):
        raise InvalidConfigError(
            "index['embed'] must be an Embeddings object, a function from texts to vectors, or a provider "
            f"string such as 'openai:text-embedding-3-small'; got {embed!r}"
        )
    dims = index.get("dims")
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, Integral) or dims < 1):
        raise InvalidConfigError(f"index['dims'] must be a whole number >= 1 (the vectors' size), got {dims!r}")
    index_fields(index)


def index_fields(index: Mapping[str, Any]) -> list[str] | None:
    """The JSON paths to embed: ``fields``, or SqliteStore's ``text_fields`` (which may be one path)."""
    fields = index.get("fields")
    text_fields = index.get("text_fields")
    if isinstance(text_fields, str):
        text_fields = [text_fields]
    if fields is not None and text_fields is not None and list(fields) != list(text_fields):
        raise InvalidConfigError(
            f"index has both 'fields' {fields!r} and 'text_fields' {text_fields!r}; give one ('text_fields' is "
            "SqliteStore's name for 'fields')"
        )
    chosen = fields if fields is not None else text_fields
    if chosen is not None and (isinstance(chosen, str) or not all(isinstance(f, str) for f in chosen)):
        raise InvalidConfigError(
            f"index['fields'] must be a list of JSON paths such as ['text', 'metadata.title'], got {chosen!r}"
        )
    return None if chosen is None else list(chosen)
