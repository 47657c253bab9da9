"""The saver's plans in one class: :class:`Core` composes reading (:mod:`.reading`), committing
(:mod:`.committing`) and thread edits (:mod:`.thread_edits`) over one bucket prefix, free of I/O.

Every operation is a *plan*: a generator that yields batches of :mod:`requests` and receives their
replies (see :mod:`langgraph_s3_checkpoint._protocol.requests`). The sync and async savers run the same plans
through two small drivers (:mod:`langgraph_s3_checkpoint._transport.bucket_io`), so there is exactly one copy of the
commit protocol: :meth:`.committing.Committing.put`, whose docstring states it step by step, and one rule
of which records are committed, :mod:`.chain`'s (docs/design.md, "Read this first", walks through both).
"""

from __future__ import annotations

from .committing import Committing, refusal_error
from .fencing import FENCING_TABLE, SETTLE_TABLE, CallerReads, HeadSeen, ParentRead, Rule, SaverMemory, settle
from .reading import CheckpointAddress, CoreState, Reading, checkpoint_config, matches, merge_writes, parse_config
from .thread_edits import Maintenance


class Core(Maintenance):
    """Plans for every saver operation over one bucket prefix: :class:`~.reading.Reading`,
    :class:`~.committing.Committing` and :class:`~.maintenance.Maintenance`, over the fields of
    :class:`~.reading.CoreState`."""


__all__ = [
    "FENCING_TABLE",
    "SETTLE_TABLE",
    "CallerReads",
    "CheckpointAddress",
    "Committing",
    "Core",
    "CoreState",
    "HeadSeen",
    "Maintenance",
    "ParentRead",
    "Reading",
    "Rule",
    "SaverMemory",
    "checkpoint_config",
    "matches",
    "merge_writes",
    "parse_config",
    "refusal_error",
    "settle",
]
