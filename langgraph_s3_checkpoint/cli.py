"""``langgraph-s3``: inspect and maintain the checkpoints of a bucket prefix from a shell.

Examples::

    export LANGGRAPH_S3_URL=s3://agent-checkpoints/prod
    langgraph-s3 threads
    langgraph-s3 history support-42 --limit 5
    langgraph-s3 show support-42
    langgraph-s3 export support-42 support-42.tar && langgraph-s3 import support-42.tar --thread support-42-copy
    langgraph-s3 verify --json
    langgraph-s3 gc --dry-run
    langgraph-s3 repair support-42 --dry-run
    langgraph-s3 store ls memories
    langgraph-s3 store put memories.user-1 color '{"value": "teal"}' && langgraph-s3 store get memories.user-1 color
    langgraph-s3 cache ls && langgraph-s3 cache clear '["__pregel_ns_writes", "app.nodes.search", "search"]'

``store`` commands work on the long-term memory store (:class:`~langgraph_s3_checkpoint.store.S3Store`) at
the same location; a namespace is written with its labels joined by dots (``memories.user-1``), which is
unambiguous because LangGraph forbids dots in labels. ``cache`` commands work on the node cache
(:class:`~langgraph_s3_checkpoint.cache.S3Cache`), whose labels may hold dots: a namespace is a JSON list.

Exit codes: 0 success, 1 problems found, thread/checkpoint not found, or a question answered "no",
2 usage or configuration error (including a missing or wrong decryption key), 3 S3 error (unreachable
or silent endpoint, an endpoint that is not S3, missing bucket, refused or missing credentials),
130 interrupted. Every failure prints one ``langgraph-s3: error: ...`` line on stderr, never a traceback.

Destructive commands (``delete``, ``prune``, ``expire``, ``gc``, ``import --replace``, ``store rm``, ``cache clear``,
``cache sweep``) take ``--dry-run``
(report, change nothing) and ask for confirmation when stdin is a terminal; ``--yes`` answers for them.
Without a terminal (a pipe, a cron job) nothing is asked.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import datetime as dt
import importlib
import io
import json
import os
import sys
import tarfile
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import IO, TYPE_CHECKING, Any, NoReturn

from botocore.exceptions import BotoCoreError, ClientError
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple

from . import ops
from .errors import (
    BucketNotFoundError,
    CorruptObjectError,
    DecryptionError,
    InvalidConfigError,
    S3AccessError,
    S3CheckpointError,
    S3RequestError,
    TargetThreadExistsError,
    ThreadChangedError,
)
from .options import SAVER, parse_url
from .saver import S3Saver
from .shell import BucketIO

if TYPE_CHECKING:
    from .cache import S3Cache
    from .store import S3Store

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2
EXIT_S3 = 3

ENV_URL = "LANGGRAPH_S3_URL"
MANIFEST = "manifest.json"
CLIP = 200
"""Longest string ``show`` prints in full without ``--full``."""
CELL = 40
"""Widest table cell; longer ids are shortened in the middle (``--json`` has them in full)."""
OBJECTS_DIR = "objects/"


class Failure(Exception):
    """A command ends with this exit code and message (not a crash)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------------------------------------
# Progress on stderr
# ------------------------------------------------------------------------------------------------
class Progress:
    """A one-line counter redrawn in place on a terminal; silent when disabled."""

    def __init__(self, label: str, *, total: int | None = None, enabled: bool, stream: IO[str] | None = None) -> None:
        self.label = label
        self.total = total
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self._drawn = 0.0

    def advance(self, count: int = 1, detail: str = "") -> None:
        self.done += count
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._drawn < 0.1 and (self.total is None or self.done < self.total):
            return
        self._drawn = now
        if self.total:
            width = 24
            filled = min(width, width * self.done // self.total)
            bar = f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}"
        else:
            bar = str(self.done)
        self.stream.write(f"\r\x1b[K{self.label}: {bar} {detail}"[:200])
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


