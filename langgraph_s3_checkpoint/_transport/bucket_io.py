"""The I/O shell: performs the requests that plans ask for, with boto3, and drives plans to the end.

One :class:`BucketIO` serves both savers. ``execute`` turns one request into one boto3 call and maps the
reply (and the handful of S3 errors that carry meaning, such as 412) onto :mod:`.._protocol.requests` replies.
Independent requests of one batch run in parallel on a bounded thread pool: the sync driver waits for
them, the async driver awaits them, and that is the only difference between the two. One exception: with
the direct transport and the async saver, GET, PUT and LIST are sent from the event loop itself
(:mod:`.asyncio_sender`); the rest of its requests keep the thread pool. Either driver waits for every request of a
batch before it returns or raises, and each request ends by the operation's deadline on its own
(:mod:`.deadline`), so a call never ends with a request of it still in flight.

Which transport sends a GET, PUT or LIST is decided per request: with the default (``transport="auto"``) the
direct one unless something other than botocore takes part in the client's requests (:mod:`.watch`) or S3
redirected the bucket elsewhere; with ``"boto3"`` or ``"direct"``, always that one. Both retry alike
(:mod:`.retries`) and send the same headers: the saver's ``extra_headers`` on every request, Content-MD5 (not
botocore's CRC32) on the requests S3 requires a checksum for.

Before the first write, the drivers wait for the conditional-write probe's verdict (:mod:`.probe`), and
without conditional writes (``require_conditional_writes=False``) they send each batch through
:func:`.probe.without_conditions`.

boto3 clients are thread-safe, so one client and one connection pool serve every thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    NoCredentialsError,
    PartialCredentialsError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.parsers import ResponseParserError

from .._protocol.plans import Steps
from .._protocol.requests import (
    Emit,
    Get,
    ListKeys,
    Plan,
    ProbeConditionalWrites,
    Put,
    Request,
    StoredObject,
    named_in_errors,
    request_kind,
    same_etag,
    sent_directly,
)
from ..errors import (
    CorruptObjectError,
    NotS3EndpointError,
    S3AccessError,
    S3RequestError,
    SaverMisuseError,
    WrongRegionError,
    unreachable,
)
from .asyncio_sender import AsyncioSender
from .boto3_calls import (
    OURS,
    Boto3Calls,
    answer_of,
    attempts_made,
    error_code,
    http_status,
    speaks_s3,
)
from .deadline import Deadline, DeadlinePassed, cut_at_deadline, follow_connections
from .direct import DirectTransport
from .probe import ConditionalWrites, Enforcement, without_conditions
from .retries import Kind, Retries, final_error, kind_of
from .watch import ClientWatch

logger = logging.getLogger("langgraph_s3_checkpoint")

T = TypeVar("T")

Closing = TypeVar("Closing", bound="ClosesAtBlockEnd")


class ClosesAtBlockEnd:
    """``with x:`` and ``async with x:`` hand back ``x`` and close it when the block ends, as a file does and as
    ``from_conn_string``'s block does. Both forms work on the sync and the async classes alike: InMemorySaver
    accepts both, and closing never needs the event loop."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: Closing) -> Closing:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self: Closing) -> Closing:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


