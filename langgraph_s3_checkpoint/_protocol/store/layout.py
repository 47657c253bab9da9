"""The store's keys: where namespaces, items, vector shards and names live under ``{prefix}/store/``."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..keys import MAX_SEGMENT, is_digest, made_by

HERE = "~"
"""The segment holding a namespace's own items (never an escaped label: labels are not empty)."""
DEFAULT_VECTOR_SHARDS = 16
READ_CHUNK = 128
"""Items read in parallel at once by a scan (bounds the bodies held in memory)."""
MAX_SHARD_ATTEMPTS = 20

Vectors = dict[str, list[float]]
"""Path of an embedded field (``"text"``, ``"tags.1"`` ...) -> its vector."""
Place = tuple[tuple[str, ...], str, str]
"""Where a text to embed comes from: (namespace, key, field path)."""


# ------------------------------------------------------------------------------------------------
# Layout
# ------------------------------------------------------------------------------------------------
_KEEP = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def escape(value: str) -> str:
    """One key segment for a label or key: letters, digits and ``_`` stay, every other UTF-8 byte
    becomes ``=XX``; ``""`` becomes ``~``; a segment over 180 characters becomes ``~`` + SHA-256.

    Unlike the saver's :func:`.._protocol.keys.escape` (``%XX``, ``-`` kept), every character of a segment sorts
    above ``/``, so ascending byte order of keys (S3, moto) and folder-by-folder order (SeaweedFS's
    filer) are the same order: search pages identically on every server."""
    if value == "":
        return "~"
    raw = value.encode("utf-8", "surrogatepass")
    segment = "".join(chr(b) if b in _KEEP else f"={b:02X}" for b in raw)
    if len(segment) > MAX_SEGMENT:
        return "~" + hashlib.sha256(raw).hexdigest()
    return segment


def unescape(segment: str) -> str:
    """Inverse of :func:`escape` for verbatim segments."""
    if segment == "~":
        return ""
    out = bytearray()
    i = 0
    while i < len(segment):
        if segment[i] == "=":
            out.append(int(segment[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(ord(segment[i]))
            i += 1
    return out.decode("utf-8", "surrogatepass")


_VERBATIM = re.compile(r"[A-Za-z0-9_]+")


def is_own_segment(segment: str) -> bool:
    """Whether :func:`escape` could have made ``segment`` (:func:`.._protocol.keys.made_by`, as
    :func:`.._protocol.keys.is_own_segment` for the saver's): a folder or key of the store whose segment fails it
    (``a.b``, ``%zz``, ``=zz``) is foreign, skipped by every read, search, listing and sweep."""
    return made_by(segment, escape, unescape, _VERBATIM)


@dataclass(frozen=True)
class StoreLayout:
    """Keys of the store under one bucket prefix. Pure."""

    prefix: str = ""
    root: str = field(init=False)
    """``{prefix}store/``: every object of the store."""
    items_root: str = field(init=False)
    """``{root}ns/``: the items, one object each."""
    vectors_root: str = field(init=False)
    """``{root}vec/``: the vector shards."""
    names_root: str = field(init=False)
    """``{root}names/``: the real strings behind digest segments."""

    def __post_init__(self) -> None:
        cleaned = self.prefix.strip("/")
        prefix = f"{cleaned}/" if cleaned else ""
        root = f"{prefix}store/"
        derived = {
            "prefix": prefix,
            "root": root,
            "items_root": f"{root}ns/",
            "vectors_root": f"{root}vec/",
            "names_root": f"{root}names/",
        }
        for attribute, value in derived.items():
            object.__setattr__(self, attribute, value)  # frozen: set once, here

    @staticmethod
    def path(namespace: Sequence[str]) -> str:
        return "".join(f"{escape(label)}/" for label in namespace)

    def items(self, namespace_prefix: Sequence[str]) -> str:
        """Prefix of every item in ``namespace_prefix`` and the namespaces below it."""
        return f"{self.items_root}{self.path(namespace_prefix)}"

    def item(self, namespace: Sequence[str], key: str) -> str:
        return f"{self.items(namespace)}{HERE}/{escape(key)}"

    def vectors(self, namespace_prefix: Sequence[str]) -> str:
        return f"{self.vectors_root}{self.path(namespace_prefix)}"

    def shard(self, namespace: Sequence[str], key: str, shards: int) -> str:
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
        return f"{self.vectors(namespace)}{HERE}/{int.from_bytes(digest[:4], 'big') % shards:02x}"

    def name(self, segment: str) -> str:
        return f"{self.names_root}{segment}"

    def digests(self, namespace: Sequence[str], key: str | None) -> dict[str, str]:
        """Digest segment -> real string, for the labels (and key) too long to be kept verbatim."""
        out = {}
        for value in (*namespace, *(() if key is None else (key,))):
            segment = escape(value)
            if is_digest(segment):
                out[segment] = value
        return out

    def is_item(self, key: str) -> bool:
        """Whether a listed key is an item of ours (folder markers and foreign objects are skipped)."""
        return _is_namespace_leaf(self.items_root, key)

    def is_shard(self, key: str) -> bool:
        """Whether a listed key is a vector shard of ours: its leaf a shard number as :meth:`shard` writes it
        (another tool's ``notes`` beside the shards is not one)."""
        return (
            _is_namespace_leaf(self.vectors_root, key) and _SHARD_NUMBER.fullmatch(key.rsplit("/", 1)[-1]) is not None
        )

    def item_of_shard_entry(self, shard_key: str, key: str) -> str:
        """The item key of ``key`` in the namespace that ``shard_key`` belongs to."""
        namespace_path = shard_key[len(self.vectors_root) : shard_key.rindex(f"{HERE}/")]
        return f"{self.items_root}{namespace_path}{HERE}/{escape(key)}"


_SHARD_NUMBER = re.compile("[0-9a-f]{2,}")
"""A shard's leaf: its number in lowercase hexadecimal, at least two digits (``Layout.shard``)."""


def _is_namespace_leaf(root: str, key: str) -> bool:
    """Whether ``key`` is ``{root}{label}/.../~/{leaf}``: escaped labels (never ``~`` alone), the
    namespace's own segment, one leaf (an item key or a shard number), each a segment :func:`escape` could
    have made."""
    if not key.startswith(root):
        return False
    parts = key[len(root) :].split("/")
    return (
        len(parts) >= 2
        and parts[-2] == HERE
        and HERE not in parts[:-2]
        and all(map(is_own_segment, parts[:-2]))
        and is_own_segment(parts[-1])
    )
