"""ThreadEdits and listing at scale: what grows with the work and what grows with the bucket.

    python benchmarks/scale.py --sizes 1000,10000             # develop: a few minutes
    python benchmarks/scale.py --sizes 1000,10000,100000      # the full run (about 75 minutes on 2 cores)

On a throwaway local SeaweedFS (``local.start_seaweedfs``), for each size N on a fresh prefix:

* **load**: N threads, one chat turn each (a LangGraph graph: input, one node, ``add_messages``), written by
  ``--workers`` (4) processes, each running ``--concurrency`` (50) threads at once through ``AsyncS3Saver``;
* **list(None)**: every checkpoint of every thread, in a child process (wall time, requests, and how far its
  resident memory rises while listing: the listing streams, so that should not grow with N);
* **langgraph-s3 threads**: the CLI's statistics of every thread (its own plan, run in this process);
* **expire_threads(30 days)**: nothing is that old, so this is what the daily sweep costs when it finds nothing;
* **gc**, twice, with ``grace_seconds=0`` (so the first gc seals what was just written; with the default hour it
  seals records an hour old): the first reads every record once, the second only what changed (nothing);
* **store sweep** over N items put by ``S3Store`` (after ``setup``, so the store is filed), 1% of them with a
  TTL that has passed: the sweep, a sweep with nothing due, and ``sweep_ttl(full=True)`` (what every sweep
  cost before expiry markers: it reads every item).

Every operation reports its requests (counted in the saver's own senders, whichever transport sends them)
and its wall time; the report gives how each grows from one size to the next (the exponent of N: 1 is
linear, 0 is flat) and a log-log plot.

Before the sizes, a throughput run: ``--workers`` processes x ``--concurrency`` threads x ``--steps`` one-node
supersteps (``durability="sync"``) with AsyncS3Saver, against the machine's floor measured the same way in the
same run: LangGraph with a checkpointer that serializes nothing, plus the three conditional PUTs a superstep sends
(record and head together, the node's writes) sent bare by the same HTTP sender; and LangGraph alone with that
checkpointer. Ours and the floor run in ``--rounds`` paired rounds after an unmeasured one (see
:func:`throughput`). Writes ``results/scale.json``, ``results/scale.md`` and ``results/scale.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing as mp
import os
import platform
import resource
import statistics
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

BUCKET = "lgs3-scale"
SWEEP_EXPIRED_SHARE = 0.01
STORE_BATCH = 200


# ---------------------------------------------------------------------------------------------
# graphs


class Chat(TypedDict):
    messages: Annotated[list[Any], add_messages]


def chat_graph() -> Any:
    """One chat turn: the user's message in, one reply out (two checkpoints and the node's writes)."""

    def reply(state: Chat) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"Noted ({len(state['messages'])} messages so far). " + "x" * 200)]}

    g = StateGraph(Chat)
    g.add_node("reply", reply)
    g.add_edge(START, "reply")
    g.add_edge("reply", END)
    return g


def loop_graph(steps: int) -> Any:
    from latency import loop_graph as latency_loop_graph

    return latency_loop_graph(steps)


# ---------------------------------------------------------------------------------------------
# worker processes


def _client_options(s3: dict[str, Any]) -> dict[str, Any]:
    """The client of every saver and store here. ``read_timeout`` 60 s (the default is 10): on the shared 2-core
    machine SeaweedFS, the 4 writers and other people's work, a request's answer was seen to stall past 10 s."""
    return {
        "endpoint_url": s3["endpoint_url"],
        "aws_access_key_id": s3["access_key"],
        "aws_secret_access_key": s3["secret_key"],
        "region_name": s3["region"],
        "read_timeout": 60,
    }


PATIENT = {"operation_timeout": 600}
"""Saver option for the same reason: a call may wait out a stalled answer (3 attempts of up to 60 s each)."""
LOAD_ATTEMPTS = 3


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _wait_until(start_at: float) -> None:
    await asyncio.sleep(max(0.0, start_at - time.time()))


def load_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """One of the processes that write the threads: one chat turn each, ``concurrency`` at a time."""
    from langgraph_s3_checkpoint import AsyncS3Saver, S3RequestError

    async def main() -> dict[str, Any]:
        saver = AsyncS3Saver(bucket=BUCKET, prefix=spec["prefix"], **_client_options(spec["s3"]), **PATIENT)
        graph = chat_graph().compile(checkpointer=saver)
        gate = asyncio.Semaphore(spec["concurrency"])
        retried = 0

        async def one(thread: str) -> None:
            nonlocal retried
            async with gate:
                for attempt in range(LOAD_ATTEMPTS):
                    try:
                        await graph.ainvoke(
                            {"messages": [("user", f"Remember that {thread} prefers short answers.")]},
                            {"configurable": {"thread_id": thread}},
                            durability="sync",
                        )
                        return
                    except S3RequestError:
                        # The server did not answer in time; the turn runs again (the thread may keep a
                        # checkpoint of the first attempt: a longer history, still one thread).
                        if attempt == LOAD_ATTEMPTS - 1:
                            raise
                        retried += 1

        await _wait_until(spec["start_at"])
        started, cpu = time.perf_counter(), _cpu()
        await asyncio.gather(*(one(t) for t in spec["threads"]))
        result = {"seconds": time.perf_counter() - started, "cpu": _cpu() - cpu, "threads": len(spec["threads"])}
        result["retried"] = retried
        saver.close()
        return result

    return asyncio.run(main())


class NullSaver(BaseCheckpointSaver[str]):
    """LangGraph's own cost: keeps each thread's latest checkpoint by reference and serializes nothing (the
    throughput threads are new, so LangGraph reads only that, at the start)."""

    def __init__(self) -> None:
        super().__init__()
        self.latest: dict[str, CheckpointTuple] = {}

    async def aget_tuple(self, config: Any) -> CheckpointTuple | None:
        return self.latest.get(config["configurable"]["thread_id"])

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        configurable = config["configurable"]
        stored = {
            "configurable": {
                "thread_id": configurable["thread_id"],
                "checkpoint_ns": configurable.get("checkpoint_ns", ""),
                "checkpoint_id": checkpoint["id"],
            }
        }
        self.latest[configurable["thread_id"]] = CheckpointTuple(stored, checkpoint, metadata, config, [])
        return stored

    async def aput_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        return None


class FloorSaver(NullSaver):
    """The floor of a superstep on this machine: LangGraph's own work (:class:`NullSaver`) plus the requests our
    saver sends for it, with the same conditions, sent bare by the same sender: per checkpoint the record
    (unconditional) and the head (``If-Match`` on its last ETag, ``If-None-Match`` for the first) together, per
    ``put_writes`` one PUT (``If-None-Match``). Nothing is serialized and nothing read."""

    BODY = b"x" * 700

    def __init__(self, io: Any, prefix: str) -> None:
        super().__init__()
        self.io = io
        self.prefix = prefix
        self.heads: dict[str, str] = {}

    @staticmethod
    def _batch(requests: list[Any]) -> Any:
        return (yield requests)

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        from langgraph_s3_checkpoint._protocol.requests import CREATE, Put, Update

        thread = config["configurable"]["thread_id"]
        head_key = f"{self.prefix}floor/{thread}/head"
        etag = self.heads.get(thread)
        head = Put(head_key, self.BODY, mode=Update(etag)) if etag else Put(head_key, self.BODY, mode=CREATE)
        record = Put(f"{self.prefix}floor/{thread}/c/{checkpoint['id']}", self.BODY)
        replies = await self.io.arun(self._batch([record, head]))
        self.heads[thread] = replies[1].etag
        return await super().aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        from langgraph_s3_checkpoint._protocol.requests import CREATE, Put

        c = config["configurable"]
        key = f"{self.prefix}floor/{c['thread_id']}/w/{c['checkpoint_id']}/{task_id}"
        await self.io.arun(self._batch([Put(key, self.BODY, mode=CREATE)]))


def throughput_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """``concurrency`` threads of ``steps`` one-node supersteps at once, with one of: ours, the floor, LangGraph
    alone."""
    from worker import Counter

    from langgraph_s3_checkpoint import AsyncS3Saver

    async def main() -> dict[str, Any]:
        holder = AsyncS3Saver(bucket=BUCKET, prefix=spec["prefix"], **_client_options(spec["s3"]))
        counter = Counter()
        counter.attach_saver(holder)
        if spec["kind"] == "ours":
            saver: Any = holder
        elif spec["kind"] == "floor":
            saver = FloorSaver(holder.bucket_io, f"{spec['prefix']}/")
        else:
            saver = NullSaver()
        graph = loop_graph(spec["steps"]).compile(checkpointer=saver)
        threads = [f"{spec['kind']}-{spec['worker']}-{i}" for i in range(spec["concurrency"])]

        async def one(thread: str) -> None:
            config = {"configurable": {"thread_id": thread}}
            await graph.ainvoke({"step": 0, "data": ""}, config, durability="sync")

        await _wait_until(spec["start_at"])
        started, cpu = time.time(), _cpu()
        await asyncio.gather(*(one(t) for t in threads))
        result = {"started": started, "ended": time.time(), "cpu": _cpu() - cpu, "pid": os.getpid()}
        result["supersteps"] = len(threads) * (spec["steps"] + 1)  # the input checkpoint, then one per step
        result["requests"] = counter.snapshot()
        holder.close()
        return result

    return asyncio.run(main())


def _rss_mb() -> float:
    """This process's resident memory now (``VmRSS``)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def list_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """``list(None)`` in a fresh process: its wall time, requests, and how far its resident memory rose above
    where it started (sampled every 500 checkpoints)."""
    from worker import Counter

    from langgraph_s3_checkpoint import S3Saver

    saver = S3Saver(bucket=BUCKET, prefix=spec["prefix"], **_client_options(spec["s3"]), **PATIENT)
    counter = Counter()
    counter.attach_saver(saver)
    rss_start = peak = _rss_mb()
    started = time.perf_counter()
    checkpoints = 0
    for _ in saver.list(None):
        checkpoints += 1
        if checkpoints % 500 == 0:
            peak = max(peak, _rss_mb())
    seconds = time.perf_counter() - started
    peak = max(peak, _rss_mb())
    saver.close()
    return {
        "seconds": seconds,
        "checkpoints": checkpoints,
        "requests": counter.snapshot(),
        "rss_start_mb": rss_start,
        "rss_growth_mb": peak - rss_start,
    }


def in_processes(function: Any, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    with mp.get_context("spawn").Pool(len(specs)) as pool:
        return pool.map(function, specs)


def _all_up(barrier: Any) -> None:
    """Pool initializer: no process takes a task before all are up, so each takes one (a task waits for its
    ``start_at``, and a process that is in one takes no other)."""
    barrier.wait()


# ---------------------------------------------------------------------------------------------
# the measurements


def measured(counter: Any, call: Any) -> dict[str, Any]:
    counter.reset()
    started = time.perf_counter()
    value = call()
    return {"seconds": round(time.perf_counter() - started, 3), "requests": counter.snapshot(), "value": value}


def throughput(s3: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Ours against the floor, in ``--rounds`` rounds that run both back to back (in turn first), after a round
    of each that is not measured; LangGraph alone once. The same ``--workers`` processes run every round.

    Why so: the server is the bottleneck of both (a PUT keeps SeaweedFS busy for milliseconds of this machine's
    two cores), so which of the two runs first on a fresh server (whose first writes allocate its volumes), the
    processes' imports and conditional-write probes, and other people's work on the cores moved a single run of
    each by more than their difference: one run of each measured the floor at 0.79 of ours. Paired rounds
    compare the two under the same load; the warm-up takes the server's and the processes' first-time costs out."""
    context = mp.get_context("spawn")
    with context.Pool(args.workers, initializer=_all_up, initargs=(context.Barrier(args.workers),)) as pool:

        def run(kind: str) -> dict[str, Any]:
            prefix = f"tp/{kind}/{uuid.uuid4().hex[:8]}"
            start_at = time.time() + 2  # every process is up (_all_up) and idle: each takes its task at once
            specs = [
                {"s3": s3, "prefix": prefix, "kind": kind, "worker": w, "concurrency": args.concurrency}
                | {"steps": args.steps, "start_at": start_at}
                for w in range(args.workers)
            ]
            results = pool.map(throughput_worker, specs, chunksize=1)
            assert len({r["pid"] for r in results}) == args.workers, "a process ran two workers' threads in turn"
            supersteps = sum(r["supersteps"] for r in results)
            seconds = max(r["ended"] for r in results) - min(r["started"] for r in results)
            requests = {k: sum(r["requests"][k] for r in results) for k in ("PUT", "GET", "LIST", "DELETE", "total")}
            return {
                "per_second": round(supersteps / seconds, 1),
                "seconds": round(seconds, 3),
                "supersteps": supersteps,
                "client_cpu_ms_per_superstep": round(1000 * sum(r["cpu"] for r in results) / supersteps, 3),
                "requests_per_superstep": {k: round(v / supersteps, 3) for k, v in requests.items()},
            }

        for kind in ("floor", "ours"):
            print(f"throughput warm-up {kind}: {run(kind)}", flush=True)
        rounds: dict[str, list[dict[str, Any]]] = {"floor": [], "ours": []}
        for r in range(args.rounds):
            for kind in ("floor", "ours") if r % 2 == 0 else ("ours", "floor"):
                rounds[kind].append(run(kind))
                print(f"throughput round {r + 1} {kind}: {rounds[kind][-1]}", flush=True)
        langgraph = run("langgraph")
        print(f"throughput langgraph: {langgraph}", flush=True)

    def summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "per_second": statistics.median(s["per_second"] for s in samples),
            "per_second_rounds": [s["per_second"] for s in samples],
            "client_cpu_ms_per_superstep": round(
                statistics.median(s["client_cpu_ms_per_superstep"] for s in samples), 3
            ),
            "requests_per_superstep": samples[0]["requests_per_superstep"],
        }

    ratios = [o["per_second"] / f["per_second"] for o, f in zip(rounds["ours"], rounds["floor"], strict=True)]
    return {
        "rounds": args.rounds,
        "floor": summary(rounds["floor"]),
        "ours": summary(rounds["ours"]),
        "langgraph": summary([langgraph]),
        "ours_of_floor": round(statistics.median(ratios), 3),
        "ours_of_floor_rounds": [round(ratio, 3) for ratio in ratios],
    }


