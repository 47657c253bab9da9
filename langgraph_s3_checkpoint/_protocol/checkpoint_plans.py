"""The saver's plans in one class: :class:`CheckpointPlans` composes reading (:mod:`.reading`), committing
(:mod:`.committing`) and thread edits (:mod:`.thread_edits`) over one bucket prefix, free of I/O.

Every operation is a *plan*: a generator that yields batches of :mod:`.requests` and receives their
replies (see :mod:`langgraph_s3_checkpoint._protocol.requests`). The sync and async savers run the same plans
through two small drivers (:mod:`langgraph_s3_checkpoint._transport.bucket_io`), so there is exactly one copy of the
commit protocol: :meth:`.committing.Committing.put`, whose docstring states it step by step, and one rule
of which records are committed, :mod:`.chain`'s (docs/design.md, "Read this first", walks through both).
"""

from __future__ import annotations

from .committing import Committing, refusal_error
from .delta_history import DeltaHistoryReading
from .fencing import FENCING_TABLE, SETTLE_TABLE, HeadSeen, ParentRead, ReadId, Recall, Rule, RunReads, settle
from .reading import CheckpointAddress, PlansState, Reading, checkpoint_config, matches, merge_writes, parse_config
from .thread_edits import ThreadEdits


class CheckpointPlans(ThreadEdits, DeltaHistoryReading):
    """Plans for every saver operation over one bucket prefix: :class:`~.reading.Reading`,
    :class:`~.delta_history.DeltaHistoryReading`, :class:`~.committing.Committing` and
    :class:`~.thread_edits.ThreadEdits`, over the fields of :class:`~.reading.PlansState`."""


__all__ = [
    "FENCING_TABLE",
    "SETTLE_TABLE",
    "CheckpointAddress",
    "CheckpointPlans",
    "Committing",
    "HeadSeen",
    "ParentRead",
    "PlansState",
    "ReadId",
    "Reading",
    "Recall",
    "Rule",
    "RunReads",
    "ThreadEdits",
    "checkpoint_config",
    "matches",
    "merge_writes",
    "parse_config",
    "refusal_error",
    "settle",
]
