"""The building blocks every plan is made of, shared by the saver's core, gc and the operator tools.

A plan is a generator that yields batches of independent requests (:mod:`.requests`) and receives their
replies; a streaming plan also yields :class:`~.requests.Emit` to hand one value to its caller. These
helpers compose plans: one request (or two, three, or a batch of one kind) returning replies typed by
the requests, a listing streamed page by page, a sub-plan's stream consumed inside another plan, deletes
in S3-sized chunks.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Generic, TypeVar

from .keys import is_digest, is_own_segment, named_id, unescape
from .requests import (
    PRECONDITION_FAILED,
    DeleteIfMatch,
    DeleteObjects,
    Emit,
    Get,
    ListKeys,
    Page,
    Plan,
    PreconditionFailed,
    Put,
    Request,
    Written,
)

R = TypeVar("R")
Y = TypeVar("Y")
A = TypeVar("A")
B = TypeVar("B")
C = TypeVar("C")

DELETE_BATCH = 1000
"""Keys per DeleteObjects request (the S3 maximum)."""
MAX_PAGE = 1000
"""Keys per LIST request (the S3 maximum)."""
READ_BATCH = 32
"""Objects read in parallel by one batch of a streaming walk."""
SIDE_BY_SIDE = 32
"""Threads a scan over every thread works on at once (:func:`side_by_side`)."""


def one(request: Request[R]) -> Plan[R]:
    """A plan of one request, returning its reply."""
    replies = yield [request]
    return replies[0]


def two(a: Request[A], b: Request[B]) -> Plan[tuple[A, B]]:
    """A plan of one batch of two requests run in parallel, returning their replies."""
    reply_a, reply_b = yield [a, b]
    return reply_a, reply_b


def three(a: Request[A], b: Request[B], c: Request[C]) -> Plan[tuple[A, B, C]]:
    """A plan of one batch of three requests run in parallel, returning their replies."""
    reply_a, reply_b, reply_c = yield [a, b, c]
    return reply_a, reply_b, reply_c


def all_of(requests: Sequence[Request[R]]) -> Plan[list[R]]:
    """A plan of one batch of ``requests`` run in parallel (even if there are none), returning their
    replies in the same order."""
    return (yield list(requests))


def exists(key: str) -> Plan[bool]:
    """Whether an object exists, by a 1-key LIST (no body read)."""
    page = yield from one(ListKeys(key, max_keys=1))
    return key in page.keys


def any_under(prefix: str) -> Plan[bool]:
    """Whether any object's key starts with ``prefix`` (a thread's, say), by a 1-key LIST."""
    page = yield from one(ListKeys(prefix, max_keys=1))
    return bool(page.keys)


def mark(key: str, operation: str) -> Plan[DeleteIfMatch]:
    """Write a marker (a delete's: the thread's, or a namespace's for a rollback; a copy's or an import's on
    its target); returns the request that removes it. It goes before anything is deleted, copied or imported
    and is removed last, so an operation that dies part-way leaves it beside the records it was deleting or
    writing: ``repair_thread`` then does not take them for a namespace whose head was lost. Each operation
    writes its own bytes (``"{operation} {uuid}"``, a rollback's operation carrying its run id, read by
    :func:`.keys.marker_operation`) and removes the marker only if it is still its own, so that of a second one
    running meanwhile stays until that one ends."""
    written = yield from one(Put(key, f"{operation} {uuid.uuid4()}".encode()))
    assert isinstance(written, Written)  # an unconditional PUT is never refused
    return DeleteIfMatch(key, written.etag)


def landed(puts: Sequence[Put], replies: Sequence[Written | PreconditionFailed]) -> Plan[list[bool]]:
    """Whether each conditional PUT's object holds that PUT's bytes now. A refused PUT is read back: the
    bytes are its own when an earlier attempt landed and only its answer was lost (the retry is then
    refused by the very condition the first attempt met); anything else is another writer's."""
    refused = [i for i, reply in enumerate(replies) if reply is PRECONDITION_FAILED]
    now = (yield from all_of([Get(puts[i].key) for i in refused])) if refused else []
    held = {i: obj is not None and obj.body == puts[i].body for i, obj in zip(refused, now, strict=True)}
    return [held.get(i, True) for i in range(len(puts))]


def list_all(prefix: str, token: str | None = None) -> Plan[list[str]]:
    """Every key under a prefix that is known to be small (one checkpoint's writes)."""
    keys: list[str] = []
    while True:
        page = yield from one(ListKeys(prefix, token=token))
        keys.extend(page.keys)
        token = page.token
        if token is None:
            return keys


