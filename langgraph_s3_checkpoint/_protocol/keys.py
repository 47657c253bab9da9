"""Object keys: how thread ids, namespaces and checkpoint ids become S3 keys, and back.

Any string is a valid thread id or namespace, so every id is escaped into one key segment that never
contains ``/`` (no prefix of one thread's keys can match another thread's) and never contains ``.``
(so ``..`` cannot appear, which some filer-backed servers treat as a path). Segments longer than
:data:`MAX_SEGMENT` are replaced by a digest, and the real id is kept in a small ``name`` object.

Checkpoint ids are stored *order-inverted* (:func:`invert_id`) so that S3's ascending LIST returns the
newest checkpoint first. That makes ``list(limit=k)`` and ``before=`` cost O(k) requests however long
the history is. A checkpoint's record and pending writes share the folder ``c/{R}/`` (record first, since
``checkpoint`` sorts before ``w/``), so one LIST returns each record immediately followed by its writes:
no per-checkpoint listing is needed to stream history.

No key is ever the folder of another key (``a/b`` and ``a/b/c``): filer-backed servers such as SeaweedFS
and MinIO map keys to files and folders and cannot hold both.

Layout under ``{prefix}/`` (see docs/design.md)::

    threads/{T}/deleting                      a delete_thread in progress (or one that died part-way)
    threads/{T}/copying                       a copy_thread into T in progress (or one that died)
    threads/{T}/name                          real thread id, only when T is a digest
    threads/{T}/r/{run}/{N}                   0.1.x only: this thread's twins of its run-index entries
    threads/{T}/ns/{N}/name                   real namespace, only when N is a digest
    threads/{T}/ns/{N}/deleting               a rollback removing this namespace's head (or one that died)
    threads/{T}/ns/{N}/head                   commit pointer: a copy of the newest record
    threads/{T}/ns/{N}/c/{R}/checkpoint       checkpoint record (R = invert_id(checkpoint_id))
    threads/{T}/ns/{N}/c/{R}/w/{task}         pending writes of one task (every put_writes call merged)
    threads/{T}/ns/{N}/b/{channel}/{version}  a channel value too large to inline
    runs/{run}/{T}/{N}                        run index: first checkpoint id of run in (T, N)

Beside ``threads/``, ``runs/`` and ``_setup/`` (the saver's), ``store/`` is the long-term memory store's
(:mod:`.store`) and ``cache/`` the node cache's (:mod:`.cache`: ``cache/{namespace_segment(ns)}/{escape(key)}``,
with its expiry markers beside it in ``cache-ttl/``); the saver's readers and tools walk only their own three
folders, so they never see the others.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

MAX_SEGMENT = 180
"""Longest escaped segment kept verbatim; longer ids become ``~`` + SHA-256."""

MAX_KEY_BYTES = 1024
"""The longest object key S3 accepts (UTF-8 bytes; AWS and SeaweedFS refuse longer ones with KeyTooLongError)."""


def key_bytes(key: str) -> int:
    """The length S3 measures a key by (UTF-8 bytes), to compare with :data:`MAX_KEY_BYTES`."""
    return len(key.encode("utf-8", "surrogatepass"))


_SURROGATE = re.compile("[\ud800-\udfff]")


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (undecodable bytes decoded with ``surrogateescape``, say): not
    text that UTF-8, and so the serializer, can store as it is."""
    return not text.isascii() and _SURROGATE.search(text) is not None


EXPIRY_TAG = "langgraph-s3-ttl=1"
"""Object tag (``key=value``) matched by the expiry rule that ``setup()`` installs when ``ttl_days`` is set."""
RULE_PREFIX = "langgraph-s3-ttl:"
"""The expiry rule's id is this and the saver's prefix: one rule per prefix, replaced by each ``setup()``."""

