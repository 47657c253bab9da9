"""The saver's logic, free of I/O: for each LangGraph operation, which objects to read and write, in
what order, under which conditions, and how to turn the replies into a result or an error.

Every operation is a *plan*: a generator that yields batches of :mod:`requests` and receives their
replies (see :mod:`langgraph_s3_checkpoint.requests`). The sync and async savers run the same plans
through two small drivers (:mod:`langgraph_s3_checkpoint.shell`), so there is exactly one copy of the
commit protocol: :meth:`.committing.Committing.put`, whose docstring states it step by step.

In short (docs/design.md has the long form):

1. ``put`` writes what the new record needs first, in parallel: large channel values that are not known
   to exist, run-index entries, ``name`` objects.
2. Then it sends the record and the ``head`` together. The head is a full copy of the record, replaced
   conditionally: ``If-Match`` on the ETag this saver observed at the parent, ``If-None-Match: *`` for a
   new thread, or ``If-Match`` on a head just read for a fork. That conditional PUT is the commit, and
   the point where a second writer loses. Each record names the head it replaced, so the committed
   records form a chain that every reader follows (:mod:`langgraph_s3_checkpoint.chain`).

A crash before the head lands leaves a record off the chain, invisible; a crash after it leaves a
committed checkpoint whose record, if it did not land, is restored from the head.
"""

from __future__ import annotations

from .committing import Committing, refusal_error
from .fencing import FENCING_TABLE, SETTLE_TABLE, CallerReads, HeadSeen, ParentRead, Rule, SaverMemory, settle
from .maintenance import Maintenance
from .reading import CheckpointAddress, CoreState, Reading, checkpoint_config, matches, merge_writes, parse_config


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
