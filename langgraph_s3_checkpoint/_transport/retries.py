"""When a failed request is sent again, and what it raises when it is not: one policy for both transports.

The direct transport (:mod:`.transport`) retries each attempt itself; the boto3 path (:mod:`.shell`) lets botocore
make its own attempts and then asks the same budget, counting botocore's attempts, whether to call again. So a
request meets the same faults with the same patience whichever transport sends it.

Three kinds of failure, three budgets:

* **transient** (5xx, ``RequestTimeout``, ``InternalError``, resets, timeouts): ``max_attempts`` attempts in all
  (3 by default), full-jitter backoff on a 50 ms scale (botocore's standard mode). More would only make a dead
  endpoint take longer to report.
* **throttled** (429, ``503 SlowDown``, ``Throttling`` ...): a provider asking for patience. R2 and GCS allow one
  write per second per key, Spaces fewer, and the head of a thread is rewritten every superstep, so a fast graph
  meets them on every step. At least ``max_attempts`` attempts, and more while the waits fit in the request's
  time budget (the saver's ``operation_timeout``): full-jitter backoff on a 1 s scale doubling to 20 s
  (botocore's throttling scale), so a writer paced by a per-key limit gets through at the provider's rate instead
  of failing after three tries.
* **conflict** (``409 ConditionalRequestConflict``): AWS's answer to a conditional write that raced another
  conditional write on the same key, documented as "retry". It is not a refusal: the same request is sent again
  (the next answer is 200 or 412), up to :data:`CONFLICT_ATTEMPTS` attempts on a 50 ms scale within the time
  budget. Taking it for 412 would fail a run nobody else touched with ``CheckpointConflictError``, or take a
  create-only PUT for "exists".
"""

from __future__ import annotations

import enum
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from .._protocol.requests import Request, describe_condition, is_conditional
from ..errors import (
    ConditionalRequestConflictError,
    ConditionalWritesUnsupportedError,
    S3CheckpointError,
    error_for_code,
)

RETRY_STATUS = frozenset({500, 502, 503, 504})
THROTTLING_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestThrottled", "TooManyRequestsException", "TooManyRequests"}
)
TRANSIENT_CODES = frozenset({"RequestTimeout", "RequestTimeoutException", "InternalError"})
CONFLICT_CODE = "ConditionalRequestConflict"
CONFLICT_ATTEMPTS = 8
"""Attempts of a request answered ``409 ConditionalRequestConflict`` each time (at least ``max_attempts``). A burst
of conflicts on one key ends within a few attempts; a server that answers 409 to every conditional write never."""
MAX_BACKOFF = 20.0
"""Longest wait between two attempts, in seconds (botocore's)."""
CONFLICT_MAX_BACKOFF = 1.0


class Kind(enum.Enum):
    """What a failed attempt was, for the retry budget."""

    TRANSIENT = "transient"
    THROTTLED = "throttled"
    CONFLICT = "conflict"


_SCALE = {Kind.TRANSIENT: 0.05, Kind.THROTTLED: 1.0, Kind.CONFLICT: 0.05}
_CAP = {Kind.TRANSIENT: MAX_BACKOFF, Kind.THROTTLED: MAX_BACKOFF, Kind.CONFLICT: CONFLICT_MAX_BACKOFF}


def kind_of(status: int | None, code: str) -> Kind | None:
    """The kind of a failed answer (its HTTP status and S3 error code); ``None``: not worth another attempt."""
    if code == CONFLICT_CODE:
        return Kind.CONFLICT
    if status == 429 or code in THROTTLING_CODES:
        return Kind.THROTTLED
    if status in RETRY_STATUS or code in TRANSIENT_CODES:
        return Kind.TRANSIENT
    return None


class Retries:
    """The retry budget of one request (see the module's doc): after each failed attempt, how long to wait
    before the next one, or ``None`` to give up.

    ``contention_seconds`` bounds the time a throttled or conflicting request keeps trying (counted from the
    first attempt, by ``clock``); ``max_attempts`` bounds transient failures, and throttled ones while over time."""

    def __init__(
        self, max_attempts: int, contention_seconds: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_attempts = max_attempts
        self.contention_seconds = contention_seconds
        self._clock = clock
        self._started = clock()
        self.failed: Counter[Kind] = Counter()
        """Failed attempts so far, by kind."""

    def wait_after(self, kind: Kind | None, attempts: int = 1) -> float | None:
        """Seconds to wait after ``attempts`` more failed attempts of ``kind`` (botocore may have made several
        for one call), or ``None`` when the request has had its budget."""
        if kind is None:
            return None
        self.failed[kind] += attempts
        tries = self.failed[kind]
        wait = random.random() * min(_SCALE[kind] * 2 ** (tries - 1), _CAP[kind])
        if kind is Kind.TRANSIENT:
            return wait if tries < self.max_attempts else None
        if kind is Kind.CONFLICT and tries >= max(CONFLICT_ATTEMPTS, self.max_attempts):
            return None
        within = self._clock() - self._started + wait <= self.contention_seconds
        return wait if within or tries < self.max_attempts else None


def final_error(
    request: Request[Any], bucket: str, what: str, status: int | None, code: str, detail: str, attempts: int
) -> S3CheckpointError:
    """The error for a request that failed for good (both transports): a 409 conflict that outlasted its budget,
    a 501 to a conditional request (the server does not implement conditions), or :func:`error_for_code`'s."""
    if code == CONFLICT_CODE:
        return ConditionalRequestConflictError(
            f"{what} ({describe_condition(request)}) was answered 409 ConditionalRequestConflict on each of its "
            f"{attempts} attempts: another conditional write to the same key kept racing it, or the server answers "
            "409 to every conditional write. Nothing was written by it; retry the call."
        )
    if (status == 501 or code == "NotImplemented") and is_conditional(request):
        return ConditionalWritesUnsupportedError(
            f"{what} with {describe_condition(request)} was answered HTTP {status or 501} {code or 'NotImplemented'}: "
            "the S3 server does not implement conditional requests, so concurrent writers could silently fork a "
            "thread's history. Use a server that enforces them (docs/operations.md, S3 providers), or pass "
            "require_conditional_writes=False if only one process ever writes each thread (no conditional "
            "headers are sent then).",
            check=f"{describe_condition(request)} on {what}",
            answer=f"HTTP {status or 501} {code or 'NotImplemented'}",
        )
    return error_for_code(code, bucket, what, detail)
