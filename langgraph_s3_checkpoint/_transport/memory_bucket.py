"""An S3 bucket in memory: test graphs (and the saver itself) with no server.

``MemoryBucket`` answers the saver's requests (:mod:`langgraph_s3_checkpoint._protocol.requests`) itself, with the
replies the I/O shell (:mod:`langgraph_s3_checkpoint._transport.bucket_io`) would have produced from a real server. Pass
it as the client and nothing else changes::

    from langgraph_s3_checkpoint import S3Saver
    from langgraph_s3_checkpoint.memory import MemoryBucket

    saver = S3Saver(bucket="b", client=MemoryBucket())  # or AsyncS3Saver(bucket="b", client=...)
    graph = builder.compile(checkpointer=saver)

That makes unit tests of a graph (interrupts, resumes, forks, time travel, ``delete_for_runs``...) run in
milliseconds, with the same storage layout, commit protocol and conflict detection as against S3. Two
savers over one ``MemoryBucket`` behave like two processes over one bucket. The bucket name is not used
(one ``MemoryBucket`` is one bucket). The ``transport`` is ignored (there is no HTTP to send).

What it models, exactly the S3 semantics the plans rely on:

* objects with an ETag that is the quoted MD5 of the body (two PUTs of the same bytes share an ETag, as on
  S3) and a LastModified taken from :attr:`MemoryBucket.now` (injectable, so tests can skew the clock);
* conditional PUT: ``If-None-Match: *`` fails on an existing key, ``If-Match`` on a different ETag or a
  missing key (see ``missing_if_match``); conditional DELETE (``DeleteIfMatch``);
* ListObjectsV2: keys in ascending UTF-8 byte order, ``prefix``, ``start_after``, ``max_keys`` (at most
  1,000), ``delimiter`` (common prefixes, which count towards ``max_keys``) and opaque continuation tokens;
  each page carries the ETag, LastModified and size of its keys and the server's clock (``served``);
* DeleteObjects (missing keys are fine), CopyObject (a missing source replies ``False``, as the I/O shell maps
  NoSuchKey), HeadBucket / CreateBucket, and lifecycle rules (recorded; :meth:`MemoryBucket.apply_lifecycle`
  runs them on demand);
* keys longer than 1,024 bytes are refused (``KeyTooLongError``), and every request on a bucket that does
  not exist fails with :class:`~langgraph_s3_checkpoint.errors.BucketNotFoundError`.

Every request is atomic, and the bucket is thread-safe (one lock). There is no eventual consistency to
model: S3 has been strongly consistent for reads after writes and for listings since 2020.

It is also the ground the protocol simulation in ``tests/sim.py`` runs on: ``keep_log=True`` records every
applied request with its reply.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from .._protocol.keys import MAX_KEY_BYTES
from .._protocol.requests import (
    PRECONDITION_FAILED,
    BucketExists,
    Copy,
    Create,
    CreateBucket,
    DeleteIfMatch,
    DeleteObjects,
    EnsureExpiryRule,
    ExpiryRule,
    Get,
    ListKeys,
    Page,
    Put,
    RemoveExpiryRule,
    Request,
    StoredObject,
    Update,
    Written,
)
from ..errors import S3RequestError, error_for_code

MAX_LIST_KEYS = 1000
MAX_DELETE_KEYS = 1000


def etag_of(body: bytes) -> str:
    """The ETag S3 gives a single-part object: its MD5, hex, in double quotes."""
    return '"' + hashlib.md5(body).hexdigest() + '"'


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


def _bare(etag: str) -> str:
    return etag.strip().strip('"')


@dataclass(frozen=True)
class _BucketObject:
    body: bytes
    etag: str
    modified: datetime
    tagged: bool
    """Whether the PUT carried the retention tag (``Put.expires``; copies keep their source's)."""


class MemoryBucket:
    """One S3 bucket in memory; ``execute(request)`` returns what ``BucketIO`` would (see the module doc).

    ``missing_if_match`` says how the modelled server answers a conditional request on a key that does not
    exist: ``"404"`` (AWS, moto) or ``"412"`` (SeaweedFS). The variant is modelled at the level of the reply
    the I/O shell produces from it:

    * ``Put`` with ``If-Match`` on a missing key: the I/O shell maps both 404 and 412 to
      :data:`PRECONDITION_FAILED`, so **both variants collapse to the same reply** here;
    * ``DeleteIfMatch`` on a missing key: 404 becomes ``None`` (like a deleted object) and 412 becomes
      :data:`PRECONDITION_FAILED`, so the variants differ (the plan must cope with both).

    ``now`` is the bucket's clock (LastModified of writes); reassign :attr:`now` at any time to skew it.
    """

    def __init__(
        self,
        *,
        missing_if_match: Literal["404", "412"] = "404",
        now: Callable[[], datetime] | None = None,
        exists: bool = True,
        keep_log: bool = False,
        name: str = "memory",
    ) -> None:
        if missing_if_match not in ("404", "412"):
            raise ValueError(f"missing_if_match must be '404' or '412', got {missing_if_match!r}")
        self.missing_if_match = missing_if_match
        self.now: Callable[[], datetime] = now or _utc_now
        self.exists = exists
        self.name = name
        self.lifecycle_rules: dict[str, tuple[str, int]] = {}
        """Installed expiry rules: rule id -> (prefix, days)."""
        self.log: list[tuple[Request, Any]] | None = [] if keep_log else None
        """With ``keep_log``: every applied request and its reply, in the order they were applied."""
        self._objects: dict[str, _BucketObject] = {}
        self._sorted: list[bytes] = []  # UTF-8 keys in ascending byte order: S3's listing order
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"MemoryBucket({self.name!r}, {len(self._objects)} objects)"

    # -- inspection (tests) ---------------------------------------------------------------------
    def keys(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix``, in listing order."""
        with self._lock:
            return [k.decode("utf-8", "surrogatepass") for k in self._sorted if k.startswith(_b(prefix))]

    def object(self, key: str) -> _BucketObject | None:
        with self._lock:
            return self._objects.get(key)

    def __len__(self) -> int:
        return len(self._objects)

    def copy(self) -> MemoryBucket:
        """A second bucket holding what this one holds now: every object with its body, ETag and LastModified, and
        the lifecycle rules; the same variant, clock and name; a log of its own (empty) if this one keeps a log.

        Writes to either bucket are not seen by the other. For tests that build one state (a thread's history)
        and start many runs from it.
        """
        with self._lock:
            other = MemoryBucket(
                missing_if_match=self.missing_if_match,
                now=self.now,
                exists=self.exists,
                keep_log=self.log is not None,
                name=self.name,
            )
            other.lifecycle_rules = dict(self.lifecycle_rules)
            other._objects = dict(self._objects)  # its values are frozen
            other._sorted = list(self._sorted)
            return other

    def apply_lifecycle(self, now: datetime | None = None) -> list[str]:
        """Expire tagged objects older than their rule's days (as the server would, eventually); returns them."""
        now = now or self.now()
        with self._lock:
            doomed = [
                key
                for key, obj in self._objects.items()
                for prefix, days in self.lifecycle_rules.values()
                if obj.tagged and key.startswith(prefix) and now - obj.modified >= timedelta(days=days)
            ]
            for key in doomed:
                self._remove(key)
            return doomed

    # -- one request ----------------------------------------------------------------------------
    def execute(self, request: Request) -> Any:
        with self._lock:
            reply = self._apply(request)
            if self.log is not None:
                self.log.append((request, reply))
            return reply

    def _apply(self, request: Request) -> Any:
        answer = _ANSWERS.get(type(request))
        if answer is None:
            raise TypeError(f"the in-memory bucket does not answer {type(request).__name__}")
        if not self.exists and type(request) not in (BucketExists, CreateBucket):
            raise error_for_code("NoSuchBucket", self.name, type(request).__name__, "NoSuchBucket")
        return answer(self, request)

    def _bucket_exists(self, request: BucketExists) -> bool:
        return self.exists

    def _create_bucket(self, request: CreateBucket) -> None:
        self.exists = True

    def _get(self, request: Get) -> StoredObject | None:
        obj = self._objects.get(request.key)
        return None if obj is None else StoredObject(obj.body, obj.etag, obj.modified, self.now())

    def _copy(self, request: Copy) -> bool:
        source = self._objects.get(request.source)
        if source is not None:
            self._store(request.target, source.body, source.tagged)
        return source is not None

    def _ensure_expiry_rule(self, request: EnsureExpiryRule) -> ExpiryRule:
        self.lifecycle_rules[request.rule_id] = (request.prefix, request.days)
        key, _, value = request.tag.partition("=")
        return ExpiryRule(request.prefix, ((key, value),), request.days, f"prefix {request.prefix!r}, tag {key}")

    def _remove_expiry_rule(self, request: RemoveExpiryRule) -> None:
        self.lifecycle_rules.pop(request.rule_id, None)

    def _delete(self, request: DeleteObjects) -> None:
        if len(request.keys) > MAX_DELETE_KEYS:
            raise S3RequestError(f"DeleteObjects of {len(request.keys)} keys: at most {MAX_DELETE_KEYS}")
        for key in request.keys:
            self._remove(key)

    def _delete_if_match(self, request: DeleteIfMatch) -> Any:
        obj = self._objects.get(request.key)
        if obj is None:
            return None if self.missing_if_match == "404" else PRECONDITION_FAILED
        if _bare(obj.etag) != _bare(request.etag) and request.etag != "*":
            return PRECONDITION_FAILED
        self._remove(request.key)
        return None

    def _put(self, request: Put) -> Any:
        current = self._objects.get(request.key)
        if isinstance(request.mode, Create) and current is not None:
            return PRECONDITION_FAILED
        if isinstance(request.mode, Update):
            # A missing key: 404 (AWS, moto) or 412 (SeaweedFS); the I/O shell maps both to PRECONDITION_FAILED.
            if current is None:
                return PRECONDITION_FAILED
            if request.mode.etag != "*" and _bare(current.etag) != _bare(request.mode.etag):
                return PRECONDITION_FAILED
        return Written(self._store(request.key, bytes(request.body), request.expires).etag)

    def _store(self, key: str, body: bytes, tagged: bool) -> _BucketObject:
        raw = _b(key)
        if not raw or len(raw) > MAX_KEY_BYTES:
            raise error_for_code("KeyTooLongError", self.name, f"PutObject {key[:64]!r}...", "KeyTooLongError")
        obj = _BucketObject(body, etag_of(body), self.now(), tagged)
        if key not in self._objects:
            bisect.insort(self._sorted, raw)
        self._objects[key] = obj
        return obj

    def _remove(self, key: str) -> None:
        if self._objects.pop(key, None) is not None:
            raw = _b(key)
            del self._sorted[bisect.bisect_left(self._sorted, raw)]

    def _list(self, request: ListKeys) -> Page:
        prefix = _b(request.prefix)
        delimiter = _b(request.delimiter) if request.delimiter else None
        max_keys = max(0, min(request.max_keys, MAX_LIST_KEYS))
        skip_under: bytes | None = None  # resuming after a common prefix: skip every key under it
        if request.token:
            kind, marker = _decode_token(request.token)
            if kind == "p":
                skip_under = marker
        else:
            marker = _b(request.start_after) if request.start_after else b""
        keys: list[str] = []
        prefixes: list[str] = []
        modified: list[datetime] = []
        etags: list[str] = []
        sizes: list[int] = []
        token: str | None = None
        last: tuple[str, bytes] | None = None
        i = bisect.bisect_right(self._sorted, marker) if marker else bisect.bisect_left(self._sorted, prefix)
        i = max(i, bisect.bisect_left(self._sorted, prefix))
        while i < len(self._sorted):
            raw = self._sorted[i]
            i += 1
            if not raw.startswith(prefix):
                break
            if skip_under is not None and raw.startswith(skip_under):
                continue
            entry: tuple[str, bytes] = ("k", raw)
            if delimiter is not None:
                cut = raw.find(delimiter, len(prefix))
                if cut >= 0:
                    common = raw[: cut + len(delimiter)]
                    skip_under = common
                    entry = ("p", common)
            if len(keys) + len(prefixes) == max_keys:
                # One more entry exists: the page is truncated after the last one returned.
                token = _encode_token(*last) if last is not None else None
                break
            kind, value = entry
            text = value.decode("utf-8", "surrogatepass")
            if kind == "p":
                prefixes.append(text)
            else:
                obj = self._objects[text]
                keys.append(text)
                modified.append(obj.modified)
                etags.append(obj.etag)
                sizes.append(len(obj.body))
            last = entry
        return Page(keys, prefixes, token, modified, etags, sizes=sizes, served=self.now())


def _b(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _encode_token(kind: str, marker: bytes) -> str:
    return base64.urlsafe_b64encode(json.dumps([kind, marker.hex()]).encode()).decode()


def _decode_token(token: str) -> tuple[str, bytes]:
    try:
        kind, marker = json.loads(base64.urlsafe_b64decode(token.encode()))
        return str(kind), bytes.fromhex(marker)
    except (ValueError, TypeError) as exc:
        raise S3RequestError(f"ListObjectsV2: invalid continuation token {token!r}") from exc


__all__ = ["MemoryBucket", "_BucketObject", "etag_of"]


_ANSWERS: dict[type, Callable[[MemoryBucket, Any], Any]] = {
    BucketExists: MemoryBucket._bucket_exists,
    CreateBucket: MemoryBucket._create_bucket,
    Get: MemoryBucket._get,
    Put: MemoryBucket._put,
    ListKeys: MemoryBucket._list,
    DeleteObjects: MemoryBucket._delete,
    DeleteIfMatch: MemoryBucket._delete_if_match,
    Copy: MemoryBucket._copy,
    EnsureExpiryRule: MemoryBucket._ensure_expiry_rule,
    RemoveExpiryRule: MemoryBucket._remove_expiry_rule,
}
"""The in-memory bucket's answer to each request type it is sent (``ProbeConditionalWrites`` never is: the drivers
answer it; ``requests.REQUEST_KINDS`` is the catalogue this table must cover)."""