# ------------------------------------------------------------------------------------------------
# Rendering values
# ------------------------------------------------------------------------------------------------
def jsonable(value: Any) -> Any:
    """A JSON-compatible rendering of a checkpointed value (messages, models, dataclasses ...)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return {"bytes_base64": base64.b64encode(value).decode()}
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        try:
            return jsonable(model_dump())
        except Exception:  # a model that cannot dump itself is still shown, by repr
            return repr(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return repr(value)


def clip(value: Any, limit: int) -> Any:
    """``value`` with strings longer than ``limit`` shortened, for reading on a terminal."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]}... ({len(value) - limit} more characters; --full shows all)"
    if isinstance(value, dict):
        return {k: clip(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [clip(v, limit) for v in value]
    return value


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=repr)


def _size(n: int) -> str:
    amount = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if amount < 1024 or unit == "GiB":
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    raise AssertionError("unreachable")


def shorten(text: str, width: int = CELL) -> str:
    """``text`` cut to ``width`` characters with an ellipsis in the middle, keeping both ends readable."""
    if len(text) <= width:
        return text
    tail = max(6, width // 3)
    return f"{text[: width - tail - 1]}\u2026{text[-tail:]}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], out: IO[str]) -> None:
    cells = [[str(c) for c in headers], *([shorten("" if c is None else str(c)) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        out.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() + "\n")


def _short_time(ts: str | None) -> str:
    if not ts:
        return ""
    try:
        return dt.datetime.fromisoformat(ts).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return ts


# ------------------------------------------------------------------------------------------------
# Context shared by the commands
# ------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Context:
    saver: S3Saver
    store: BucketIO
    as_json: bool
    progress: bool
    out: IO[str]
    url: str = ""
    store_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    memory_store: S3Store | None = None

    def memory(self) -> S3Store:
        """The long-term memory store at the same location (opened on first use, closed by ``main``)."""
        if self.memory_store is None:
            from .store import S3Store

            self.memory_store = S3Store._from_url(self.url, **self.store_options)
        return self.memory_store

    @property
    def layout(self) -> Any:
        return self.saver.plans.layout

    @property
    def core(self) -> Any:
        return self.saver.plans

    def bar(self, label: str, total: int | None = None) -> Progress:
        return Progress(label, total=total, enabled=self.progress)

    def emit_json(self, value: Any) -> None:
        self.out.write(_dumps(value) + "\n")

    def confirm(self, args: argparse.Namespace, question: str) -> None:
        """Ask before a destructive change when stdin is a terminal (``--yes`` answers yes)."""
        if getattr(args, "yes", False) or not sys.stdin.isatty():
            return
        sys.stderr.write(f"{question} [y/N] ")
        sys.stderr.flush()
        answer = sys.stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            raise Failure(EXIT_PROBLEMS, "aborted: nothing was changed")

    def require_thread(self, thread_id: str) -> None:
        if not self.store.run(ops.thread_exists(self.layout, thread_id)):
            raise Failure(EXIT_PROBLEMS, f"thread {thread_id!r} not found under {self.where}")

    @property
    def where(self) -> str:
        return f"s3://{self.saver.bucket}/{self.saver.prefix}".rstrip("/")


def _thread_config(thread_id: str, ns: str | None, checkpoint_id: str | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if ns is not None:
        configurable["checkpoint_ns"] = ns
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


# ------------------------------------------------------------------------------------------------
# Commands
# ------------------------------------------------------------------------------------------------
def cmd_threads(ctx: Context, args: argparse.Namespace) -> int:
    bar = ctx.bar("threads")
    stats: list[ops.ThreadStats] = []
    for item in ctx.store.iterate(ops.all_thread_stats(ctx.layout)):
        stats.append(item)
        bar.advance(detail=item.thread_id)
    bar.close()
    if ctx.as_json:
        ctx.emit_json([s.as_dict() for s in stats])
        return EXIT_OK
    if not stats:
        ctx.out.write(f"no threads under {ctx.where}\n")
        return EXIT_OK
    rows = [
        [
            s.thread_id,
            s.namespaces,
            s.checkpoints,
            s.writes,
            s.blobs,
            _size(s.bytes),
            s.last_modified.strftime("%Y-%m-%d %H:%M:%S") if s.last_modified else "",
        ]
        for s in stats
    ]
    _table(["THREAD", "NS", "CHECKPOINTS", "WRITES", "BLOBS", "SIZE", "LAST UPDATE (UTC)"], rows, ctx.out)
    total = sum(s.bytes for s in stats)
    ctx.out.write(f"{len(stats)} thread(s), {sum(s.objects for s in stats)} objects, {_size(total)}\n")
    return EXIT_OK


def _summary(tup: CheckpointTuple) -> dict[str, Any]:
    conf = tup.config["configurable"]
    parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    md = tup.metadata or {}
    return {
        "checkpoint_id": conf["checkpoint_id"],
        "checkpoint_ns": conf.get("checkpoint_ns", ""),
        "parent_id": parent,
        "step": md.get("step"),
        "source": md.get("source"),
        "run_id": md.get("run_id"),
        "ts": tup.checkpoint.get("ts"),
        "pending_writes": len(tup.pending_writes or []),
    }


def cmd_history(ctx: Context, args: argparse.Namespace) -> int:
    ctx.require_thread(args.thread)
    config = _thread_config(args.thread, args.ns)
    limit = args.limit if args.limit and args.limit > 0 else None
    bar = ctx.bar("history", total=limit)
    items: list[dict[str, Any]] = []
    damaged: list[CorruptObjectError] = []
    for tup in ctx.saver.list(config, limit=limit, skip_damaged=args.skip_damaged, on_damaged=damaged.append):
        items.append(_summary(tup))
        bar.advance()
    bar.close()
    if ctx.as_json:
        if args.skip_damaged:
            ctx.emit_json({"checkpoints": items, "damaged": [{"key": e.key, "problem": e.reason} for e in damaged]})
        else:
            ctx.emit_json(items)
        return EXIT_PROBLEMS if damaged else EXIT_OK
    rows = [
        [
            i["checkpoint_id"],
            i["checkpoint_ns"] or "-",
            i["step"],
            i["source"],
            _short_time(i["ts"]),
            i["run_id"] or "",
            i["pending_writes"],
        ]
        for i in items
    ]
    _table(["CHECKPOINT", "NS", "STEP", "SOURCE", "CREATED (UTC)", "RUN", "WRITES"], rows, ctx.out)
    for error in damaged:
        ctx.out.write(f"SKIPPED damaged object {error.key}: {error.reason}\n")
    return EXIT_PROBLEMS if damaged else EXIT_OK


def cmd_show(ctx: Context, args: argparse.Namespace) -> int:
    ns = args.ns or ""
    tup = ctx.saver.get_tuple(_thread_config(args.thread, ns, args.checkpoint))
    if tup is None:
        what = (
            f"checkpoint {args.checkpoint!r} of thread {args.thread!r}"
            if args.checkpoint
            else f"thread {args.thread!r}"
        )
        where = f" in namespace {ns!r}" if ns else ""
        raise Failure(EXIT_PROBLEMS, f"{what}{where} not found under {ctx.where}")
    summary = _summary(tup)
    limit = None if ctx.as_json or args.full else CLIP
    values = {ch: _shown(v, limit) for ch, v in sorted(tup.checkpoint["channel_values"].items())}
    writes = [{"task_id": t, "channel": ch, "value": _shown(v, limit)} for t, ch, v in tup.pending_writes or []]
    if ctx.as_json:
        ctx.emit_json(
            {
                "thread_id": args.thread,
                **summary,
                "metadata": jsonable(tup.metadata),
                "channel_versions": tup.checkpoint.get("channel_versions", {}),
                "channel_values": values,
                "pending_writes": writes,
            }
        )
        return EXIT_OK
    out = ctx.out
    out.write(f"thread      {args.thread}\n")
    out.write(f"namespace   {summary['checkpoint_ns'] or '(root)'}\n")
    out.write(f"checkpoint  {summary['checkpoint_id']}\n")
    out.write(f"parent      {summary['parent_id'] or '-'}\n")
    out.write(f"created     {summary['ts']}\n")
    out.write(f"step        {summary['step']}  source {summary['source']}  run {summary['run_id'] or '-'}\n")
    out.write("\nmetadata\n")
    out.write(_indent(_dumps(jsonable(tup.metadata))))
    out.write("\nchannel values\n")
    if not values:
        out.write("  (none)\n")
    for channel, value in values.items():
        out.write(f"  {channel}:\n")
        out.write(_indent(_dumps(value), 4))
    out.write(f"\npending writes ({len(writes)})\n")
    for write in writes:
        out.write(f"  {write['task_id']} -> {write['channel']}:\n")
        out.write(_indent(_dumps(write["value"]), 4))
    return EXIT_OK


def _shown(value: Any, limit: int | None) -> Any:
    rendered = jsonable(value)
    return rendered if limit is None else clip(rendered, limit)


def _indent(text: str, spaces: int = 2) -> str:
    pad = " " * spaces
    return "".join(f"{pad}{line}\n" for line in text.splitlines())


def cmd_delete(ctx: Context, args: argparse.Namespace) -> int:
    ctx.require_thread(args.thread)
    before = ctx.store.run(ops.thread_stats(ctx.layout, args.thread))
    what = f"thread {args.thread!r} ({before.objects} objects, {_size(before.bytes)})"
    if args.dry_run:
        return _done(
            ctx,
            f"would delete {what}",
            {
                "dry_run": True,
                "deleted": None,
                "thread_id": args.thread,
                "objects": before.objects,
                "bytes": before.bytes,
            },
        )
    ctx.confirm(args, f"Delete {what} and its whole history?")
    ctx.saver.delete_thread(args.thread)
    return _done(
        ctx,
        f"deleted {what}",
        {
            "dry_run": False,
            "deleted": args.thread,
            "thread_id": args.thread,
            "objects": before.objects,
            "bytes": before.bytes,
        },
    )


def _done(ctx: Context, text: str, data: dict[str, Any]) -> int:
    if ctx.as_json:
        ctx.emit_json({"ok": True, **data})
    else:
        ctx.out.write(text + "\n")
    return EXIT_OK


def cmd_copy(ctx: Context, args: argparse.Namespace) -> int:
    ctx.require_thread(args.source)
    try:
        ctx.saver.copy_thread(args.source, args.target)
    except TargetThreadExistsError as exc:
        raise Failure(EXIT_PROBLEMS, str(exc)) from None
    after = ctx.store.run(ops.thread_stats(ctx.layout, args.target))
    return _done(
        ctx,
        f"copied thread {args.source!r} to {args.target!r} ({after.objects} objects)",
        {
            "source": args.source,
            "target": args.target,
            "objects": after.objects,
        },
    )


def cmd_prune(ctx: Context, args: argparse.Namespace) -> int:
    thread_ids = _threads_to_prune(ctx, args)
    if args.dry_run:
        return _report_prune_plan(ctx, thread_ids)
    ctx.confirm(args, f"Delete all but the latest checkpoint of {len(thread_ids)} thread(s)?")
    results = _prune_each(ctx, thread_ids)
    if ctx.as_json:
        ctx.emit_json({"ok": True, "dry_run": False, "threads": results})
        return EXIT_OK
    rows = [[r["thread_id"], r["removed_objects"], _size(r["removed_bytes"]), r["checkpoints_left"]] for r in results]
    _table(["THREAD", "REMOVED OBJECTS", "REMOVED", "CHECKPOINTS LEFT"], rows, ctx.out)
    return EXIT_OK


def _threads_to_prune(ctx: Context, args: argparse.Namespace) -> list[str]:
    """The threads ``prune`` works on: every thread with ``--all``, else the named ones, each of which
    must exist. Refuses a call without ``--keep-latest`` (the strategy is never implied) or naming
    threads and ``--all`` together (or neither)."""
    if not args.keep_latest:
        raise Failure(
            EXIT_USAGE,
            "prune: say what to keep: --keep-latest (keep each namespace's latest checkpoint, delete the rest "
            "of its history; the only strategy)",
        )
    if args.all == bool(args.threads):
        raise Failure(EXIT_USAGE, "prune: name the threads to prune, or pass --all (not both)")
    if args.all:
        return list(ctx.store.iterate(ops.thread_ids(ctx.layout)))
    for thread_id in args.threads:
        ctx.require_thread(thread_id)
    return list(args.threads)


def _report_prune_plan(ctx: Context, thread_ids: Sequence[str]) -> int:
    """``prune --dry-run``: the checkpoints and objects each thread has now (threads with no object,
    deleted since they were listed, are left out); changes nothing."""
    planned = []
    for thread_id in thread_ids:
        stats = ctx.store.run(ops.thread_stats(ctx.layout, thread_id))
        if stats.objects:
            planned.append({"thread_id": thread_id, "checkpoints": stats.checkpoints, "objects": stats.objects})
    if ctx.as_json:
        ctx.emit_json({"ok": True, "dry_run": True, "threads": planned})
    else:
        rows = [[p["thread_id"], p["checkpoints"], p["objects"]] for p in planned]
        _table(["THREAD", "CHECKPOINTS NOW", "OBJECTS NOW"], rows, ctx.out)
        ctx.out.write(f"would keep only the latest checkpoint of {len(planned)} thread(s)\n")
    return EXIT_OK


def _prune_each(ctx: Context, thread_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Keep only the latest checkpoint of each thread, with a progress bar; what each lost, measured
    by the thread's stats before and after. A thread with no object (deleted since it was listed, or
    a foreign key that looks like a thread) is skipped and not reported."""
    bar = ctx.bar("prune", total=len(thread_ids))
    results = []
    for thread_id in thread_ids:
        before = ctx.store.run(ops.thread_stats(ctx.layout, thread_id))
        if not before.objects:
            continue
        ctx.saver.prune([thread_id], strategy="keep_latest")
        after = ctx.store.run(ops.thread_stats(ctx.layout, thread_id))
        results.append(
            {
                "thread_id": thread_id,
                "removed_objects": before.objects - after.objects,
                "removed_bytes": before.bytes - after.bytes,
                "checkpoints_left": after.checkpoints,
            }
        )
        bar.advance(detail=thread_id)
    bar.close()
    return results


def cmd_expire(ctx: Context, args: argparse.Namespace) -> int:
    if args.days <= 0:
        raise Failure(EXIT_USAGE, "expire: --days must be positive")
    if not args.dry_run and not args.yes and sys.stdin.isatty():
        idle = ctx.saver.expire_threads(timedelta(days=args.days), dry_run=True)
        if not idle:
            return _done(ctx, f"no thread idle for {args.days:g} days", {"dry_run": False, "threads": []})
        ctx.confirm(args, f"Delete {len(idle)} thread(s) idle for {args.days:g} days ({', '.join(idle[:5])}...)?")
    expired = ctx.saver.expire_threads(timedelta(days=args.days), dry_run=args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    if ctx.as_json:
        ctx.emit_json({"ok": True, "dry_run": args.dry_run, "threads": expired})
        return EXIT_OK
    for thread_id in expired:
        ctx.out.write(f"{verb} {thread_id!r}\n")
    ctx.out.write(f"{verb} {len(expired)} thread(s) not updated for {args.days:g} days\n")
    return EXIT_OK


EXPORT_ATTEMPTS = 3
"""How often ``export`` starts again when the thread changed under it (:class:`ThreadChangedError`)."""


def cmd_export(ctx: Context, args: argparse.Namespace) -> int:
    ctx.require_thread(args.thread)
    target: str = args.file
    for attempt in range(1, EXPORT_ATTEMPTS + 1):
        try:
            count, size = _export_once(ctx, args.thread, target)
            break
        except ThreadChangedError:
            if target == "-" or attempt == EXPORT_ATTEMPTS:
                raise  # what went to stdout cannot be taken back
    if target == "-":
        return EXIT_OK
    return _done(
        ctx,
        f"exported thread {args.thread!r} to {target} ({count} objects, {_size(size)})",
        {"thread_id": args.thread, "file": target, "objects": count, "bytes": size},
    )


def _export_once(ctx: Context, thread_id: str, target: str) -> tuple[int, int]:
    """One export into ``target``: the number of objects and their bytes."""
    # Written beside the target and renamed at the end, so a failed export never leaves a file that
    # looks complete.
    partial = f"{target}.partial"
    count = 0
    size = 0
    bar = ctx.bar("export")
    try:
        with contextlib.ExitStack() as stack:
            stream = sys.stdout.buffer if target == "-" else stack.enter_context(open(partial, "wb"))
            archive = stack.enter_context(tarfile.open(fileobj=stream, mode="w|", format=tarfile.PAX_FORMAT))
            manifest = {
                "format": ops.EXPORT_FORMAT,
                "version": ops.EXPORT_VERSION,
                "thread_id": thread_id,
                "source": ctx.where,
                "exported_at": dt.datetime.now(dt.timezone.utc).isoformat(),
            }
            _add_member(archive, MANIFEST, json.dumps(manifest, indent=2).encode())
            for item in ctx.store.iterate(ops.export_thread(ctx.layout, ctx.core.codec, thread_id)):
                _add_member(archive, OBJECTS_DIR + item.relative, item.body)
                count += 1
                size += len(item.body)
                bar.advance()
    except BaseException:
        if target != "-":
            with contextlib.suppress(FileNotFoundError):
                os.remove(partial)
        raise
    finally:
        bar.close()
    if target != "-":
        os.replace(partial, target)
    return count, size


def _add_member(archive: tarfile.TarFile, name: str, body: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(body)
    info.mtime = int(time.time())
    archive.addfile(info, io.BytesIO(body))


@contextlib.contextmanager
def _archive_reader(path: str) -> Iterator[tuple[dict[str, Any], Iterator[ops.Exported]]]:
    """The manifest and a stream of the archive's objects (members are read in order, once)."""
    with contextlib.ExitStack() as stack:
        try:
            stream = sys.stdin.buffer if path == "-" else stack.enter_context(open(path, "rb"))
            archive = stack.enter_context(tarfile.open(fileobj=stream, mode="r|"))
            first = archive.next()
            if first is None or first.name != MANIFEST:
                raise Failure(EXIT_PROBLEMS, f"{path}: not a langgraph-s3 export ({MANIFEST} is not first)")
            manifest = json.loads(_member_bytes(archive, first))
        except (OSError, tarfile.TarError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise Failure(EXIT_PROBLEMS, f"{path}: unreadable archive ({exc})") from None
        if manifest.get("format") != ops.EXPORT_FORMAT or manifest.get("version") != ops.EXPORT_VERSION:
            raise Failure(EXIT_PROBLEMS, f"{path}: unsupported export format {manifest.get('format')!r}")

        def objects() -> Iterator[ops.Exported]:
            # next(), not iteration: iterating a stream-mode archive starts again at the manifest.
            while (member := archive.next()) is not None:
                if not member.isfile() or not member.name.startswith(OBJECTS_DIR):
                    raise CorruptObjectError(member.name, "unexpected member in the archive")
                yield ops.Exported(member.name[len(OBJECTS_DIR) :], _member_bytes(archive, member))

        yield manifest, objects()


def _member_bytes(archive: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    handle = archive.extractfile(member)
    if handle is None:
        raise CorruptObjectError(member.name, "archive member has no content")
    return handle.read()


def cmd_import(ctx: Context, args: argparse.Namespace) -> int:
    bar = ctx.bar("import")
    with _archive_reader(args.file) as (manifest, objects):
        thread_id = str(manifest["thread_id"]) if args.thread is None else args.thread
        exists = ctx.store.run(ops.thread_exists(ctx.layout, thread_id))
        if exists and not args.replace:
            raise Failure(
                EXIT_PROBLEMS,
                f"thread {thread_id!r} already exists; import under another id (--thread) or replace it (--replace)",
            )
        if args.dry_run:
            count = sum(1 for _ in objects)
            verb = "replace" if exists else "create"
            return _done(
                ctx,
                f"would {verb} thread {thread_id!r} with {count} objects",
                {"dry_run": True, "thread_id": thread_id, "objects": count, "replaces": exists},
            )
        if exists:
            ctx.confirm(args, f"Replace thread {thread_id!r}: delete its whole history and import the archive?")
            ctx.saver.delete_thread(thread_id)

        def counted() -> Iterator[ops.Exported]:
            for item in objects:
                bar.advance()
                yield item

        try:
            written = ctx.store.run(ops.import_thread(ctx.layout, thread_id, counted()))
        except TargetThreadExistsError as exc:
            raise Failure(EXIT_PROBLEMS, str(exc)) from None
        finally:
            bar.close()
    return _done(
        ctx,
        f"imported {written} objects into thread {thread_id!r}",
        {"thread_id": thread_id, "source_thread_id": manifest["thread_id"], "objects": written},
    )


def cmd_verify(ctx: Context, args: argparse.Namespace) -> int:
    problems: list[ops.Problem] = []
    if args.thread is not None:
        ctx.require_thread(args.thread)
        threads = [args.thread]
    else:  # a thread whose long id cannot be read back is a problem, not skipped silently
        threads = list(ctx.store.iterate(ops.thread_ids(ctx.layout, unnamed=problems)))
    bar = ctx.bar("verify")
    checked = 0
    seen: set[str] = set()
    for thread_id in threads:
        for item in ctx.store.iterate(ops.verify_thread(ctx.layout, ctx.core.codec, thread_id)):
            if isinstance(item, ops.Checked):
                checked += item.count
                seen.add(thread_id)
                bar.advance(item.count, detail=thread_id)
            else:
                problems.append(item)
    bar.close()
    threads = [t for t in threads if t in seen]
    if ctx.as_json:
        ctx.emit_json(
            {
                "threads": len(threads),
                "objects": checked,
                "problems": [dataclasses.asdict(p) for p in problems],
            }
        )
    else:
        for p in problems:
            ctx.out.write(f"{'UNDECRYPTABLE' if p.undecryptable else 'PROBLEM'} {p.key}: {p.problem}\n")
        verdict = "OK" if not problems else f"{len(problems)} problem(s)"
        ctx.out.write(f"checked {checked} objects in {len(threads)} thread(s): {verdict}\n")
    undecryptable = sum(p.undecryptable for p in problems)
    if undecryptable:  # a configuration error, not damage: restoring from a backup would not help
        raise Failure(
            EXIT_USAGE,
            f"{undecryptable} object(s) could not be decrypted: the decryption key is wrong or missing, the objects "
            "are not damaged (do not delete or restore them). Pass the serializer that wrote them (--serde, "
            "LANGGRAPH_AES_KEY) and verify again",
        )
    return EXIT_PROBLEMS if problems else EXIT_OK


def cmd_repair(ctx: Context, args: argparse.Namespace) -> int:
    ctx.require_thread(args.thread)
    if not args.dry_run and not args.yes and sys.stdin.isatty():
        planned = ctx.saver.repair_thread(args.thread, dry_run=True)
        if planned.repaired:
            ctx.confirm(args, f"Rewrite the head of {len(planned.repaired)} namespace(s) of {args.thread!r}?")
    report = ctx.saver.repair_thread(args.thread, dry_run=args.dry_run)
    if ctx.as_json:
        ctx.emit_json({"ok": report.ok, **report.as_dict()})
    else:
        if report.name_restored:
            written = "would write" if report.dry_run else "wrote"
            ctx.out.write(f"name          {written} the thread's name object (it was missing or damaged)\n")
        for ns in report.namespaces:
            where = ns.checkpoint_ns or "(root)"
            head = f" -> head {ns.head_id}" if ns.head_id else ""
            ctx.out.write(f"{ns.status:<13} {where}{head}: {ns.reason}\n")
            for key in ns.damaged:
                ctx.out.write(f"  damaged record left in place: {key} (see verify)\n")
        done = "would repair" if report.dry_run else "repaired"
        ctx.out.write(f"{done} {len(report.repaired)} of {len(report.namespaces)} namespace(s)\n")
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def cmd_gc(ctx: Context, args: argparse.Namespace) -> int:
    from .gc import gc

    if args.grace_seconds < 0:
        raise Failure(EXIT_USAGE, "gc: --grace-seconds must be >= 0")
    if not args.dry_run and not args.yes and sys.stdin.isatty():
        planned = gc(ctx.saver, grace_seconds=args.grace_seconds, dry_run=True)
        if planned.total:
            ctx.confirm(args, f"Delete {planned.total} leftover object(s) ({_size(planned.deleted_bytes)})?")
    report = gc(ctx.saver, grace_seconds=args.grace_seconds, dry_run=args.dry_run)
    if ctx.as_json:
        ctx.emit_json(
            {
                "dry_run": report.dry_run,
                "grace_seconds": report.grace_seconds,
                "scanned": report.scanned,
                "deleted": dict(report.deleted),
                "deleted_objects": report.total,
                "deleted_bytes": report.deleted_bytes,
                "young": report.young,
                "foreign": report.foreign,
                "unreadable": report.unreadable,
                "sample": report.sample,
            }
        )
    else:
        verb = "would delete" if report.dry_run else "deleted"
        ctx.out.write(
            f"scanned {report.scanned} objects; {verb} {report.total} ({_size(report.deleted_bytes)}); "
            f"{report.young} younger than {report.grace_seconds:g} s kept\n"
        )
        if report.foreign:
            ctx.out.write(f"  left alone: {report.foreign} object(s) that are not the saver's\n")
        for category, count in sorted(report.deleted.items()):
            ctx.out.write(f"  {category}: {count}\n")
        for key in report.unreadable:
            ctx.out.write(f"UNREADABLE {key} (its namespace was left alone; run verify)\n")
    return EXIT_PROBLEMS if report.unreadable else EXIT_OK


# ------------------------------------------------------------------------------------------------
# Long-term memory store
# ------------------------------------------------------------------------------------------------
def parse_namespace(text: str) -> tuple[str, ...]:
    """``memories.user-1`` -> ``("memories", "user-1")``; ``""`` is the root (every namespace)."""
    if not text:
        return ()
    labels = tuple(text.split("."))
    if any(not label for label in labels):
        raise Failure(EXIT_USAGE, f"namespace {text!r}: empty label (write labels joined by single dots)")
    return labels


def _dotted(namespace: Sequence[str]) -> str:
    return ".".join(namespace)


def _json_arg(what: str, text: str, *, obj: bool) -> Any:
    if text == "-":
        text = sys.stdin.read()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Failure(EXIT_USAGE, f"{what}: not valid JSON ({exc})") from None
    if obj and not isinstance(value, dict):
        raise Failure(EXIT_USAGE, f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


def _item_dict(item: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "namespace": list(item.namespace),
        "key": item.key,
        "value": jsonable(item.value),
        "created_at": item.created_at.isoformat(),
        "updated_at": item.updated_at.isoformat(),
    }
    if getattr(item, "score", None) is not None:
        data["score"] = item.score
    return data


def _store_call(call: Callable[[], Any]) -> Any:
    """Namespace/key rules LangGraph enforces (``InvalidNamespaceError``, a ValueError) are usage errors."""
    try:
        return call()
    except ValueError as exc:
        if isinstance(exc, S3CheckpointError):
            raise
        raise Failure(EXIT_USAGE, f"{type(exc).__name__}: {exc}") from None


def cmd_store_ls(ctx: Context, args: argparse.Namespace) -> int:
    prefix = parse_namespace(args.prefix)
    store = ctx.memory()
    namespaces = _store_call(
        lambda: store.list_namespaces(
            prefix=prefix or None, max_depth=args.max_depth, limit=args.limit, offset=args.offset
        )
    )
    if ctx.as_json:
        ctx.emit_json([list(ns) for ns in namespaces])
        return EXIT_OK
    if not namespaces:
        ctx.out.write(f"no namespaces{' under ' + repr(args.prefix) if prefix else ''} in {ctx.where}\n")
        return EXIT_OK
    for ns in namespaces:
        ctx.out.write(_dotted(ns) + "\n")
    return EXIT_OK


def _require_item(ctx: Context, namespace: tuple[str, ...], key: str) -> Any:
    store = ctx.memory()
    item = _store_call(lambda: store.get(namespace, key, refresh_ttl=False))
    if item is None:
        raise Failure(EXIT_PROBLEMS, f"item {key!r} not found in namespace {_dotted(namespace)!r} under {ctx.where}")
    return item


def cmd_store_get(ctx: Context, args: argparse.Namespace) -> int:
    item = _require_item(ctx, parse_namespace(args.namespace), args.key)
    if ctx.as_json:
        ctx.emit_json(_item_dict(item))
    else:
        ctx.out.write(json.dumps(jsonable(item.value), indent=2, ensure_ascii=False, sort_keys=True) + "\n")
    return EXIT_OK


def cmd_store_put(ctx: Context, args: argparse.Namespace) -> int:
    namespace = parse_namespace(args.namespace)
    if not namespace:
        raise Failure(EXIT_USAGE, "store put: the namespace must have at least one label")
    value = _json_arg("store put VALUE", args.value, obj=True)
    if args.ttl is not None and args.ttl <= 0:
        raise Failure(EXIT_USAGE, "store put: --ttl must be positive (minutes)")
    if args.index is not None:
        if args.no_index:
            raise Failure(EXIT_USAGE, "store put: --index and --no-index exclude each other")
        ctx.store_options["index"] = _load_index(args.index)
    store = ctx.memory()
    _store_call(lambda: store.put(namespace, args.key, value, index=False if args.no_index else None, ttl=args.ttl))
    return _done(
        ctx,
        f"put {args.key!r} in {_dotted(namespace)!r}",
        {"namespace": list(namespace), "key": args.key, "put": True},
    )


def cmd_store_rm(ctx: Context, args: argparse.Namespace) -> int:
    namespace = parse_namespace(args.namespace)
    _require_item(ctx, namespace, args.key)
    data = {"namespace": list(namespace), "key": args.key, "dry_run": args.dry_run}
    if args.dry_run:
        return _done(ctx, f"would delete {args.key!r} from {_dotted(namespace)!r}", data)
    ctx.confirm(args, f"delete item {args.key!r} from namespace {_dotted(namespace)!r}?")
    store = ctx.memory()
    _store_call(lambda: store.delete(namespace, args.key))
    return _done(ctx, f"deleted {args.key!r} from {_dotted(namespace)!r}", data)


def cmd_store_search(ctx: Context, args: argparse.Namespace) -> int:
    prefix = parse_namespace(args.prefix)
    filter_ = _json_arg("--filter", args.filter, obj=True) if args.filter is not None else None
    store = ctx.memory()
    items = _store_call(
        lambda: store.search(prefix, filter=filter_, limit=args.limit, offset=args.offset, refresh_ttl=False)
    )
    if ctx.as_json:
        ctx.emit_json([_item_dict(i) for i in items])
        return EXIT_OK
    if not items:
        ctx.out.write(f"no items under {args.prefix or 'the root'!r} in {ctx.where}\n")
        return EXIT_OK
    rows = [
        [
            _dotted(i.namespace),
            i.key,
            _short_time(i.updated_at.isoformat()),
            shorten(json.dumps(jsonable(i.value), ensure_ascii=False, sort_keys=True), 60),
        ]
        for i in items
    ]
    _table(["NAMESPACE", "KEY", "UPDATED", "VALUE"], rows, ctx.out)
    return EXIT_OK


def cmd_store_sweep(ctx: Context, args: argparse.Namespace) -> int:
    ctx.confirm(args, f"delete every expired item under {ctx.where}?")
    swept = ctx.memory().sweep_ttl(full=args.full)
    return _done(ctx, f"deleted {swept} expired items", {"deleted": swept})


# ------------------------------------------------------------------------------------------------
# Node cache
# ------------------------------------------------------------------------------------------------
def _node_cache(ctx: Context) -> S3Cache[Any]:
    """The node cache at the same location (closed by the command's ``with``)."""
    from .cache import S3Cache

    options = {k: v for k, v in ctx.store_options.items() if k in ("endpoint_url", "region_name", "serde")}
    return S3Cache.from_conn_string(ctx.url, **options)


def _cache_namespace(text: str) -> tuple[str, ...]:
    """``'["a", "b.c"]'`` -> ``("a", "b.c")``: a JSON list of labels (node cache labels may hold dots)."""
    try:
        labels = json.loads(text)
    except json.JSONDecodeError:
        labels = None
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise Failure(
            EXIT_USAGE,
            f"cache namespace {text!r}: expected a JSON list of labels, as `langgraph-s3 cache ls` prints them, "
            """e.g. '["__pregel_ns_writes", "app.nodes.search", "search"]'""",
        )
    return tuple(labels)


def cmd_cache_ls(ctx: Context, args: argparse.Namespace) -> int:
    with _node_cache(ctx) as cache:
        namespaces, foreign = cache.bucket_io.run(cache.plans.namespaces(), bounded=False)
    if ctx.as_json:
        ctx.emit_json(
            {
                "namespaces": [
                    {
                        "namespace": None if ns.namespace is None else list(ns.namespace),
                        "segment": ns.segment,
                        "entries": ns.entries,
                        "bytes": ns.bytes,
                        "last_modified": ns.last_modified.isoformat() if ns.last_modified else None,
                    }
                    for ns in namespaces
                ],
                "foreign": foreign,
            }
        )
        return EXIT_OK
    if not namespaces:
        ctx.out.write(f"no cache entries under {ctx.where}\n")
    else:
        ctx.out.write(f"{'ENTRIES':>8}  {'SIZE':>10}  {'LAST WRITE (UTC)':<19}  NAMESPACE\n")
        for ns in namespaces:
            when = ns.last_modified.strftime("%Y-%m-%d %H:%M:%S") if ns.last_modified else ""
            name = json.dumps(list(ns.namespace), ensure_ascii=False) if ns.namespace is not None else f"? {ns.segment}"
            ctx.out.write(f"{ns.entries:>8}  {_size(ns.bytes):>10}  {when:<19}  {name}\n")
        total, size = sum(ns.entries for ns in namespaces), _size(sum(ns.bytes for ns in namespaces))
        ctx.out.write(f"{total} entries in {len(namespaces)} namespace(s), {size}\n")
    if foreign:
        ctx.out.write(f"  left alone: {foreign} object(s) under cache/ that are not the cache's\n")
    return EXIT_OK


def cmd_cache_clear(ctx: Context, args: argparse.Namespace) -> int:
    namespaces = [_cache_namespace(text) for text in args.namespaces] or None
    what = "the whole node cache" if namespaces is None else f"{len(namespaces)} namespace(s) of the node cache"
    with _node_cache(ctx) as cache:
        if not args.dry_run and not args.yes and sys.stdin.isatty():
            planned = cache.bucket_io.run(cache.plans.clear(namespaces, dry_run=True), bounded=False)
            ctx.confirm(args, f"Delete {planned} entries of {what} under {ctx.where}?")
        cleared = cache.bucket_io.run(cache.plans.clear(namespaces, dry_run=args.dry_run), bounded=False)
    verb = "would delete" if args.dry_run else "deleted"
    return _done(ctx, f"{verb} {cleared} entries of {what}", {"dry_run": args.dry_run, "entries": cleared})


def cmd_cache_sweep(ctx: Context, args: argparse.Namespace) -> int:
    if not args.dry_run:
        ctx.confirm(args, f"Delete every expired node cache entry under {ctx.where}?")
    with _node_cache(ctx) as cache:
        report = cache.sweep(dry_run=args.dry_run, full=args.full)
    if ctx.as_json:
        ctx.emit_json({"ok": not report.unreadable, **dataclasses.asdict(report)})
    else:
        done = f"would delete {report.expired}" if report.dry_run else f"deleted {report.deleted}"
        ctx.out.write(f"scanned {report.scanned} entries; {done} expired\n")
        if report.foreign:
            ctx.out.write(f"  left alone: {report.foreign} object(s) under cache/ that are not the cache's\n")
        for key in report.unreadable:
            ctx.out.write(f"UNREADABLE {key} (left alone: a miss for every reader; `cache clear` removes it)\n")
    return EXIT_PROBLEMS if report.unreadable else EXIT_OK


def _add_cache_commands(commands: Any, destructive: Callable[[Any], None]) -> None:
    group = commands.add_parser(
        "cache",
        help="node cache: ls, clear, sweep",
        description="Inspect and clear LangGraph's node cache (S3Cache) at the same location. A namespace is "
        'a JSON list of labels, as `cache ls` prints it: \'["__pregel_ns_writes", "app.nodes.search", "search"]\'',
    )
    cache_commands = group.add_subparsers(dest="cache_command", required=True, metavar="CACHE_COMMAND")
    _add_command(cache_commands, "ls", cmd_cache_ls, "list the cache's namespaces with their entries and sizes")
    sub = _add_command(cache_commands, "clear", cmd_cache_clear, "delete the entries of namespaces (default: all)")
    sub.add_argument("namespaces", nargs="*", metavar="NAMESPACE", help="a JSON list of labels")
    destructive(sub)
    sub = _add_command(cache_commands, "sweep", cmd_cache_sweep, "delete every expired (TTL) entry now")
    sub.add_argument(
        "--full",
        action="store_true",
        help="read every entry, not only those whose expiry came due (after an older release wrote entries)",
    )
    destructive(sub)


# ------------------------------------------------------------------------------------------------
# Parser and entry point
# ------------------------------------------------------------------------------------------------
def _add_global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """Global options are accepted before and after the command name."""

    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    group = parser.add_argument_group("connection and output")
    group.add_argument(
        "--url", default=default(None), help=f"s3://bucket/prefix?options (default: ${ENV_URL})", metavar="URL"
    )
    group.add_argument("--endpoint-url", default=default(None), help="S3 endpoint (non-AWS servers)")
    group.add_argument("--region", default=default(None), help="region name")
    group.add_argument(
        "--serde",
        default=default(None),
        metavar="MODULE:ATTR",
        help="serializer the checkpoints were written with (e.g. an EncryptedSerializer); default JsonPlusSerializer",
    )
    group.add_argument("--json", action="store_true", default=default(False), help="machine-readable output")
    group.add_argument("--no-progress", action="store_true", default=default(False), help="no progress on stderr")


class _Parser(argparse.ArgumentParser):
    """Usage errors as one ``error:`` line (exit 2), like every other failure; ``--help`` has the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


Handler = Callable[[Context, argparse.Namespace], int]


def _add_command(commands: Any, name: str, handler: Handler, text: str) -> Any:
    """One (sub)command: its help, the global options (accepted after its name too) and its handler."""
    sub = commands.add_parser(name, help=text, description=text)
    _add_global_options(sub, top=False)
    sub.set_defaults(handler=handler)
    return sub


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="langgraph-s3",
        description="Inspect and maintain LangGraph checkpoints stored by langgraph-s3-checkpoint.",
        epilog="Exit codes: 0 ok, 1 problems found or not found, 2 usage error, 3 S3 error.",
    )
    _add_global_options(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Handler, text: str) -> Any:
        return _add_command(commands, name, handler, text)

    command("threads", cmd_threads, "list threads with checkpoint counts, sizes and last update")
    sub = command("history", cmd_history, "list a thread's checkpoints, newest first")
    sub.add_argument("thread")
    sub.add_argument("--ns", default=None, help="only this checkpoint namespace ('' is the root graph)")
    sub.add_argument("--limit", type=int, default=None, help="at most N checkpoints")
    sub.add_argument(
        "--skip-damaged",
        action="store_true",
        help="list past checkpoint records that cannot be decoded and report them (exit 1) instead of stopping",
    )
    sub = command("show", cmd_show, "show one checkpoint (default: the latest) with its channel values")
    sub.add_argument("thread")
    sub.add_argument("checkpoint", nargs="?", default=None)
    sub.add_argument("--ns", default="", help="checkpoint namespace (default: the root graph)")
    sub.add_argument("--full", action="store_true", help="do not shorten long strings")

    def destructive(sub: Any) -> None:
        sub.add_argument("--dry-run", action="store_true", help="report what would change, change nothing")
        sub.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation on a terminal")

    sub = command("delete", cmd_delete, "delete a thread and everything under it")
    sub.add_argument("thread")
    destructive(sub)
    sub = command("copy", cmd_copy, "copy a thread to a new thread id")
    sub.add_argument("source")
    sub.add_argument("target")
    sub = command("prune", cmd_prune, "keep only the latest checkpoint of threads")
    sub.add_argument("threads", nargs="*", metavar="THREAD")
    sub.add_argument(
        "--keep-latest",
        action="store_true",
        help="required: keep each namespace's latest checkpoint and delete the rest of its history (the only strategy)",
    )
    sub.add_argument("--all", action="store_true", help="prune every thread under the prefix")
    destructive(sub)
    sub = command("expire", cmd_expire, "delete whole threads not updated for N days (a TTL sweep)")
    sub.add_argument("--days", type=float, required=True, help="idle time after which a thread is deleted")
    destructive(sub)
    sub = command("export", cmd_export, "write a thread's objects to a portable tar archive ('-' for stdout)")
    sub.add_argument("thread")
    sub.add_argument("file")
    sub = command("import", cmd_import, "recreate a thread from an export archive ('-' for stdin)")
    sub.add_argument("file")
    sub.add_argument("--thread", default=None, help="thread id to import under (default: the exported id)")
    sub.add_argument("--replace", action="store_true", help="delete an existing thread of that id first")
    destructive(sub)
    sub = command("gc", cmd_gc, "delete leftovers of interrupted or losing writes (never committed checkpoints)")
    sub.add_argument(
        "--grace-seconds",
        type=float,
        default=3600,
        help="keep garbage younger than this, so puts in flight are never touched (default 3600)",
    )
    destructive(sub)
    sub = command("repair", cmd_repair, "rebuild a thread's damaged or missing head from its newest committed record")
    sub.add_argument("thread")
    destructive(sub)
    sub = command("verify", cmd_verify, "check that every object decodes and every reference resolves")
    sub.add_argument("thread", nargs="?", default=None)

    group = commands.add_parser(
        "store",
        help="long-term memory store: ls, get, put, rm, search, sweep",
        description="Inspect and edit the long-term memory store (S3Store) at the same location. "
        "Namespaces are written with their labels joined by dots: memories.user-1",
    )
    store_commands = group.add_subparsers(dest="store_command", required=True, metavar="STORE_COMMAND")

    def store_command(name: str, handler: Handler, text: str) -> Any:
        return _add_command(store_commands, name, handler, text)

    def paging(sub: Any, limit: int) -> None:
        sub.add_argument("--limit", type=int, default=limit, help=f"at most N results (default {limit})")
        sub.add_argument("--offset", type=int, default=0, help="skip the first N results")

    sub = store_command("ls", cmd_store_ls, "list the namespaces that hold items, sorted")
    sub.add_argument("prefix", nargs="?", default="", metavar="NAMESPACE_PREFIX")
    sub.add_argument("--max-depth", type=int, default=None, help="truncate namespaces to N labels")
    paging(sub, 1000)
    sub = store_command("get", cmd_store_get, "print one item's value (--json: the whole item)")
    sub.add_argument("namespace")
    sub.add_argument("key")
    sub = store_command("put", cmd_store_put, "write one item (VALUE: a JSON object, '-' for stdin)")
    sub.add_argument("namespace")
    sub.add_argument("key")
    sub.add_argument("value")
    sub.add_argument("--ttl", type=float, default=None, help="expire the item after N minutes")
    sub.add_argument(
        "--index",
        default=None,
        metavar="MODULE:ATTR",
        help="the application's IndexConfig (or a factory returning one): embed the item with it, so semantic "
        "search finds it; without it the item gets no vectors",
    )
    sub.add_argument("--no-index", action="store_true", help="do not embed the item (stores with an index)")
    sub = store_command("rm", cmd_store_rm, "delete one item")
    sub.add_argument("namespace")
    sub.add_argument("key")
    destructive(sub)
    sub = store_command("search", cmd_store_search, "list items under a namespace prefix, optionally filtered")
    sub.add_argument("prefix", nargs="?", default="", metavar="NAMESPACE_PREFIX")
    sub.add_argument("--filter", default=None, metavar="JSON", help='e.g. \'{"kind": "pref", "score": {"$gt": 3}}\'')
    paging(sub, 100)
    sub = store_command("sweep", cmd_store_sweep, "delete every expired (TTL) item now")
    sub.add_argument(
        "--full",
        action="store_true",
        help="read every item, not only those whose expiry came due (after an older release wrote items)",
    )
    sub.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation on a terminal")
    _add_cache_commands(commands, destructive)
    return parser


def _load_attr(option: str, spec: str, *, factory: Callable[[Any], bool]) -> Any:
    """``module:attr[.attr...]`` named by ``option``; a value that ``factory`` says is a class or factory
    is called without arguments. Any failure is a usage error naming the option."""
    module_name, _, path = spec.partition(":")
    if not module_name or not path:
        raise Failure(EXIT_USAGE, f"{option} {spec!r}: expected MODULE:ATTR")
    try:
        value: Any = importlib.import_module(module_name)
        for attr in path.split("."):
            value = getattr(value, attr)
        if factory(value):
            value = value()
    except Exception as exc:  # whatever the user's factory raises is a configuration problem
        raise Failure(EXIT_USAGE, f"{option} {spec!r}: {type(exc).__name__}: {exc}") from None
    return value


def _load_serde(spec: str) -> Any:
    """``module:attr[.attr...]``: a serializer, or a class or factory called without arguments.

    ``langgraph.checkpoint.serde.encrypted:EncryptedSerializer.from_pycryptodome_aes`` reads its key
    from ``LANGGRAPH_AES_KEY``, which makes encrypted checkpoints readable without writing any code.
    """
    value = _load_attr("--serde", spec, factory=lambda v: not hasattr(v, "dumps_typed") and callable(v))
    if not hasattr(value, "dumps_typed") or not hasattr(value, "loads_typed"):
        raise Failure(EXIT_USAGE, f"--serde {spec!r} is not a serializer (no dumps_typed/loads_typed)")
    return value


def _load_index(spec: str) -> dict[str, Any]:
    """``module:attr[.attr...]``: the application's ``IndexConfig`` (a dict with ``dims`` and ``embed``),
    or a factory returning one, so that ``store put --index`` embeds items as the application does."""
    value = _load_attr("--index", spec, factory=lambda v: not isinstance(v, dict) and callable(v))
    if not isinstance(value, dict) or "dims" not in value or "embed" not in value:
        raise Failure(EXIT_USAGE, f"--index {spec!r} is not an IndexConfig (a dict with 'dims' and 'embed')")
    return value


def _open(args: argparse.Namespace) -> Context:
    url = args.url or os.environ.get(ENV_URL)
    if not url:
        raise Failure(EXIT_USAGE, f"no location: pass --url s3://bucket/prefix or set {ENV_URL}")
    try:
        bucket, prefix, options = parse_url(url, used_by=SAVER)  # the store and the cache read their own
    except ValueError as exc:  # a malformed option value (e.g. a non-integer threshold) is a usage error
        raise Failure(EXIT_USAGE, f"bad option in the location URL: {exc}") from None
    if args.endpoint_url:
        options["endpoint_url"] = args.endpoint_url
    if args.region:
        options["region_name"] = args.region
    if args.serde:
        options["serde"] = _load_serde(args.serde)
    # The CLI never creates buckets; its writing commands (delete, prune, gc, import ...) probe conditional writes at
    # their first write, as savers do.
    options.pop("create_bucket", None)
    saver = S3Saver(bucket=bucket, prefix=prefix, **options)
    store_options: dict[str, Any] = {k: options[k] for k in ("endpoint_url", "region_name", "serde") if k in options}
    store_options["create_bucket"] = False
    # Operator commands walk whole threads: no deadline per operation; each request is still bounded by the timeouts.
    store = dataclasses.replace(saver.bucket_io, deadline=None)
    return Context(
        saver=saver,
        store=store,
        as_json=args.json,
        progress=not args.json and not args.no_progress and sys.stderr.isatty(),
        out=sys.stdout,
        url=url,
        store_options=store_options,
    )


def _fail(code: int, message: str) -> NoReturn:
    sys.stderr.write(f"langgraph-s3: error: {message}\n")
    raise SystemExit(code)


EXIT_STATUS: tuple[tuple[tuple[type[BaseException], ...], int, str], ...] = (
    ((InvalidConfigError, DecryptionError), EXIT_USAGE, "{exc}"),
    ((BucketNotFoundError, S3AccessError, S3RequestError), EXIT_S3, "{exc}"),
    ((BotoCoreError, ClientError), EXIT_S3, "S3 error: {exc}"),
    ((S3CheckpointError,), EXIT_PROBLEMS, "{exc}"),
    ((KeyboardInterrupt,), 130, "interrupted"),
    ((OSError,), EXIT_PROBLEMS, "{kind}: {exc}"),  # a local file (export/import), not S3
    ((Exception,), EXIT_PROBLEMS, "unexpected {kind}: {exc} (please report this as a bug)"),
)
"""Exception kinds, first match wins -> exit code and the one ``error:`` line (``{exc}``: its message,
``{kind}``: its class name)."""


def exit_status(exc: BaseException) -> tuple[int, str]:
    """The exit code and one-line message a command's exception ends the CLI with."""
    if isinstance(exc, Failure):
        return exc.code, str(exc)
    for kinds, code, message in EXIT_STATUS:
        if isinstance(exc, kinds):
            return code, message.format(exc=exc, kind=type(exc).__name__)
    raise exc  # pragma: no cover - BaseExceptions other than KeyboardInterrupt are never caught


def _close(ctx: Context) -> None:
    if ctx.memory_store is not None:
        ctx.memory_store.close()
    ctx.store.close()
    ctx.saver.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ctx: Context | None = None
    try:
        ctx = _open(args)
        code: int = args.handler(ctx, args)
        return code
    except BrokenPipeError:
        # Output piped into a command that stopped reading (e.g. `| head`): not an error.
        sys.stderr.close()
        return EXIT_OK
    except (Exception, KeyboardInterrupt) as exc:
        _fail(*exit_status(exc))
    finally:
        if ctx is not None:
            _close(ctx)


if __name__ == "__main__":
    sys.exit(main())