def one_size(s3: dict[str, Any], n: int, args: argparse.Namespace) -> dict[str, Any]:
    from langgraph.store.base import PutOp
    from worker import Counter

    from langgraph_s3_checkpoint import S3Saver, S3Store, cli
    from langgraph_s3_checkpoint.gc import gc

    prefix = f"scale/{n}/{uuid.uuid4().hex[:8]}"
    row: dict[str, Any] = {"threads": n}
    threads = [f"chat-{i:07d}" for i in range(n)]
    start_at = time.time() + 8
    specs = [
        {"s3": s3, "prefix": prefix, "threads": threads[w :: args.workers], "concurrency": args.concurrency}
        | {"start_at": start_at}
        for w in range(args.workers)
    ]
    loaded = in_processes(load_worker, specs)
    seconds = max(r["seconds"] for r in loaded)
    row["load"] = {
        "seconds": round(seconds, 1),
        "threads_per_second": round(n / seconds, 1),
        "turns_retried": sum(r["retried"] for r in loaded),
    }
    print(f"[{n}] load {row['load']}", flush=True)

    listed = in_processes(list_worker, [{"s3": s3, "prefix": prefix}])[0]
    row["list_none"] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in listed.items()}
    print(f"[{n}] list(None) {row['list_none']}", flush=True)

    saver = S3Saver(bucket=BUCKET, prefix=prefix, **_client_options(s3), **PATIENT)
    counter = Counter()
    counter.attach_saver(saver)

    def threads_command() -> int:
        import io

        parsed = cli.build_parser().parse_args(["--url", f"s3://{BUCKET}/{prefix}", "threads", "--json"])
        out = io.StringIO()
        ctx = cli.Context(saver=saver, bucket_io=saver.bucket_io, as_json=True, progress=False, out=out)
        parsed.handler(ctx, parsed)
        return len(json.loads(out.getvalue()))

    row["threads_command"] = measured(counter, threads_command)
    print(f"[{n}] langgraph-s3 threads {row['threads_command']}", flush=True)
    row["expire_threads"] = measured(counter, lambda: len(saver.expire_threads(timedelta(days=30))))
    print(f"[{n}] expire_threads {row['expire_threads']}", flush=True)
    time.sleep(3)  # gc with grace 0 seals records older than 2 s
    for label in ("gc_first", "gc_second"):
        report = measured(counter, lambda: gc(saver, grace_seconds=0))
        gc_report = report.pop("value")
        report["value"] = {
            "deleted": gc_report.total,
            "read": gc_report.records_read,
            "sealed": gc_report.records_sealed,
        }
        row[label] = report
        print(f"[{n}] {label} {row[label]}", flush=True)
    saver.close()

    store = S3Store(bucket=BUCKET, prefix=f"{prefix}/memory", **_client_options(s3))
    store.setup()
    expiring = max(1, int(n * SWEEP_EXPIRED_SHARE))
    started = time.perf_counter()
    for start in range(0, n, STORE_BATCH):
        store.batch(
            [
                PutOp(
                    ("users", f"u{i // 100:05d}", "memories"),
                    f"m{i:07d}",
                    {"text": f"fact {i}"},
                    ttl=0.001 if i < expiring else 60.0,
                )
                for i in range(start, min(n, start + STORE_BATCH))
            ]
        )
    row["store_load"] = {"seconds": round(time.perf_counter() - started, 1), "items": n}
    time.sleep(1)
    scounter = Counter()
    scounter.attach_saver(_Holder(store._bucket_io))
    row["sweep_due"] = measured(scounter, store.sweep_ttl)
    row["sweep_nothing_due"] = measured(scounter, store.sweep_ttl)
    row["sweep_full"] = measured(scounter, lambda: store.sweep_ttl(full=True))
    for label in ("sweep_due", "sweep_nothing_due", "sweep_full"):
        print(f"[{n}] {label} {row[label]}", flush=True)
    store.close()
    return row


