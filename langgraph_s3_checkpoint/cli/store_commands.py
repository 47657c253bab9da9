"""``langgraph-s3 store``: the long-term memory store's items (ls, get, put, rm, search, sweep)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import (
    S3CheckpointError,
)
from .context import (
    EXIT_OK,
    EXIT_PROBLEMS,
    EXIT_USAGE,
    Context,
    Failure,
    jsonable,
    load_index,
    print_table,
    report_done,
    short_time,
    shorten,
)


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
    store = ctx.long_term_store()
    namespaces = _store_call(
        lambda: store.list_namespaces(
            prefix=prefix or None, max_depth=args.max_depth, limit=args.limit, offset=args.offset
        )
    )
    if ctx.listing_done(
        namespaces, list, f"no namespaces{' under ' + repr(args.prefix) if prefix else ''} in {ctx.where}"
    ):
        return EXIT_OK
    for ns in namespaces:
        ctx.out.write(_dotted(ns) + "\n")
    return EXIT_OK


def _require_item(ctx: Context, namespace: tuple[str, ...], key: str) -> Any:
    store = ctx.long_term_store()
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
        ctx.store_options["index"] = load_index(args.index)
    store = ctx.long_term_store()
    _store_call(lambda: store.put(namespace, args.key, value, index=False if args.no_index else None, ttl=args.ttl))
    return report_done(
        ctx,
        f"put {args.key!r} in {_dotted(namespace)!r}",
        {"namespace": list(namespace), "key": args.key, "put": True},
    )


def cmd_store_rm(ctx: Context, args: argparse.Namespace) -> int:
    namespace = parse_namespace(args.namespace)
    _require_item(ctx, namespace, args.key)
    data = {"namespace": list(namespace), "key": args.key, "dry_run": args.dry_run}
    if args.dry_run:
        return report_done(ctx, f"would delete {args.key!r} from {_dotted(namespace)!r}", data)
    ctx.confirm(args, f"delete item {args.key!r} from namespace {_dotted(namespace)!r}?")
    store = ctx.long_term_store()
    _store_call(lambda: store.delete(namespace, args.key))
    return report_done(ctx, f"deleted {args.key!r} from {_dotted(namespace)!r}", data)


def cmd_store_search(ctx: Context, args: argparse.Namespace) -> int:
    prefix = parse_namespace(args.prefix)
    filter_ = _json_arg("--filter", args.filter, obj=True) if args.filter is not None else None
    store = ctx.long_term_store()
    items = _store_call(
        lambda: store.search(prefix, filter=filter_, limit=args.limit, offset=args.offset, refresh_ttl=False)
    )
    if ctx.listing_done(items, _item_dict, f"no items under {args.prefix or 'the root'!r} in {ctx.where}"):
        return EXIT_OK
    rows = [
        [
            _dotted(i.namespace),
            i.key,
            short_time(i.updated_at.isoformat()),
            shorten(json.dumps(jsonable(i.value), ensure_ascii=False, sort_keys=True), 60),
        ]
        for i in items
    ]
    print_table(["NAMESPACE", "KEY", "UPDATED", "VALUE"], rows, ctx.out)
    return EXIT_OK


def cmd_store_sweep(ctx: Context, args: argparse.Namespace) -> int:
    ctx.confirm(args, f"delete every expired item under {ctx.where}?")
    swept = ctx.long_term_store().sweep_ttl(full=args.full)
    return report_done(ctx, f"deleted {swept} expired items", {"deleted": swept})
