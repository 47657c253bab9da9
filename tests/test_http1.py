"""HTTP/1.1 framing of the direct transport's senders (``http1.py``), driven exhaustively: every reply shape the
reader must know (RFC 9112 6.3 body lengths, interim replies, keep-alive or close, CRLF or bare LF), delivered in
one piece, split in two at every byte, and byte by byte; then every malformed reply it must refuse; then the same
framings from a real socket through both senders (blocking and asyncio)."""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from langgraph_s3_checkpoint import make_client
from langgraph_s3_checkpoint._protocol.requests import Get, Put, Written
from langgraph_s3_checkpoint._transport.asyncio_sender import AsyncioSender
from langgraph_s3_checkpoint._transport.direct import DirectTransport
from langgraph_s3_checkpoint._transport.http1 import MAX_LINE, ProtocolError, Reply, ReplyReader, request_bytes

pytestmark = pytest.mark.memory
"""No S3 server: every test of this module runs in memory (``pytest -m memory``)."""


@dataclass(frozen=True)
class Shape:
    framing: str  # "length", "chunked", "close" (body until the end of the stream) or "none" (204)
    body: bytes
    eol: str
    interim: bool  # a 100 Continue first
    close: bool  # Connection: close
    http10: bool

    def wire(self) -> bytes:
        eol = self.eol
        lines = [f"HTTP/1.{0 if self.http10 else 1} {204 if self.framing == 'none' else 200} OK"]
        lines += ['ETag: "abc"', "x-amz-meta-a: 1", "X-Amz-Meta-A: 2", "Server:   padded   "]
        if self.close:
            lines.append("Connection: close")
        if self.framing == "length":
            lines.append(f"Content-Length: {len(self.body)}")
        if self.framing == "chunked":
            lines.append("Transfer-Encoding: chunked")
        head = (eol.join(lines) + eol + eol).encode("latin-1")
        if self.interim:
            head = f"HTTP/1.1 100 Continue{eol}{eol}".encode() + head
        if self.framing == "chunked":
            pieces = [self.body[:3], self.body[3:]] if len(self.body) > 3 else [self.body]
            chunks = b"".join(
                f"{len(p):x};ext=1{eol}".encode() + p + eol.encode() for p in pieces if p
            )  # fmt: skip
            return head + chunks + f"0{eol}Trailer-Field: x{eol}{eol}".encode()
        if self.framing == "none":
            return head
        return head + self.body

    def expected(self) -> Reply:
        reusable = self.framing != "close" and not self.close and not self.http10
        return Reply(
            status=204 if self.framing == "none" else 200,
            headers={
                "etag": '"abc"',
                "x-amz-meta-a": "1, 2",
                "server": "padded",
                **({"connection": "close"} if self.close else {}),
                **({"content-length": str(len(self.body))} if self.framing == "length" else {}),
                **({"transfer-encoding": "chunked"} if self.framing == "chunked" else {}),
            },
            body=b"" if self.framing == "none" else self.body,
            reusable=reusable,
        )


SHAPES = [
    Shape(framing, body, eol, interim, close, http10)
    for framing, body, eol, interim, close, http10 in itertools.product(
        ("length", "chunked", "close", "none"),
        (b"", b"x", b"<xml>\r\n0\r\n\r\n</xml>" * 3),
        ("\r\n", "\n"),
        (False, True),
        (False, True),
        (False, True),
    )
    if not (framing == "none" and body)
]


def _read(reader: ReplyReader, pieces: Iterator[bytes], closes: bool) -> Reply | None:
    reply = None
    for piece in pieces:
        assert reply is None, "the reply ended before its last byte"
        reply = reader.feed(piece)
    if reply is None and closes:
        reply = reader.end_of_stream()
    return reply


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, vars(s).values()))[:60])
def test_every_split_of_every_shape(shape: Shape) -> None:
    data, expected = shape.wire(), shape.expected()
    closes = shape.framing == "close"
    splits: list[list[bytes]] = [[data], [data[i : i + 1] for i in range(len(data))]]
    splits += [[data[:i], data[i:]] for i in range(1, len(data))]
    reader = ReplyReader()  # one reader for all: each expect() starts afresh, as on a kept-alive connection
    for pieces in splits:
        reader.expect("GET")
        assert _read(reader, iter(pieces), closes) == expected, pieces


def test_a_head_request_has_no_body() -> None:
    reader = ReplyReader()
    reader.expect("HEAD")
    reply = reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n")
    assert reply is not None and reply.body == b"" and reply.reusable


