"""Benchmark worker: runs the workloads against ONE saver and writes JSON results.

Runs in a subprocess so that each saver gets a clean interpreter (memory figures are not polluted by
another saver's caches) and so that peers whose dependencies conflict with ours (``boto3`` pins)
can run from their own virtualenv.  Only the standard library, ``langgraph`` and the saver's own
dependencies are imported here; our package is imported only when the saver is ours.

Invoked by ``run.py`` as ``python worker.py SPEC.json OUT.json``.  Results are rewritten to OUT
after every workload, so a worker killed on timeout still leaves what it measured.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import cProfile
import functools
import io
import json
import operator
import os
import pstats
import sqlite3
import statistics
import sys
import threading
import time
import traceback
import tracemalloc
import uuid
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.graph import END, START, StateGraph

# ---------------------------------------------------------------------------------------------
# request counting


def op_kind(operation: str) -> str:
    if operation in ("PutObject", "CopyObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload"):
        return "PUT"
    if operation == "GetObject":
        return "GET"
    if operation in ("ListObjectsV2", "ListObjects"):
        return "LIST"
    if operation in ("HeadObject", "HeadBucket"):
        return "HEAD"
    if operation in ("DeleteObject", "DeleteObjects"):
        return "DELETE"
    return "OTHER"


def _operation(request: Any) -> str:
    """The S3 call one of our requests is, to count it as boto3's hooks would (imported here: the peers' venvs,
    which run this file too, do not have the package)."""
    from langgraph_s3_checkpoint._protocol.requests import request_kind

    return request_kind(request).operation


class Counter:
    """Counts S3 requests by kind and the number of sequential "waves".

    A wave starts whenever a request is issued while none is in flight, so requests sent in
    parallel count once: the wave count approximates the round trips on the critical path.
    """

    def __init__(self) -> None:
        self.kinds: collections.Counter[str] = collections.Counter()
        self.waves = 0
        self._in_flight = 0
        self._lock = threading.Lock()

    def start(self, operation: str) -> None:
        with self._lock:
            self.kinds[op_kind(operation)] += 1
            if self._in_flight == 0:
                self.waves += 1
            self._in_flight += 1

    def end(self) -> None:
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)

    def reset(self) -> None:
        with self._lock:
            self.kinds.clear()
            self.waves = 0

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            out = {k: self.kinds.get(k, 0) for k in ("PUT", "GET", "LIST", "HEAD", "DELETE", "OTHER")}
            out["total"] = sum(self.kinds.values())
            out["waves"] = self.waves
            return out

    def attach_boto3(self, client: Any) -> None:
        """Count with botocore event hooks on a boto3 client (one event per API call)."""
        events = client.meta.events
        events.register("before-call.s3", lambda model, **_: self.start(model.name), unique_id="bench-start")
        events.register("after-call.s3", lambda **_: self.end(), unique_id="bench-end")
        events.register("after-call-error.s3", lambda **_: self.end(), unique_id="bench-end-error")

    def attach_saver(self, saver: Any) -> None:
        """Count every request of one of our savers, whichever transport sends it, without botocore hooks on
        its client: with the default transport a hook would make the saver send through boto3 (``watch.py``)."""
        io = saver.bucket_io
        if io.direct is not None:
            self.attach_direct(io.direct)
        if io.native is not None:
            self.attach_native(io.native)
        io._send_through_boto3 = self._counted(io._send_through_boto3)

    def attach_direct(self, transport: Any) -> None:
        """Count the requests our direct transport sends itself (the rest still go through boto3)."""
        transport.execute = self._counted(transport.execute)

    def _counted(self, send: Callable[..., Any]) -> Callable[..., Any]:
        """``send`` (one of our request senders), counting each request it sends."""

        def counted(request: Any, *deadline: Any) -> Any:
            self.start(_operation(request))
            try:
                return send(request, *deadline)
            finally:
                self.end()

        return counted

    def attach_native(self, transport: Any) -> None:
        """Count the requests the async saver's native sender sends from the event loop."""
        original = transport.execute

        async def counted(request: Any, *deadline: Any) -> Any:
            self.start(_operation(request))
            try:
                return await original(request, *deadline)
            finally:
                self.end()

        transport.execute = counted

    def attach_aiobotocore(self) -> None:
        """Count every aiobotocore API call in this process (s3fs creates its own clients)."""
        from aiobotocore.client import AioBaseClient

        original = AioBaseClient._make_api_call
        counter = self

        async def counted(client: Any, operation_name: str, api_params: Any) -> Any:
            counter.start(operation_name)
            try:
                return await original(client, operation_name, api_params)
            finally:
                counter.end()

        AioBaseClient._make_api_call = counted  # type: ignore[method-assign]