def pages(
    prefix: str, *, delimiter: str | None = None, start_after: str | None = None, max_keys: int = MAX_PAGE
) -> Generator[Any, Any, None]:
    """Stream pages of a listing: yields request batches and ``Emit(page)`` for each page."""
    token: str | None = None
    while True:
        page = yield from one(
            ListKeys(
                prefix, delimiter=delimiter, start_after=None if token else start_after, max_keys=max_keys, token=token
            )
        )
        yield Emit(page)
        token = page.token
        if token is None:
            return


def all_pages(prefix: str, delimiter: str | None = None) -> Plan[list[Page]]:
    """Every page of a listing known to be small enough to hold (one thread's, a namespace level)."""
    found: list[Page] = []
    yield from collect_emitted(pages(prefix, delimiter=delimiter), found)
    return found


def id_behind(segment: str, folder: str) -> Plan[str | None]:
    """The real thread or namespace id behind a folder's ``segment`` (``folder`` ends with it and ``/``); ``None``
    for a segment we did not make (a foreign folder such as ``%ZZ``) or a digest whose ``name`` object is missing
    or not to be trusted (:func:`.keys.named_id`). The one way readers, maintenance and tools read it."""
    if not is_own_segment(segment):
        return None
    if not is_digest(segment):
        return unescape(segment)
    obj = yield from one(Get(f"{folder}name"))
    return named_id(segment, None if obj is None else obj.body)


def own_folders_under(root: str) -> Plan[list[str]]:
    """The thread or namespace folders directly under ``root`` (``threads/{T}/ns/``, say), from a delimited
    listing: those whose name :func:`.keys.is_own_segment` accepts. Any other folder is foreign, and what it
    holds, a ``head`` included, is nobody's checkpoint."""
    found = yield from all_pages(root, delimiter="/")
    return [p for page in found for p in page.prefixes if is_own_segment(p[len(root) : -1])]


def surely_before(a: str, b: str) -> bool:
    """Whether folder ``a`` lists before folder ``b`` (two thread segments, say) on every server: byte order of the
    keys (``a/`` against ``b/``: S3, moto) and folder-by-folder order (``a`` against ``b``: SeaweedFS's filer) differ
    only where one segment continues the other with ``-`` or ``%``, which sort below ``/``."""
    return a < b and f"{a}/" < f"{b}/"


@dataclass(frozen=True)
class FolderKeys:
    """Keys of one folder under a root (``segment``: its name; ``None``: keys directly under the root, in no
    folder) from one page of :func:`folder_by_folder`, with their dates, ETags and sizes, and the page's ``served``."""

    segment: str | None
    page: Page


@dataclass(frozen=True)
class FolderEnd:
    """Every key of folder ``segment`` has been emitted (:func:`folder_by_folder`)."""

    segment: str


def folder_by_folder(root: str) -> Generator[Any, Any, None]:
    """A flat listing of ``root`` (``threads/``: LIST without a delimiter, 1,000 keys a page), emitted folder by
    folder: ``Emit(FolderKeys)`` for the keys of each folder in each page, and ``Emit(FolderEnd)`` once the next
    folder's first key (or the listing's end) shows that a folder's keys were all listed. Every server lists the keys
    of one folder together (in byte order a key between two keys under ``T/`` is under ``T/`` too; SeaweedFS lists
    folder by folder), so the walker holds one page and needs no whole-bucket memory; only the order *between*
    folders differs between servers (:func:`surely_before`). A folder met again after a later one is a listing that
    is not in either order: :class:`ValueError`, rather than judge a folder from part of its keys."""
    token: str | None = None
    current: str | None = None
    """The folder whose keys are being emitted (``None``: keys in no folder, or none yet)."""
    last: str | None = None
    """The last folder met."""
    while True:
        page = yield from one(ListKeys(root, token=token))
        segments = [_folder_of(key[len(root) :]) for key in page.keys]
        start = 0
        while start < len(page.keys):
            segment = segments[start]
            end = start
            while end < len(page.keys) and segments[end] == segment:
                end += 1
            if segment != current:
                if current is not None:
                    yield Emit(FolderEnd(current))
                if segment is not None:
                    if last is not None and (segment == last or surely_before(segment, last)):
                        raise ValueError(
                            f"the listing of {root!r} is in no known key order: folder {segment!r} after {last!r}"
                        )
                    last = segment
                current = segment
            yield Emit(FolderKeys(segment, _slice(page, start, end)))
            start = end
        token = page.token
        if token is None:
            if current is not None:
                yield Emit(FolderEnd(current))
            return


