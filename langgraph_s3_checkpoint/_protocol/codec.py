"""The bytes of one object: a small versioned envelope around LangGraph's own serializer.

Channel values, pending writes, checkpoints and metadata are all encoded by the saver's ``serde``
(``dumps_typed``/``loads_typed``), and the serializer's type tag is stored next to its bytes. That is
what makes ``EncryptedSerializer`` and ``with_allowlist`` apply to everything we store, and it means
this package never pickles and never invents its own format for user values.

The envelope only frames those ``(tag, bytes)`` pairs (with msgpack, which ``langgraph-checkpoint``
already depends on) and records, per object, whether the frame was compressed::

    b"LGS3" | format version (1 byte) | compression (1 byte: 0 none, 1 zlib) | msgpack frame

Objects written with and without compression stay readable side by side, and a reader that meets a
newer format version fails with a clear error instead of guessing.
"""

from __future__ import annotations

import hashlib
import itertools
import uuid
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ormsgpack
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata
from langgraph.checkpoint.serde.base import SerializerProtocol

from ..errors import CorruptObjectError, DamagedHeadError, DecryptionError, NewerFormatError, SerializationError
from .chain import DELETED_NAMED
from .keys import RECORD, filed_checkpoint_id, is_digest, unescape
from .writes import StoredWrite, TaskWrites, restored

MAGIC = b"LGS3"
THREAD_FORMAT = 2
"""The version a thread's heads and records, and gc's seals, are written in. Version 2 (release 0.2) reads as
version 1 does; it marks a thread whose runs are indexed by their global run-index entries alone, without the
per-thread twin ``threads/{T}/r/{run}/{N}`` that 0.1.x writes, reads and garbage-collects by. A 0.1.x process
meets version 2 as a :class:`~langgraph_s3_checkpoint.errors.NewerFormatError` (its reads, puts, copies, rollbacks
and gc stop there) instead of judging the new run index by rules that no longer hold."""
OBJECT_FORMAT = 1
"""The version every other object (writes, large values, the store's and the cache's) is written in. Each kind is
read up to the version this release writes for it: a newer one is a newer release's
(:class:`~langgraph_s3_checkpoint.errors.NewerFormatError`)."""
_PLAIN = 0
_ZLIB = 1
ROLLED_BACK_NAMED = 16
"""How many runs a head names as rolled back while it was the head (:meth:`Codec.rolled_back_on`), newest last."""


def corrupt(key: str, reason: str) -> CorruptObjectError:
    """The error for an undecodable object: a damaged head names ``repair`` (its history may be intact)."""
    parts = key.split("/")
    if len(parts) >= 5 and parts[-1] == "head" and parts[-3] == "ns" and parts[-5] == "threads":
        segment = parts[-4]
        return DamagedHeadError(key, reason, segment if is_digest(segment) else unescape(segment))
    return CorruptObjectError(key, reason)


APPENDED_TAIL_BYTES = 32 * 1024
"""The most serialized bytes a record carries of a list's elements appended since its base and parts
(:class:`Appended`); beyond, they go out as a new part. A chat of 1 KB messages writes a part about every 15 turns: a
PUT spared at each other step that changes the list, at the price of the tail travelling in the record and the head
(every record repeats its tail: a smaller budget stores less and sends more PUTs, which cost more than the bytes;
``docs/design.md``, "Large lists")."""

PARTS_MERGED = 8
"""Parts of one size merged into one (:class:`Appended`): a list of ``n`` elements is read in at most about
``(PARTS_MERGED - 1) * log(n / part)`` parallel GETs, and each element is written about ``log(n / part)`` times."""

PART_MARK = "\x00"
"""Between a channel and a part's first element index in the ``blobs`` entry of a part (:func:`part_name`): no
LangGraph channel holds it (a checkpoint with a channel whose name does stores no list in parts)."""


def part_name(channel: str, start: int) -> str:
    """The ``blobs`` entry of the part of ``channel``'s list that begins at element ``start``: parts are large values
    like any (gc, prune, copy, repair and verify see them through ``blobs``), under a name no channel has."""
    return f"{channel}{PART_MARK}{start}"