DELETING = "deleting"
"""Name of a delete-in-progress marker (:meth:`Layout.deleting`, :meth:`Layout.deleting_in`)."""
COPYING = "copying"
"""Name of a copy-in-progress marker on a ``copy_thread`` target (:meth:`Layout.copying`)."""


def marker_operation(body: bytes) -> tuple[str, str]:
    """What a marker's body (``"{operation} {uuid}"``, written by :func:`.plans.mark`) names: the operation
    (``delete_thread``, ``expire_threads``, ``delete_for_runs``, ``copy_thread``, ``import_thread``) and its
    argument (a rollback's run id, which its operation carries: ``"delete_for_runs {run_id} {uuid}"``; ``""`` for
    the others)."""
    operation, _, argument = body.decode("utf-8", "replace").rsplit(" ", 1)[0].partition(" ")
    return operation, argument


def copy_marked_by(body: bytes) -> tuple[str, str]:
    """What wrote a ``copying`` marker (``copy_thread`` or an import into the thread), as messages name it, and
    what to run again once the thread is deleted."""
    if marker_operation(body)[0] == "import_thread":
        return "an import", "import it again (import --replace)"
    return "a copy_thread", "copy again"


RECORD = "checkpoint"
"""Name of the record object inside its checkpoint folder; sorts before the writes folder ``w/``."""

_KEEP = frozenset((string.ascii_letters + string.digits + "-_").encode())
_ESCAPED = tuple(chr(b) if b in _KEEP else f"%{b:02X}" for b in range(256))
"""Each byte's form in a segment: itself when kept, else ``%XX``."""
_VERBATIM = re.compile(r"[A-Za-z0-9_-]+")
"""A value made only of kept characters is its own segment (the common case: uuids, task ids)."""
_EMPTY = "~"
_DIGEST = "~"


@functools.lru_cache(maxsize=4096)
def escape(value: str) -> str:
    """Escape an arbitrary string into one key segment (inverse: :func:`unescape`).

    Memoized, as :func:`revert_id` is: every key a plan builds or parses escapes its thread and namespace again,
    and a process works on few ids at a time (a tenth of the simulations' CPU went to these two)."""
    if value == "":
        return _EMPTY
    raw = value.encode("utf-8", "surrogatepass")
    seg = value if _VERBATIM.fullmatch(value) else "".join(map(_ESCAPED.__getitem__, raw))
    if len(seg) > MAX_SEGMENT:
        return _DIGEST + hashlib.sha256(raw).hexdigest()
    return seg


def is_digest(segment: str) -> bool:
    """Whether a segment is a digest, i.e. its real value lives in a ``name`` object."""
    return segment.startswith(_DIGEST) and segment != _EMPTY


_DIGEST_FORM = re.compile(r"~[0-9a-f]{64}")


def made_by(
    segment: str, escaper: Callable[[str], str], unescaper: Callable[[str], str], kept: re.Pattern[str]
) -> bool:
    """Whether ``escaper`` could have made ``segment``: ``kept`` as it is (the pattern of values it does not
    escape), a digest (``~`` + SHA-256), or a spelling that ``unescaper`` reads and ``escaper`` writes back the
    same. The rule of :func:`is_own_segment` and of the store's, each with its own escape."""
    if len(segment) <= MAX_SEGMENT and kept.fullmatch(segment):
        return True  # the common case: uuids, task ids, plain names
    if is_digest(segment):
        return _DIGEST_FORM.fullmatch(segment) is not None
    try:
        return escaper(unescaper(segment)) == segment
    except ValueError:  # an unescape that refuses a bad spelling, or bytes that are not UTF-8
        return False


def is_own_segment(segment: str) -> bool:
    """Whether :func:`escape` could have made ``segment``: the one test of a thread, namespace, run, task,
    channel or version segment that every reader and tool applies before taking a folder or key as the
    saver's. A folder under the prefix that fails it (``a.b``, ``%zz``, ``%61``, an empty segment) is foreign:
    read as nothing, never deleted, never repaired."""
    return made_by(segment, escape, unescape, _VERBATIM)


