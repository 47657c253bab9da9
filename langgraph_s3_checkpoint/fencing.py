"""What a saver remembers between calls, and how that decides the way a ``put`` commits (its :data:`Fence`)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

ABSENT = "<absent>"
"""Key of the observation "this saver saw no head for the namespace" (a parentless put's parent)."""


def written_here(modified: datetime | None, served: datetime | None, now: datetime) -> datetime | None:
    """When an object read from the server was written, on this machine's clock (``now``): its age by the server's
    own clock (the reply's ``Date`` minus its ``LastModified``) before ``now``.

    Why not ``LastModified`` itself: lifecycle renewal (``Committing._split_values``) compares the time a value
    was written with this machine's clock, and the lifecycle rule expires objects by the server's. A clock behind
    the server's by more than half the TTL would otherwise never find a value old enough to rewrite, and the rule
    would expire it under a live thread. ``None`` (unknown: rewritten at the next put) without both dates.
    """
    if modified is None or served is None:
        return None
    return now - max(served - modified, timedelta(0))


@dataclass(frozen=True)
class HeadSeen:
    """What this saver knows of a head it observed: enough to continue it without reading anything."""

    etag: str
    blobs: Mapping[str, str]
    """Large values (channel -> version) the head's record references: they exist while it is the head."""
    run_id: str | None
    """The run that wrote it: a put of the same run needs no new run-index entry."""
    versions: Mapping[str, str] = field(default_factory=dict)
    """The head's channel versions."""
    inline: Mapping[str, list[Any]] | None = None
    """The head's inline values as stored, for a put to carry over the values whose version did not move;
    ``None`` when they were too large to remember (:data:`REMEMBERED_VALUES_BYTES`)."""


REMEMBERED_VALUES_BYTES = 64 * 1024
"""The most bytes of inline values remembered per head (:func:`head_seen`): the memory keeps up to 10,000 heads."""


def head_seen(
    etag: str,
    blobs: Mapping[str, str],
    run_id: str | None,
    versions: Mapping[str, Any],
    inline: Mapping[str, list[Any]],
) -> HeadSeen:
    """What to remember of a head just written or read."""
    size = sum(len(typed[1]) for typed in inline.values() if len(typed) > 1 and isinstance(typed[1], bytes))
    return HeadSeen(
        etag,
        dict(blobs),
        run_id,
        {channel: str(version) for channel, version in versions.items()},
        dict(inline) if size <= REMEMBERED_VALUES_BYTES else None,
    )


@dataclass(frozen=True)
class Fenced:
    """The put continues a head this saver observed: commit only if it still has this ETag."""

    seen: HeadSeen


@dataclass(frozen=True)
class NewThread:
    """This saver observed that the namespace has no head: commit only if there still is none."""


@dataclass(frozen=True)
class Join:
    """Read the head and commit on top of it: a fork or replay from a checkpoint this saver read
    explicitly (``fork``), or a parent this saver knows nothing of (a fresh saver, an evicted memory)."""

    fork: bool = False


Fence = Fenced | NewThread | Join


class SaverMemory:
    r"""The head this saver last observed in each namespace (the basis of fencing), and when it last
    wrote large values.

    ``heads[(thread, ns)]`` is the checkpoint id the head pointed at when this saver last read or
    wrote it, with the :class:`HeadSeen` of that moment (``None`` for "saw no head"). Only a put whose
    parent is that very checkpoint is :class:`Fenced`: an older parent means the saver has itself seen
    the thread move past it, so the put is a fork (LangGraph's ``__copy__`` updates, a subgraph starting
    over during a replay) and :class:`Join`\ s. Reading a checkpoint explicitly (by id, or below a
    ``before`` bound) is how LangGraph starts a replay, so it marks that checkpoint as a fork point,
    which also exempts a step on top of it from the straggler rule (see ``Core.put``). Everything else
    the saver might remember (that a large value or a ``name`` object exists, that a run is indexed) is
    derived from the observed head, so it is only trusted while the fence holds: nothing here can
    outlive what it describes.
    """

    def __init__(self, max_threads: int = 10_000, blobs_per_namespace: int = 256) -> None:
        self._lock = threading.Lock()
        self._blobs_per_namespace = blobs_per_namespace
        self._max_threads = max_threads
        self._heads: OrderedDict[tuple[str, str], tuple[str, HeadSeen | None]] = OrderedDict()
        self._written: OrderedDict[tuple[str, str], dict[tuple[str, str], datetime]] = OrderedDict()
        self._forks: OrderedDict[tuple[str, str, str], None] = OrderedDict()

    def _touch(self, table: OrderedDict[Any, Any], key: Any, default: Any) -> Any:
        entry = table.get(key)
        if entry is None:
            entry = table[key] = default
            while len(table) > self._max_threads:
                table.popitem(last=False)
        else:
            table.move_to_end(key)
        return entry

    def saw_head(self, thread_id: str, ns: str, checkpoint_id: str | None, seen: HeadSeen | None) -> None:
        with self._lock:
            self._heads[(thread_id, ns)] = (checkpoint_id or ABSENT, seen)
            self._heads.move_to_end((thread_id, ns))
            while len(self._heads) > self._max_threads:
                self._heads.popitem(last=False)

    def fence(self, thread_id: str, ns: str, parent_id: str | None) -> Fence:
        """How a put with this parent commits."""
        with self._lock:
            observed = self._heads.get((thread_id, ns))
            if observed is not None and observed[0] == (parent_id or ABSENT):
                return NewThread() if observed[1] is None else Fenced(observed[1])
            return Join(fork=parent_id is not None and (thread_id, ns, parent_id) in self._forks)

    def head_written_by(self, thread_id: str, ns: str) -> tuple[str, str | None] | None:
        """The checkpoint id of the head this saver last saw in the namespace and the run that wrote it
        (``None``: it saw no head there, or remembers nothing). Only asked, never changed, by ``put_writes``."""
        with self._lock:
            observed = self._heads.get((thread_id, ns))
        if observed is None or observed[1] is None:
            return None
        return observed[0], observed[1].run_id

    def read_explicitly(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        """A checkpoint was read by id or below a bound: how LangGraph starts a replay or a fork.

        A put on top of it joins the current head instead of being fenced on an old observation, and
        is not taken for a straggler when the head has moved on.
        """
        with self._lock:
            self._touch(self._forks, (thread_id, ns, checkpoint_id), None)

    def forget_namespace(self, thread_id: str, ns: str) -> None:
        """After a surprise (a conflict, a rollback): the next put reads the head again."""
        with self._lock:
            self._heads.pop((thread_id, ns), None)

    def forget_thread(self, thread_id: str) -> None:
        with self._lock:
            tables: tuple[OrderedDict[Any, Any], ...] = (self._heads, self._written, self._forks)
            for table in tables:
                for key in [k for k in table if k[0] == thread_id]:
                    del table[key]

    def wrote_blobs(self, thread_id: str, ns: str, refs: Mapping[str, str], when: datetime | None) -> None:
        """Remember when these (channel -> version) values were written, for lifecycle renewal."""
        if when is None:
            return
        with self._lock:
            known = self._touch(self._written, (thread_id, ns), {})
            for ref in refs.items():
                known.pop(ref, None)
                known[ref] = when  # re-inserted: the most recently referenced values are kept
            while len(known) > self._blobs_per_namespace:
                del known[next(iter(known))]

    def blob_written(self, thread_id: str, ns: str, channel: str, version: str) -> datetime | None:
        with self._lock:
            return self._written.get((thread_id, ns), {}).get((channel, version))