class ReadCache:
    """Least-recently-used bodies of objects, valid only for the ETag they were read with.

    A plan offers an ETag only when a listing has just shown it, so a hit is an object that has not
    changed since (a rewritten object has a new ETag, a deleted one is not listed); or it reads a large value
    ``settled`` (:class:`~langgraph_s3_checkpoint._protocol.requests.Get`), which no write ever changes. Bounded in
    bytes.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, StoredObject] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def retained_bytes(self) -> int:
        """Bytes of bodies kept now (at most ``max_bytes``)."""
        return self._bytes

    def get(self, key: str, etag: str | None) -> StoredObject | None:
        """The body kept for ``key`` if it has this ETag (``None``: any, for an object that never changes)."""
        with self._lock:
            obj = self._entries.get(key)
            if obj is None or (etag is not None and not same_etag(obj.etag, etag)):
                return None
            self._entries.move_to_end(key)
            return obj

    def offer(self, key: str, listed_etag: str, obj: StoredObject) -> None:
        """Keep ``obj`` if it is still the version the listing showed."""
        if same_etag(obj.etag, listed_etag):
            self.put(key, obj)

    def forget(self, key: str) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= len(old.body)

    def put(self, key: str, obj: StoredObject) -> None:
        size = len(obj.body)
        if size > self.max_bytes // 8:
            return  # one large object must not flush the cache
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= len(old.body)
            self._entries[key] = obj
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= len(evicted.body)


@dataclass
class BucketIO:
    """Executes requests against one bucket."""

    client: Any
    bucket: str
    max_concurrency: int = 32
    put_args: dict[str, Any] = field(default_factory=dict, repr=False)
    """Extra PutObject/CopyObject arguments, e.g. server-side encryption settings."""
    get_args: dict[str, Any] = field(default_factory=dict, repr=False)
    """Extra GetObject arguments (SSE-C needs the customer key on reads too)."""
    copy_args: dict[str, Any] = field(default_factory=dict, repr=False)
    """Extra CopyObject arguments (SSE-C needs the key for the source as well as the target)."""
    expiry_tag: str | None = None
    """``key=value`` object tag that the bucket's expiry rule matches (only with a TTL)."""
    direct: DirectTransport | None = field(default=None, repr=False)
    """Sends GET, PUT and LIST itself instead of through boto3 (``transport="direct"``, or ``"auto"`` when
    the client is one it can imitate)."""
    native: AsyncioSender | None = field(default=None, repr=False)
    """Sends the async driver's GET, PUT and LIST from the event loop (the async saver with ``direct``)."""
    watch: ClientWatch | None = field(default=None, repr=False)
    """With ``transport="auto"``: sends through boto3 instead of ``direct`` while something watches the client.
    ``None`` with ``transport="direct"``: always direct."""
    cache: ReadCache | None = field(default=None, repr=False)
    """Bodies of listed objects by key and ETag, so re-reading history costs its LIST only."""
    backend: Any = field(default=None, repr=False)
    """An in-process bucket (``memory.MemoryBucket``) that answers every request instead of boto3."""
    deadline: float | None = None
    """Seconds one operation may take (``operation_timeout``); for a stream, each item. ``None``: no limit."""
    serves: str = "saver"
    """What the user holds, a saver or a store: named when a call comes after ``close()``."""
    conditions: ConditionalWrites | None = field(default=None, repr=False)
    """The conditional-write probe's gate before the first write (``None``: an in-process bucket, which enforces
    them by construction)."""
    extra_headers: tuple[tuple[str, str], ...] = ()
    """Sent with every request of either transport (``extra_headers``: Tigris's ``X-Tigris-Consistent``)."""
    contention_seconds: float = 60.0
    """How long a throttled or 409-conflicting request keeps trying (:mod:`.retries`): ``operation_timeout``."""
    _calls: Boto3Calls = field(init=False, repr=False)
    """The boto3 call of each request (:mod:`.boto3_calls`)."""
    _pool: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)
    _closed: bool = field(default=False, init=False, repr=False)
    _write_grace: float = field(default=0.0, init=False, repr=False)
    """Seconds a write still unanswered at the deadline is given to answer: the client's read timeout."""

    _explained: set[str] = field(default_factory=set, init=False, repr=False)
    """Operations for which it was logged why ``transport="auto"`` sends them through boto3."""

    def __post_init__(self) -> None:
        self._calls = Boto3Calls(
            self.client,
            self.bucket,
            put_args=self.put_args,
            get_args=self.get_args,
            copy_args=self.copy_args,
            expiry_tag=self.expiry_tag,
            not_s3=self.not_s3,
        )
        if self.backend is None:
            config = getattr(getattr(self.client, "meta", None), "config", None)
            self._write_grace = float(getattr(config, "read_timeout", None) or 0.0)
            follow_connections(self.client)  # so that a boto3 request can be cut at its deadline

    @property
    def pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.max_concurrency, thread_name_prefix="lgs3")
        return self._pool

    def close(self) -> None:
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self.native is not None:
            self.native.close()
        if self.direct is not None:
            self.direct.close()

    def check_open(self, what: str) -> None:
        """Refuse work after ``close()``: its connections are gone, and a silently re-opened pool would leak."""
        if self._closed:
            raise SaverMisuseError(
                f"{what}() was called on a {self.serves} that was closed (after its `with` block or close()). "
                f"Open a new {self.serves} (from_conn_string or the constructor) for further calls."
            )

    # -- one request ----------------------------------------------------------------------------
    def execute(self, request: Request, deadline: Deadline | None = None) -> Any:
        """The reply to ``request``; with a ``deadline`` it ends on time (:mod:`.deadline`), raising
        :class:`DeadlinePassed` when cut."""
        cached = self._cached(request)
        return self._fetch(request, deadline) if cached is _MISS else cached

    def _cached(self, request: Request) -> Any:
        """The cached reply to a listed :class:`Get` (or setup's :class:`ProbeConditionalWrites`, answered by the
        drivers' gate before the batch is sent), or ``_MISS``."""
        if isinstance(request, ProbeConditionalWrites):
            return None
        if isinstance(request, Get) and self.cache is not None and (request.etag or request.settled):
            obj = self.cache.get(request.key, request.etag)
            if obj is not None:
                return obj
        return _MISS

    def _fetch(self, request: Request, deadline: Deadline | None = None) -> Any:
        return self._remember(request, self._send(request, deadline))

    def _remember(self, request: Request, reply: Any) -> Any:
        if self.cache is not None and isinstance(request, Get) and reply is not None:
            if request.settled:
                self.cache.put(request.key, reply)
            elif request.etag:
                self.cache.offer(request.key, request.etag, reply)
        return reply

    def _fetch_or_error(self, request: Request, deadline: Deadline | None) -> Any:
        try:
            return self._fetch(request, deadline)
        except Exception as failed:
            return failed

    def _afetch(self, request: Request, loop: asyncio.AbstractEventLoop, deadline: Deadline | None) -> Awaitable[Any]:
        """The async driver's request: on the loop itself when the native sender takes it or an in-process bucket
        answers it (at once, no I/O), else on the pool."""
        if self.backend is not None:
            return _answered(self._fetch, request, deadline)
        if self.native is not None and sent_directly(request) and self._goes_direct(request):
            return self._afetch_native(self.native, request, loop, deadline)
        return loop.run_in_executor(self.pool, self._fetch, request, deadline)

    async def _afetch_native(
        self,
        native: AsyncioSender,
        request: Get | Put | ListKeys,
        loop: asyncio.AbstractEventLoop,
        deadline: Deadline | None,
    ) -> Any:
        try:
            return self._remember(request, await native.execute(request, deadline))
        except WrongRegionError as redirected:
            self._follow_redirects(redirected)
        return await loop.run_in_executor(self.pool, self._fetch, request, deadline)

    def _goes_direct(self, request: Get | Put | ListKeys) -> bool:
        if self.watch is None:
            return True
        operation = request_kind(request).operation
        if not self.watch.watched(operation):
            return True
        if operation not in self._explained:
            self._explained.add(operation)
            explain_boto3(self.client, f"{operation} requests", self.watch.reason(operation))
        return False

    def _follow_redirects(self, redirected: WrongRegionError) -> None:
        """S3 redirected a direct request to another region. With ``transport="direct"`` that is the caller's
        to fix (the error names the region); by default this and every later request go through boto3, which
        follows redirects (the redirected request was not applied, so sending it again is safe)."""
        if self.watch is None:
            raise redirected
        self.watch.send_through_boto3()

    def _send(self, request: Request, deadline: Deadline | None) -> Any:
        if self.backend is not None:
            return self.backend.execute(request)
        if self.direct is not None and sent_directly(request) and self._goes_direct(request):
            try:
                return self.direct.execute(request, deadline)
            except WrongRegionError as redirected:
                self._follow_redirects(redirected)
        return self._send_through_boto3(request, deadline)

    def _send_through_boto3(self, request: Request, deadline: Deadline | None = None) -> Any:
        if deadline is None:
            return self._retrying_boto3(request, None)
        with cut_at_deadline(deadline):
            return self._retrying_boto3(request, deadline)

    def _retrying_boto3(self, request: Request, deadline: Deadline | None) -> Any:
        retries: Retries | None = None
        while True:
            try:
                return self._boto3_call(request)
            except ClientError as exc:
                # botocore made its own attempts; throttling and 409 conflicts then get the longer budget, as long as
                # the next attempt can start before the call's deadline.
                kind = kind_of(http_status(exc), error_code(exc))
                if kind in (Kind.THROTTLED, Kind.CONFLICT) and speaks_s3(exc):
                    retries = retries or Retries(self.max_attempts, self.contention_seconds)
                    wait = retries.wait_after(kind, attempts_made(exc))
                    if wait is not None and (deadline is None or wait < deadline.start_left()):
                        time.sleep(wait)
                        continue
                if not speaks_s3(exc):
                    raise self.not_s3(answer_of(exc)) from None
                code = error_code(exc)
                tried = sum(retries.failed.values()) if retries is not None else attempts_made(exc)
                what = named_in_errors(request, self.bucket)
                error = final_error(request, self.bucket, what, http_status(exc), code, code or str(exc), tried)
                raise error from (exc if isinstance(error, S3RequestError) else None)

    @property
    def max_attempts(self) -> int:
        """The client's attempts per request (botocore's ``total_max_attempts``), which both transports spend."""
        config = getattr(getattr(self.client, "meta", None), "config", None)
        return int((getattr(config, "retries", None) or {}).get("total_max_attempts") or 3)

    def _boto3_call(self, request: Request) -> Any:
        OURS.headers = self.extra_headers
        try:
            return self._calls.call(request)
        except (BotoConnectionError, HTTPClientError) as exc:
            # Connection refused, reset, closed or timed out on every retry.
            raise unreachable(f"{self.endpoint} ({named_in_errors(request, self.bucket)})", exc) from exc
        except ResponseParserError as exc:
            raise self.not_s3(f"a reply botocore cannot parse as S3 ({str(exc)[:200]})") from None
        except (NoCredentialsError, PartialCredentialsError) as exc:
            raise S3AccessError(
                f"No usable AWS credentials were found ({exc}). Set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or an instance/task role), or pass "
                "aws_access_key_id=/aws_secret_access_key= to the saver."
            ) from None
        except BotoCoreError as exc:
            raise S3RequestError(f"{named_in_errors(request, self.bucket)} failed: {exc}") from exc
        finally:
            OURS.headers = None

    @property
    def endpoint(self) -> str:
        return str(getattr(getattr(self.client, "meta", None), "endpoint_url", "") or "(default)")

    def not_s3(self, answer: str) -> NotS3EndpointError:
        return NotS3EndpointError(
            f"The endpoint {self.endpoint} does not answer like S3: it answered {answer}. Check endpoint_url "
            "(the host and port of the S3 API, e.g. SeaweedFS's S3 port 8333, not its filer or master port)."
        )

    # -- drivers --------------------------------------------------------------------------------
    def _ends(self, started: float | None) -> float | None:
        """The instant (``time.monotonic``) the operation must end by; raises once it has passed."""
        if self.deadline is None or started is None:
            return None
        ends = started + self.deadline
        if time.monotonic() >= ends:
            raise self._deadline_error([])
        return ends

    def _left(self, started: float | None) -> float | None:
        """Seconds left before the operation's deadline (``None``: no limit); raises once it has passed."""
        ends = self._ends(started)
        return None if ends is None else ends - time.monotonic()

    def _deadline_of(self, request: Request, ends: float | None) -> Deadline | None:
        """What ``request`` carries of the operation's deadline: no attempt after it, and a write still unanswered
        then is given the client's read timeout to answer (its answer says whether it was applied)."""
        if ends is None:
            return None
        return Deadline(ends, ends if request_kind(request).reads else ends + self._write_grace)

    def _deadline_error(self, cut: list[Request]) -> S3RequestError:
        """The operation passed its deadline; ``cut``: the requests it ended, sent and unanswered."""
        message = (
            f"The S3 operation did not finish within {self.deadline:g} s (operation_timeout; endpoint "
            f"{self.endpoint}). The server is slow or not answering; raise operation_timeout if it is "
            "expected to be this slow."
        )
        writes = [r for r in cut if not request_kind(r).reads]
        if writes:
            message += (
                f" {len(writes)} write(s) had no answer {self._write_grace:g} s after the deadline and were cut off "
                f"(e.g. {named_in_errors(writes[0], self.bucket)}): the server may or may not have applied them. "
                "No request of this call is still in flight: read what it wrote to see which (get_tuple after a "
                "put, get after a store put)."
            )
        return S3RequestError(message)

    def _batch(self, requests: list[Request], started: float | None) -> list[Any]:
        replies, missing = self._split(requests)
        ends = self._ends(started)
        deadlines = [self._deadline_of(r, ends) for r in missing]
        if len(missing) == 1 or self.backend is not None:
            # One request, or an in-process bucket (it answers at once): in this thread, one after another.
            outcomes: list[Any] = [self._fetch_or_error(r, d) for r, d in zip(missing, deadlines, strict=True)]
        else:
            futures = [self.pool.submit(self._fetch, r, d) for r, d in zip(missing, deadlines, strict=True)]
            concurrent.futures.wait(futures)  # every request ends by its own deadline
            outcomes = [f.exception() or f.result() for f in futures]
        return _fill(replies, self._settled(missing, outcomes))

    async def _abatch(self, requests: list[Request], started: float | None) -> list[Any]:
        replies, missing = self._split(requests)
        ends = self._ends(started)
        loop = asyncio.get_running_loop()
        fetching = [self._afetch(r, loop, self._deadline_of(r, ends)) for r in missing]
        if any(not request_kind(r).reads for r in missing):
            outcomes = await _settled_if_cancelled(_all_settled(fetching))
        else:
            outcomes = await _all_settled(fetching)  # reads: a cancelled caller abandons them at once
        return _fill(replies, self._settled(missing, outcomes))

    def _settled(self, requests: list[Request], outcomes: list[Any]) -> list[Any]:
        """The replies of a batch every request of which has ended, or the error to raise: the first failure other
        than the deadline's, in the batch's order, else the deadline error (naming the writes it cut)."""
        failures = [(r, o) for r, o in zip(requests, outcomes, strict=True) if isinstance(o, BaseException)]
        if not failures:
            return outcomes
        cut: list[Request] = []
        for request, failure in failures:
            if not isinstance(failure, DeadlinePassed):
                raise failure
            if failure.sent:
                cut.append(request)
        raise self._deadline_error(cut) from None

    def _split(self, requests: list[Request]) -> tuple[list[Any], list[Request]]:
        """Replies answered from the cache (``_MISS`` elsewhere), and the requests still to send."""
        replies = [self._cached(r) for r in requests]
        return replies, [r for r, reply in zip(requests, replies, strict=True) if reply is _MISS]

    def iterate(self, plan: Plan[Any], *, bounded: bool = True) -> Iterator[Any]:
        """Run a streaming plan, yielding what it emits.

        With ``bounded``, the deadline counts the time spent getting to each emitted item (not the
        consumer's time). ThreadEdits that may legitimately run long (deleting or copying a large thread)
        passes ``bounded=False``: each of its requests is still bounded by the client's timeouts."""
        steps = _CallSteps(plan, bounded)
        with self._forgetting_damage():
            for step in steps:
                if isinstance(step, Emit):
                    yield step.value
                else:
                    steps.answer(self._step(step, steps.started))

    async def aiterate(self, plan: Plan[Any], *, bounded: bool = True) -> AsyncIterator[Any]:
        """The same, awaiting each batch instead of blocking on it."""
        steps = _CallSteps(plan, bounded)
        with self._forgetting_damage():
            for step in steps:
                if isinstance(step, Emit):
                    yield step.value
                else:
                    steps.answer(await self._astep(step, steps.started))

    @contextlib.contextmanager
    def _forgetting_damage(self) -> Iterator[None]:
        """A body a plan could not decode is not served again from the read cache: an object mended in place (a large
        value restored from a backup, which the cache otherwise trusts never to change) is read anew."""
        try:
            yield
        except CorruptObjectError as damaged:
            if self.cache is not None:
                self.cache.forget(damaged.key)
            raise

    # -- conditional writes: the probe's verdict before the first write (conditions.py) -------------
    def _step(self, step: list[Request], started: float | None) -> list[Any]:
        """One batch of a plan; the first that writes waits for the probe's verdict (:mod:`.probe`), and
        without conditional writes every batch goes through :func:`.probe.without_conditions`."""
        gate = self.conditions
        if gate is None or gate.enforcement is Enforcement.ENFORCED:
            return self._batch(step, started)
        if gate.enforcement is None:
            if not any(request_kind(request).after_probe for request in step):
                return self._batch(step, started)
            try:
                gate.settle(lambda plan: self._drive(plan, started), self._left(started))
            except concurrent.futures.TimeoutError:
                raise self._deadline_error([]) from None
        if gate.enforcement is Enforcement.WITHOUT:
            return self._drive(without_conditions(step), started)
        return self._batch(step, started)

    async def _astep(self, step: list[Request], started: float | None) -> list[Any]:
        gate = self.conditions
        if gate is None or gate.enforcement is Enforcement.ENFORCED:
            return await self._abatch(step, started)
        if gate.enforcement is None:
            if not any(request_kind(request).after_probe for request in step):
                return await self._abatch(step, started)
            try:
                await gate.asettle(lambda plan: self._adrive(plan, started), self._left(started))
            except (asyncio.TimeoutError, concurrent.futures.TimeoutError):
                raise self._deadline_error([]) from None
        if gate.enforcement is Enforcement.WITHOUT:
            return await self._adrive(without_conditions(step), started)
        return await self._abatch(step, started)

    def _drive(self, plan: Plan[T], started: float | None) -> T:
        """Run a plan of batches (the probe, a batch without conditions) within the caller's operation."""
        steps = Steps(plan)
        for step in steps:
            assert isinstance(step, list)  # these plans stream nothing
            steps.answer(self._batch(step, started))
        return steps.result

    async def _adrive(self, plan: Plan[T], started: float | None) -> T:
        steps = Steps(plan)
        for step in steps:
            assert isinstance(step, list)
            steps.answer(await self._abatch(step, started))
        return steps.result

    def run(self, plan: Plan[T], *, bounded: bool = True) -> T:
        """Run a plan to its result."""
        return _only_result(list(self.iterate(_result_of(plan), bounded=bounded)))

    async def arun(self, plan: Plan[T], *, bounded: bool = True) -> T:
        return _only_result([item async for item in self.aiterate(_result_of(plan), bounded=bounded)])