def named_id(segment: str, name_body: bytes | None) -> str | None:
    """The real id behind a digest ``segment``, from the body of its ``name`` object (``None``: missing).

    ``None`` when there is none to trust: no ``name`` object, or one that is not UTF-8 or whose text does not
    escape to ``segment`` (damaged, or written by something else). The one rule every reader and tool applies
    before taking a digest folder for a thread or namespace id.
    """
    if name_body is None:
        return None
    try:
        name = name_body.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None
    return name if escape(name) == segment else None


_CACHE_DIGEST = "~~"
"""Marks a node-cache namespace segment that is a digest of the whole namespace (:func:`namespace_segment`)."""
_CACHE_DIGEST_FORM = re.compile(r"~~[0-9a-f]{64}")


def namespace_segment(namespace: Sequence[str]) -> str:
    """One key segment for a namespace of any strings (the node cache's): each label :func:`escape`-d, joined
    with ``.``, which ``escape`` never writes, so the labels come back apart; ``~~`` + SHA-256 of the namespace
    when that is empty (the namespace ``()``) or longer than :data:`MAX_SEGMENT`. No such segment is ``.`` or
    ``..`` or holds ``..`` (every escaped label has at least one character), and none of the verbatim ones starts
    with ``~~`` (an escaped label is ``~`` alone or ``~`` + hex), so no two namespaces share a segment."""
    joined = ".".join(map(escape, namespace))
    if joined and len(joined) <= MAX_SEGMENT:
        return joined
    canonical = json.dumps(list(namespace), ensure_ascii=False, separators=(",", ":"))
    return _CACHE_DIGEST + hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def is_namespace_segment(segment: str) -> bool:
    """Whether :func:`namespace_segment` could have made ``segment``: the test every reader and tool of the node
    cache applies before taking a folder for a namespace's (anything else under ``cache/`` is foreign)."""
    if segment.startswith(_CACHE_DIGEST):
        return _CACHE_DIGEST_FORM.fullmatch(segment) is not None
    return len(segment) <= MAX_SEGMENT and all(map(is_own_segment, segment.split(".")))


def namespace_of_segment(segment: str) -> tuple[str, ...] | None:
    """The namespace behind a verbatim :func:`namespace_segment` (``None`` for a digest, or a label kept as
    one: their strings are only in the entries)."""
    labels = segment.split(".")
    if segment.startswith(_CACHE_DIGEST) or any(map(is_digest, labels)):
        return None
    return tuple(map(unescape, labels))


def unescape(segment: str) -> str:
    """Recover the string behind a verbatim segment (digests cannot be reversed).

    A segment this module did not make (a foreign object under the prefix, e.g. ``threads/a%zz/x``)
    comes back unchanged rather than raising: its "id" escapes to another segment, so readers and tools
    find nothing under it and skip it, as they skip every other foreign key.
    """
    if segment == _EMPTY:
        return ""
    if is_digest(segment):
        raise ValueError(f"segment {segment!r} is a digest; read its name object")
    out = bytearray()
    i = 0
    try:
        while i < len(segment):
            ch = segment[i]
            if ch == "%":
                out.append(int(segment[i + 1 : i + 3], 16))
                i += 3
            else:
                out.extend(ch.encode("utf-8", "surrogatepass"))
                i += 1
        return out.decode("utf-8", "surrogatepass")
    except ValueError:  # a bad %XX, or bytes that are not UTF-8: not a segment of ours
        return segment


def invert_id(checkpoint_id: str) -> str:
    """Map a checkpoint id to a segment whose ascending order is the ids' descending order.

    Each UTF-8 byte b becomes the two hex digits of 255 - b, and ``~`` (above every hex digit) ends the
    segment, so an id that is a prefix of another sorts after it, as a shorter string sorts before.
    """
    return checkpoint_id.encode("utf-8", "surrogatepass").translate(_COMPLEMENT).hex() + "~"


