"""The run index of a thread made from another thread's objects (``copy_thread``, ``import``).

A put indexes its run with one entry, ``runs/{run}/{T}/{N}``, naming the oldest checkpoint the run touched in
(T, N) (``committing.Committing._index_entries``), so that ``delete_for_runs`` finds every namespace a run wrote
to without scanning the bucket. The index is keyed by run, so a copy cannot list the entries of its source thread;
it rebuilds them from what the objects it carries say: a record of release 0.2 names its run in its frame, in the
clear (as the index's keys do; so no serializer key is needed), a writes object names the run of each write, and a
0.1.x thread's twins (``threads/{T}/r/{run}/{N}``) name their entry's checkpoint. The oldest checkpoint per
(run, namespace) wins, as the first put's entry would have.
"""

from __future__ import annotations

from .codec import Codec
from .keys import KeyKind, Layout, escape, revert_id
from .requests import Put

CARRYING = frozenset({KeyKind.RECORD, KeyKind.WRITE, KeyKind.RUN_ENTRY})
"""The kinds of objects whose bodies name runs."""


class CarriedRuns:
    """The runs a thread's objects name, with the oldest checkpoint each touched per namespace (escaped segments;
    memory: one entry per run and namespace)."""

    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        self.first: dict[tuple[str, str], str] = {}
        """(run segment, namespace segment) -> the oldest checkpoint id named."""

    def note(self, key: str, relative: str, kind: KeyKind, body: bytes) -> None:
        """What one object says (``relative``: its key under the thread, as :func:`.keys.classify` took it)."""
        parts = relative.split("/")
        if kind is KeyKind.RUN_ENTRY:  # r/{run}/{N}: a 0.1.x twin, naming its entry's checkpoint
            checkpoint_id = body.decode("utf-8", "surrogatepass")
            if checkpoint_id:
                self._touched(parts[1], parts[2], checkpoint_id)
            return
        ns_segment, checkpoint_id = parts[1], revert_id(parts[3])  # ns/{N}/c/{R}/...
        if kind is KeyKind.RECORD:
            runs = [self.codec.peek_run(key, body)]
        else:
            runs = [write.run for write in self.codec.peek_task_writes(key, body).stored]
        for run in runs:
            if run is not None:
                self._touched(escape(run), ns_segment, checkpoint_id)

    def _touched(self, run_segment: str, ns_segment: str, checkpoint_id: str) -> None:
        known = self.first.get((run_segment, ns_segment))
        if known is None or checkpoint_id < known:
            self.first[(run_segment, ns_segment)] = checkpoint_id

    def entries(self, layout: Layout, thread_segment: str) -> list[Put]:
        """The target thread's entries (unconditional, like the copy's other objects: the target is new, and an
        entry a deleted thread of the same id left behind is rewritten)."""
        return [
            Put(layout.run_entry_at(run_segment, thread_segment, ns_segment), checkpoint_id.encode())
            for (run_segment, ns_segment), checkpoint_id in sorted(self.first.items())
        ]
