"""What every command shares: exit codes, progress on stderr, rendering of values, and the opened location."""

from __future__ import annotations

import argparse
import base64
import dataclasses
import datetime as dt
import importlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any

from .._protocol import operator_plans
from .._transport.bucket_io import BucketIO
from ..saver import S3Saver

if TYPE_CHECKING:
    from ..store import S3Store


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
END_OF_EXPORT = "end.json"
"""An export's last member, holding its number of objects: an archive without it was cut short (tar itself cannot
tell: a stream cut at a member's edge reads as a shorter archive)."""


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


def dumps(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=repr)


def human_size(n: int) -> str:
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


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], out: IO[str]) -> None:
    cells = [[str(c) for c in headers], *([shorten("" if c is None else str(c)) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        out.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() + "\n")


def short_time(ts: str | None) -> str:
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
    bucket_io: BucketIO
    as_json: bool
    progress: bool
    out: IO[str]
    url: str = ""
    store_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    long_term_store_opened: S3Store | None = None

    def long_term_store(self) -> S3Store:
        """The long-term memory store at the same location (opened on first use, closed by ``main``)."""
        if self.long_term_store_opened is None:
            from ..store import S3Store

            self.long_term_store_opened = S3Store._from_url(self.url, **self.store_options)
        return self.long_term_store_opened

    @property
    def layout(self) -> Any:
        return self.saver.plans.layout

    @property
    def core(self) -> Any:
        return self.saver.plans

    def bar(self, label: str, total: int | None = None) -> Progress:
        return Progress(label, total=total, enabled=self.progress)

    def emit_json(self, value: Any) -> None:
        self.out.write(dumps(value) + "\n")

    def listing_done(self, entries: Sequence[Any], as_json: Callable[[Any], Any], none_found: str) -> bool:
        """What a listing shows unless it prints a table: with ``--json``, the entries as a JSON list (each as
        ``as_json`` makes it); with none, ``none_found``. Whether it did (the caller prints the entries otherwise)."""
        if self.as_json:
            self.emit_json([as_json(entry) for entry in entries])
            return True
        if not entries:
            self.out.write(none_found + "\n")
            return True
        return False

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
        if not self.bucket_io.run(operator_plans.thread_exists(self.layout, thread_id)):
            raise Failure(EXIT_PROBLEMS, f"thread {thread_id!r} not found under {self.where}")

    @property
    def where(self) -> str:
        return f"s3://{self.saver.bucket}/{self.saver.prefix}".rstrip("/")


def load_attr(option: str, spec: str, *, factory: Callable[[Any], bool]) -> Any:
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


def load_serde(spec: str) -> Any:
    """``module:attr[.attr...]``: a serializer, or a class or factory called without arguments.

    ``langgraph.checkpoint.serde.encrypted:EncryptedSerializer.from_pycryptodome_aes`` reads its key
    from ``LANGGRAPH_AES_KEY``, which makes encrypted checkpoints readable without writing any code.
    """
    value = load_attr("--serde", spec, factory=lambda v: not hasattr(v, "dumps_typed") and callable(v))
    if not hasattr(value, "dumps_typed") or not hasattr(value, "loads_typed"):
        raise Failure(EXIT_USAGE, f"--serde {spec!r} is not a serializer (no dumps_typed/loads_typed)")
    return value


def load_index(spec: str) -> dict[str, Any]:
    """``module:attr[.attr...]``: the application's ``IndexConfig`` (a dict with ``dims`` and ``embed``),
    or a factory returning one, so that ``store put --index`` embeds items as the application does."""
    value = load_attr("--index", spec, factory=lambda v: not isinstance(v, dict) and callable(v))
    if not isinstance(value, dict) or "dims" not in value or "embed" not in value:
        raise Failure(EXIT_USAGE, f"--index {spec!r} is not an IndexConfig (a dict with 'dims' and 'embed')")
    return value


def report_done(ctx: Context, text: str, data: dict[str, Any]) -> int:
    if ctx.as_json:
        ctx.emit_json({"ok": True, **data})
    else:
        ctx.out.write(text + "\n")
    return EXIT_OK