_MISS = object()


_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()


def explain_boto3(client: Any, what: str, reason: str) -> None:
    """Log, once per process and reason, that ``transport="auto"`` sends ``what`` through boto3, and why: it costs
    about five times the client CPU, and the requests then carry what the client's botocore config adds."""
    with _WARNED_LOCK:
        if reason in _WARNED:
            return
        _WARNED.add(reason)
    config = getattr(getattr(client, "meta", None), "config", None)
    checksums = ""
    if getattr(config, "request_checksum_calculation", None) == "when_supported":
        checksums = (
            " This client's request_checksum_calculation='when_supported' makes botocore add CRC32 checksums to "
            "PutObject (over https as aws-chunked bodies), which some S3 providers reject; the clients the saver "
            "makes use 'when_required'."
        )
    logger.warning(
        "transport='auto' sends %s through boto3 (the direct transport costs about a fifth of its CPU): %s.%s",
        what,
        reason,
        checksums,
    )


async def _answered(
    fetch: Callable[[Request, Deadline | None], Any], request: Request, deadline: Deadline | None
) -> Any:
    """An in-process bucket's answer, as an awaitable for the async driver's batch (run on the loop: it does no I/O,
    and a thread would cost more than the answer)."""
    return fetch(request, deadline)


async def _all_settled(fetching: list[Awaitable[Any]]) -> list[Any]:
    """Each request's reply or error, once every one has ended: a failed request does not leave the others of
    its batch running (each ends by its own deadline)."""
    if len(fetching) == 1:
        try:
            return [await fetching[0]]
        except Exception as failed:
            return [failed]
    return await asyncio.gather(*fetching, return_exceptions=True)


