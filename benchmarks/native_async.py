"""AsyncS3Saver(transport="direct"): client CPU per checkpoint, requests sent from the event loop (native)
against the previous thread hop (the blocking sender on the saver's thread pool), 50 threads x 10 one-node supersteps
run concurrently and the same 500 sequentially.

    python benchmarks/native_async.py [--rtt-ms 20] [--repeats 3]

Starts a local SeaweedFS; with --rtt-ms, requests go through benchmarks/latencyproxy.py running in a child
process (so its CPU is not counted). Prints one line per (mode, schedule): client CPU ms per checkpoint
(time.process_time of this process / checkpoints stored) and wall time per step."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from langgraph_s3_checkpoint import AsyncS3Saver, local, make_client

THREADS, STEPS = 50, 10


class State(TypedDict):
    n: int


class CountingSaver(AsyncS3Saver):
    checkpoints = 0

    async def aput(self, *args: Any, **kwargs: Any) -> Any:
        type(self).checkpoints += 1
        return await super().aput(*args, **kwargs)


def graph(saver: AsyncS3Saver) -> Any:
    builder = StateGraph(State)
    builder.add_node("step", lambda s: {"n": s["n"] + 1})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=saver)


async def run(saver: AsyncS3Saver, concurrent: bool, tag: str) -> tuple[float, float]:
    g = graph(saver)

    async def thread(i: int) -> None:
        config = {"configurable": {"thread_id": f"{tag}-{i}"}}
        for n in range(STEPS):
            await g.ainvoke({"n": n}, config, durability="sync")

    await thread(-1)  # warm up: connections, imports
    CountingSaver.checkpoints = 0
    cpu, wall = time.process_time(), time.perf_counter()
    if concurrent:
        await asyncio.gather(*(thread(i) for i in range(THREADS)))
    else:
        for i in range(THREADS):
            await thread(i)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu / CountingSaver.checkpoints * 1e3, wall / (THREADS * STEPS) * 1e3


def latency_proxy(port: int, rtt_ms: float) -> tuple[subprocess.Popen[str], str]:
    code = (
        f"import sys, time; sys.path.insert(0, {str(Path(__file__).parent)!r}); from latencyproxy import LatencyProxy;"
        f"p = LatencyProxy('127.0.0.1', {port}, one_way_ms={rtt_ms / 2}); print(p.url, flush=True); sys.stdin.read()"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rtt-ms", type=float, default=0.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    server = local.start("seaweedfs")
    proxy = None
    try:
        server.create_bucket("bench")
        endpoint = server.endpoint_url
        if args.rtt_ms:
            proxy, endpoint = latency_proxy(int(endpoint.rsplit(":", 1)[1]), args.rtt_ms)
        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for repeat in range(args.repeats):
            for mode in ("thread-hop", "native"):
                for schedule in ("sequential", "concurrent"):
                    client = make_client(
                        endpoint_url=endpoint,
                        region_name=server.region,
                        aws_access_key_id=server.access_key,
                        aws_secret_access_key=server.secret_key,
                    )
                    saver = CountingSaver(bucket="bench", prefix=f"native/{repeat}", client=client, transport="direct")
                    if mode == "thread-hop":
                        saver.bucket_io.native = None  # the async driver's previous path
                    try:
                        measured = asyncio.run(run(saver, schedule == "concurrent", f"{mode}-{schedule}"))
                        results.setdefault((mode, schedule), []).append(measured)
                    finally:
                        saver.close()
        print(f"rtt {args.rtt_ms:g} ms, {THREADS} threads x {STEPS} steps, median of {args.repeats}")
        for (mode, schedule), values in results.items():
            cpu = statistics.median(v[0] for v in values)
            wall = statistics.median(v[1] for v in values)
            print(f"{mode:10s} {schedule:10s} client CPU {cpu:.2f} ms/checkpoint, wall {wall:.2f} ms/step")
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait()
        server.stop()


if __name__ == "__main__":
    main()
