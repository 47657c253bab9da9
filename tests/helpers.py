"""Test helpers shared by the test modules."""

from __future__ import annotations

import collections
import contextlib
import itertools
import operator
import os
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Annotated, Any, TypedDict

import pytest

from langgraph_s3_checkpoint._protocol.requests import Delete

ALL_SERVER_KINDS = ("seaweedfs", "moto")

_ids = itertools.count()


def selected_server_kinds() -> list[str]:
    """Server kinds to test against: ``S3_SERVERS`` (comma list) or all of them."""
    raw = os.environ.get("S3_SERVERS")
    if raw is None:
        return list(ALL_SERVER_KINDS)
    kinds = [kind.strip() for kind in raw.split(",") if kind.strip()]
    if not kinds or set(kinds) - set(ALL_SERVER_KINDS):
        raise pytest.UsageError(f"S3_SERVERS={raw!r}: expected a comma list of {ALL_SERVER_KINDS}")
    return kinds


def requires_server(kind: str) -> pytest.MarkDecorator:
    """Skip a test that starts its own ``kind`` server when ``S3_SERVERS`` excludes it."""
    return pytest.mark.skipif(kind not in selected_server_kinds(), reason=f"{kind} not selected by S3_SERVERS")


class RequestCounter:
    """Counts S3 requests a boto3 client sends, by operation name, using botocore event hooks.

    ``counts`` is fed by ``before-send``, which fires once per HTTP attempt (retries included);
    ``calls`` is fed by ``before-call``, which fires once per API call.  Both are keyed by
    operation name (``"PutObject"``, ``"GetObject"``, ``"ListObjectsV2"``, ...).  Thread-safe:
    the saver sends requests from a thread pool.
    """

    def __init__(self, client: Any) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._events = client.meta.events
        uid = next(_ids)
        self._hooks = (
            ("before-send.s3", self._on_send, f"request-counter-send-{uid}"),
            ("before-call.s3", self._on_call, f"request-counter-call-{uid}"),
        )
        for event, handler, unique_id in self._hooks:
            self._events.register(event, handler, unique_id=unique_id)

    def _on_send(self, event_name: str, **kwargs: Any) -> None:
        # event_name is "before-send.s3.<OperationName>"
        operation = event_name.rsplit(".", 1)[-1]
        with self._lock:
            self.counts[operation] += 1

    def _on_call(self, model: Any, **kwargs: Any) -> None:
        with self._lock:
            self.calls[model.name] += 1

    def total(self) -> int:
        """Number of HTTP requests sent (all operations, retries included)."""
        with self._lock:
            return sum(self.counts.values())

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()
            self.calls.clear()

    def snapshot(self) -> dict[str, int]:
        """HTTP requests per operation so far, as a plain dict."""
        with self._lock:
            return dict(self.counts)

    def detach(self) -> None:
        """Stop counting; the counts stay readable.  Safe to call more than once."""
        for event, _handler, unique_id in self._hooks:
            self._events.unregister(event, unique_id=unique_id)


def cfg(thread_id: str, checkpoint_ns: str = "", checkpoint_id: str | None = None) -> dict[str, Any]:
    """A LangGraph config for a thread (and namespace, and checkpoint when given)."""
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def client_options(server: Any, endpoint_url: str | None = None) -> dict[str, Any]:
    """boto3 client settings for a local server (``endpoint_url`` overrides, e.g. a proxy in front of it)."""
    return {
        "endpoint_url": endpoint_url or server.endpoint_url,
        "region_name": server.region,
        "aws_access_key_id": server.access_key,
        "aws_secret_access_key": server.secret_key,
    }


def is_record_key(key: str) -> bool:
    """Whether a listed key is a checkpoint record (``.../c/{R}~/checkpoint``)."""
    return key.endswith("~/checkpoint")


def checkpoint_id_of(key: str) -> str:
    """The checkpoint id of a record or writes key."""
    from langgraph_s3_checkpoint._protocol.keys import revert_id

    parts = key.split("/")
    return revert_id(parts[parts.index("c") + 1])


def lose_first_answer(saver: Any, matches: Callable[[Any], bool]) -> list[str]:
    """Make the first request ``matches`` accepts land on the server but lose its answer: the saver sees the
    reply of a retry, which a conditional PUT that landed gets refused. Returns the keys it happened to
    (empty if it never did), for the test to assert on."""
    shell = saver.bucket_io
    original = shell._send
    lost: list[str] = []

    def send(request: Any, *deadline: Any) -> Any:
        reply = original(request, *deadline)
        if not lost and matches(request):
            lost.append(request.key)
            return original(request, *deadline)  # the retry, as S3 answers it after the first attempt landed
        return reply

    shell._send = send
    return lost


class Crash(Exception):
    """Where a test stops a plan, as a killed process would (raised by :func:`crash_at`)."""


def crash_at(saver: Any, matches: Callable[[Any], bool]) -> None:
    """Make the saver's first request that ``matches`` accepts raise :class:`Crash` instead of being sent:
    the plan stops there, with every earlier request applied, as when its process is killed."""
    shell = saver.bucket_io
    original = shell._send

    def send(request: Any, *deadline: Any) -> Any:
        if matches(request):
            raise Crash(request)
        return original(request, *deadline)

    shell._send = send


def deletes_records(request: Any) -> bool:
    """Whether a request deletes checkpoint records (``.../c/...``): where a test stops a delete or a rollback
    that has already removed the heads (with :func:`crash_at`)."""
    return isinstance(request, Delete) and any("/c/" in key for key in request.keys)


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts connections and never answers; yields its port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                accepted.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()


class GrowingState(TypedDict):
    n: int
    log: Annotated[list[str], operator.add]


def growing_graph(saver: Any) -> Any:
    """Five supersteps whose log grows by 2 KB each: it is stored as its own object after a few steps."""
    from langgraph.graph import END, START, StateGraph

    def step(state: GrowingState) -> dict[str, Any]:
        return {"n": state["n"] + 1, "log": [f"step {state['n']} " + "x" * 2000]}

    builder = StateGraph(GrowingState)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: "step" if s["n"] < 5 else END)
    return builder.compile(checkpointer=saver)