@functools.lru_cache(maxsize=4096)
def revert_id(segment: str) -> str:
    """Inverse of :func:`invert_id`; ``ValueError`` for a segment it did not make."""
    hexpart = segment[:-1]
    if not segment.endswith("~") or not hexpart or len(hexpart) % 2 or hexpart.strip(_LOWER_HEX):
        raise ValueError(f"{segment!r} is not an inverted checkpoint id")
    return bytes.fromhex(hexpart).translate(_COMPLEMENT).decode("utf-8", "surrogatepass")


def filed_checkpoint_id(key: str) -> str | None:
    """The checkpoint id a record's key names (``.../c/{R}/checkpoint``); ``None`` for any other key, or a
    record key whose folder is not an inverted id."""
    folder, _, name = key.rpartition("/")
    if name != RECORD:
        return None
    try:
        return revert_id(folder.rpartition("/")[2])
    except ValueError:
        return None


_LOWER_HEX = "0123456789abcdef"
_COMPLEMENT = bytes(255 - b for b in range(256))
"""Maps each byte b to 255 - b."""


@dataclass(frozen=True)
class CheckpointKey:
    """What a key under a namespace's ``c/`` is: a checkpoint's record, or one task's writes."""

    checkpoint_id: str
    is_record: bool


@dataclass(frozen=True)
class Layout:
    """Key builder and parser for one bucket prefix. Pure: knows nothing of S3 or serialization."""

    prefix: str = ""

    def __post_init__(self) -> None:
        cleaned = self.prefix.strip("/")
        object.__setattr__(self, "prefix", f"{cleaned}/" if cleaned else "")

    # -- builders -------------------------------------------------------------------------------
    @property
    def threads_root(self) -> str:
        return f"{self.prefix}threads/"

    def thread(self, thread_id: str) -> str:
        return f"{self.threads_root}{escape(thread_id)}/"

    def thread_name(self, thread_id: str) -> str:
        return f"{self.thread(thread_id)}name"

    def deleting(self, thread_id: str) -> str:
        """Written before ``delete_thread`` (or ``expire_threads``) deletes anything and deleted when it is
        done: while it exists, ``repair_thread`` does not rebuild a head from the records it condemned."""
        return f"{self.thread(thread_id)}{DELETING}"

    @staticmethod
    def deleting_in(ns_folder: str) -> str:
        """The marker of a rollback (``delete_for_runs``) that removes the head of the namespace whose folder
        (``.../ns/{N}/``) is given: the same role as :meth:`deleting`, for that namespace only."""
        return f"{ns_folder}{DELETING}"

    def copying(self, thread_id: str) -> str:
        """Written on a ``copy_thread`` target before anything is copied and deleted once its heads landed:
        while it exists, ``repair_thread`` does not rebuild a head from the copy's records (see repair.py)."""
        return f"{self.thread(thread_id)}{COPYING}"

    def namespaces(self, thread_id: str) -> str:
        return f"{self.thread(thread_id)}ns/"

    def ns(self, thread_id: str, checkpoint_ns: str) -> str:
        return f"{self.namespaces(thread_id)}{escape(checkpoint_ns)}/"

    def ns_name(self, thread_id: str, checkpoint_ns: str) -> str:
        return f"{self.ns(thread_id, checkpoint_ns)}name"

    def head(self, thread_id: str, checkpoint_ns: str) -> str:
        return Layout.head_in(self.ns(thread_id, checkpoint_ns))

    @staticmethod
    def head_in(ns_folder: str) -> str:
        """The head of the namespace whose folder (``.../ns/{N}/``) is given."""
        return f"{ns_folder}head"

    def records(self, thread_id: str, checkpoint_ns: str) -> str:
        return Layout.records_in(self.ns(thread_id, checkpoint_ns))

    @staticmethod
    def records_in(ns_folder: str) -> str:
        """The folder of the records (and their writes) of the namespace whose folder is given."""
        return f"{ns_folder}c/"

    def checkpoint_dir(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
        return f"{self.records(thread_id, checkpoint_ns)}{invert_id(checkpoint_id)}/"

    def record(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
        return f"{self.checkpoint_dir(thread_id, checkpoint_ns, checkpoint_id)}{RECORD}"

    def writes(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
        return f"{self.checkpoint_dir(thread_id, checkpoint_ns, checkpoint_id)}w/"

    def task_writes(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, task_id: str) -> str:
        return f"{self.writes(thread_id, checkpoint_ns, checkpoint_id)}{escape(task_id)}"

    @staticmethod
    def record_in(ns_folder: str, checkpoint_id: str) -> str:
        """A checkpoint's record key in a namespace known by its folder (``.../ns/{N}/``, as listed)."""
        return f"{ns_folder}c/{invert_id(checkpoint_id)}/{RECORD}"

    def blobs(self, thread_id: str, checkpoint_ns: str) -> str:
        return Layout.blobs_in(self.ns(thread_id, checkpoint_ns))

    @staticmethod
    def blobs_in(ns_folder: str) -> str:
        """The folder of the large values of the namespace whose folder is given."""
        return f"{ns_folder}b/"

    def blob(self, thread_id: str, checkpoint_ns: str, channel: str, version: str) -> str:
        return self.blob_in(self.ns(thread_id, checkpoint_ns), channel, version)

    @staticmethod
    def blob_in(ns_folder: str, channel: str, version: str) -> str:
        """A large value's key in a namespace known by its folder (``.../ns/{N}/``, as listed) rather than
        by its name, which a digest segment would need a read to recover."""
        return f"{ns_folder}b/{escape(channel)}/{escape(version)}"

    def run_index(self, run_id: str) -> str:
        return f"{self.prefix}runs/{escape(run_id)}/"

    def run_entry(self, run_id: str, thread_id: str, checkpoint_ns: str) -> str:
        return f"{self.run_index(run_id)}{escape(thread_id)}/{escape(checkpoint_ns)}"

    def thread_run_entry(self, run_id: str, thread_id: str, checkpoint_ns: str) -> str:
        return f"{self.thread(thread_id)}r/{escape(run_id)}/{escape(checkpoint_ns)}"

    def probe(self, token: str) -> str:
        return f"{self.prefix}_setup/probe-{token}"

    # -- parsers --------------------------------------------------------------------------------
    @staticmethod
    def parse_checkpoint_key(records_prefix: str, key: str) -> CheckpointKey | None:
        """What ``key`` (listed under ``records_prefix``, a namespace's ``c/``) is, or ``None`` if it is
        not ours: folder markers (``.../``) that consoles and sync tools create, and foreign objects (a task
        segment :func:`escape` could not have made among them), are skipped by every reader and tool rather
        than failing them.

        Writes are ``w/{task}`` (one object per task); ``w/{task}/{idx}`` objects of earlier releases
        are read too.
        """
        rest = key[len(records_prefix) :].split("/") if key.startswith(records_prefix) else []
        if len(rest) < 2 or not all(rest):
            return None
        try:
            checkpoint_id = revert_id(rest[0])
        except ValueError:
            return None
        if rest[1:] == [RECORD]:
            return CheckpointKey(checkpoint_id, is_record=True)
        if rest[1] == "w" and len(rest) in (3, 4) and all(map(is_own_segment, rest[2:])):
            return CheckpointKey(checkpoint_id, is_record=False)
        return None

    def segment_after(self, key: str, root: str) -> str:
        """The first segment of ``key`` after ``root`` (e.g. a thread segment after threads_root)."""
        return key[len(root) :].split("/", 1)[0]

    def retarget_thread(self, key: str, source_thread_id: str, target_thread_id: str) -> str:
        """The key that ``key`` (under the source thread) has under the target thread."""
        return self.thread(target_thread_id) + key[len(self.thread(source_thread_id)) :]

    def global_run_entry_of(self, thread_run_key: str, thread_segment: str) -> str:
        """Global run-index key for a 0.1.x twin ``threads/{T}/r/{run}/{N}``."""
        run_seg, ns_seg = thread_run_key.split("/")[-2:]
        return self.run_entry_at(run_seg, thread_segment, ns_seg)

    def run_entry_at(self, run_segment: str, thread_segment: str, ns_segment: str) -> str:
        """Global run-index key from key segments (a namespace known by its folder, as listed)."""
        return f"{self.prefix}runs/{run_segment}/{thread_segment}/{ns_segment}"


# ------------------------------------------------------------------------------------------------
# What a key under a thread is
# ------------------------------------------------------------------------------------------------
class KeyKind(Enum):
    """What an object directly or indirectly under ``threads/{T}/`` is (:func:`classify`)."""

    THREAD_NAME = "thread-name"
    MARKER = "marker"
    RUN_ENTRY = "run-entry"
    NS_NAME = "ns-name"
    HEAD = "head"
    RECORD = "record"
    WRITE = "write"
    BLOB = "blob"
    UNKNOWN = "unknown"


_TOP_LEVEL = {"name": KeyKind.THREAD_NAME, DELETING: KeyKind.MARKER, COPYING: KeyKind.MARKER}
"""Kinds of the keys directly under a thread."""
_IN_NAMESPACE = {"name": KeyKind.NS_NAME, DELETING: KeyKind.MARKER, "head": KeyKind.HEAD}
"""Kinds of the single-segment keys directly under a namespace."""


def classify(relative: str) -> KeyKind:
    """The kind of object at ``relative``, a key relative to its thread's prefix (``threads/{T}/``).

    The one rule for which keys under a thread are the saver's: copy_thread, export and import, the
    ``threads`` statistics, verify, gc and prune all ask it. A key is the saver's only if its shape is the
    layout's and each id in it is a segment :func:`escape` could have made (:func:`is_own_segment`); so a
    folder marker (``.../``), which consoles and sync tools create, or an empty segment is never ours."""
    parts = relative.split("/")
    if len(parts) == 1:
        return _TOP_LEVEL.get(parts[0], KeyKind.UNKNOWN)
    if parts[0] == "r":
        return KeyKind.RUN_ENTRY if len(parts) == 3 and all(map(is_own_segment, parts[1:])) else KeyKind.UNKNOWN
    if parts[0] == "ns" and len(parts) >= 3 and is_own_segment(parts[1]):
        return classify_in_namespace("/".join(parts[2:]))
    return KeyKind.UNKNOWN


def classify_in_namespace(relative: str) -> KeyKind:
    """The kind of object at ``relative``, a key relative to its namespace's prefix (``threads/{T}/ns/{N}/``):
    :func:`classify` for tools that walk one namespace."""
    parts = relative.split("/")
    if len(parts) == 1:
        return _IN_NAMESPACE.get(parts[0], KeyKind.UNKNOWN)
    if parts[0] == "c":
        parsed = Layout.parse_checkpoint_key("c/", relative)
        if parsed is None:
            return KeyKind.UNKNOWN
        return KeyKind.RECORD if parsed.is_record else KeyKind.WRITE
    if parts[0] == "b" and len(parts) == 3 and all(map(is_own_segment, parts[1:])):
        return KeyKind.BLOB
    return KeyKind.UNKNOWN


COPIED = frozenset({KeyKind.RECORD, KeyKind.WRITE, KeyKind.BLOB, KeyKind.RUN_ENTRY, KeyKind.NS_NAME})
"""Kinds that ``copy_thread`` and ``export`` carry over as they are. Not the heads (read first as the copy's
snapshot and written last, as its commit), the thread's ``name`` (written for the target's own id), the
markers (of operations on the source, not the copy's) or foreign objects (not the thread's data: ``import``
refuses an archive that holds one)."""
