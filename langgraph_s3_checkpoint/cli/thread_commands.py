"""The commands on checkpoints: threads, history, show, delete, copy, prune, expire, export, import, verify,
repair and gc."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import io
import json
import os
import sys
import tarfile
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple

from .._protocol import operator_plans
from .._protocol.checkpoint_plans import checkpoint_config
from ..errors import (
    CorruptObjectError,
    TargetThreadExistsError,
    ThreadChangedError,
)
from .context import (
    CLIP,
    END_OF_EXPORT,
    EXIT_OK,
    EXIT_PROBLEMS,
    EXIT_USAGE,
    MANIFEST,
    OBJECTS_DIR,
    Context,
    Failure,
    clip,
    dumps,
    human_size,
    jsonable,
    print_table,
    report_done,
    short_time,
)


# ------------------------------------------------------------------------------------------------
# Commands
# ------------------------------------------------------------------------------------------------
def cmd_threads(ctx: Context, args: argparse.Namespace) -> int:
    bar = ctx.bar("threads")
    stats: list[operator_plans.ThreadStats] = []
    for item in ctx.bucket_io.iterate(operator_plans.all_thread_stats(ctx.layout)):
        stats.append(item)
        bar.advance(detail=item.thread_id)
    bar.close()
    if ctx.listing_done(stats, operator_plans.ThreadStats.as_dict, f"no threads under {ctx.where}"):
        return EXIT_OK
    rows = [
        [
            s.thread_id,
            s.namespaces,
            s.checkpoints,
            s.writes,
            s.blobs,
            human_size(s.bytes),
            s.last_modified.strftime("%Y-%m-%d %H:%M:%S") if s.last_modified else "",
        ]
        for s in stats
    ]
    print_table(["THREAD", "NS", "CHECKPOINTS", "WRITES", "BLOBS", "SIZE", "LAST UPDATE (UTC)"], rows, ctx.out)
    total = sum(s.bytes for s in stats)
    ctx.out.write(f"{len(stats)} thread(s), {sum(s.objects for s in stats)} objects, {human_size(total)}\n")
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
    config = checkpoint_config(args.thread, args.ns)
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
            short_time(i["ts"]),
            i["run_id"] or "",
            i["pending_writes"],
        ]
        for i in items
    ]
    print_table(["CHECKPOINT", "NS", "STEP", "SOURCE", "CREATED (UTC)", "RUN", "WRITES"], rows, ctx.out)
    for error in damaged:
        ctx.out.write(f"SKIPPED damaged object {error.key}: {error.reason}\n")
    return EXIT_PROBLEMS if damaged else EXIT_OK


def cmd_show(ctx: Context, args: argparse.Namespace) -> int:
    ns = args.ns or ""
    tup = ctx.saver.get_tuple(checkpoint_config(args.thread, ns, args.checkpoint))
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
    out.write(_indent(dumps(jsonable(tup.metadata))))
    out.write("\nchannel values\n")
    if not values:
        out.write("  (none)\n")
    for channel, value in values.items():
        out.write(f"  {channel}:\n")
        out.write(_indent(dumps(value), 4))
    out.write(f"\npending writes ({len(writes)})\n")
    for write in writes:
        out.write(f"  {write['task_id']} -> {write['channel']}:\n")
        out.write(_indent(dumps(write["value"]), 4))
    return EXIT_OK


def _shown(value: Any, limit: int | None) -> Any:
    rendered = jsonable(value)
    return rendered if limit is None else clip(rendered, limit)


def _indent(text: str, spaces: int = 2) -> str:
    pad = " " * spaces
    return "".join(f"{pad}{line}\n" for line in text.splitlines())


def cmd_delete(ctx: Context, args: argparse.Namespace) -> int:
    ctx.require_thread(args.thread)
    before = ctx.bucket_io.run(operator_plans.thread_stats(ctx.layout, args.thread))
    what = f"thread {args.thread!r} ({before.objects} objects, {human_size(before.bytes)})"
    if args.dry_run:
        return report_done(
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
    return report_done(
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


def cmd_copy(ctx: Context, args: argparse.Namespace) -> int:
    ctx.require_thread(args.source)
    try:
        ctx.saver.copy_thread(args.source, args.target)
    except TargetThreadExistsError as exc:
        raise Failure(EXIT_PROBLEMS, str(exc)) from None
    after = ctx.bucket_io.run(operator_plans.thread_stats(ctx.layout, args.target))
    return report_done(
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
    rows = [
        [r["thread_id"], r["removed_objects"], human_size(r["removed_bytes"]), r["checkpoints_left"]] for r in results
    ]
    print_table(["THREAD", "REMOVED OBJECTS", "REMOVED", "CHECKPOINTS LEFT"], rows, ctx.out)
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
        return list(ctx.bucket_io.iterate(operator_plans.thread_ids(ctx.layout)))
    for thread_id in args.threads:
        ctx.require_thread(thread_id)
    return list(args.threads)


def _report_prune_plan(ctx: Context, thread_ids: Sequence[str]) -> int:
    """``prune --dry-run``: the checkpoints and objects each thread has now (threads with no object,
    deleted since they were listed, are left out); changes nothing."""
    planned = []
    for thread_id in thread_ids:
        stats = ctx.bucket_io.run(operator_plans.thread_stats(ctx.layout, thread_id))
        if stats.objects:
            planned.append({"thread_id": thread_id, "checkpoints": stats.checkpoints, "objects": stats.objects})
    if ctx.as_json:
        ctx.emit_json({"ok": True, "dry_run": True, "threads": planned})
    else:
        rows = [[p["thread_id"], p["checkpoints"], p["objects"]] for p in planned]
        print_table(["THREAD", "CHECKPOINTS NOW", "OBJECTS NOW"], rows, ctx.out)
        ctx.out.write(f"would keep only the latest checkpoint of {len(planned)} thread(s)\n")
    return EXIT_OK


def _prune_each(ctx: Context, thread_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Keep only the latest checkpoint of each thread, with a progress bar; what each lost, measured
    by the thread's stats before and after. A thread with no object (deleted since it was listed, or
    a foreign key that looks like a thread) is skipped and not reported."""
    bar = ctx.bar("prune", total=len(thread_ids))
    results = []
    for thread_id in thread_ids:
        before = ctx.bucket_io.run(operator_plans.thread_stats(ctx.layout, thread_id))
        if not before.objects:
            continue
        ctx.saver.prune([thread_id], strategy="keep_latest")
        after = ctx.bucket_io.run(operator_plans.thread_stats(ctx.layout, thread_id))
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
            return report_done(ctx, f"no thread idle for {args.days:g} days", {"dry_run": False, "threads": []})
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
    if target == "-":
        _export_to_stdout(ctx, args.thread)
        return EXIT_OK
    for attempt in range(1, EXPORT_ATTEMPTS + 1):
        try:
            count, size = _export_once(ctx, args.thread, target)
            break
        except ThreadChangedError:
            if attempt == EXPORT_ATTEMPTS:
                raise
    return report_done(
        ctx,
        f"exported thread {args.thread!r} to {target} ({count} objects, {human_size(size)})",
        {"thread_id": args.thread, "file": target, "objects": count, "bytes": size},
    )


