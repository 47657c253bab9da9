"""The bytes of the store's objects: items (value, timestamps, TTL), packed vectors and their similarity."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from langgraph.store.base import (
    Item,
)
from langgraph.store.memory import _cosine_similarity

from ...errors import (
    CorruptObjectError,
    DecryptionError,
)
from ..codec import Codec
from ..requests import (
    StoredObject,
)


# ------------------------------------------------------------------------------------------------
# Objects
# ------------------------------------------------------------------------------------------------
@dataclass
class Stored:
    """One item as read from the bucket."""

    key: str
    etag: str
    frame: dict[str, Any]
    item: Item

    @property
    def version(self) -> str:
        return str(self.frame.get("ver", ""))

    @property
    def ttl(self) -> float | None:
        ttl = self.frame.get("ttl")
        return None if ttl is None else float(ttl)

    def expired(self, now: datetime) -> bool:
        expires = self.frame.get("expires")
        return _has_expired(None if expires is None else float(expires), now)


def _has_expired(expires: float | None, now: datetime) -> bool:
    """The TTL rule: an item expires at its ``expires`` time (by the clock of the process that judges)."""
    return expires is not None and expires <= now.timestamp()


def expires_at(now: datetime, ttl_minutes: float) -> float:
    """The ``expires`` (POSIX time) of an item written or refreshed at ``now`` with a TTL of ``ttl_minutes``."""
    return (now + timedelta(minutes=ttl_minutes)).timestamp()


@dataclass(frozen=True)
class Expiry:
    """What the TTL sweep reads of an item: its frame's expiry and identity, not its value."""

    key: str
    etag: str
    expires: float | None
    """POSIX time the item expires at; ``None``: it never does."""
    namespace: tuple[str, ...]
    item_key: str
    put_derived: bool = False
    """Whether ``expires`` is the one its put set (not moved by a refresh): that put filed a marker for it."""

    def expired(self, now: datetime) -> bool:
        return _has_expired(self.expires, now)


STORE_CORRUPT_ADVICE = (
    "Other items are unaffected. Put the item again to replace it, or delete the object (`langgraph-s3 store rm` "
    "for an item), which loses what it holds."
)


def _iso(moment: datetime) -> str:
    return moment.isoformat()


@dataclass(frozen=True)
class StoreCodec:
    """Bytes of items, vector shards and name objects, framed like every object of the saver."""

    codec: Codec

    def encode_item(
        self, namespace: Sequence[str], key: str, value: Any, now: datetime, ttl: float | None, version: str
    ) -> bytes:
        return self.codec._frame(
            {
                "ns": list(namespace),
                "key": key,
                "value": self.codec.dump(f"store value {tuple(namespace)!r}/{key!r}", dict(value)),
                "created": _iso(now),
                "updated": _iso(now),
                "ttl": ttl,
                "expires": None if ttl is None else expires_at(now, ttl),
                "ver": version,
            }
        )

    def refreshed(self, stored: Stored, now: datetime) -> bytes:
        frame = dict(stored.frame)
        frame["expires"] = expires_at(now, float(frame["ttl"]))
        return self.codec._frame(frame)

    def _unframe(self, key: str, obj: StoredObject) -> dict[str, Any]:
        """The frame of a store object. Damage is reported with the store's advice (the codec's names the
        saver's tools); a value that cannot be decrypted keeps its own error (the object is intact)."""
        try:
            frame = self.codec._unframe(key, obj.body)
        except CorruptObjectError as exc:
            raise CorruptObjectError(key, exc.reason, STORE_CORRUPT_ADVICE) from None
        if not isinstance(frame, dict):
            raise CorruptObjectError(key, "not a store object", STORE_CORRUPT_ADVICE)
        return frame

    def decode_item(self, key: str, obj: StoredObject) -> Stored:
        frame = self._unframe(key, obj)
        try:
            value = self.codec.load(key, frame["value"])
            item = Item(
                value=value,
                key=str(frame["key"]),
                namespace=tuple(frame["ns"]),
                created_at=datetime.fromisoformat(frame["created"]),
                updated_at=datetime.fromisoformat(frame["updated"]),
            )
        except DecryptionError:
            raise
        except CorruptObjectError as exc:
            raise CorruptObjectError(key, exc.reason, STORE_CORRUPT_ADVICE) from None
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptObjectError(key, f"store item is missing a field ({exc})", STORE_CORRUPT_ADVICE) from exc
        return Stored(key, obj.etag, frame, item)

    def peek_expiry(self, key: str, obj: StoredObject) -> Expiry:
        """When an item expires, and which it is, from its frame alone: the TTL sweep need not decode (nor
        be able to decrypt) the value to delete an expired item."""
        frame = self._unframe(key, obj)
        try:
            expires = None if frame.get("expires") is None else float(frame["expires"])
            ttl = frame.get("ttl")
            put_derived = (
                expires is not None
                and ttl is not None
                and expires_at(datetime.fromisoformat(frame["updated"]), float(ttl)) == expires
            )
            return Expiry(key, obj.etag, expires, tuple(frame["ns"]), str(frame["key"]), put_derived)
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise CorruptObjectError(key, f"store item is missing a field ({exc})", STORE_CORRUPT_ADVICE) from exc

    def peek_version(self, key: str, obj: StoredObject) -> str:
        """The version an item was written with (as :attr:`Stored.version`), from its frame alone: its value is
        neither decoded nor decrypted. Raises :class:`CorruptObjectError` for an object that is not a store item."""
        return str(self._unframe(key, obj).get("ver", ""))

    def encode_shard(self, entries: dict[str, list[Any]]) -> bytes:
        return self.codec._frame({"entries": entries})

    def decode_shard(self, key: str, obj: StoredObject) -> dict[str, list[Any]]:
        frame = self._unframe(key, obj)
        try:
            return dict(frame["entries"])
        except (KeyError, TypeError) as exc:
            raise CorruptObjectError(key, f"vector shard is missing a field ({exc})", STORE_CORRUPT_ADVICE) from exc

    def encode_name(self, value: str) -> bytes:
        return self.codec._frame({"name": value})

    def decode_name(self, key: str, obj: StoredObject) -> str:
        frame = self._unframe(key, obj)
        try:
            return str(frame["name"])
        except (KeyError, TypeError) as exc:
            raise CorruptObjectError(key, f"name object is missing a field ({exc})", STORE_CORRUPT_ADVICE) from exc