def _folder_of(relative: str) -> str | None:
    folder, slash, _ = relative.partition("/")
    return folder if slash else None


def _slice(page: Page, start: int, end: int) -> Page:
    """Keys ``start`` to ``end`` of a page, with their dates, ETags and sizes (each list only if the page had it
    for every key)."""

    def cut(values: list[Any]) -> list[Any]:
        return values[start:end] if len(values) == len(page.keys) else []

    return Page(page.keys[start:end], [], None, cut(page.modified), cut(page.etags), cut(page.sizes), page.served)


def chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def deletes(keys: Sequence[str]) -> list[Request]:
    """DeleteObjects requests for ``keys``, at most :data:`DELETE_BATCH` each (one parallel batch)."""
    return [DeleteObjects(tuple(chunk)) for chunk in chunks(keys, DELETE_BATCH)]


class Steps(Iterator[Y], Generic[Y, R]):
    """A generator driven by whoever answers its steps (a plan by a driver or another plan, a request's exchanges by
    a sender): ``for step in steps:`` takes each step it yields, ``steps.answer(reply)`` gives the reply it receives
    for that step (``None`` if not answered: an :class:`~.requests.Emit`, a wait), and :attr:`result` is what it
    returned once the loop ends. One way to drive a generator, for every loop that does."""

    def __init__(self, generator: Generator[Y, Any, R]) -> None:
        self._generator = generator
        self._reply: Any = None
        self.result: R
        """What the generator returned (set once it has)."""

    def __iter__(self) -> Steps[Y, R]:
        return self

    def __next__(self) -> Y:
        reply, self._reply = self._reply, None
        try:
            return self._generator.send(reply)
        except StopIteration as done:
            self.result = done.value
            raise StopIteration from None

    def answer(self, reply: Any) -> None:
        """The reply to the step just taken, sent with the next."""
        self._reply = reply


def collect_emitted(sub: Plan[Any], into: list[Any]) -> Plan[Any]:
    """Run a streaming sub-plan inside another plan, appending what it emits to ``into``."""
    steps = Steps(sub)
    for step in steps:
        if isinstance(step, Emit):
            into.append(step.value)
        else:
            steps.answer((yield step))
    return steps.result


def side_by_side(subplans: Sequence[Plan[R]]) -> Plan[list[R]]:
    """Run plans that do not depend on each other together, returning their results in order.

    Each round trip carries the next batch of every plan still running, so a scan that asks the same few
    questions of each of many threads costs round trips per group of threads rather than per thread: at a
    region's 20 ms, 100,000 threads one after another are 100,000 round trips per question (half an hour),
    side by side 32 at a time, about 3,000. What each plan sends and decides is unchanged; only when its
    requests leave changes, which no plan may depend on across threads. The plans may not stream
    (:class:`~.requests.Emit`): what they find is returned, and the caller emits it in order.
    """
    results: list[Any] = [None] * len(subplans)
    waiting: dict[int, list[Request]] = {}

    def advance(i: int, reply: Any) -> None:
        try:
            step = subplans[i].send(reply)
        except StopIteration as done:
            results[i] = done.value
            return
        if isinstance(step, Emit):
            raise TypeError("side_by_side runs plans that return what they find, not streaming plans")
        waiting[i] = step

    for i in range(len(subplans)):
        advance(i, None)
    while waiting:
        running, waiting = list(waiting.items()), {}
        batch = [request for _, step in running for request in step]
        replies = (yield batch) if batch else []  # plans that yield an empty batch go on without a round trip
        start = 0
        for i, step in running:
            advance(i, replies[start : start + len(step)])
            start += len(step)
    return results


def for_each_emitted(sub: Plan[Any], handle: Callable[[Any], Plan[bool | None]]) -> Plan[None]:
    """Run a streaming sub-plan and, for each value it emits, the plan ``handle(value)``.

    ``handle`` returning ``False`` stops the stream. This is how listings are processed page by page
    without holding more than one page.
    """
    steps = Steps(sub)
    for step in steps:
        if isinstance(step, Emit):
            if (yield from handle(step.value)) is False:
                sub.close()
                return
        else:
            steps.answer((yield step))


def age_cutoff(page: Page, grace: float) -> Callable[[int], bool]:
    """Whether the ``i``-th key of ``page`` is old enough to go, by the server's clock."""
    now = page.served or datetime.now(timezone.utc)

    def old(i: int) -> bool:
        if i >= len(page.modified):
            return False  # no LastModified: its age is unknown
        return (now - page.modified[i]).total_seconds() >= grace

    return old
