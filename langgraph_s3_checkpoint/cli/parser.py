"""The command line: the parser of every command and option, and how a location is opened from it."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from botocore.exceptions import BotoCoreError, ClientError

from .. import migrate
from ..errors import (
    BucketNotFoundError,
    DecryptionError,
    InvalidConfigError,
    S3AccessError,
    S3CheckpointError,
    S3RequestError,
)
from ..options import SAVER, parse_url
from ..saver import S3Saver
from .cache_commands import cmd_cache_clear, cmd_cache_ls, cmd_cache_sweep
from .context import (
    ENV_URL,
    EXIT_PROBLEMS,
    EXIT_S3,
    EXIT_USAGE,
    Context,
    Failure,
    load_serde,
)
from .migrate_commands import cmd_export_to, cmd_import_from, cmd_store_export_to, cmd_store_import_from
from .store_commands import cmd_store_get, cmd_store_ls, cmd_store_put, cmd_store_rm, cmd_store_search, cmd_store_sweep
from .thread_commands import (
    cmd_copy,
    cmd_delete,
    cmd_expire,
    cmd_export,
    cmd_gc,
    cmd_history,
    cmd_import,
    cmd_prune,
    cmd_repair,
    cmd_show,
    cmd_threads,
    cmd_verify,
)


# ------------------------------------------------------------------------------------------------
# Parser and entry point
# ------------------------------------------------------------------------------------------------
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


def _add_command_group(commands: Any, name: str, summary: str, description: str) -> Any:
    """A command of commands (``store``, ``cache``): its help, and the subparsers its own commands are added to
    (``args.<name>_command`` names the one given)."""
    group = commands.add_parser(name, help=summary, description=description)
    return group.add_subparsers(dest=f"{name}_command", required=True, metavar=f"{name.upper()}_COMMAND")


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


def _add_cache_commands(commands: Any, destructive: Callable[[Any], None]) -> None:
    cache_commands = _add_command_group(
        commands,
        "cache",
        "node cache: ls, clear, sweep",
        "Inspect and clear LangGraph's node cache (S3Cache) at the same location. A namespace is "
        'a JSON list of labels, as `cache ls` prints it: \'["__pregel_ns_writes", "app.nodes.search", "search"]\'',
    )
    _add_command(cache_commands, "ls", cmd_cache_ls, "list the cache's namespaces with their entries and sizes")
    sub = _add_command(cache_commands, "clear", cmd_cache_clear, "delete the entries of namespaces (default: all)")
    sub.add_argument("namespaces", nargs="*", metavar="NAMESPACE", help="a JSON list of labels")
    destructive(sub)
    sub = _add_command(cache_commands, "sweep", cmd_cache_sweep, "delete every expired (TTL) entry now")
    _add_full_sweep_option(sub, "entry", "entries")
    destructive(sub)


def _add_full_sweep_option(sub: Any, thing: str, things: str) -> None:
    """``--full`` of a TTL sweep (the store's, the cache's)."""
    help_text = f"read every {thing}, not only those whose expiry came due (after an older release wrote {things})"
    sub.add_argument("--full", action="store_true", help=help_text)


def _add_index_option(sub: Any, help_text: str) -> None:
    """``--index``: the IndexConfig (or a factory of one) that embeds what a store command writes."""
    sub.add_argument("--index", default=None, metavar="MODULE:ATTR", help=help_text)


def _add_selection_option(sub: Any, flag: str, dest: str, metavar: str, help_text: str) -> None:
    """A repeatable option naming what a copy takes (default: everything)."""
    sub.add_argument(flag, dest=dest, action="append", default=None, metavar=metavar, help=help_text)


def _add_migration_commands(
    add: Callable[[str, Handler, str], Any],
    handlers: tuple[Handler, Handler],
    things: str,
    other: str,
    add_options: Callable[[Any], None],
    note: str = "",
) -> None:
    """``import-from`` and ``export-to``: ``things`` copied from another ``other`` into the location and back, each
    with the options ``add_options`` adds."""
    import_from, export_to = handlers
    sub = add(
        "import-from", import_from, f"copy {things} from another {other} into the location ({note}docs/migration.md)"
    )
    sub.add_argument("source", metavar="SOURCE", help=f"where the {things} are: {migrate.LOCATIONS}")
    add_options(sub)
    sub = add("export-to", export_to, f"copy {things} from the location into another {other} ({note}docs/migration.md)")
    sub.add_argument("target", metavar="TARGET", help=f"where to copy them: {migrate.LOCATIONS}")
    add_options(sub)


def _add_migration_options(sub: Any) -> None:
    _add_selection_option(sub, "--thread", "threads", "ID", "copy this thread (repeatable; default: every thread)")
    sub.add_argument(
        "--rounds",
        type=int,
        default=migrate.DEFAULT_ROUNDS,
        help="copy a thread the source keeps writing this many times before reporting it changed "
        f"(default {migrate.DEFAULT_ROUNDS})",
    )
    sub.add_argument("--dry-run", action="store_true", help="report what the target lacks, write nothing")


def _add_store_migration_options(sub: Any) -> None:
    _add_selection_option(
        sub,
        "--namespace",
        "namespaces",
        "NAMESPACE_PREFIX",
        "copy the namespaces under this prefix, labels joined by dots (repeatable; default: all)",
    )
    _add_index_option(
        sub,
        "the target's IndexConfig (or a factory returning one): the target embeds the items it receives with it; "
        "without it they get no vectors (a factory TARGET brings its own)",
    )
    sub.add_argument("--dry-run", action="store_true", help="report what the target lacks, write nothing")


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
    _add_migration_commands(
        command, (cmd_import_from, cmd_export_to), "threads", "checkpointer", _add_migration_options, "resumable; "
    )
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

    store_commands = _add_command_group(
        commands,
        "store",
        "long-term memory store: ls, get, put, rm, search, sweep, import-from, export-to",
        "Inspect and edit the long-term memory store (S3Store) at the same location. "
        "Namespaces are written with their labels joined by dots: memories.user-1",
    )

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
    _add_index_option(
        sub,
        "the application's IndexConfig (or a factory returning one): embed the item with it, so semantic search "
        "finds it; without it the item gets no vectors",
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
    _add_full_sweep_option(sub, "item", "items")
    sub.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation on a terminal")
    _add_migration_commands(
        store_command, (cmd_store_import_from, cmd_store_export_to), "items", "store", _add_store_migration_options
    )
    _add_cache_commands(commands, destructive)
    return parser


def open_context(args: argparse.Namespace) -> Context:
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
        options["serde"] = load_serde(args.serde)
    # The CLI never creates buckets; its writing commands (delete, prune, gc, import ...) probe conditional writes at
    # their first write, as savers do.
    options.pop("create_bucket", None)
    saver = S3Saver(bucket=bucket, prefix=prefix, **options)
    store_options: dict[str, Any] = {k: options[k] for k in ("endpoint_url", "region_name", "serde") if k in options}
    store_options["create_bucket"] = False
    # Operator commands walk whole threads: no deadline per operation; each request is still bounded by the timeouts.
    bucket_io = dataclasses.replace(saver.bucket_io, deadline=None)
    return Context(
        saver=saver,
        bucket_io=bucket_io,
        as_json=args.json,
        progress=not args.json and not args.no_progress and sys.stderr.isatty(),
        out=sys.stdout,
        url=url,
        store_options=store_options,
    )


def fail(code: int, message: str) -> NoReturn:
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


def close_context(ctx: Context) -> None:
    if ctx.long_term_store_opened is not None:
        ctx.long_term_store_opened.close()
    ctx.bucket_io.close()
    ctx.saver.close()
