"""One task's pending writes on one checkpoint, as its writes object keeps them (no I/O).

LangGraph's rule, as InMemorySaver applies it per (task, idx): the first write of a regular channel
(idx >= 0) wins, a special channel (``__error__``, ``__scheduled__``, ``__interrupt__``, ``__resume__``: a
negative idx) replaces. What a reader sees is that rule applied to the task's calls in the order they were
stored.

A rollback (``delete_for_runs``) must make a checkpoint read as if a run had never written to it, and one
task object can hold the writes of several runs: run r0 stops at ``interrupt()`` on checkpoint S (its
task's ``__interrupt__`` write), run r1 resumes it (its ``__resume__``, then the node's output, in the
same object). So every write is kept with the run that made it, including the writes another run's write
hides (a special write that replaced it, or an earlier regular write at its index): taking a run out
recomputes the rule over what the other runs wrote, in their order, which is exactly what a reader would
have seen had the run never written. Per (idx, run) at most one write is kept (a run's later regular write
at an index it already holds never shows; its later special write replaces its own), so an object grows
with the number of runs that wrote to the task, not with the number of calls.

Each write also keeps its own ``task_path``, as InMemorySaver does: readers order a checkpoint's writes by
``writes_sort_key(task_path, task_id, idx)``, and one task can be written under two paths (LangGraph
writes a task's resume value before it knows the task's path).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

RawWrite = tuple[int, str, list[Any]]
"""One write of a call: (idx, channel, [serde type tag, bytes]), not deserialized."""


@dataclass(frozen=True)
class StoredWrite:
    """One write as a writes object keeps it."""

    idx: int
    channel: str
    typed: list[Any]
    """The value as stored: serde type tag and bytes (never deserialized to merge or roll back)."""
    run: str | None
    """The run that wrote it (``None``: written without a run id, or by a release that did not record it)."""
    path: str
    """The ``task_path`` of the call that wrote it."""


@dataclass(frozen=True)
class TaskWrites:
    """Every write kept for one task on one checkpoint."""

    task_id: str
    path: str
    """The ``task_path`` of the latest call (older releases read one path per object)."""
    stored: tuple[StoredWrite, ...] = field(default_factory=tuple)
    """In the order they were stored, as far as it matters: per index, the order of the calls."""

    @staticmethod
    def of_call(task_id: str, path: str, run: str | None, writes: Sequence[RawWrite]) -> TaskWrites:
        """What the first ``put_writes`` call of a task stores."""
        merged = TaskWrites(task_id, path).merge(path, run, writes)
        return merged if merged is not None else TaskWrites(task_id, path)

    def visible(self) -> list[StoredWrite]:
        """What readers see: per index the first regular write, or the last special one (indices in the
        order they were first written)."""
        chosen: dict[int, StoredWrite] = {}
        for write in self.stored:
            if write.idx < 0 or write.idx not in chosen:
                chosen[write.idx] = write
        return list(chosen.values())

    def hidden(self) -> list[StoredWrite]:
        """The writes kept for a rollback only (another run's write at their index shows instead)."""
        shown = {id(write) for write in self.visible()}
        return [write for write in self.stored if id(write) not in shown]

    def merge(self, path: str, run: str | None, writes: Sequence[RawWrite]) -> TaskWrites | None:
        """The object after a later call of the task; ``None`` when nothing changes (a retry, or regular
        writes this run already made)."""
        stored = list(self.stored)
        changed = False
        for idx, channel, typed in writes:
            write = StoredWrite(idx, channel, typed, run, path)
            mine = [i for i, kept in enumerate(stored) if kept.idx == idx and kept.run == run]
            if idx >= 0:
                if mine:
                    continue  # the run's first write at this index is the one that counts
                stored.append(write)
                changed = True
                continue
            at_idx = [i for i, kept in enumerate(stored) if kept.idx == idx]
            if mine and at_idx[-1] == mine[0] and stored[mine[0]] == write:
                continue  # already the one shown (a retry)
            if mine:
                del stored[mine[0]]
            stored.append(write)  # a special write replaces: it is now the last at its index
            changed = True
        return TaskWrites(self.task_id, path, tuple(stored)) if changed else None

    def without_run(self, run: str) -> TaskWrites | None:
        """The object as if ``run`` had never written to it; ``None`` when it holds none of its writes."""
        kept = tuple(write for write in self.stored if write.run != run)
        return None if len(kept) == len(self.stored) else TaskWrites(self.task_id, self.path, kept)

    def runs(self) -> set[str]:
        return {write.run for write in self.stored if write.run is not None}


def restored(task_id: str, path: str, visible: Sequence[StoredWrite], hidden: Sequence[StoredWrite]) -> TaskWrites:
    """A :class:`TaskWrites` from what its object stores: the visible writes and, in their order, the hidden
    ones. At an index, a regular write shows before the ones it hides (the first wins) and a special write
    after them (the last wins), which is all the order the rule depends on."""
    stored: list[StoredWrite] = []
    for write in visible:
        others = [h for h in hidden if h.idx == write.idx]
        stored.extend([write, *others] if write.idx >= 0 else [*others, write])
    return TaskWrites(task_id, path, tuple(stored))
