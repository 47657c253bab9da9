"""A map bounded in bytes, least recently used first out: what a saver recalls between calls
(:class:`.fencing.Recall`) and the names a store knows (:class:`.store.plans.KnownNames`), so that a long-lived
process keeps at most its budget of either."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LeastRecentlyUsed(Generic[K, V]):
    """Values by key, each with the size its owner counts for it, within ``max_bytes``: keeping one drops the least
    recently used beyond the budget, and a value larger than the whole budget is not kept. Not locked: its owners
    hold their own locks."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self.retained_bytes = 0
        """Bytes of the values kept now (at most ``max_bytes``)."""

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        """The value kept under ``key``, now the most recently used; ``None`` if none is."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def keep(self, key: K, value: V, size: int) -> None:
        """Keep ``value`` under ``key`` (instead of what was there), as the most recently used."""
        self.forget(key)
        if size > self.max_bytes:
            return
        self._entries[key] = (value, size)
        self.retained_bytes += size
        while self.retained_bytes > self.max_bytes:
            _, (_, evicted) = self._entries.popitem(last=False)
            self.retained_bytes -= evicted

    def forget(self, key: K) -> None:
        """Drop what is kept under ``key``, if anything."""
        old = self._entries.pop(key, None)
        if old is not None:
            self.retained_bytes -= old[1]

    def __iter__(self) -> Iterator[K]:
        """The keys kept now, least recently used first."""
        return iter(self._entries)
