"""Whether the server enforces conditional writes, checked before the first write: the probe, its verdict kept once
per process, and what a saver does without them.

Why before the first write and not only in ``setup()``. The saver's safety is S3's conditional writes (the head's
``If-Match``, create-only ``If-None-Match: *`` for writes and large values, conditional DELETE in expiry and the
store's sweep). A server that ignores them (Google Cloud Storage's XML API, Garage, OCI) passes every single-writer
test and silently forks a thread under two writers; one that refuses them (Backblaze B2: 501) fails every write with
an HTTP error. A check that only ``setup()`` runs leaves everyone who skips it unprotected, so the shell
(:class:`.bucket_io.BucketIO`) runs it before the first write request of every saver and store (or when ``setup()``
asks, :class:`~.._protocol.requests.ProbeConditionalWrites`), once per process for an endpoint and bucket, whoever asks
first: concurrent first writes wait for the one probe, later ones find its verdict and pay nothing (one attribute read
per batch until it is known, none after).

:func:`probe` is a plan like every other operation; on fresh keys under ``{prefix}_setup/probe-`` (where ``gc``
collects what an interrupted probe leaves) it checks, in five round trips and nineteen requests (1 LIST, 11 PUT, 4 GET,
2 DELETE, 1 DeleteObjects; a refused write that must be read back costs a GET and a round trip more):

0. the bucket exists: a one-key LIST under the probe's key, a read, before any PUT. A missing bucket raises
   :class:`~..errors.BucketNotFoundError` there, as a read of the saver does (SeaweedFS creates a bucket at the first
   PutObject to it, so a mistyped bucket name would otherwise become a new bucket at the first write of a store,
   a cache or ``put_writes``, none of which reads first); it is an error, not a verdict, so the next write asks again;
1. a create-only PUT (``If-None-Match: *``) of a new key succeeds;
2. a second create-only PUT of an existing key is refused;
3. a PUT with a wrong ``If-Match`` is refused;
4. a PUT with the right ``If-Match`` succeeds;
5. a PUT with ``If-Match`` on a missing key is refused and creates nothing (older MinIO created it: a straggler
   then resurrects a deleted thread);
6. a DELETE with a stale ``If-Match`` (an ETag the object does not have) is refused and keeps the object (Garage
   ignores it: expiry and the store's sweep would delete what was just rewritten);
7. a DELETE with the right ``If-Match`` deletes;
8. two create-only PUTs of one key sent in parallel: exactly one wins, and the key holds its bytes.

A refused PUT is read back before it counts as refused: an earlier attempt of it may have landed with its answer
lost, and its retry meets the condition that attempt met (the commit protocol reasons the same way). A 501 or a
409 that never stops is a verdict too (:mod:`.retries` raises them). Other errors (an unreachable endpoint, a
deadline) are not: they are raised to the caller, and the next write probes again.

Without conditional writes. ``require_conditional_writes=False`` (one writer per thread, the user's promise) must
work on a server that refuses the headers, so the saver then sends none: :func:`without_conditions` replaces each
conditional request of a batch by a LIST of its key (one key, its ETag) and the plain request when the condition
holds, or the reply ``PRECONDITION_FAILED`` when it does not. Every plan runs unchanged: a create-only write still
finds an existing object (``put_writes`` still merges a task's later writes instead of replacing them), a head
still moves only from the ETag the saver saw, the store's sweep still deletes only what it read. What is lost is
atomicity: another writer between the LIST and the write is not seen, which is why it is single-writer only. The
cost is one more round trip for each batch that holds a conditional request (a step's commit: 2 instead of 1).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import logging
import threading
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .._protocol.plans import landed, one
from .._protocol.requests import (
    CREATE,
    PRECONDITION_FAILED,
    Create,
    DeleteIfMatch,
    DeleteObjects,
    Get,
    ListKeys,
    Plan,
    PreconditionFailed,
    Put,
    Request,
    StoredObject,
    Update,
    Written,
    is_conditional,
    same_etag,
)
from ..errors import ConditionalRequestConflictError, ConditionalWritesUnsupportedError

logger = logging.getLogger("langgraph_s3_checkpoint")

NO_SUCH_ETAG = '"00000000000000000000000000000000"'
"""An ETag no object of the probe has (the MD5 of none of its bodies)."""

CHECKS = {
    "create": "a create-only PUT (If-None-Match: *) of a new key succeeds",
    "create again": "a second create-only PUT of an existing key is refused",
    "wrong If-Match": "a PUT with a wrong If-Match is refused",
    "right If-Match": "a PUT with the right If-Match succeeds",
    "If-Match on a missing key": "a PUT with If-Match on a missing key is refused and creates nothing",
    "stale If-Match DELETE": "a DELETE with a stale If-Match is refused and keeps the object",
    "right If-Match DELETE": "a DELETE with the right If-Match deletes the object",
    "race": "two create-only PUTs of one key sent in parallel: exactly one wins",
    "conditional requests": "the server answers conditional requests (If-None-Match, If-Match)",
}
"""What each check of :func:`probe` asserts, as errors name it."""


@dataclass(frozen=True)
class Failed:
    """The first check of :func:`probe` that failed, and what the server answered."""

    check: str
    """A key of :data:`CHECKS`."""
    answer: str


def _answer(reply: Written | PreconditionFailed) -> str:
    return "412 Precondition Failed (or 404)" if reply is PRECONDITION_FAILED else f"success (ETag {reply.etag})"


def probe(key: str) -> Plan[Failed | None]:
    """Check that the server enforces conditional writes (the module's doc lists the checks); ``None`` when it
    does, else the first check that failed. Its objects are ``key`` and ``key-*``, all deleted at the end (or
    collected by ``gc`` as ``setup_probe`` when the plan is cut short).

    Each check has a key of its own, written at most twice (created, then checked): R2 and GCS allow one write per
    second per key and throttle the rest, so the second writes are throttled in parallel, not one after another.
    Through the dialect proxy at one write per second per key the probe took 4.0-5.0 s (three runs), where an
    earlier version whose checks shared keys took 8.8-10.9 s; without the limit, 0.4 s on the test machine."""
    keys = Keys(*(f"{key}{suffix}" for suffix in ("", "-again", "-wrong", "-kept", "-deleted", "-missing", "-race")))
    yield [ListKeys(key, max_keys=1)]  # a read first: a missing bucket raises BucketNotFoundError before any PUT
    failed = yield from _checks(keys)
    yield [DeleteObjects(tuple(keys))]
    return failed


class Keys(NamedTuple):
    """The probe's objects, one per check: replaced with the right If-Match, created again, replaced with a wrong
    If-Match, deleted with a stale If-Match, deleted with the right one, never created, raced for."""

    replaced: str
    again: str
    wrong: str
    kept: str
    deleted: str
    missing: str
    race: str


@dataclass(frozen=True)
class _Created:
    """What the probe's first round trip left: the ETags the checks need, and the replies checked later."""

    replaced: str
    deleted: str
    stray: Written | PreconditionFailed
    racers: list[Written | PreconditionFailed]


def _create(keys: Keys) -> Plan[_Created | Failed]:
    """The probe's first round trip: every key created that a check needs, the PUT with If-Match on the missing
    key, and the race. A refused create is read back: its first attempt may have landed with its answer lost."""
    names = (keys.replaced, keys.again, keys.wrong, keys.kept, keys.deleted)
    creates = [Put(name, name.encode(), mode=CREATE) for name in names]
    *created, stray, race_a, race_b = yield [
        *creates,
        Put(keys.missing, b"m", mode=Update(NO_SUCH_ETAG)),
        Put(keys.race, b"a", mode=CREATE),
        Put(keys.race, b"b", mode=CREATE),
    ]
    held = yield from landed(creates, created)
    etags = [reply.etag if isinstance(reply, Written) else None for reply in created]
    for i in (0, 4):  # the ETags the checks use
        if held[i] and etags[i] is None:
            etags[i] = yield from _landed(creates[i].key, creates[i].body)
    replaced, deleted = etags[0], etags[4]
    if replaced is None or deleted is None or not all(held):
        return Failed("create", "412 Precondition Failed, for a key nobody had written")
    return _Created(replaced, deleted, stray, [race_a, race_b])


def _checks(keys: Keys) -> Plan[Failed | None]:
    created = yield from _create(keys)
    if isinstance(created, Failed):
        return created
    first, stray = created.replaced, created.stray
    right, again, wrong, stale, done, stray_now, race_now = yield [
        Put(keys.replaced, b"replaced", mode=Update(first)),
        Put(keys.again, b"again", mode=CREATE),
        Put(keys.wrong, b"wrong", mode=Update(NO_SUCH_ETAG)),
        DeleteIfMatch(keys.kept, first),  # the replaced key's first ETag: one this object never had
        DeleteIfMatch(keys.deleted, created.deleted),
        Get(keys.missing),
        Get(keys.race),
    ]
    if again is not PRECONDITION_FAILED:
        return Failed("create again", f"{_answer(again)}: the object was replaced")
    if wrong is not PRECONDITION_FAILED:
        return Failed("wrong If-Match", f"{_answer(wrong)}: the object was replaced")
    if not isinstance(right, Written) and (yield from _landed(keys.replaced, b"replaced")) is None:
        return Failed("right If-Match", "412 Precondition Failed, for the ETag the object had")
    if stray is not PRECONDITION_FAILED or stray_now is not None:
        return Failed("If-Match on a missing key", f"{_answer(stray)}: the object was created")
    race_failure = _race_failure(created.racers, race_now)
    if race_failure is not None:
        return Failed("race", race_failure)
    kept, gone = yield [Get(keys.kept), Get(keys.deleted)]
    if stale is not PRECONDITION_FAILED or kept is None:
        return Failed("stale If-Match DELETE", "success: the object was deleted" if kept is None else "success")
    if gone is not None:
        answer = "412 Precondition Failed, for the ETag the object had" if done is PRECONDITION_FAILED else "success"
        return Failed("right If-Match DELETE", f"{answer}: the object is still there")
    return None


def _landed(key: str, body: bytes) -> Plan[str | None]:
    """The ETag of ``key`` if it holds ``body`` (a refused PUT whose earlier attempt landed), else ``None``."""
    now = yield from one(Get(key))
    return now.etag if now is not None and now.body == body else None


def _race_failure(racers: list[Written | PreconditionFailed], stored: StoredObject | None) -> str | None:
    """What went wrong in the race of two create-only PUTs (bodies ``a`` and ``b``), or ``None``."""
    bodies = (b"a", b"b")
    winners = [body for body, reply in zip(bodies, racers, strict=True) if isinstance(reply, Written)]
    held = None if stored is None else stored.body
    if len(winners) > 1:
        return "success for both writers"
    if winners and held != winners[0]:
        return "success for one writer, and the other writer's bytes are stored"
    if not winners and held not in bodies:  # both refused, and neither landed with its answer lost
        return "412 Precondition Failed for both writers"
    return None


def without_conditions(batch: list[Request]) -> Plan[list[Any]]:
    """Run ``batch`` without sending a conditional header (see the module's doc): a LIST of each conditional
    request's key first, in parallel with the batch's other requests, then the conditional writes whose condition
    holds, as plain requests. Replies come back as the conditional requests would have had them."""
    conditional = [i for i, request in enumerate(batch) if is_conditional(request)]
    if not conditional:
        return (yield batch)
    keys = [_key_of(batch[i]) for i in conditional]
    rest = [i for i in range(len(batch)) if i not in set(conditional)]
    replies = yield [*(batch[i] for i in rest), *(ListKeys(key, max_keys=1) for key in keys)]
    answers: dict[int, Any] = dict(zip(rest, replies[: len(rest)], strict=True))
    pages = replies[len(rest) :]
    send: dict[int, Request] = {}
    for i, key, page in zip(conditional, keys, pages, strict=True):
        etag = page.etags[0] if page.keys and page.keys[0] == key and page.etags else None
        plain = _plain(batch[i], etag)
        if isinstance(plain, Request):
            send[i] = plain
        else:
            answers[i] = plain
    sent = (yield list(send.values())) if send else []
    answers.update(zip(send, sent, strict=True))
    return [answers[i] for i in range(len(batch))]


def _key_of(request: Request) -> str:
    assert isinstance(request, (Put, DeleteIfMatch))  # the conditional requests
    return request.key


def _plain(request: Request, etag: str | None) -> Request | PreconditionFailed | None:
    """The plain request to send when ``request``'s condition holds for an object whose ETag is ``etag`` (``None``:
    missing), else its reply: :data:`PRECONDITION_FAILED`, or ``None`` for a conditional DELETE of a missing key."""
    if isinstance(request, DeleteIfMatch):
        if etag is None:
            return None
        return DeleteObjects((request.key,)) if same_etag(etag, request.etag) else PRECONDITION_FAILED
    assert isinstance(request, Put)
    mode = request.mode
    if isinstance(mode, Create):
        holds = etag is None
    else:
        assert isinstance(mode, Update)  # the conditional PUTs
        holds = etag is not None and same_etag(etag, mode.etag)
    return Put(request.key, request.body, expires=request.expires) if holds else PRECONDITION_FAILED


WITHOUT_THEM = {
    "saver": "require_conditional_writes=False: writing without conditional headers, each condition checked by a "
    "LIST first. Safe for one writer per thread only.",
    "cache": "the node cache writes without conditional headers, as it needs none (its entries are plain PUTs: the "
    "last writer wins); its sweep checks each conditional delete with a LIST first, so a sweep racing a set may "
    "delete the entry just written (a miss: the node runs again).",
}
"""What writing without conditional headers risks, by who writes (:attr:`ConditionalWrites.serves`; the store's is the
saver's)."""


class Enforcement(enum.Enum):
    """How a saver writes once the probe has spoken."""

    ENFORCED = "the server enforces conditional writes"
    WITHOUT = "no conditional headers (require_conditional_writes=False: a single writer; the node cache's default)"


_VERDICTS: dict[Hashable, tuple[concurrent.futures.Future[Any], int]] = {}
"""Per endpoint, bucket and extra headers: the probe's verdict (``Failed | None``), or the probe in flight, and the
thread that runs it."""
_VERDICTS_LOCK = threading.Lock()
_TRY_AGAIN = object()
"""A probe abandoned by a cancelled caller: whoever waited for it probes itself."""


def _claim(key: Hashable, *, blocking: bool) -> tuple[concurrent.futures.Future[Any], bool]:
    """The verdict for ``key`` (known or in flight), and whether the caller must probe for it. A ``blocking`` caller
    also probes, without sharing what it finds, when the probe in flight runs on its own thread: an async probe on
    the event loop, which a blocking call of the async store (allowed there) would wait for while blocking it."""
    with _VERDICTS_LOCK:
        found = _VERDICTS.get(key)
        if found is not None:
            verdict, prober = found
            if not blocking or prober != threading.get_ident() or verdict.done():
                return verdict, False
            return concurrent.futures.Future(), True
        verdict = concurrent.futures.Future()
        verdict.set_running_or_notify_cancel()  # so that a waiter's cancellation cannot cancel it
        _VERDICTS[key] = (verdict, threading.get_ident())
        return verdict, True


def _abandon(key: Hashable, verdict: concurrent.futures.Future[Any], error: BaseException) -> None:
    """The probe ended without a verdict: forget it (the next write probes again); waiters get the same error,
    or try themselves if the prober was cancelled."""
    with _VERDICTS_LOCK:
        if _VERDICTS.get(key, (None,))[0] is verdict:
            del _VERDICTS[key]
    if isinstance(error, Exception):
        verdict.set_exception(error)
    else:
        verdict.set_result(_TRY_AGAIN)


@dataclass
class ConditionalWrites:
    """The gate a :class:`.bucket_io.BucketIO` passes before its first write: the probe's verdict for its endpoint and
    bucket (shared by the process), and this saver's or store's answer to it (``required``: refuse; else write
    without conditional headers)."""

    endpoint: str
    bucket: str
    probe_key: Callable[[], str]
    """A fresh probe key under the saver's prefix (``{prefix}_setup/probe-{token}``)."""
    required: bool
    extra_headers: tuple[tuple[str, str], ...] = ()
    """Part of the verdict's identity: Tigris checks conditions on its leader only with ``X-Tigris-Consistent``."""
    serves: str = "saver"
    """Who writes through this gate (``saver``, ``store``, ``cache``): what the warning says writing without
    conditional headers risks (:data:`WITHOUT_THEM`)."""
    enforcement: Enforcement | None = field(default=None, init=False)
    """``None`` until the verdict is known (and, with ``required``, while it refuses)."""

    @property
    def _key(self) -> Hashable:
        return (self.endpoint, self.bucket, self.extra_headers)

    def settle(self, run: Callable[[Plan[Any]], Any], timeout: float | None) -> Enforcement:
        """The enforcement, probing with ``run`` (the shell's blocking driver) if this process has no verdict yet.
        Raises :class:`ConditionalWritesUnsupportedError` when required and refused; waiting for another caller's
        probe longer than ``timeout`` raises ``concurrent.futures.TimeoutError``."""
        while self.enforcement is None:
            verdict, mine = _claim(self._key, blocking=True)
            if mine:
                try:
                    found = self._judged(run)
                except BaseException as error:
                    _abandon(self._key, verdict, error)
                    raise
                verdict.set_result(found)
            else:
                found = verdict.result(timeout)
                if found is _TRY_AGAIN:
                    continue
            self._decide(found)
        return self.enforcement

    async def asettle(self, run: Callable[[Plan[Any]], Awaitable[Any]], timeout: float | None) -> Enforcement:
        """:meth:`settle` for the async driver (``run`` awaits a plan); a probe in flight elsewhere is awaited."""
        while self.enforcement is None:
            verdict, mine = _claim(self._key, blocking=False)
            if mine:
                try:
                    found = await self._ajudged(run)
                except BaseException as error:
                    _abandon(self._key, verdict, error)
                    raise
                verdict.set_result(found)
            else:
                found = await asyncio.wait_for(asyncio.wrap_future(verdict), timeout)
                if found is _TRY_AGAIN:
                    continue
            self._decide(found)
        return self.enforcement

    def _judged(self, run: Callable[[Plan[Any]], Any]) -> Failed | None:
        try:
            found: Failed | None = run(probe(self.probe_key()))
        except (ConditionalWritesUnsupportedError, ConditionalRequestConflictError) as refused:
            return _refusal_found(refused)
        return found

    async def _ajudged(self, run: Callable[[Plan[Any]], Awaitable[Any]]) -> Failed | None:
        try:
            found: Failed | None = await run(probe(self.probe_key()))
        except (ConditionalWritesUnsupportedError, ConditionalRequestConflictError) as refused:
            return _refusal_found(refused)
        return found

    def _decide(self, found: Failed | None) -> None:
        if found is None:
            self.enforcement = Enforcement.ENFORCED
            return
        if self.required:
            raise self.refusal(found)
        logger.warning(
            "bucket %r at %s does not enforce conditional writes (%s: %s); %s",
            self.bucket,
            self.endpoint,
            CHECKS[found.check],
            found.answer,
            WITHOUT_THEM.get(self.serves, WITHOUT_THEM["saver"]),
        )
        self.enforcement = Enforcement.WITHOUT

    def refusal(self, found: Failed) -> ConditionalWritesUnsupportedError:
        return ConditionalWritesUnsupportedError(
            f"The S3 server behind bucket {self.bucket!r} ({self.endpoint}) does not enforce conditional writes "
            f"(If-None-Match / If-Match): the check that {CHECKS[found.check]} failed; the server answered "
            f"{found.answer}. Concurrent writers could silently fork a thread's history, so nothing was written. "
            "Use a server that enforces them (docs/operations.md, S3 providers), or pass "
            "require_conditional_writes=False if only one process ever writes each thread (the saver then sends "
            "no conditional headers and checks each condition with a LIST first).",
            check=found.check,
            answer=found.answer,
        )


def _refusal_found(refused: Exception) -> Failed:
    """A probe request the server refused as a whole (501, or 409 on every attempt): a verdict, not an outage."""
    if isinstance(refused, ConditionalWritesUnsupportedError):
        return Failed("conditional requests", f"{refused.answer} to {refused.check}")
    return Failed("conditional requests", "409 ConditionalRequestConflict to every attempt of a conditional PUT")