# ---------------------------------------------------------------------------------------------
# graphs


class LoopState(TypedDict):
    step: int
    data: str
    fan: Annotated[list[str], operator.add]


def build_loop_graph(steps: int, fan_at: int) -> StateGraph:
    """One node per superstep via a conditional self-loop; at ``fan_at`` one superstep of 4 parallel nodes."""

    def work(state: LoopState) -> dict[str, Any]:
        return {"step": state["step"] + 1, "data": f"payload-{state['step']:05d}-" + "x" * 64}

    def route(state: LoopState) -> Any:
        if state["step"] >= steps - 1:  # work ran steps-1 times + one fan-out superstep = steps supersteps
            return END
        if state["step"] == fan_at:
            return ["a", "b", "c", "d"]
        return "work"

    def leaf(name: str) -> Callable[[LoopState], dict[str, Any]]:
        return lambda state: {"fan": [f"{name}-{state['step']}"]}

    g = StateGraph(LoopState)
    g.add_node("work", work)
    for name in "abcd":
        g.add_node(name, leaf(name))
        g.add_edge(name, "work")
    g.add_edge(START, "work")
    g.add_conditional_edges("work", route, ["work", "a", "b", "c", "d", END])
    return g


def build_chat_graph(delta: bool) -> StateGraph:
    from langchain_core.messages import AIMessage
    from langgraph.graph.message import add_messages

    if delta:
        from langgraph.channels.delta import DeltaChannel

        def add_batch(state: Any, writes: Sequence[Any]) -> Any:
            return functools.reduce(add_messages, writes, state if state is not None else [])

        # Functional TypedDict form: the annotation must be evaluated here, not as a postponed string.
        chat_state: Any = TypedDict("ChatState", {"messages": Annotated[list, DeltaChannel(add_batch)]})
    else:
        chat_state = TypedDict("ChatState", {"messages": Annotated[list, add_messages]})  # noqa: UP013 (as above)

    def reply(state: Any) -> dict[str, Any]:
        n = len(state["messages"])
        text = f"reply {n}: " + ("lorem ipsum dolor sit amet " * 8)
        return {"messages": [AIMessage(content=text, id=f"ai-{n}")]}

    g = StateGraph(chat_state)
    g.add_node("reply", reply)
    g.add_edge(START, "reply")
    g.add_edge("reply", END)
    return g


# ---------------------------------------------------------------------------------------------
# savers


OURS = ("ours", "ours-async", "ours-direct", "ours-async-direct")