def is_part_name(name: str) -> bool:
    return PART_MARK in name


@dataclass(frozen=True)
class Part:
    """Elements ``start`` to ``start + count`` of a list, stored as one large value (a list) at the record's
    ``blobs[part_name(channel, start)]``. ``level``: 0 for a tail that went out, ``k + 1`` for
    :data:`PARTS_MERGED` parts of level ``k`` merged."""

    start: int
    count: int
    level: int = 0

    def frame(self) -> list[int]:
        return [self.start, self.count, self.level]


@dataclass(frozen=True)
class Appended:
    """A list value stored as what was appended: the large value its record references (``blobs``: the list at an
    earlier version of the channel, the *base*), then *parts* (large values holding the elements appended after it,
    in order), then the elements appended since, inline in the record (the *tail*).

    Why: a chat's ``messages`` grows by one or two elements a step, and storing the whole list at every version made
    storage grow with the square of the conversation and cost a PUT a step. The base is written once, the records
    that extend it carry only the tail, and when the tail outgrows its budget (:data:`APPENDED_TAIL_BYTES`) it goes
    out as a part: each element is stored in one part, parts of one size are merged :data:`PARTS_MERGED` at a time
    (so a read takes a bounded number of parallel GETs), and no step uploads the whole list again. A value extends
    what its parent stored when its first ``count`` elements serialize to the same bytes (``digest``): the bytes,
    not the objects, are compared, so an element changed in place is never taken for the stored one (a serializer
    that encrypts writes new bytes each time, so with it every large list is a new base, as before)."""

    count: int
    """Elements of the base and the parts."""
    digest: str
    """:func:`elements_digest` of those elements."""
    tail: tuple[list[Any], ...] = ()
    """The elements after them, as stored (serde type and bytes)."""
    parts: tuple[Part, ...] = ()
    """The parts after the base, in order (the first begins where the base ends)."""

    @property
    def base_count(self) -> int:
        """Elements of the base: those before the first part."""
        return self.parts[0].start if self.parts else self.count

    def frame(self) -> list[Any]:
        framed: list[Any] = [self.count, self.digest, list(self.tail)]
        if self.parts:
            framed.append([part.frame() for part in self.parts])
        return framed

    @classmethod
    def from_frame(cls, stored: Any) -> Appended:
        count, digest, tail, *rest = stored
        parts = tuple(Part(int(start), int(n), int(level)) for start, n, level in (rest[0] if rest else ()))
        if rest[1:]:
            raise ValueError("it has fields after its parts")
        if any(part.count <= 0 for part in parts) or any(
            before.start + before.count != after.start for before, after in itertools.pairwise(parts)
        ):
            raise ValueError("its parts do not follow one another")
        if parts and (parts[0].start <= 0 or parts[-1].start + parts[-1].count != int(count)):
            raise ValueError("its parts do not end where its tail begins")
        return cls(int(count), str(digest), tuple(list(typed) for typed in tail), parts)

    def tail_bytes(self) -> int:
        return serialized_bytes(self.tail)

    def part_names(self, channel: str) -> list[str]:
        return [part_name(channel, part.start) for part in self.parts]

    def span_of(self, channel: str, name: str) -> slice:
        """The elements of the list that its ``blobs`` entry ``name`` holds: the base's (``name`` is the channel's),
        or one part's."""
        if name == channel:
            return slice(0, self.base_count)
        part = next(part for part in self.parts if part_name(channel, part.start) == name)
        return slice(part.start, part.start + part.count)

    def sent_out(self, count: int, digest: str, merged: int) -> Appended:
        """This list once the elements after its base and parts, up to ``count`` (``digest``: of all ``count``),
        went out as a part, and the last ``merged`` parts of one size were merged into one, again while they can be.
        Only its last part is new: the others are this list's."""
        parts = [*self.parts, Part(self.count, count - self.count)]
        while 1 < merged <= len(parts) and len({part.level for part in parts[-merged:]}) == 1:
            group = parts[-merged:]
            parts[-merged:] = [Part(group[0].start, sum(part.count for part in group), group[0].level + 1)]
        return Appended(count, digest, (), tuple(parts))