def test_304_has_no_body() -> None:
    reader = ReplyReader()
    reader.expect("GET")
    assert reader.feed(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 42\r\n\r\n") == Reply(
        304, {"content-length": "42"}, b"", True
    )


def test_a_cut_reply_is_not_a_reply() -> None:
    for data in (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", b"HTTP/1.1 200 OK\r\n", b""):
        reader = ReplyReader()
        reader.expect("GET")
        assert reader.feed(data) is None
        assert reader.end_of_stream() is None


def test_bytes_after_the_reply_end_keep_alive() -> None:
    reader = ReplyReader()
    reader.expect("GET")
    reply = reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1 200 OK\r\n")
    assert reply is not None and reply.body == b"x" and not reply.reusable


def test_chunked_with_a_content_length_is_read_chunked_and_closes() -> None:
    reader = ReplyReader()
    reader.expect("GET")
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n"
    reply = reader.feed(head + b"1\r\nx\r\n0\r\n\r\n")
    assert reply is not None and reply.body == b"x" and not reply.reusable


def test_a_transfer_coding_other_than_chunked_last_reads_until_close() -> None:
    reader = ReplyReader()
    reader.expect("GET")
    assert reader.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\nabc") is None
    assert reader.end_of_stream() == Reply(200, {"transfer-encoding": "chunked, gzip"}, b"abc", False)


def test_repeated_equal_content_lengths_are_one() -> None:
    reader = ReplyReader()
    reader.expect("GET")
    reply = reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx")
    assert reply is not None and reply.body == b"x"


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/2 200 OK\r\n\r\n",
        b"ICY 200 OK\r\n\r\n",
        b"HTTP/1.1 20 OK\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n: empty name\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nName : space before the colon\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nA: 1\r\n folded: continuation\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\nxx",
        b"HTTP/1.1 200 OK\r\nContent-Length: \xd9\xa1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxy\r\n0\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
    ],
)
def test_malformed_replies_are_refused(data: bytes) -> None:
    reader = ReplyReader()
    reader.expect("GET")
    with pytest.raises(ProtocolError):
        reader.feed(data)


def test_an_endless_head_or_chunk_line_is_refused() -> None:
    reader = ReplyReader()
    reader.expect("GET")
    with pytest.raises(ProtocolError, match="header section"):
        reader.feed(b"HTTP/1.1 200 OK\r\nX: " + b"a" * MAX_LINE)
    reader.expect("GET")
    assert reader.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n") is None
    with pytest.raises(ProtocolError, match="line break"):
        reader.feed(b"1" * (MAX_LINE + 1))


def test_bytes_without_a_request_are_refused() -> None:
    with pytest.raises(ProtocolError, match="no request"):
        ReplyReader().feed(b"HTTP/1.1 200 OK\r\n\r\n")


def test_request_bytes() -> None:
    put = request_bytes("PUT", "/b/k?x=1", {"host": "h:1", "if-none-match": "*"}, b"body")
    assert put == b"PUT /b/k?x=1 HTTP/1.1\r\nhost: h:1\r\nif-none-match: *\r\ncontent-length: 4\r\n\r\nbody"
    assert request_bytes("PUT", "/k", {"host": "h"}, b"").endswith(b"content-length: 0\r\n\r\n")
    assert request_bytes("GET", "/k", {"host": "h"}, b"") == b"GET /k HTTP/1.1\r\nhost: h\r\n\r\n"


@pytest.mark.parametrize("headers", [{"x": "a\r\nInjected: 1"}, {"x": "a\nb"}, {"x\r\n": "a"}, {"x": "日本"}])
def test_request_bytes_refuses_what_would_break_the_framing(headers: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="header"):
        request_bytes("GET", "/k", headers, b"")


# -- the same framings from a socket, through the asyncio sender --------------------------------------


class _CannedServer:
    """A TCP server answering each request it reads with the next canned reply, closing after it if told."""

    def __init__(self, replies: list[tuple[bytes, bool]]) -> None:
        self.replies = replies
        self.connections = 0
        self.requests: list[bytes] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while self.replies:
            conn, _ = self._sock.accept()
            self.connections += 1
            with conn:
                while self.replies:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    if not data:
                        break
                    head, _, rest = data.partition(b"\r\n\r\n")
                    sizes = [line.split(b":")[1] for line in head.split(b"\r\n") if line.startswith(b"content-length")]
                    length = int(sizes[0]) if sizes else 0
                    while len(rest) < length:
                        rest += conn.recv(65536)
                    self.requests.append(head)
                    reply, close = self.replies.pop(0)
                    conn.sendall(reply)
                    if close:
                        break

    def close(self) -> None:
        self._sock.close()