class Bench:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.name: str = spec["saver"]
        self.is_async = self.name.startswith("ours-async")
        self.counter: Counter | None = None
        self._closers: list[Callable[[], None]] = []
        self.prefixes: list[str] = []  # S3 prefixes written, for the storage measurement
        self._loop: asyncio.AbstractEventLoop | None = None
        if self.is_async:
            self._loop = asyncio.new_event_loop()

    def run(self, coro: Any) -> Any:
        assert self._loop is not None
        return self._loop.run_until_complete(coro)

    def boto3_client(self) -> Any:
        import boto3
        from botocore.config import Config

        s3 = self.spec["s3"]
        return boto3.session.Session().client(
            "s3",
            endpoint_url=s3["endpoint_url"],
            aws_access_key_id=s3["access_key"],
            aws_secret_access_key=s3["secret_key"],
            region_name=s3["region"],
            config=Config(s3={"addressing_style": "path"}, max_pool_connections=64, retries={"max_attempts": 3}),
        )

    def make(self, tag: str) -> BaseCheckpointSaver[Any]:
        """A saver isolated under a fresh prefix / database namespace for workload ``tag``."""
        prefix = f"bench/{self.name}/{tag}-{uuid.uuid4().hex[:8]}"
        bucket = self.spec.get("s3", {}).get("bucket", "")
        if self.name in OURS:
            from langgraph_s3_checkpoint import AsyncS3Saver, S3Saver

            # "-direct": the default transport ("auto"), which sends directly while no hook watches the client,
            # so it is counted in the saver's own senders; the others: transport="boto3", counted by hooks.
            client = self.boto3_client()
            self.counter = Counter()
            cls = AsyncS3Saver if self.is_async else S3Saver
            if self.name.endswith("-direct"):
                saver: Any = cls(bucket=bucket, prefix=prefix, client=client)
                self.counter.attach_saver(saver)
            else:
                saver = cls(bucket=bucket, prefix=prefix, client=client, transport="boto3")
                self.counter.attach_boto3(client)
            if self.is_async:
                self.run(saver.setup())
            else:
                saver.setup()
            self.prefixes.append(prefix)
            return saver
        if self.name == "tigris":
            from langgraph.checkpoint.tigris import TigrisSaver

            client = self.boto3_client()
            self.counter = Counter()
            self.counter.attach_boto3(client)
            saver = TigrisSaver(bucket, client=client, prefix=prefix + "/")
            saver.setup()
            self.prefixes.append(prefix)
            return saver
        if self.name == "objectstorage":
            import s3fs
            from langgraph_checkpoint_objectstorage import ObjectStorageSaver

            if self.counter is None:
                self.counter = Counter()
                self.counter.attach_aiobotocore()
            s3 = self.spec["s3"]
            fs = s3fs.S3FileSystem(
                key=s3["access_key"],
                secret=s3["secret_key"],
                client_kwargs={"endpoint_url": s3["endpoint_url"], "region_name": s3["region"]},
                skip_instance_cache=True,
            )
            self.prefixes.append(prefix)
            return ObjectStorageSaver(fs, f"{bucket}/{prefix}")
        self.counter = None
        if self.name == "postgres":
            from langgraph.checkpoint.postgres import PostgresSaver

            cm = PostgresSaver.from_conn_string(self.spec["postgres_dsn"])
            saver = cm.__enter__()
            saver.setup()
            self._closers.append(lambda: cm.__exit__(None, None, None))
            return saver
        if self.name == "sqlite":
            from langgraph.checkpoint.sqlite import SqliteSaver

            path = os.path.join(self.spec["tmp_dir"], f"{tag}-{uuid.uuid4().hex[:8]}.sqlite")
            conn = sqlite3.connect(path, check_same_thread=False)
            self._closers.append(conn.close)
            saver = SqliteSaver(conn)
            saver.setup()
            return saver
        if self.name == "inmemory":
            from langgraph.checkpoint.memory import InMemorySaver

            return InMemorySaver()
        raise ValueError(f"unknown saver {self.name}")

    def counts(self) -> dict[str, int] | None:
        return self.counter.snapshot() if self.counter is not None else None

    def reset(self) -> None:
        if self.counter is not None:
            self.counter.reset()

    def close(self) -> None:
        for close in reversed(self._closers):
            with contextlib.suppress(Exception):
                close()
        if self._loop is not None:
            self._loop.close()

    # graph calls, sync or async ------------------------------------------------------------
    def invoke(self, graph: Any, inp: Any, config: dict[str, Any], **kw: Any) -> Any:
        if self.is_async:
            return self.run(graph.ainvoke(inp, config, **kw))
        return graph.invoke(inp, config, **kw)

    def get_state(self, graph: Any, config: dict[str, Any]) -> Any:
        if self.is_async:
            return self.run(graph.aget_state(config))
        return graph.get_state(config)

    def history_page(self, graph: Any, config: dict[str, Any], limit: int) -> list[Any]:
        if self.is_async:

            async def collect() -> list[Any]:
                return [s async for s in graph.aget_state_history(config, limit=limit)]

            return self.run(collect())
        return list(graph.get_state_history(config, limit=limit))

    def list(self, saver: Any, config: dict[str, Any], limit: int | None) -> int:
        if self.is_async:

            async def count() -> int:
                n = 0
                async for _ in saver.alist(config, limit=limit):
                    n += 1
                return n

            return self.run(count())
        n = 0
        for _ in saver.list(config, limit=limit):
            n += 1
        return n

    def put(self, saver: Any, *args: Any) -> Any:
        if self.is_async:
            return self.run(saver.aput(*args))
        return saver.put(*args)


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def per(counts: dict[str, int] | None, n: float) -> dict[str, float] | None:
    return None if counts is None else {k: v / n for k, v in counts.items()}


# ---------------------------------------------------------------------------------------------
# workloads