class _Holder:
    """What ``worker.Counter.attach_saver`` needs of a saver: its I/O (here the store's)."""

    def __init__(self, io: Any) -> None:
        self.bucket_io = io


# ---------------------------------------------------------------------------------------------
# report

OPERATIONS = [
    ("list_none", "list(None)"),
    ("threads_command", "`langgraph-s3 threads`"),
    ("expire_threads", "expire_threads(30 days), none idle"),
    ("gc_first", "gc, first run (reads every record, seals)"),
    ("gc_second", "gc, next run (nothing new)"),
    ("sweep_due", "store sweep, 1% due"),
    ("sweep_nothing_due", "store sweep, nothing due"),
    ("sweep_full", "store sweep `full=True` (every item: the old sweep)"),
]


def total(row: dict[str, Any], op: str) -> int:
    return int(row[op]["requests"]["total"])


def exponent(rows: list[dict[str, Any]], op: str, what: str) -> str:
    """How ``what`` (requests or seconds) grows with N between the two largest sizes: the exponent k of N^k."""
    if len(rows) < 2:
        return "–"
    a, b = rows[-2], rows[-1]
    va = total(a, op) if what == "requests" else a[op]["seconds"]
    vb = total(b, op) if what == "requests" else b[op]["seconds"]
    if va <= 0 or vb <= 0:
        return "–"
    return f"{math.log(vb / va) / math.log(b['threads'] / a['threads']):.2f}"