@pytest.mark.parametrize("sender", ["blocking", "native"])
def test_both_senders_read_chunked_close_and_interim_replies_from_a_socket(sender: str) -> None:
    chunked = b'HTTP/1.1 200 OK\r\nETag: "e1"\r\nx-amz-request-id: 1\r\nTransfer-Encoding: chunked\r\n\r\n'
    chunked += b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    closing = b'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nETag: "e2"\r\nx-amz-request-id: 2\r\n'
    closing += b"Connection: close\r\nContent-Length: 0\r\n\r\n"
    cut = b'HTTP/1.1 200 OK\r\nETag: "e3"\r\nContent-Length: 10\r\n\r\nabc'
    until_close = b'HTTP/1.0 200 OK\r\nETag: "e4"\r\nx-amz-request-id: 4\r\n\r\nwhole body'
    server = _CannedServer([(chunked, False), (closing, True), (cut, True), (chunked, False), (until_close, True)])
    requests = [
        Get("k1"),  # chunked, kept alive
        Put("k2", b"xyz"),  # a 100 Continue, then Connection: close
        Get("k3"),  # cut short, then retried on a fresh connection (chunked)
        Get("k4"),  # HTTP/1.0, body until the server closes
    ]
    try:
        first, second, third, fourth = _send_all(server.port, sender, requests, max_attempts=2)
    finally:
        server.close()
    assert (first.body, first.etag) == (b"abcde", '"e1"')
    assert isinstance(second, Written) and second.etag == '"e2"'
    assert (third.body, third.etag) == (b"abcde", '"e1"')
    assert (fourth.body, fourth.etag) == (b"whole body", '"e4"')
    assert server.connections == 3  # new ones after the Connection: close and after the cut reply
    assert b"content-length: 3" in server.requests[1]


@pytest.mark.parametrize("sender", ["blocking", "native"])
def test_an_idle_connection_the_server_closed_is_not_reused(sender: str) -> None:
    """Servers close idle keep-alive connections (SeaweedFS and S3 after some seconds). The sender notices
    before reusing one, so the request costs no attempt: with one attempt allowed it still succeeds."""
    reply = b'HTTP/1.1 200 OK\r\nETag: "e"\r\nx-amz-request-id: 1\r\nContent-Length: 2\r\n\r\nok'
    server = _CannedServer([(reply, True), (reply, True)])  # closes after each reply, without saying so
    try:
        first, second = _send_all(server.port, sender, [Get("a"), Get("b")], max_attempts=1, pause=0.2)
    finally:
        server.close()
    assert first.body == second.body == b"ok"
    assert server.connections == 2


def _send_all(port: int, sender: str, requests: list[Any], *, max_attempts: int, pause: float = 0.0) -> list[Any]:
    """Each request's reply, sent one after another by the blocking or the asyncio sender."""
    client = make_client(
        endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="a", aws_secret_access_key="b",
        max_attempts=max_attempts,
    )  # fmt: skip
    direct = DirectTransport(client, "bkt")
    try:
        if sender == "blocking":
            replies = []
            for request in requests:
                replies.append(direct.execute(request))
                time.sleep(pause)
            return replies
        native = AsyncioSender(direct)

        async def talk() -> list[Any]:
            replies = []
            for request in requests:
                replies.append(await native.execute(request))
                await asyncio.sleep(pause)
            return replies

        try:
            return asyncio.run(talk())
        finally:
            native.close()
    finally:
        direct.close()


def test_the_blocking_sender_reuses_connections_above_descriptor_1023() -> None:
    """``select`` cannot watch descriptors above 1023; a process holding many files must still reuse its
    connections (the staleness check polls instead)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    reply = b'HTTP/1.1 200 OK\r\nETag: "e"\r\nx-amz-request-id: 1\r\nContent-Length: 2\r\n\r\nok'
    server = _CannedServer([(reply, False), (reply, False), (reply, True)])
    filler = [socket.socket() for _ in range(1100)]  # the sender's socket gets a descriptor above them
    try:
        replies = _send_all(server.port, "blocking", [Get("a"), Get("b"), Get("c")], max_attempts=1)
    finally:
        for sock in filler:
            sock.close()
        server.close()
    assert [r.body for r in replies] == [b"ok"] * 3
    assert server.connections == 1