async def _settled_if_cancelled(work: Awaitable[T]) -> T:
    """``work``'s result. If the caller is cancelled meanwhile, ``work`` (a batch of writes) still runs to its end
    before the cancellation goes on, so that no write of a cancelled ``aput`` lands after its task has ended.

    Why: a batch abandoned in flight is not undone (a PUT already sent is applied; one on the thread pool runs
    on regardless). Its head PUT could then commit after the caller saw the cancellation and began the next
    run on the thread, whose own put would be refused as another writer's (LangGraph's Agent Server cancels a
    run and starts the next at once). The wait is bounded by each request's deadline, a write's grace included
    (for maintenance calls, which have none, by the client's timeouts of each request in the batch); a second
    cancellation stops it."""
    batch = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(batch)
    except asyncio.CancelledError:
        try:
            # Also when the batch is already done: awaiting it retrieves its error, which then goes unreported.
            with contextlib.suppress(Exception):  # its outcome no longer matters to the cancelled caller
                await batch
        except asyncio.CancelledError:
            batch.cancel()  # cancelled again: the caller will not wait, so the batch is abandoned as before
            raise
        raise


def _fill(replies: list[Any], fetched: list[Any]) -> list[Any]:
    """Put the fetched replies, in order, where the cache had none."""
    answers = iter(fetched)
    return [next(answers) if reply is _MISS else reply for reply in replies]


class _CallSteps(Steps[Any, Any]):
    """A plan's steps as a call's driver takes them, with :attr:`started`: the instant the call's deadline counts from
    for the next batch (the call's start, then each time the consumer takes up the stream again after an emitted
    item: its own time does not count; ``None`` for an unbounded call)."""

    def __init__(self, plan: Plan[Any], bounded: bool) -> None:
        super().__init__(plan)
        self._bounded = bounded
        self._emitted = False
        self.started = time.monotonic() if bounded else None

    def __next__(self) -> Any:
        if self._emitted:
            self.started = time.monotonic() if self._bounded else None
        step = super().__next__()
        self._emitted = isinstance(step, Emit)
        return step


@dataclass(frozen=True)
class _Result:
    value: Any


def _result_of(plan: Plan[T]) -> Plan[None]:
    """Turn a plan's return value into its last emitted item, so one driver loop serves both uses."""
    value = yield from plan
    yield Emit(_Result(value))


def _only_result(items: list[Any]) -> Any:
    return items[-1].value