def report(meta: dict[str, Any], tp: dict[str, Any] | None, rows: list[dict[str, Any]]) -> str:
    sizes = [r["threads"] for r in rows]
    lines = [
        f"# Scale: maintenance and listing at {', '.join(f'{s:,}' for s in sizes)} threads",
        "",
        f"Run of {meta['date']} on {meta['machine']}; {meta['server']}. Sizes: {', '.join(f'{s:,}' for s in sizes)}"
        " threads (and as many store items).",
        "",
    ]
    for n, when in meta.get("appended", {}).items():
        lines += [f"The {int(n):,} point was measured {when} with the same code, in a run of its own.", ""]
    if tp:
        rounds = tp.get("rounds", 1)

        def cells(kind: str) -> str:
            row = tp[kind]
            spread = row.get("per_second_rounds", [row["per_second"]])
            span = f" ({min(spread)}–{max(spread)})" if len(spread) > 1 else ""
            per = row.get("requests_per_superstep", {}).get("total", "–")
            return f"{row['per_second']}{span} | {per} | {row['client_cpu_ms_per_superstep']} |"

        ratios = tp.get("ours_of_floor_rounds", [tp["ours_of_floor"]])
        lines += [
            f"## Throughput: {meta['workers']} processes x {meta['concurrency']} threads x {meta['steps']} supersteps",
            "",
            f"Measured {meta.get('throughput_run', meta['date'])}: a round of the floor and of ours not measured (the"
            f" server's first writes, the processes' imports and probes), then {rounds} rounds running both back to"
            " back, the first in turn; the same processes throughout. Medians, the rounds' range in brackets.",
            "",
            "| | supersteps/s | requests / superstep | client CPU ms / superstep |",
            "|---|---:|---:|---:|",
            f"| AsyncS3Saver (default transport) | {cells('ours')}",
            f"| floor: LangGraph + the 3 conditional PUTs sent bare by the same sender | {cells('floor')}",
            f"| LangGraph alone (a checkpointer that serializes nothing) | {cells('langgraph')}",
            "",
            f"Ours / floor, the median of the rounds' ratios: {tp['ours_of_floor']:.2f} (rounds: "
            + ", ".join(f"{r:.2f}" for r in ratios)
            + ").",
            "",
        ]
    lines += ["## Load", "", "| threads | seconds | threads/s | store items | seconds |", "|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['threads']:,} | {r['load']['seconds']} | {r['load']['threads_per_second']} | "
            f"{r['store_load']['items']:,} | {r['store_load']['seconds']} |"
        )
    columns = " | ".join(f"{s:,}: requests, round trips, s" for s in sizes)
    header = f"| operation | {columns} | growth (requests, time) |"
    lines += ["", "## Operations", "", header, "|---|" + "---:|" * (len(sizes) + 1)]
    for op, label in OPERATIONS:
        cells = [f"{total(r, op):,}, {r[op]['requests'].get('waves', 0):,}, {r[op]['seconds']:.2f}" for r in rows]
        growth = f"N^{exponent(rows, op, 'requests')}, N^{exponent(rows, op, 'seconds')}"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {growth} |")
    lines += [
        "",
        "How far the resident memory of the `list(None)` process rose while listing: "
        + ", ".join(f"{r['list_none']['rss_growth_mb']:.1f} MB at {r['threads']:,}" for r in rows)
        + f" (from {rows[0]['list_none']['rss_start_mb']:.0f} MB at start; sampled every 500 checkpoints).",
        "",
        "Growth is the exponent k of N^k between the two largest sizes (1: proportional to the bucket, 0: flat)."
        " Round trips are the waves of requests the operation waited for one after another (requests sent"
        " together count once).",
        "",
        "![scale](scale.png)",
    ]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["threads"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    for op, label in OPERATIONS:
        left.plot(sizes, [max(1, total(r, op)) for r in rows], marker="o", label=label.replace("`", ""))
        right.plot(sizes, [max(1e-3, r[op]["seconds"]) for r in rows], marker="o", label=label.replace("`", ""))
    for ax, title in ((left, "requests"), (right, "seconds")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("threads (store items)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000", help="thread counts, comma separated")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--steps", type=int, default=10, help="supersteps per thread in the throughput run")
    parser.add_argument("--rounds", type=int, default=5, help="paired rounds of ours and the floor")
    parser.add_argument("--no-throughput", action="store_true")
    parser.add_argument(
        "--append",
        action="store_true",
        help="keep the sizes (and throughput) of the existing scale.json and add these sizes to them",
    )
    parser.add_argument(
        "--throughput-only",
        action="store_true",
        help="run the throughput section again and put it into the existing scale.json/scale.md",
    )
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    from langgraph_s3_checkpoint import local

    server = local.start_seaweedfs()
    try:
        server.create_bucket(BUCKET)
        s3 = {
            "endpoint_url": server.endpoint_url,
            "access_key": server.access_key,
            "secret_key": server.secret_key,
            "region": server.region,
        }
        meta = {
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
            f"load average {os.getloadavg()[0]:.1f} at start",
            "server": "local SeaweedFS (weed mini) on the same cores",
            "workers": args.workers,
            "concurrency": args.concurrency,
            "steps": args.steps,
            "sizes": sizes,
        }
        out = Path(args.out)
        if args.throughput_only:
            previous = json.loads((out / "scale.json").read_text())
            meta, rows = previous["meta"], previous["sizes"]
            meta["throughput_run"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
            tp = throughput(s3, args)
            (out / "scale.json").write_text(json.dumps({"meta": meta, "throughput": tp, "sizes": rows}, indent=1))
            (out / "scale.md").write_text(report(meta, tp, rows))
            return
        if args.append:
            previous = json.loads((out / "scale.json").read_text())
            meta, tp = previous["meta"], previous["throughput"]
            rows = [r for r in previous["sizes"] if r["threads"] not in sizes]
            meta["appended"] = {str(n): datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC") for n in sizes}
        else:
            tp = None if args.no_throughput else throughput(s3, args)
            rows = []
        for n in sizes:
            rows.append(one_size(s3, n, args))
            rows.sort(key=lambda r: r["threads"])
            meta["load_average_after"] = os.getloadavg()[0]
            out.mkdir(parents=True, exist_ok=True)
            (out / "scale.json").write_text(json.dumps({"meta": meta, "throughput": tp, "sizes": rows}, indent=1))
            (out / "scale.md").write_text(report(meta, tp, rows))
            plot(rows, out / "scale.png")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