def pack_vector(vector: Sequence[float]) -> bytes:
    """float32, little endian: half the bytes of float64, and precise enough for cosine ranking."""
    import array

    packed = array.array("f", vector)
    return packed.tobytes() if _LITTLE else _swapped(packed)


def unpack_vector(data: bytes) -> list[float]:
    import array

    values = array.array("f")
    values.frombytes(data)
    if not _LITTLE:
        values.byteswap()
    return values.tolist()


DISTANCES = ("cosine", "inner_product", "l2")
"""``index['distance_type']`` values, scored as PostgresStore scores them (higher is closer): cosine similarity
(the default, and InMemoryStore's only one), the inner product, and minus the Euclidean distance."""


def similarity_scores(query: Sequence[float], packed: Sequence[bytes], distance: str = "cosine") -> list[float]:
    """The score of each packed vector against ``query`` for ``distance`` (see :data:`DISTANCES`); cosine is
    InMemoryStore's (same float64 arithmetic, so the same scores). With numpy the vectors are scored from their
    packed bytes without turning each into a Python list."""
    if not packed:
        return []
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is optional, as for InMemoryStore
        return _python_scores(query, [unpack_vector(v) for v in packed], distance)
    try:
        matrix = np.frombuffer(b"".join(packed), dtype="<f4").reshape(len(packed), -1).astype(np.float64)
    except ValueError:  # vectors of different sizes (the index changed): the general path
        return _python_scores(query, [unpack_vector(v) for v in packed], distance)
    if matrix.shape[1] != len(query):
        return _python_scores(query, [unpack_vector(v) for v in packed], distance)
    x = np.array(query)
    if distance == "inner_product":
        return [float(v) for v in (matrix @ x).tolist()]
    if distance == "l2":
        return [float(v) for v in (-np.linalg.norm(matrix - x, axis=1)).tolist()]
    x_norm = np.linalg.norm(x)
    y_norm = np.linalg.norm(matrix, axis=1)
    mask = y_norm != 0
    similarities = np.zeros_like(y_norm)
    similarities[mask] = np.dot(matrix[mask], x) / (y_norm[mask] * x_norm)
    return [float(v) for v in similarities.tolist()]


def _python_scores(query: Sequence[float], vectors: list[list[float]], distance: str) -> list[float]:
    if distance == "inner_product":
        return [math.fsum(a * b for a, b in zip(query, v, strict=False)) for v in vectors]
    if distance == "l2":
        return [-math.sqrt(math.fsum((a - b) ** 2 for a, b in zip(query, v, strict=False))) for v in vectors]
    return _cosine_similarity(list(query), vectors)


def _swapped(values: Any) -> bytes:
    values.byteswap()
    return bytes(values.tobytes())


_LITTLE = __import__("sys").byteorder == "little"