def _export_to_stdout(ctx: Context, thread_id: str) -> None:
    """One export to standard output: not started again if the thread changes (what went out cannot be taken
    back), and a failure if the reader goes away before the end. A listing cut off by ``| head`` exits 0 (main), but
    an archive cut off is not a backup, and exiting 0 would let ``export - | aws s3 cp - ...`` look like one."""
    try:
        _export_once(ctx, thread_id, "-")
        sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
        raise Failure(
            EXIT_PROBLEMS,
            f"standard output closed before the export of thread {thread_id!r} was complete: what was written is "
            "incomplete, not a usable archive",
        ) from None


def _discard_stdout() -> None:
    """Point standard output at the null device: what is still buffered for the closed pipe goes nowhere, instead
    of failing again (with a traceback) when Python flushes it at exit."""
    with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)


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
                "format": operator_plans.EXPORT_FORMAT,
                "version": operator_plans.EXPORT_VERSION,
                "thread_id": thread_id,
                "source": ctx.where,
                "exported_at": dt.datetime.now(dt.timezone.utc).isoformat(),
            }
            _add_member(archive, MANIFEST, json.dumps(manifest, indent=2).encode())
            for item in ctx.bucket_io.iterate(operator_plans.export_thread(ctx.layout, ctx.core.codec, thread_id)):
                _add_member(archive, OBJECTS_DIR + item.relative, item.body)
                count += 1
                size += len(item.body)
                bar.advance()
            _add_member(archive, END_OF_EXPORT, json.dumps({"objects": count}).encode())
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
def _archive_reader(path: str) -> Iterator[tuple[dict[str, Any], Iterator[operator_plans.Exported]]]:
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
        if (
            manifest.get("format") != operator_plans.EXPORT_FORMAT
            or manifest.get("version") != operator_plans.EXPORT_VERSION
        ):
            raise Failure(EXIT_PROBLEMS, f"{path}: unsupported export format {manifest.get('format')!r}")

        def objects() -> Iterator[operator_plans.Exported]:
            """The archive's objects, then a check that it ends as exported: with END_OF_EXPORT, after as many
            objects as it says. An archive cut short raises before the import writes its heads (they come last)."""
            count = 0
            try:
                # next(), not iteration: iterating a stream-mode archive starts again at the manifest.
                while (member := archive.next()) is not None:
                    if member.isfile() and member.name == END_OF_EXPORT:
                        end = json.loads(_member_bytes(archive, member))
                        if end.get("objects") != count or archive.next() is not None:
                            raise CorruptObjectError(END_OF_EXPORT, f"does not end an archive of {count} objects")
                        return
                    if not member.isfile() or not member.name.startswith(OBJECTS_DIR):
                        raise CorruptObjectError(member.name, "unexpected member in the archive")
                    yield operator_plans.Exported(member.name[len(OBJECTS_DIR) :], _member_bytes(archive, member))
                    count += 1
            except (OSError, tarfile.TarError, json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise Failure(EXIT_PROBLEMS, f"{path}: unreadable archive ({exc})") from None
            raise Failure(
                EXIT_PROBLEMS,
                f"{path}: incomplete archive: it ends after {count} objects without {END_OF_EXPORT} (cut short?); "
                "nothing of it is visible (the import writes the heads last), export the thread again",
            )

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
        exists = ctx.bucket_io.run(operator_plans.thread_exists(ctx.layout, thread_id))
        if exists and not args.replace:
            raise Failure(
                EXIT_PROBLEMS,
                f"thread {thread_id!r} already exists; import under another id (--thread) or replace it (--replace)",
            )
        if args.dry_run:
            count = sum(1 for _ in objects)
            verb = "replace" if exists else "create"
            return report_done(
                ctx,
                f"would {verb} thread {thread_id!r} with {count} objects",
                {"dry_run": True, "thread_id": thread_id, "objects": count, "replaces": exists},
            )
        if exists:
            ctx.confirm(args, f"Replace thread {thread_id!r}: delete its whole history and import the archive?")
            ctx.saver.delete_thread(thread_id)

        def counted() -> Iterator[operator_plans.Exported]:
            for item in objects:
                bar.advance()
                yield item

        try:
            written = ctx.bucket_io.run(operator_plans.import_thread(ctx.layout, ctx.core.codec, thread_id, counted()))
        except TargetThreadExistsError as exc:
            raise Failure(EXIT_PROBLEMS, str(exc)) from None
        finally:
            bar.close()
    return report_done(
        ctx,
        f"imported {written} objects into thread {thread_id!r}",
        {"thread_id": thread_id, "source_thread_id": manifest["thread_id"], "objects": written},
    )


def cmd_verify(ctx: Context, args: argparse.Namespace) -> int:
    problems: list[operator_plans.Problem] = []
    if args.thread is not None:
        ctx.require_thread(args.thread)
        threads = [args.thread]
    else:  # a thread whose long id cannot be read back is a problem, not skipped silently
        threads = list(ctx.bucket_io.iterate(operator_plans.thread_ids(ctx.layout, unnamed=problems)))
    bar = ctx.bar("verify")
    checked = 0
    seen: set[str] = set()
    for thread_id in threads:
        for item in ctx.bucket_io.iterate(operator_plans.verify_thread(ctx.layout, ctx.core.codec, thread_id)):
            if isinstance(item, operator_plans.Checked):
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
    from ..gc import gc

    if args.grace_seconds < 0:
        raise Failure(EXIT_USAGE, "gc: --grace-seconds must be >= 0")
    if not args.dry_run and not args.yes and sys.stdin.isatty():
        planned = gc(ctx.saver, grace_seconds=args.grace_seconds, dry_run=True)
        if planned.total:
            ctx.confirm(args, f"Delete {planned.total} leftover object(s) ({human_size(planned.deleted_bytes)})?")
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
                "records_read": report.records_read,
                "records_sealed": report.records_sealed,
                "threads_unchanged": report.threads_unchanged,
                "unreadable": report.unreadable,
                "sample": report.sample,
            }
        )
    else:
        verb = "would delete" if report.dry_run else "deleted"
        ctx.out.write(
            f"scanned {report.scanned} objects; {verb} {report.total} ({human_size(report.deleted_bytes)}); "
            f"{report.young} younger than {report.grace_seconds:g} s kept\n"
        )
        if report.foreign:
            ctx.out.write(f"  left alone: {report.foreign} object(s) that are not the saver's\n")
        for category, count in sorted(report.deleted.items()):
            ctx.out.write(f"  {category}: {count}\n")
        for key in report.unreadable:
            ctx.out.write(f"UNREADABLE {key} (its namespace was left alone; run verify)\n")
    return EXIT_PROBLEMS if report.unreadable else EXIT_OK
