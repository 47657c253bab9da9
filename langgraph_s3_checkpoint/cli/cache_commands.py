"""``langgraph-s3 cache``: the node cache's entries (ls, clear, sweep)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..cache import S3Cache

from .context import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, Context, Failure, human_size, report_done


# ------------------------------------------------------------------------------------------------
# Node cache
# ------------------------------------------------------------------------------------------------
def _node_cache(ctx: Context) -> S3Cache[Any]:
    """The node cache at the same location (closed by the command's ``with``)."""
    from ..cache import S3Cache

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
            ctx.out.write(f"{ns.entries:>8}  {human_size(ns.bytes):>10}  {when:<19}  {name}\n")
        total, size = sum(ns.entries for ns in namespaces), human_size(sum(ns.bytes for ns in namespaces))
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
    return report_done(ctx, f"{verb} {cleared} entries of {what}", {"dry_run": args.dry_run, "entries": cleared})


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
