"""Garbage collection: delete objects that no committed checkpoint needs.

What counts as garbage, and why deleting it is safe while the saver is in use, is said where the plan
lives: :mod:`langgraph_s3_checkpoint._protocol.garbage_collection`. This module runs that plan through a
saver's own I/O shell (boto3, the direct transport or an in-memory bucket).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._protocol.garbage_collection import GcReport, gc_plan

if TYPE_CHECKING:
    from .saver import BaseS3Saver


def gc(saver: BaseS3Saver, *, grace_seconds: float = 3600, dry_run: bool = False) -> GcReport:
    """Delete leftovers of interrupted and losing operations under the saver's prefix.

    Only objects older than ``grace_seconds`` (by the server's clock) are deleted. With ``dry_run``
    nothing is deleted and the report says what would be. Safe to run while the saver is in use, as
    long as no ``put`` takes longer than the grace period. See the module docstring for what counts
    as garbage. Bounded per request only, not by ``operation_timeout``.

    Args:
        saver: The saver whose prefix to collect, through its own I/O.
        grace_seconds: Leave every object younger than this.
        dry_run: Delete nothing; report what would be deleted.

    Returns:
        What was found (and deleted), by category, and the foreign keys left alone.

    Raises:
        InvalidConfigError: ``grace_seconds`` is negative.
        NewerFormatError: An object was written by a newer release: gc stops rather than take it for garbage.
        SaverMisuseError: The saver is closed.
        S3CheckpointError: The saver's I/O errors (:class:`S3RequestError`, :class:`S3AccessError`,
            :class:`BucketNotFoundError`, :class:`ConditionalWritesUnsupportedError` at the first write).
    """
    saver.bucket_io.check_open("gc")
    # A sweep of the whole prefix: each request is bounded by the timeouts, the sweep by nothing.
    return saver.bucket_io.run(gc_plan(saver.plans, grace_seconds, dry_run), bounded=False)


async def agc(saver: BaseS3Saver, *, grace_seconds: float = 3600, dry_run: bool = False) -> GcReport:
    """:func:`gc` for asyncio: the same plan, awaiting each batch of requests; same arguments, result and
    errors."""
    saver.bucket_io.check_open("agc")
    return await saver.bucket_io.arun(gc_plan(saver.plans, grace_seconds, dry_run), bounded=False)


__all__ = ["GcReport", "agc", "gc"]