def w_supersteps(b: Bench, p: dict[str, Any]) -> dict[str, Any]:
    steps, repeats = p["steps"], p["repeats"]
    out: dict[str, Any] = {"steps": steps}
    for mode in ("sync", "async", "exit"):
        saver = b.make(f"steps-{mode}")
        graph = build_loop_graph(steps, fan_at=steps // 2).compile(checkpointer=saver)
        times: list[float] = []
        counts: list[dict[str, int] | None] = []
        for r in range(repeats + 1):  # first run warms connections and imports; not recorded
            config = {"configurable": {"thread_id": f"t-{mode}-{r}"}, "recursion_limit": steps * 3}
            b.reset()
            t = timed(
                lambda graph=graph, config=config, mode=mode: b.invoke(
                    graph, {"step": 0, "data": "", "fan": []}, config, durability=mode
                )
            )
            if r or t > p.get("slow_s", 15):
                times.append(t)
                counts.append(b.counts())
            if r == 0 and t > p.get("slow_s", 15):
                break  # a slow saver gets one (cold) sample so the run stays within its time budget
        out[mode] = {
            "per_step_ms": statistics.median(times) / steps * 1000,
            "total_s": statistics.median(times),
            "requests_per_step": per(counts[len(counts) // 2], steps),
            "one_node_step": one_node_step_requests(b, steps, mode),
            "samples": len(times),
        }
        write_partial(b, "supersteps", {**out, "running": True})
    if p.get("profile"):
        saver = b.make("steps-profile")
        graph = build_loop_graph(steps, fan_at=steps // 2).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "t-prof"}, "recursion_limit": steps * 3}
        prof = cProfile.Profile()
        prof.enable()
        b.invoke(graph, {"step": 0, "data": "", "fan": []}, config, durability="sync")
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(18)
        out["profile_tottime"] = buf.getvalue()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(25)
        out["profile_cumulative"] = buf.getvalue()
    return out


def one_node_step_requests(b: Bench, steps: int, mode: str) -> dict[str, int] | None:
    """Requests of one more one-node superstep: a run of ``steps + 1`` steps minus a run of ``steps``."""
    if b.counter is None:
        return None
    totals = []
    for n in (steps, steps + 1):
        graph = build_loop_graph(n, fan_at=steps // 2).compile(checkpointer=b.make(f"marginal-{mode}-{n}"))
        b.reset()
        config = {"configurable": {"thread_id": f"marginal-{n}"}, "recursion_limit": n * 3}
        b.invoke(graph, {"step": 0, "data": "", "fan": []}, config, durability=mode)
        totals.append(b.counts() or {})
    return {k: totals[1][k] - totals[0].get(k, 0) for k in totals[1]}


def grow_thread(b: Bench, saver: Any, thread: str, start: int, stop: int, parent: str | None) -> str | None:
    """Append checkpoints ``start..stop-1`` to ``thread`` with direct ``put`` calls; returns the last config id."""
    from langgraph.checkpoint.base.id import uuid6

    version: Any = None
    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent
    for i in range(start, stop):
        cp = empty_checkpoint()
        cp["id"] = str(uuid6(clock_seq=i))
        version = saver.get_next_version(version, None)
        cp["channel_values"] = {"step": i, "data": f"payload-{i:05d}-" + "x" * 64, "fan": []}
        cp["channel_versions"] = {"step": version, "data": version, "fan": version}
        new_versions = {"step": version, "data": version} if i else dict(cp["channel_versions"])
        stored = b.put(saver, config, cp, {"source": "loop", "step": i, "parents": {}}, new_versions)
        config = stored
    return config["configurable"].get("checkpoint_id")


def w_history(b: Bench, p: dict[str, Any]) -> dict[str, Any]:
    """Resume cost (get_state) at growing history lengths, list/history pages and list() memory at the end."""
    sizes: list[int] = p["sizes"]
    repeats = p["repeats"]
    saver = b.make("history")
    graph = build_loop_graph(10**9, fan_at=-1).compile(checkpointer=saver)
    thread = "long"
    config = {"configurable": {"thread_id": thread}}
    out: dict[str, Any] = {"get_state": {}, "build_s": {}, "list_memory": {}}
    have, last = 0, None
    for size in sizes:
        t0 = time.perf_counter()
        last = grow_thread(b, saver, thread, have, size, last)
        out["build_s"][str(size)] = time.perf_counter() - t0
        have = size
        b.get_state(graph, config)  # warm
        lat, counts = [], None
        for _ in range(repeats):
            b.reset()
            lat.append(timed(lambda: b.get_state(graph, config)))
            counts = b.counts()
        state = b.get_state(graph, config)
        assert state.values["step"] == size - 1, state.values
        out["get_state"][str(size)] = {"ms": statistics.median(lat) * 1000, "requests": counts}
        if size in p["memory_sizes"]:
            out["list_memory"][str(size)] = list_memory(b, saver, config, size)
        write_partial(b, "history", out)
    # pages at the longest history
    lat, counts = [], None
    for _ in range(repeats):
        b.reset()
        lat.append(timed(lambda: b.list(saver, config, 10)))
        counts = b.counts()
    out["list10"] = {"size": have, "ms": statistics.median(lat) * 1000, "requests": counts}
    lat, counts = [], None
    for _ in range(repeats):
        b.reset()
        lat.append(timed(lambda: b.history_page(graph, config, 10)))
        counts = b.counts()
    out["history10"] = {"size": have, "ms": statistics.median(lat) * 1000, "requests": counts}
    return out


def list_memory(b: Bench, saver: Any, config: dict[str, Any], size: int) -> dict[str, Any]:
    tracemalloc.start()
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    t0 = time.perf_counter()
    n = b.list(saver, config, None)
    elapsed = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"peak_kib": (peak - base) / 1024, "items": n, "s": elapsed}


def w_storage(b: Bench, p: dict[str, Any]) -> dict[str, Any]:
    from langchain_core.messages import HumanMessage

    out: dict[str, Any] = {"turns": p["turns"]}
    for delta in (False, True):
        key = "delta" if delta else "plain"
        try:
            saver = b.make(f"chat-{key}")
            graph = build_chat_graph(delta).compile(checkpointer=saver)
            thread = f"chat-{key}"
            config = {"configurable": {"thread_id": thread}}
            t0 = time.perf_counter()
            for turn in range(p["turns"]):
                msg = HumanMessage(content=f"question {turn}: " + ("what about the weather " * 6), id=f"h-{turn}")
                b.invoke(graph, {"messages": [msg]}, config)
            elapsed = time.perf_counter() - t0
            n_messages = len(b.get_state(graph, config).values["messages"])
            assert n_messages == 2 * p["turns"], n_messages
            out[key] = {
                "s": elapsed,
                "messages": n_messages,
                "prefix": b.prefixes[-1] if b.prefixes and b.name not in ("postgres", "sqlite", "inmemory") else None,
                "bytes": safe_local_bytes(b, saver, thread),
            }
        except Exception as exc:  # DeltaChannel support differs between savers
            out[key] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
        write_partial(b, "storage", out)
    return out


def safe_local_bytes(b: Bench, saver: Any, thread: str) -> int | None:
    try:
        return local_bytes(b, saver, thread)
    except Exception:
        return None


def local_bytes(b: Bench, saver: Any, thread: str) -> int | None:
    """Bytes a non-S3 saver holds for ``thread`` (S3 prefixes are measured by run.py)."""
    if b.name == "postgres":
        total = 0
        with saver.conn.cursor() as cur:
            for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
                cur.execute(
                    f"select coalesce(sum(pg_column_size(t.*)), 0) from {table} t where thread_id = %s", (thread,)
                )
                row = cur.fetchone()
                total += int(row["coalesce"] if isinstance(row, dict) else row[0])
        return total
    if b.name == "sqlite":
        cur = saver.conn.cursor()
        a = cur.execute(
            "select coalesce(sum(length(checkpoint) + length(metadata)), 0) from checkpoints where thread_id = ?",
            (thread,),
        ).fetchone()[0]
        w = cur.execute("select coalesce(sum(length(value)), 0) from writes where thread_id = ?", (thread,)).fetchone()[
            0
        ]
        return int(a) + int(w)
    if b.name == "inmemory":
        total = 0
        for ns in saver.storage.get(thread, {}).values():
            for cp, meta, _parent in ns.values():
                total += len(cp[1]) + len(meta[1]) if isinstance(meta, tuple) else len(cp[1])
        for (tid, *_rest), v in saver.blobs.items():
            if tid == thread:
                total += len(v[1])
        for (tid, *_rest), writes in saver.writes.items():
            if tid == thread:
                total += sum(len(w[2][1]) for w in writes.values())
        return total
    return None


def w_throughput(b: Bench, p: dict[str, Any]) -> dict[str, Any]:
    assert b.is_async
    threads, steps = p["threads"], p["steps"]
    saver = b.make("throughput")
    graph = build_loop_graph(steps, fan_at=-1).compile(checkpointer=saver)

    def cfg(tag: str, i: int) -> dict[str, Any]:
        return {"configurable": {"thread_id": f"{tag}-{i}"}, "recursion_limit": steps * 3}

    inp = {"step": 0, "data": "", "fan": []}
    b.run(graph.ainvoke(inp, cfg("warm", 0)))

    async def sequential() -> None:
        for i in range(threads):
            await graph.ainvoke(inp, cfg("seq", i))

    async def concurrent() -> None:
        await asyncio.gather(*(graph.ainvoke(inp, cfg("con", i)) for i in range(threads)))

    server_pid = b.spec.get("s3", {}).get("server_pid")
    cpu: dict[str, dict[str, float]] = {}

    def measured(name: str, run: Callable[[], Any]) -> float:
        client0, server0 = time.process_time(), process_cpu_s(server_pid)
        elapsed = timed(run)
        cpu[name] = {"client_s": time.process_time() - client0, "server_s": process_cpu_s(server_pid) - server0}
        return elapsed

    seq = measured("sequential", lambda: b.run(sequential()))
    con = measured("concurrent", lambda: b.run(concurrent()))
    total_steps = threads * steps
    # CPU per step, in this process and in the S3 server, which share the machine's cores: the rate that
    # no amount of overlap can exceed is cores / (CPU per step), and the client part runs under one GIL.
    per_step = {k: v / total_steps * 1000 for k, v in cpu["concurrent"].items()}
    cores = os.cpu_count() or 1
    ceiling = min(cores / ((per_step["client_s"] + per_step["server_s"]) / 1000), 1000 / per_step["client_s"])
    return {
        "threads": threads,
        "steps": steps,
        "sequential_s": seq,
        "concurrent_s": con,
        "sequential_steps_per_s": total_steps / seq,
        "concurrent_steps_per_s": total_steps / con,
        "speedup": seq / con,
        "cpu_ms_per_step": {"client": per_step["client_s"], "server": per_step["server_s"]},
        "cpu_ceiling_steps_per_s": ceiling,
        "cpu_ceiling_speedup": ceiling / (total_steps / seq),
    }


def process_cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a process and its children so far (Linux /proc); 0 if unknown."""
    if pid is None:
        return 0.0
    pids = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            pids += [int(c) for c in f.read().split()]
        total = 0
        for p in pids:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    except OSError:
        return 0.0
    return total / os.sysconf("SC_CLK_TCK")


WORKLOADS: dict[str, Callable[[Bench, dict[str, Any]], dict[str, Any]]] = {
    "supersteps": w_supersteps,
    "history": w_history,
    "storage": w_storage,
    "throughput": w_throughput,
}

_results: dict[str, Any] = {}
_out_path = ""


def write_partial(b: Bench, name: str, data: dict[str, Any]) -> None:
    _results.setdefault("workloads", {})[name] = data
    _results["prefixes"] = b.prefixes
    with open(_out_path + ".tmp", "w") as f:
        json.dump(_results, f, indent=1)
    os.replace(_out_path + ".tmp", _out_path)


def main() -> None:
    global _out_path
    with open(sys.argv[1]) as spec_file:
        spec = json.load(spec_file)
    _out_path = sys.argv[2]
    _results.update({"saver": spec["saver"], "python": sys.version.split()[0], "workloads": {}, "errors": {}})
    b = Bench(spec)
    try:
        for name, params in spec["workloads"].items():
            try:
                write_partial(b, name, {"running": True})
                write_partial(b, name, WORKLOADS[name](b, params))
            except Exception as exc:
                _results["workloads"].pop(name, None)
                _results["errors"][name] = f"{type(exc).__name__}: {exc}"[:600]
                _results.setdefault("tracebacks", {})[name] = traceback.format_exc()[-3000:]
                write_partial(b, "_", {})
                _results["workloads"].pop("_", None)
    finally:
        b.close()
        with open(_out_path, "w") as f:
            json.dump(_results, f, indent=1)


if __name__ == "__main__":
    main()
