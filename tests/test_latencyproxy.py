"""The benchmarks' latency proxy: a round trip through it costs at least two one-way delays, in order."""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from latencyproxy import LatencyProxy

pytestmark = pytest.mark.memory
"""No S3 server: every test of this module runs in memory (``pytest -m memory``)."""


def _echo_server() -> tuple[socket.socket, int]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return listener, listener.getsockname()[1]


def test_round_trip_costs_two_one_way_delays_and_keeps_order() -> None:
    listener, port = _echo_server()
    with (
        LatencyProxy("127.0.0.1", port, one_way_ms=25, lifetime=30) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as s,
    ):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(3):
            started = time.monotonic()
            s.sendall(b"ping%d" % i)
            got = b""
            while len(got) < 5:
                got += s.recv(100)
            elapsed = time.monotonic() - started
            assert got == b"ping%d" % i
            assert 0.050 <= elapsed < 0.5
        # Pipelined chunks are not serialized: 10 sends in quick succession arrive after ~one round trip.
        started = time.monotonic()
        for i in range(10):
            s.sendall(b"%02d" % i)
            time.sleep(0.005)
        got = b""
        while len(got) < 20:
            got += s.recv(100)
        assert got == b"".join(b"%02d" % i for i in range(10))
        assert time.monotonic() - started < 0.05 + 0.05 + 0.2
    listener.close()


def test_stops_itself_after_its_lifetime() -> None:
    proxy = LatencyProxy("127.0.0.1", 9, one_way_ms=1, lifetime=0.2)
    time.sleep(1.5)
    assert not proxy._thread.is_alive()
