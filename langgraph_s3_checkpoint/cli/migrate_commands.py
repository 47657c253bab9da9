"""``import-from`` / ``export-to`` and ``store import-from`` / ``store export-to``: threads and long-term memory
moved between another checkpointer or store and the location (:mod:`langgraph_s3_checkpoint.migrate`)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from .. import migrate
from ..store import S3Store
from .context import EXIT_OK, EXIT_PROBLEMS, Context, Progress, load_index, print_table
from .store_commands import parse_namespace


# ------------------------------------------------------------------------------------------------
# Threads
# ------------------------------------------------------------------------------------------------
def cmd_import_from(ctx: Context, args: argparse.Namespace) -> int:
    with migrate.open_checkpointer(args.source, must_exist=True) as source:
        if not args.dry_run:
            migrate.prepare_target(ctx.saver)
        return _copy_threads(
            ctx, args, source, ctx.saver, source_name=migrate.shown(args.source), target_name=ctx.where
        )


def cmd_export_to(ctx: Context, args: argparse.Namespace) -> int:
    with _target_checkpointer(args.target, dry_run=args.dry_run) as target:
        if not args.dry_run:
            migrate.prepare_target(target)
        return _copy_threads(
            ctx, args, ctx.saver, target, source_name=ctx.where, target_name=migrate.shown(args.target)
        )


@contextlib.contextmanager
def _target_checkpointer(location: str, *, dry_run: bool) -> Iterator[BaseCheckpointSaver[Any]]:
    """The target, or for a dry run into a SQLite file that does not exist yet, an empty stand-in: opening it
    would create the file, and a dry run writes nothing."""
    if dry_run and migrate.would_create(location):
        yield InMemorySaver()
        return
    with migrate.open_checkpointer(location) as target:
        yield target


def _copy_threads(
    ctx: Context,
    args: argparse.Namespace,
    source: BaseCheckpointSaver[Any],
    target: BaseCheckpointSaver[Any],
    *,
    source_name: str,
    target_name: str,
) -> int:
    bar = ctx.bar("threads")

    def show(progress: migrate.MigrationProgress) -> None:
        bar.total, bar.done = progress.threads_total, progress.threads_done
        bar.advance(0, detail=f"{progress.thread_id}: {progress.checkpoints} checkpoint(s)")

    try:
        report = migrate.copy_threads(
            source, target, thread_ids=args.threads, dry_run=args.dry_run, rounds=args.rounds, on_progress=show
        )
    finally:
        bar.close()
    if ctx.as_json:
        threads = [
            {
                "thread_id": t.thread_id,
                "status": t.status.value,
                "checkpoints": t.checkpoints,
                "writes": t.writes,
                "rounds": t.rounds,
                "problems": t.problems,
            }
            for t in report.threads
        ]
        details = {"checkpoints": report.checkpoints, "writes": report.writes, "threads": threads}
        return _emit_report(ctx, report, source_name, target_name, details)
    rows = [[t.thread_id, t.status.value, t.checkpoints, t.writes, t.rounds] for t in report.threads]
    print_table(["THREAD", "STATUS", "CHECKPOINTS", "WRITES", "ROUNDS"], rows, ctx.out)
    return _print_report(
        ctx,
        report,
        [f"{thread.thread_id}: {problem}" for thread in report.threads for problem in thread.problems],
        f"{report.checkpoints} checkpoint(s) and {report.writes} write(s) of {len(report.threads)} thread(s) "
        f"from {source_name} into {target_name}",
    )


# ------------------------------------------------------------------------------------------------
# Long-term memory
# ------------------------------------------------------------------------------------------------
def cmd_store_import_from(ctx: Context, args: argparse.Namespace) -> int:
    index = load_index(args.index) if args.index else None
    with (
        migrate.open_store(args.source, must_exist=True) as source,
        S3Store._from_url(ctx.url, **ctx.store_options, index=index) as target,
    ):
        if not args.dry_run:
            migrate.prepare_target(target)
        return _copy_store(ctx, args, source, target, source_name=migrate.shown(args.source), target_name=ctx.where)


def cmd_store_export_to(ctx: Context, args: argparse.Namespace) -> int:
    index = load_index(args.index) if args.index else None
    with _target_store(args.target, dry_run=args.dry_run, index=index) as target:
        if not args.dry_run:
            migrate.prepare_target(target)
        source = ctx.long_term_store()
        return _copy_store(ctx, args, source, target, source_name=ctx.where, target_name=migrate.shown(args.target))


@contextlib.contextmanager
def _target_store(location: str, *, dry_run: bool, index: Any) -> Iterator[BaseStore]:
    """As :func:`_target_checkpointer`, for a store."""
    if dry_run and migrate.would_create(location):
        yield InMemoryStore()
        return
    with migrate.open_store(location, index=index) as target:
        yield target


def _copy_store(
    ctx: Context, args: argparse.Namespace, source: BaseStore, target: BaseStore, *, source_name: str, target_name: str
) -> int:
    bar: Progress = ctx.bar("namespaces")

    def show(progress: migrate.StoreProgress) -> None:
        bar.total, bar.done = progress.namespaces_total, progress.namespaces_done
        bar.advance(0, detail=f"{'.'.join(progress.namespace)}: {progress.items} item(s) so far")

    prefixes = [parse_namespace(text) for text in args.namespaces] if args.namespaces else [()]
    try:
        report = migrate.copy_store(source, target, namespace_prefixes=prefixes, dry_run=args.dry_run, on_progress=show)
    finally:
        bar.close()
    if ctx.as_json:
        details = {
            "namespaces": report.namespaces,
            "items": report.items,
            "unchanged": report.unchanged,
            "problems": report.problems,
        }
        return _emit_report(ctx, report, source_name, target_name, details)
    return _print_report(
        ctx,
        report,
        report.problems,
        f"{report.items} item(s) of {report.namespaces} namespace(s) from {source_name} into {target_name} "
        f"({report.unchanged} already there)",
    )


def _emit_report(
    ctx: Context,
    report: migrate.MigrationReport | migrate.StoreCopyReport,
    source_name: str,
    target_name: str,
    details: dict[str, Any],
) -> int:
    """A copy's report as JSON: the fields every copy has, then ``details``."""
    ctx.emit_json({"ok": report.ok, "dry_run": report.dry_run, "source": source_name, "target": target_name, **details})
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def _print_report(
    ctx: Context, report: migrate.MigrationReport | migrate.StoreCopyReport, problems: list[str], copied: str
) -> int:
    """A copy's problems, one a line, then what it copied (a dry run: would copy) and whether the target verified."""
    for problem in problems:
        ctx.out.write(f"PROBLEM {problem}\n")
    verb = "would copy" if report.dry_run else "copied"
    verdict = "" if report.dry_run else "; verified: " + ("OK" if report.ok else "see the problems above")
    ctx.out.write(f"{verb} {copied}{verdict}\n")
    return EXIT_OK if report.ok else EXIT_PROBLEMS


__all__ = ["cmd_export_to", "cmd_import_from", "cmd_store_export_to", "cmd_store_import_from"]