def part_owners(appended: Mapping[str, Appended]) -> dict[str, str]:
    """Each part's ``blobs`` entry, with the channel whose list it is part of."""
    return {name: channel for channel, entry in appended.items() for name in entry.part_names(channel)}


def serialized_bytes(elements: Sequence[list[Any]]) -> int:
    """The serializer's bytes of serialized values (each ``[tag, bytes]``)."""
    return sum(len(typed[1]) for typed in elements)


def elements_digest(elements: Sequence[list[Any]]) -> str:
    """A digest of serialized list elements (each ``[tag, bytes]``), as :class:`Appended` compares them."""
    h = hashlib.sha256()
    for tag, data in elements:
        encoded_tag = str(tag).encode()
        h.update(len(encoded_tag).to_bytes(4, "big") + encoded_tag + len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


@dataclass
class Record:
    """One stored checkpoint: what ``put`` receives, split into inline values and blob references."""

    checkpoint: Checkpoint
    """The checkpoint without ``channel_values``."""
    metadata: CheckpointMetadata
    parent_id: str | None
    inline: dict[str, Any] = field(default_factory=dict)
    """Channel values small enough to live inside the record."""
    encoded: dict[str, list[Any]] = field(default_factory=dict)
    """The same values as stored (serde type and bytes): what a put continuing this record carries over."""
    blobs: dict[str, str] = field(default_factory=dict)
    """Channel -> version of values stored as separate blob objects."""
    appended: dict[str, Appended] = field(default_factory=dict)
    """Channels whose value is the blob at ``blobs[channel]`` followed by these elements (:class:`Appended`), as
    stored: what a put continuing this record carries over."""
    tails: dict[str, list[Any]] = field(default_factory=dict)
    """The same elements decoded: what :meth:`Codec.extended` appends to the base."""
    previous_head: str | None = None
    """Id of the head this checkpoint replaced when it was committed: the commit chain."""
    detached: bool = False
    """Committed by its record alone (older than the head when written), so outside the chain."""
    deleted: dict[str, str | None] = field(default_factory=dict)
    """Committed records deleted below it, each with the link the chain goes on at (:mod:`.chain`, "Deleted links"):
    written into the head by the deleter, carried into each record committed on top of it."""
    rolled_back: tuple[str, ...] = ()
    """Runs rolled back while this was the head, which it names so that their steps are refused (a head's only:
    :meth:`Codec.rolled_back_on`)."""
    undecodable: bool = False
    """A stand-in for a record whose body could not be decoded (``list(skip_damaged=True)``): only its id, from its
    key, is known; the commit chain never shows it (:class:`~.chain.Standing`)."""

    def large_channels(self) -> list[str]:
        """The channels whose value is a large value: the ``blobs`` entries that are not parts of a list."""
        parts = part_owners(self.appended)
        return [name for name in self.blobs if name not in parts]

    def entries_of(self, channel: str) -> list[str]:
        """The ``blobs`` entries that hold ``channel``'s large value, in order: its own (a list's base), then its
        parts' (:class:`Appended`)."""
        appended = self.appended.get(channel)
        return [channel, *(appended.part_names(channel) if appended is not None else ())]


@dataclass
class WriteBatch:
    """The writes a reader sees in one writes object: one task's (or, from earlier releases, one call's)."""

    task_id: str
    writes: list[tuple[int, str, Any, str]]
    """(idx, channel, value, task_path)."""


@dataclass(frozen=True)
class Codec:
    """Encodes and decodes every object the saver stores. Pure: no I/O."""

    serde: SerializerProtocol
    compress_threshold: int | None = 4096
    """Frames at least this large are zlib-compressed; ``None`` disables compression."""
    _alike: bool | None = field(default=None, init=False, repr=False, compare=False)
    """:meth:`encodes_alike`'s answer, once asked."""

    # -- framing --------------------------------------------------------------------------------
    def _frame(self, payload: Any, version: int = OBJECT_FORMAT) -> bytes:
        body = ormsgpack.packb(payload)
        if self.compress_threshold is not None and len(body) >= self.compress_threshold:
            packed = zlib.compress(body, 3)
            if len(packed) < len(body):
                return MAGIC + bytes((version, _ZLIB)) + packed
        return MAGIC + bytes((version, _PLAIN)) + body

    def _thread_frame(self, payload: Any) -> bytes:
        """A head's or record's frame (:data:`THREAD_FORMAT`)."""
        return self._frame(payload, THREAD_FORMAT)

    def _unframe(self, key: str, data: bytes, newest: int = OBJECT_FORMAT) -> Any:
        """An object's frame; ``newest``: the newest version this release writes for its kind (a newer one is a
        newer release's)."""
        if len(data) < 6 or data[:4] != MAGIC:
            raise corrupt(key, "not written by langgraph-s3-checkpoint (bad magic)")
        version, compression = data[4], data[5]
        if version > newest:
            raise NewerFormatError(key, version, newest)
        if version < 1:
            raise corrupt(key, f"format version {version} was never written by any release")
        body = data[6:]
        try:
            if compression == _ZLIB:
                body = zlib.decompress(body)
            elif compression != _PLAIN:
                raise corrupt(key, f"unknown compression code {compression}")
            return ormsgpack.unpackb(body)
        except (zlib.error, ormsgpack.MsgpackDecodeError, ValueError) as exc:
            raise corrupt(key, f"truncated or damaged ({exc})") from exc

    # -- serde ----------------------------------------------------------------------------------
    def dump(self, what: str, value: Any) -> list[Any]:
        try:
            tag, data = self.serde.dumps_typed(value)
        except Exception as exc:
            raise SerializationError(
                f"Cannot serialize {what} ({type(value).__name__}) with {type(self.serde).__name__}: "
                f"{exc}. Nothing was committed. Make the value serializable or configure serde."
            ) from exc
        return [tag, data]

    def load(self, key: str, typed: Any) -> Any:
        tag: Any = None
        try:
            tag = typed[0]
            return self.serde.loads_typed((tag, typed[1]))
        except Exception as exc:
            if isinstance(tag, str) and "+" in tag:
                # EncryptedSerializer tags its values "{type}+{cipher}": the bytes are ciphertext.
                cipher = tag.split("+", 1)[1]
                if getattr(self.serde, "cipher", None) is None:
                    reason = (
                        f"it was written by an EncryptedSerializer (cipher {cipher!r}) and this saver's "
                        f"serializer ({type(self.serde).__name__}) has no key"
                    )
                else:
                    reason = f"the key of this saver's serializer does not match (cipher {cipher!r}: {exc})"
                raise DecryptionError(key, reason) from exc
            raise corrupt(key, f"the serializer could not decode a value ({exc})") from exc

    # -- records --------------------------------------------------------------------------------
    def encode_value(self, channel: str, value: Any) -> list[Any]:
        return self.dump(f"channel {channel!r}", value)

    def encode_record(
        self,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        parent_id: str | None,
        inline: dict[str, list[Any]],
        blobs: dict[str, str],
        *,
        previous_head: str | None = None,
        detached: bool = False,
        deleted: Mapping[str, str | None] | None = None,
        appended: Mapping[str, Appended] | None = None,
    ) -> bytes:
        """Frame a record from already-encoded inline values (see :meth:`encode_value`)."""
        stripped = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        frame: dict[str, Any] = {
            "id": checkpoint["id"],
            "checkpoint": self.dump("the checkpoint", stripped),
            "metadata": self.dump("checkpoint metadata", metadata),
            "parent": parent_id,
            "inline": inline,
            "blobs": blobs,
            "previous_head": previous_head,
            "detached": detached,
        }
        if deleted:
            frame["deleted"] = dict(deleted)
        if appended:
            frame["appended"] = {channel: entry.frame() for channel, entry in appended.items()}
        run = metadata.get("run_id")
        if run is not None:
            # Beside the serializer's copy, in the clear (as the run index's keys hold it): a copy or an import
            # indexes the runs a thread carries without decoding metadata (:mod:`.run_index`), so without the key.
            frame["run"] = str(run)
        return self._thread_frame(frame)

    def _record_frame(self, key: str, data: bytes) -> Any:
        """A record's or head's frame; a record must hold the checkpoint its key names.

        Readers, gc and repair take a record's id from its body, so an object filed under another
        checkpoint's key (a botched manual restore, a tampered bucket) would otherwise show a checkpoint
        where another belongs, or hide one from ``list`` and gc.
        """
        frame = self._unframe(key, data, THREAD_FORMAT)
        misfiled = (
            key.endswith(f"/{RECORD}")
            and isinstance(frame, dict)
            and "id" in frame
            and filed_checkpoint_id(key) != frame["id"]
        )
        if misfiled:
            raise corrupt(key, f"holds checkpoint {frame['id']!r}, not the one its key names: misfiled or tampered")
        return frame

    def decode_record(self, key: str, data: bytes) -> Record:
        frame = self._record_frame(key, data)
        try:
            checkpoint = self.load(key, frame["checkpoint"])
            return Record(
                checkpoint=checkpoint,
                metadata=self.load(key, frame["metadata"]),
                parent_id=frame["parent"],
                inline={ch: self.load(key, typed) for ch, typed in frame["inline"].items()},
                encoded=dict(frame["inline"]),
                blobs=dict(frame["blobs"]),
                appended=(appended := self._appended(key, frame)),
                tails={ch: [self.load(key, typed) for typed in entry.tail] for ch, entry in appended.items()},
                previous_head=frame.get("previous_head"),
                detached=bool(frame.get("detached", False)),
                deleted=_deleted_links(frame.get("deleted")),
                rolled_back=_run_names(frame.get("rolled_back")),
            )
        except (KeyError, TypeError, IndexError) as exc:
            raise corrupt(key, f"record is missing a field ({exc})") from exc

    def peek_head_id(self, key: str, data: bytes) -> str:
        """The checkpoint id of a record or head, without decoding anything else."""
        return self.peek_chain(key, data)[0]

    def peek_chain(self, key: str, data: bytes) -> tuple[str, str | None, dict[str, str | None]]:
        """Checkpoint id, ``previous_head`` and deleted links (:mod:`.chain`) of a record or head, without decoding
        anything else."""
        frame = self._record_frame(key, data)
        try:
            return str(frame["id"]), frame.get("previous_head"), _deleted_links(frame.get("deleted"))
        except (KeyError, TypeError, AttributeError) as exc:
            raise corrupt(key, f"record has no checkpoint id ({exc})") from exc

    def with_deleted(self, key: str, data: bytes, links: Mapping[str, str | None], *, replace: bool = False) -> bytes:
        """The same head naming more deleted links (``replace``: only these), keeping the newest
        :data:`~.chain.DELETED_NAMED`."""
        frame = self._record_frame(key, data)
        if not isinstance(frame, dict) or "id" not in frame:
            raise corrupt(key, "record has no checkpoint id")
        merged = dict(links) if replace else {**_deleted_links(frame.get("deleted")), **links}
        kept = dict(sorted(merged.items())[-DELETED_NAMED:])
        return self._thread_frame({**frame, "deleted": kept})

    def relink(self, key: str, data: bytes, previous_head: str | None) -> bytes:
        """The same record as an ordinary link of the chain: naming ``previous_head``, not detached."""
        frame = self._unframe(key, data, THREAD_FORMAT)
        if not isinstance(frame, dict) or "id" not in frame:
            raise CorruptObjectError(key, "record has no checkpoint id")
        return self._thread_frame({**frame, "previous_head": previous_head, "detached": False})

    def rolled_back_on(self, key: str, data: bytes, run_id: str) -> bytes:
        """The same head in new bytes, so under a new ETag (a conditional write on the old one is then refused),
        naming ``run_id`` among the runs rolled back while it was the head (the last :data:`ROLLED_BACK_NAMED`).
        Readers ignore both fields; a put of a run named there is refused (``committing._settle``)."""
        frame = self._record_frame(key, data)
        if not isinstance(frame, dict) or "id" not in frame:
            raise corrupt(key, "record has no checkpoint id")
        runs = [*(run for run in _run_names(frame.get("rolled_back")) if run != run_id), run_id][-ROLLED_BACK_NAMED:]
        return self._thread_frame({**frame, "rolled_back": runs, "rewritten": uuid.uuid4().hex})

    def rolled_back_runs(self, key: str, data: bytes) -> list[str]:
        """The runs rolled back while this head was the head (:meth:`rolled_back_on`); none for any other."""
        frame = self._record_frame(key, data)
        return list(_run_names(frame.get("rolled_back") if isinstance(frame, dict) else None))

    def peek_link(self, key: str, data: bytes) -> tuple[str | None, bool]:
        """``previous_head`` and ``detached`` of a record: its place in the commit chain."""
        frame = self._record_frame(key, data)
        if not isinstance(frame, dict) or "id" not in frame:
            raise corrupt(key, "record has no checkpoint id")
        return frame.get("previous_head"), bool(frame.get("detached", False))

    def peek_record(self, key: str, data: bytes) -> tuple[CheckpointMetadata, str | None, dict[str, str]]:
        """Metadata, parent id and blob references, without decoding channel values."""
        frame = self._unframe(key, data, THREAD_FORMAT)
        try:
            return self.load(key, frame["metadata"]), frame["parent"], dict(frame["blobs"])
        except (KeyError, TypeError) as exc:
            raise corrupt(key, f"record is missing a field ({exc})") from exc

    def peek_run(self, key: str, data: bytes) -> str | None:
        """The run a record names in the clear (``None``: none, or a 0.1.x record, whose run its twin entry names)."""
        frame = self._record_frame(key, data)
        run = frame.get("run") if isinstance(frame, dict) else None
        return run if isinstance(run, str) else None

    def peek_blobs(self, key: str, data: bytes) -> dict[str, str]:
        """The large values (channel -> version) a record or head references, decoding nothing else (no key
        is needed to copy an encrypted thread)."""
        frame = self._record_frame(key, data)
        try:
            return dict(frame["blobs"])
        except (KeyError, TypeError) as exc:
            raise corrupt(key, f"record is missing a field ({exc})") from exc

    # -- writes and blobs -----------------------------------------------------------------------
    def encode_task_writes(self, task: TaskWrites) -> bytes:
        """One task's writes object (see :mod:`langgraph_s3_checkpoint._protocol.writes`), values already encoded with
        :meth:`dump`.

        ``task``, ``path`` and ``writes`` (the visible writes, ``[idx, channel, tag, bytes]``) are what every
        release reads; the rest is read by this one and ignored by earlier ones: ``runs`` and ``paths``, the
        run and task path of each visible write (left out when no write has a run, or every one has the
        object's path), and ``hidden``, the writes another run's write hides at their index, kept so that a
        rollback can bring them back (``[idx, channel, tag, bytes, run, path]``, in the order stored).
        """
        visible, hidden = task.visible(), task.hidden()
        frame: dict[str, Any] = {
            "task": task.task_id,
            "path": task.path,
            "writes": [[w.idx, w.channel, *w.typed] for w in visible],
        }
        if any(w.run is not None for w in task.stored):
            frame["runs"] = [w.run for w in visible]
        if any(w.path != task.path for w in visible):
            frame["paths"] = [w.path for w in visible]
        if hidden:
            frame["hidden"] = [[w.idx, w.channel, *w.typed, w.run, w.path] for w in hidden]
        return self._frame(frame)

    def peek_task_writes(self, key: str, data: bytes) -> TaskWrites:
        """A task's writes object, values left encoded (to merge a later call into it, or roll a run back).
        Objects of earlier releases hold no runs: their writes are nobody's."""
        frame = self._unframe(key, data)
        try:
            task_id, path, writes = str(frame["task"]), str(frame["path"]), frame["writes"]
            runs = frame.get("runs") or [None] * len(writes)
            paths = frame.get("paths") or [path] * len(writes)
            visible = [
                StoredWrite(int(idx), str(ch), [tag, raw], _run(run), str(p))
                for (idx, ch, tag, raw), run, p in zip(writes, runs, paths, strict=True)
            ]
            hidden = [
                StoredWrite(int(idx), str(ch), [tag, raw], _run(run), str(p))
                for idx, ch, tag, raw, run, p in frame.get("hidden") or ()
            ]
        except (KeyError, TypeError, ValueError) as exc:
            raise corrupt(key, f"writes object is missing a field ({exc})") from exc
        return restored(task_id, path, visible, hidden)

    def decode_writes(self, key: str, data: bytes) -> WriteBatch:
        """The writes a reader sees in a writes object, values decoded (hidden writes are not)."""
        task = self.peek_task_writes(key, data)
        return WriteBatch(
            task_id=task.task_id,
            writes=[(w.idx, w.channel, self.load(key, w.typed), w.path) for w in task.visible()],
        )

    def encode_blob(self, typed: list[Any]) -> bytes:
        return self._frame(typed)

    def decode_blob(self, key: str, data: bytes) -> Any:
        return self.load(key, self._unframe(key, data))

    def _appended(self, key: str, frame: Mapping[str, Any]) -> dict[str, Appended]:
        """A record's ``appended`` field (absent: none), its tails checked to decode."""
        try:
            appended = {str(ch): Appended.from_frame(stored) for ch, stored in (frame.get("appended") or {}).items()}
        except (TypeError, ValueError) as exc:
            raise corrupt(key, f"an appended list is malformed ({exc})") from exc
        if any(ch not in frame["blobs"] for ch in appended):
            raise corrupt(key, "an appended list names no large value to extend")
        if any(name not in frame["blobs"] for ch, entry in appended.items() for name in entry.part_names(ch)):
            raise corrupt(key, "an appended list names a part it does not reference")
        return appended

    def encodes_alike(self, channel: str, sample: Any) -> bool:
        """Whether the serializer writes the same bytes for the same value, as JsonPlusSerializer does and
        EncryptedSerializer (a new nonce each time) does not: only then can a list's base be recognised by its bytes
        (:class:`Appended`). Asked once, on the first element of the first large list; without it, lists are stored
        whole without serializing each element for nothing."""
        if self._alike is None:
            object.__setattr__(self, "_alike", self.encode_value(channel, sample) == self.encode_value(channel, sample))
        return bool(self._alike)

    @staticmethod
    def extended(
        key: str, base: Any, record: Record, channel: str, record_key: str, parts: Sequence[tuple[str, Any]] = ()
    ) -> Any:
        """The value ``record`` stores for ``channel`` given its large value ``base`` (read at ``key``) and the
        parts after it (each read at its key, in order): ``base`` itself, or a new list of ``base``, the parts'
        elements and the record's tail (:class:`Appended`)."""
        appended = record.appended.get(channel)
        if appended is None:
            return base
        if type(base) is not list or len(base) != appended.base_count:
            raise corrupt(record_key, f"extends {key}, which does not hold a list of {appended.base_count} elements")
        if len(parts) != len(appended.parts):
            raise corrupt(record_key, f"names {len(appended.parts)} parts of {channel!r}, {len(parts)} were read")
        value = list(base)
        for (part_key, elements), part in zip(parts, appended.parts, strict=True):
            if type(elements) is not list or len(elements) != part.count:
                raise corrupt(record_key, f"names {part_key}, which does not hold a list of {part.count} elements")
            value.extend(elements)
        value.extend(record.tails[channel])
        return value


def _deleted_links(stored: Any) -> dict[str, str | None]:
    """A record's ``deleted`` field (absent: none)."""
    if stored is None:
        return {}
    return {str(k): None if v is None else str(v) for k, v in stored.items()}


def _run_names(stored: Any) -> tuple[str, ...]:
    """A head's ``rolled_back`` field as written by :meth:`Codec.rolled_back_on` (anything else names no run)."""
    return tuple(run for run in stored if isinstance(run, str)) if isinstance(stored, list) else ()


def _run(stored: Any) -> str | None:
    """A write's run id as stored: a str, or ``None``."""
    if stored is None or isinstance(stored, str):
        return stored
    raise ValueError(f"a run id is a {type(stored).__name__}")
