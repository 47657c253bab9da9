"""HTTP/1.1 for the direct transport's two senders: the messages (:class:`Exchange`, :data:`Response`,
:class:`Failure`), a request's bytes, and a reader of replies fed as bytes arrive. Pure, no I/O.

Why not a general-purpose parser such as ``h11``: the direct transport exists to spend little CPU per request,
and ``h11`` validates every header field of both directions through regular expressions and event objects, a large
share of the async saver's CPU per checkpoint (docs/benchmarks.md, "The direct transport"). What a client needs
from RFC 9112 is small and is all here: the status line, the header fields, and where the body ends (section 6.3:
no body for 1xx, 204 and 304; chunked transfer coding; ``Content-Length``; else until the server closes). The
requests are the saver's own, signed a moment before, so building them needs no validation beyond refusing a line
break or a non-Latin-1 character in a field (which would change the message's framing); anything unexpected in a
reply is a :class:`ProtocolError`, which the sender turns into a retryable failure on a fresh connection.

One reply at a time: the sender never pipelines, so bytes left over after a reply mean the connection can no
longer be trusted (``Reply.reusable`` is then false), as does ``Connection: close``, an HTTP/1.0 reply, a body
delimited by the end of the stream, or a reply that sends both ``Transfer-Encoding`` and ``Content-Length``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar

MAX_LINE = 64 * 1024
"""The longest status line, header section or chunk-size line accepted."""

_HEAD_END = re.compile(rb"\r?\n\r?\n")
_VERSION = re.compile(r"HTTP/1\.([01])")
_HEX = re.compile(rb"[0-9A-Fa-f]+")


class ProtocolError(Exception):
    """The bytes received are not an HTTP/1.1 reply the sender can read."""


def request_bytes(method: str, target: str, headers: Mapping[str, str], body: bytes) -> bytes:
    """The request as sent: request line, header fields (plus ``content-length`` for a body or a PUT), body.

    Raises :class:`ValueError` naming the field when a value would break the framing (a line break) or cannot be
    sent as Latin-1."""
    lines = [f"{method} {target} HTTP/1.1"]
    for name, value in headers.items():
        if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
            raise ValueError(f"the header {name!r} contains a line break")
        lines.append(f"{name}: {value}")
    if body or method == "PUT":
        lines.append(f"content-length: {len(body)}")
    lines.append("\r\n")
    try:
        head = "\r\n".join(lines).encode("latin-1")
    except UnicodeEncodeError as exc:
        raise ValueError(f"a header cannot be sent as Latin-1 text: {exc}") from None
    return head + body if body else head


Response = tuple[int, Mapping[str, str], bytes]
"""One HTTP reply as a sender hands it back: status, headers (looked up by lower-case name), body."""


class Failure(Exception):
    """One attempt failed; ``retryable`` says whether another attempt may succeed."""

    def __init__(self, detail: str, *, retryable: bool, code: str = "", status: int = 0) -> None:
        super().__init__(detail)
        self.retryable = retryable
        self.code = code
        self.status = status


@dataclass(frozen=True)
class Exchange:
    """One signed HTTP request, ready to send: all a sender (:mod:`.blocking_sender` or :mod:`.asyncio_sender`) ever
    sees."""

    method: str
    target: str
    """Path and query string."""
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    """Field names in lower case; repeated fields joined with ``", "``."""
    body: bytes
    reusable: bool
    """Whether the connection may carry another request."""


# The reader's states. Each names what the next bytes are; ``ReplyReader._STEPS`` maps it to the step that
# reads them. A step consumes what it can and returns whether it made progress.
HEAD, FIXED, CHUNK_SIZE, CHUNK_DATA, CHUNK_END, TRAILERS, UNTIL_CLOSE, DONE = (
    "head",
    "fixed",
    "chunk-size",
    "chunk-data",
    "chunk-end",
    "trailers",
    "until-close",
    "done",
)


def _on_line(step: Callable[[ReplyReader, bytearray], bool]) -> Callable[[ReplyReader], bool]:
    """A step of :class:`ReplyReader` that reads one line (a chunk's size, the end of its data, a trailer field): it
    waits until the line is complete, then takes it without its line break."""

    def read_line(reader: ReplyReader) -> bool:
        line = reader._line()
        return line is not None and step(reader, line)

    return read_line


class ReplyReader:
    """Reads the reply to one request from the bytes of a connection, in whatever pieces they arrive.

    :meth:`expect` before each request, :meth:`feed` with each piece received (the reply once it is complete,
    else ``None``), :meth:`end_of_stream` when the server closes."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._state = DONE
        self._method = "GET"
        self._status = 0
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._remaining = 0
        self._reusable = True

    def expect(self, method: str) -> None:
        """A request with ``method`` was sent: read its reply next."""
        self._method = method
        self._state = HEAD
        self._buffer.clear()
        self._body = []

    def feed(self, data: bytes) -> Reply | None:
        if self._state is DONE:
            raise ProtocolError("bytes arrived with no request outstanding")
        self._buffer += data
        while self._state is not DONE and self._STEPS[self._state](self):
            pass
        return self._reply() if self._state is DONE else None

    def end_of_stream(self) -> Reply | None:
        """The server closed: the reply, if the close is what ends it, else ``None`` (it was cut short)."""
        if self._state is UNTIL_CLOSE:
            self._wait_for_close()
            self._finish()
            return self._reply()
        return None

    def _reply(self) -> Reply:
        reusable = self._reusable and not self._buffer
        return Reply(self._status, self._headers, b"".join(self._body), reusable)

    # -- the steps, one per state ----------------------------------------------------------------------
    def _read_head(self) -> bool:
        end = _HEAD_END.search(self._buffer)
        if end is None:
            if len(self._buffer) > MAX_LINE:
                raise ProtocolError(f"no end of the header section in {MAX_LINE} bytes")
            return False
        text = self._buffer[: end.start()].decode("latin-1")
        del self._buffer[: end.end()]
        self._status, self._headers, http10 = _parse_head(text)
        if 100 <= self._status < 200:  # an interim reply (100 Continue, 103 Early Hints): the final one follows
            if self._status == 101:
                raise ProtocolError("the server switched protocols (101), which was not asked for")
            return True
        self._state, self._remaining, self._reusable = _framing(self._method, self._status, self._headers, http10)
        return True

    def _read_fixed(self) -> bool:
        self._take_body()
        return self._remaining == 0 and self._finish()

    @_on_line
    def _read_chunk_size(self, line: bytearray) -> bool:
        size = line.split(b";", 1)[0].strip(b" \t")
        if not _HEX.fullmatch(size):
            raise ProtocolError(f"not a chunk size: {bytes(line[:40])!r}")
        self._remaining = int(size, 16)
        self._state = CHUNK_DATA if self._remaining else TRAILERS
        return True

    def _read_chunk_data(self) -> bool:
        if not self._buffer:
            return False
        self._take_body()
        if self._remaining == 0:
            self._state = CHUNK_END
        return True

    @_on_line
    def _read_chunk_end(self, line: bytearray) -> bool:
        if line:
            raise ProtocolError("a chunk is longer than its size says")
        self._state = CHUNK_SIZE
        return True

    @_on_line
    def _read_trailers(self, line: bytearray) -> bool:
        if line:
            return True  # a trailer field, read past: S3 sends none the saver uses
        return self._finish()

    def _wait_for_close(self) -> bool:
        self._body.append(bytes(self._buffer))
        self._buffer.clear()
        return False

    _STEPS: ClassVar[Mapping[str, Callable[[ReplyReader], bool]]] = {
        HEAD: _read_head,
        FIXED: _read_fixed,
        CHUNK_SIZE: _read_chunk_size,
        CHUNK_DATA: _read_chunk_data,
        CHUNK_END: _read_chunk_end,
        TRAILERS: _read_trailers,
        UNTIL_CLOSE: _wait_for_close,
    }

    def _take_body(self) -> None:
        """Move what has arrived of the ``_remaining`` body bytes (fixed length, or the current chunk) to the body."""
        if self._buffer and self._remaining:
            piece = bytes(self._buffer[: self._remaining])
            del self._buffer[: self._remaining]
            self._body.append(piece)
            self._remaining -= len(piece)

    def _finish(self) -> bool:
        self._state = DONE
        return True

    def _line(self) -> bytearray | None:
        """The next line without its line break, consumed; ``None`` while it is incomplete."""
        end = self._buffer.find(b"\n")
        if end < 0:
            if len(self._buffer) > MAX_LINE:
                raise ProtocolError(f"no line break in {MAX_LINE} bytes")
            return None
        line = self._buffer[:end]
        del self._buffer[: end + 1]
        return line[:-1] if line.endswith(b"\r") else line


def _parse_head(text: str) -> tuple[int, dict[str, str], bool]:
    """Status, header fields and whether the reply is HTTP/1.0, from the header section's text."""
    status_line, *field_lines = text.split("\n")
    version, _, rest = status_line.rstrip("\r").partition(" ")
    match = _VERSION.fullmatch(version)
    code = rest[:3]
    if match is None or not code.isdigit() or len(code) != 3 or rest[3:4] not in ("", " "):
        raise ProtocolError(f"not an HTTP/1.1 status line: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    for line in field_lines:
        name, colon, value = line.rstrip("\r").partition(":")
        if not colon or not name or name[-1] in " \t" or name[0] in " \t":
            raise ProtocolError(f"not a header field: {line[:80]!r}")  # obs-fold included (RFC 9112 5.2)
        name, value = name.lower(), value.strip(" \t")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return int(code), headers, match.group(1) == "0"


def _framing(method: str, status: int, headers: Mapping[str, str], http10: bool) -> tuple[str, int, bool]:
    """Where the body ends (RFC 9112 6.3): the state to read it in, its length, and whether the connection can be
    reused afterwards."""
    reusable = not http10 and "close" not in headers.get("connection", "").lower()
    if method == "HEAD" or status in (204, 304):
        return FIXED, 0, reusable
    coding = headers.get("transfer-encoding")
    length = headers.get("content-length")
    if coding is not None:
        chunked = coding.rsplit(",", 1)[-1].strip(" \t").lower() == "chunked"
        if not chunked:
            return UNTIL_CLOSE, 0, False
        return CHUNK_SIZE, 0, reusable and length is None
    if length is None:
        return UNTIL_CLOSE, 0, False
    values = {value.strip(" \t") for value in length.split(",")}
    value = values.pop()
    if values or not value.isdigit() or not value.isascii():
        raise ProtocolError(f"not a Content-Length: {length[:40]!r}")
    return FIXED, int(value), reusable
