"""Supersteps at real network latency: a latency proxy in front of a throwaway SeaweedFS.

    python benchmarks/latency.py                      # 0, 5, 20 and 60 ms round trips, every saver found
    python benchmarks/latency.py --rtt 0,20 --only ours,ours-boto3 --repeats 2   # no async saver: no throughput

For each round trip (``--rtt``, ms; half of it is added in each direction by ``latencyproxy.py``) and each
saver, a graph whose one node loops on itself runs with ``durability="sync"`` for 1 and for 31 supersteps on
fresh threads; the difference over 30 is the cost of one more one-node superstep (wall ms, requests, "waves"
= times a request starts while none is in flight, client CPU). Medians of ``--repeats``. Each saver runs in
its own subprocess (peers from their own venvs, see README); the proxy and SeaweedFS run in this process's
children / threads. Writes ``results/latency.md``, ``results/latency.json`` and two plots.

The 0 ms row runs through the same proxy with no delay: what a superstep costs in CPU (client, server,
proxy) on this machine. ``(ms(rtt) - ms(0)) / rtt`` is then the number of sequential round trips a superstep
waits for, the figure that matters once the server is across a network.

PostgresSaver (``--postgres-rtt``, default 1 ms: a database in the same zone) runs behind the same proxy in
front of a throwaway PostgreSQL (``run.py``'s ``Postgres``). The throughput section (``--throughput-rtt``,
default 20 ms) runs AsyncS3Saver with each transport: ``--threads`` threads of ``--thread-steps`` one-node
supersteps gathered on one event loop, against the same number of steps run one thread at a time, and
reports the ratio and the client CPU per checkpoint (process CPU / ``aput`` calls).

Savers: ``ours`` (S3Saver with its defaults: ``transport="auto"``, which sends GET, PUT and LIST directly since
nothing watches its client here; its requests are counted in the saver's own senders, not with botocore hooks,
which would send them through boto3), ``ours-boto3`` (``transport="boto3"``, a client without ``Expect:
100-continue``), ``ours-expect`` (``transport="boto3"`` with a plain boto3 client: botocore's ``Expect:
100-continue`` on PutObject, the first default), ``tigris`` and ``objectstorage`` (skipped when their venv is
missing). The throughput section runs ``ours-async`` (defaults) and ``ours-async-boto3``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, TypedDict

HERE = Path(__file__).resolve().parent
BUCKET = "lgs3-latency"
ALL_SAVERS = ("ours-expect", "ours-boto3", "ours", "tigris", "objectstorage")
ASYNC_SAVERS = ("ours-async-boto3", "ours-async", "inmemory-async")
PEER_PYTHON = {
    "tigris": os.environ.get("BENCH_TIGRIS_PYTHON", "/tmp/lg-bench-tigris/bin/python"),
    "objectstorage": os.environ.get("BENCH_OBJECTSTORAGE_PYTHON", "/tmp/lg-bench-objstore/bin/python"),
}
LABELS = {
    "ours-expect": 'S3Saver, `transport="boto3"` with `Expect: 100-continue` (first default)',
    "ours-boto3": 'S3Saver, `transport="boto3"` (no `Expect`; the default before `auto`)',
    "ours": "S3Saver, default (`auto`: direct)",
    "tigris": "TigrisSaver (on moto)",
    "objectstorage": "ObjectStorageSaver (s3fs)",
    "postgres": "PostgresSaver (psycopg)",
    "ours-async-boto3": 'AsyncS3Saver, `transport="boto3"` (on a thread pool)',
    "ours-async": "AsyncS3Saver, default (`auto`: from the event loop)",
    "inmemory-async": "InMemorySaver (LangGraph's own cost, no I/O)",
    "inmemory": "InMemorySaver (LangGraph alone, no I/O)",
}


# ---------------------------------------------------------------------------------------------
# child: one saver


class LoopState(TypedDict):
    step: int
    data: str


def loop_graph(steps: int) -> Any:
    from langgraph.graph import END, START, StateGraph

    def work(state: LoopState) -> dict[str, Any]:
        return {"step": state["step"] + 1, "data": f"payload-{state['step']:05d}-" + "x" * 64}

    g = StateGraph(LoopState)
    g.add_node("work", work)
    g.add_edge(START, "work")
    g.add_conditional_edges("work", lambda s: END if s["step"] >= steps else "work", ["work", END])
    return g


def client_options(s3: dict[str, Any]) -> dict[str, Any]:
    """The boto3 client keywords for the server (through the proxy) a child was given."""
    return {
        "endpoint_url": s3["endpoint_url"],
        "aws_access_key_id": s3["access_key"],
        "aws_secret_access_key": s3["secret_key"],
        "region_name": s3["region"],
    }


def make_saver(name: str, s3: dict[str, Any], counter: Any) -> Any:
    if name in ("inmemory", "inmemory-async"):
        from langgraph.checkpoint.memory import InMemorySaver

        return InMemorySaver()
    if name == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg import Connection
        from psycopg.rows import dict_row

        conn = Connection.connect(s3["dsn"], autocommit=True, prepare_threshold=0, row_factory=dict_row)
        saver = PostgresSaver(conn)
        saver.setup()
        return saver
    prefix = f"lat/{name}/{uuid.uuid4().hex[:8]}"
    plain = client_options(s3)

    def boto3_client() -> Any:
        import boto3
        from botocore.config import Config

        config = Config(s3={"addressing_style": "path"}, max_pool_connections=64, retries={"max_attempts": 3})
        return boto3.session.Session().client("s3", config=config, **plain)

    if name in ("ours", "ours-expect", "ours-boto3"):
        from langgraph_s3_checkpoint import S3Saver

        if name == "ours-expect":
            saver = S3Saver(bucket=BUCKET, prefix=prefix, client=boto3_client(), transport="boto3")
        elif name == "ours-boto3":
            saver = S3Saver(bucket=BUCKET, prefix=prefix, transport="boto3", **plain)
        else:
            saver = S3Saver(bucket=BUCKET, prefix=prefix, **plain)
        counter.attach_saver(saver)
        saver.setup()
        return saver
    if name in ASYNC_SAVERS:
        from langgraph_s3_checkpoint import AsyncS3Saver

        transport = "boto3" if name == "ours-async-boto3" else "auto"
        saver = AsyncS3Saver(bucket=BUCKET, prefix=prefix, transport=transport, **plain)
        counter.attach_saver(saver)
        return saver
    if name == "tigris":
        from langgraph.checkpoint.tigris import TigrisSaver

        client = boto3_client()
        counter.attach_boto3(client)
        saver = TigrisSaver(BUCKET, client=client, prefix=prefix + "/")
        saver.setup()
        return saver
    if name == "objectstorage":
        import s3fs
        from langgraph_checkpoint_objectstorage import ObjectStorageSaver

        counter.attach_aiobotocore()
        fs = s3fs.S3FileSystem(
            key=s3["access_key"],
            secret=s3["secret_key"],
            client_kwargs={"endpoint_url": s3["endpoint_url"], "region_name": s3["region"]},
            skip_instance_cache=True,
        )
        return ObjectStorageSaver(fs, f"{BUCKET}/{prefix}")
    raise ValueError(name)


def child(spec: dict[str, Any]) -> dict[str, Any]:
    if spec["saver"] == "bare":
        return bare(spec["s3"], spec["samples"])
    sys.path.insert(0, str(HERE))
    from worker import Counter

    counter = Counter()
    saver = make_saver(spec["saver"], spec["s3"], counter)
    if spec["saver"] in ASYNC_SAVERS:
        import asyncio

        return asyncio.run(throughput(saver, counter, spec))
    short, long = spec["short"], spec["long"]
    graphs = {n: loop_graph(n).compile(checkpointer=saver) for n in (short, long)}
    # Warm up: connections, imports, first requests.
    graphs[short].invoke({"step": 0, "data": ""}, {"configurable": {"thread_id": "warm"}}, durability="sync")
    runs: dict[int, list[dict[str, float]]] = {short: [], long: []}
    for r in range(spec["repeats"]):
        for n in (short, long):
            counter.reset()
            config = {"configurable": {"thread_id": f"r{r}-{n}-{uuid.uuid4().hex[:6]}"}}
            (s0, p0), c0, t0 = others_cpu_ms(spec), time.process_time(), time.perf_counter()
            out = graphs[n].invoke({"step": 0, "data": ""}, config, durability="sync")
            t1, c1, (s1, p1) = time.perf_counter(), time.process_time(), others_cpu_ms(spec)
            assert out["step"] == n, out
            snap = counter.snapshot()
            counts = {k: float(v) for k, v in snap.items()}
            cpu = {"cpu_ms": (c1 - c0) * 1000, "server_cpu_ms": s1 - s0, "proxy_cpu_ms": p1 - p0}
            runs[n].append({"ms": (t1 - t0) * 1000, **cpu, **counts})
    steps = long - short
    result: dict[str, Any] = {}
    for key in ("ms", "cpu_ms", "server_cpu_ms", "proxy_cpu_ms", "total", "waves", "PUT", "GET", "LIST", "HEAD"):
        result[key] = (
            statistics.median(x[key] for x in runs[long]) - statistics.median(x[key] for x in runs[short])
        ) / steps
    result["runs"] = runs
    return result


async def throughput(saver: Any, counter: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Steps per second one thread at a time, then with ``threads`` threads gathered on this event loop."""
    import asyncio

    if hasattr(saver, "setup"):
        await saver.setup()
    puts = 0
    aput = saver.aput

    async def counted_aput(*args: Any, **kwargs: Any) -> Any:
        nonlocal puts
        puts += 1
        return await aput(*args, **kwargs)

    saver.aput = counted_aput
    steps, threads = spec["thread_steps"], spec["threads"]
    graph = loop_graph(steps).compile(checkpointer=saver)

    async def one(thread: str) -> None:
        out = await graph.ainvoke({"step": 0, "data": ""}, {"configurable": {"thread_id": thread}}, durability="sync")
        assert out["step"] == steps, out

    await one("warm")
    sequential = spec["sequential_threads"]
    t0 = time.perf_counter()
    for i in range(sequential):
        await one(f"seq-{i}-{uuid.uuid4().hex[:6]}")
    sequential_rate = sequential * steps / (time.perf_counter() - t0)
    counter.reset()
    puts = 0
    (s0, p0), busy0, c0, t0 = others_cpu_ms(spec), machine_busy(), time.process_time(), time.perf_counter()
    await asyncio.gather(*(one(f"par-{i}-{uuid.uuid4().hex[:6]}") for i in range(threads)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    busy1, (s1, p1) = machine_busy(), others_cpu_ms(spec)
    if hasattr(saver, "close"):
        saver.close()
    per_checkpoint = {
        "cpu_ms_per_checkpoint": cpu * 1000 / puts,
        "server_cpu_ms_per_checkpoint": (s1 - s0) / puts,
        "proxy_cpu_ms_per_checkpoint": (p1 - p0) / puts,
    }
    # What the cores allow: every checkpoint needs this much CPU of the client, the server and the proxy
    # together, and there are os.cpu_count() cores' worth of it per second.
    bound_steps_per_s = (os.cpu_count() or 1) * 1000 / sum(per_checkpoint.values()) * puts / (threads * steps)
    return {
        "sequential_steps_per_s": sequential_rate,
        "concurrent_steps_per_s": threads * steps / wall,
        "speedup": threads * steps / wall / sequential_rate,
        "bound_speedup": bound_steps_per_s / sequential_rate,
        **per_checkpoint,
        "checkpoints": puts,
        "machine_busy": (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]),
        "requests": counter.snapshot()["total"],
    }


def task_cpu_ms(pid: int | None) -> float:
    """CPU time of every thread of process ``pid`` so far (``/proc/<pid>/task/*/schedstat``, ns), in ms."""
    if pid is None:
        return 0.0
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(stat.read_text().split()[0])
        except (OSError, ValueError, IndexError):  # a thread that just ended
            continue
    return total / 1e6


def others_cpu_ms(spec: dict[str, Any]) -> tuple[float, float]:
    """CPU so far of the S3 server and of the process running the proxy (the benchmark's parent)."""
    return task_cpu_ms(spec.get("server_pid")), task_cpu_ms(spec.get("proxy_pid"))


def machine_busy() -> tuple[int, int]:
    """Busy and total CPU ticks of the whole machine so far (``/proc/stat``): every process on the cores."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


# ---------------------------------------------------------------------------------------------
# parent


def run_child(python: str, spec: dict[str, Any], tmp: str, timeout: float) -> tuple[dict[str, Any] | None, str]:
    """Run one saver's measurement in a subprocess; its result, or why there is none."""
    spec_path = os.path.join(tmp, f"{uuid.uuid4().hex}-spec.json")
    spec["out"] = spec_path.replace("-spec", "")
    Path(spec_path).write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)} if python == sys.executable else None
    try:
        proc = subprocess.run(
            [python, str(Path(__file__).resolve()), "--child", spec_path],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:g}s"
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["?"]
        return None, tail[0][:300]
    return json.loads(Path(spec["out"]).read_text()), ""


def bare(s3: dict[str, Any], samples: int) -> dict[str, float]:
    """Median ms of a 1 KiB PutObject / GetObject through the proxy, per client (in a child process, as the
    savers are: the proxy's threads in the parent would otherwise compete for this process's GIL)."""
    from langgraph_s3_checkpoint import make_client
    from langgraph_s3_checkpoint._protocol.requests import Get, Put
    from langgraph_s3_checkpoint._transport.direct import DirectTransport

    opts = client_options(s3)
    import boto3
    from botocore.config import Config

    expect = boto3.session.Session().client("s3", config=Config(s3={"addressing_style": "path"}), **opts)
    fast = make_client(**opts)
    direct = DirectTransport(fast, BUCKET)
    body = b"x" * 1024
    out: dict[str, float] = {}
    for name, put, get in (
        ("boto3-expect", lambda k: expect.put_object(Bucket=BUCKET, Key=k, Body=body), None),
        (
            "boto3",
            lambda k: fast.put_object(Bucket=BUCKET, Key=k, Body=body),
            lambda k: fast.get_object(Bucket=BUCKET, Key=k)["Body"].read(),
        ),
        ("direct", lambda k: direct.execute(Put(k, body)), lambda k: direct.execute(Get(k))),
    ):
        for op, send in (("put", put), ("get", get)):
            if send is None:
                continue
            walls = []
            for i in range(samples + 2):
                t0 = time.perf_counter()
                send(f"bare/{name}/{i}")
                if i >= 2:
                    walls.append((time.perf_counter() - t0) * 1000)
            out[f"{name} {op}"] = statistics.median(walls)
    out["direct step"] = _bare_step(direct, samples * 2)
    direct.close()
    return out


def _bare_step(direct: Any, samples: int) -> float:
    """Median ms of the three requests a one-node superstep makes, sent together as the saver sends them.

    The node's writes and the checkpoint's record are created with ``If-None-Match: *``, the head replaced
    with ``If-Match``; each on its own connection, so the server answers them concurrently. No saver that
    stores a superstep with these three conditional PUTs can wait less for them on this machine: the
    S3 server's CPU (about 2 ms per conditional PUT for SeaweedFS) shares the cores with everything else."""
    from concurrent.futures import ThreadPoolExecutor

    from langgraph_s3_checkpoint._protocol.requests import CREATE, Put, Update

    etag = direct.execute(Put("bare/step/head", b"h" * 1024)).etag
    walls = []
    with ThreadPoolExecutor(3) as pool:
        for i in range(samples + 2):
            t0 = time.perf_counter()
            replies = list(
                pool.map(
                    direct.execute,
                    (
                        Put(f"bare/step/writes/{i}", b"w" * 1024, mode=CREATE),
                        Put(f"bare/step/record/{i}", b"r" * 1024, mode=CREATE),
                        Put("bare/step/head", f"{i:04d}".encode() * 256, mode=Update(etag)),
                    ),
                )
            )
            if i >= 2:
                walls.append((time.perf_counter() - t0) * 1000)
            etag = replies[2].etag
    return statistics.median(walls)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rtt", default="0,5,20,60", help="round trips in ms, comma-separated (0: proxy, no delay)")
    ap.add_argument("--only", default=",".join((*ALL_SAVERS, "postgres", *ASYNC_SAVERS)))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--short", type=int, default=1)
    ap.add_argument("--long", type=int, default=31)
    ap.add_argument("--postgres-rtt", type=float, default=1.0)
    ap.add_argument("--throughput-rtt", type=float, default=20.0)
    ap.add_argument("--threads", type=int, default=50)
    ap.add_argument("--thread-steps", type=int, default=10)
    ap.add_argument("--sequential-threads", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=300.0, help="per saver and round trip, seconds")
    ap.add_argument("--out", default=str(HERE / "results" / "latency"))
    ap.add_argument("--tigris-on-seaweedfs", action="store_true", help="default: moto (it hangs on SeaweedFS)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        spec = json.loads(Path(args.child).read_text())
        Path(spec["out"]).write_text(json.dumps(child(spec)))
        return

    sys.path.insert(0, str(HERE))
    from latencyproxy import LatencyProxy

    from langgraph_s3_checkpoint import local

    rtts = [float(x) for x in args.rtt.split(",")]
    chosen = [s for s in args.only.split(",") if s]
    savers = [s for s in chosen if s in ALL_SAVERS]
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load_before = os.getloadavg()
    server = local.start_seaweedfs()
    # TigrisSaver hangs on SeaweedFS (an empty-body PUT with `Expect: 100-continue` is never answered):
    # it runs on moto behind the same proxy instead (moto closes every connection, but the proxy does not
    # delay the handshake, so that costs no extra round trip here).
    moto = local.start("moto") if "tigris" in savers and not args.tigris_on_seaweedfs else None
    pg = None
    results: dict[str, Any] = {"rtts": rtts, "savers": savers, "bare": {}, "rows": {}, "failures": {}}
    results["tigris_server"] = "moto" if moto is not None else "seaweedfs"
    results["settings"] = {k: getattr(args, k) for k in ("postgres_rtt", "throughput_rtt", "threads", "thread_steps")}

    def s3_of(target: Any, url: str) -> dict[str, Any]:
        return {
            "endpoint_url": url,
            "access_key": target.access_key,
            "secret_key": target.secret_key,
            "region": target.region,
        }

    try:
        for s in (server, moto):
            if s is not None:
                s.create_bucket(BUCKET)
        host, port = server.endpoint_url.removeprefix("http://").split(":")
        with tempfile.TemporaryDirectory() as tmp:
            for rtt in rtts:
                with LatencyProxy(host, int(port), one_way_ms=rtt / 2, lifetime=3600) as main_proxy:
                    spec = {"saver": "bare", "s3": s3_of(server, main_proxy.url), "samples": 10}
                    measured, why = run_child(sys.executable, spec, tmp, args.timeout)
                    if measured is None:
                        results["failures"][f"bare requests @ {rtt:g} ms"] = why
                    else:
                        results["bare"][str(rtt)] = measured
                    for name in savers:
                        target = moto if name == "tigris" and moto is not None else server
                        mhost, mport = target.endpoint_url.removeprefix("http://").split(":")
                        proxy = LatencyProxy(mhost, int(mport), one_way_ms=rtt / 2) if target is moto else main_proxy
                        python = PEER_PYTHON.get(name, sys.executable)
                        if not Path(python).exists():
                            results["failures"][name] = f"no venv at {python} (see README)"
                            continue
                        spec = {
                            "saver": name,
                            "repeats": args.repeats,
                            "short": args.short,
                            "long": args.long,
                            "s3": s3_of(target, proxy.url),
                            "server_pid": server.pid if target is server else None,
                            "proxy_pid": os.getpid(),
                        }
                        try:
                            row, why = run_child(python, spec, tmp, args.timeout)
                        finally:
                            if proxy is not main_proxy:
                                proxy.stop()
                        if row is None:
                            results["failures"][f"{name} @ {rtt:g} ms"] = why
                            continue
                        results["rows"].setdefault(str(rtt), {})[name] = row
                        print(
                            f"rtt {rtt:g} ms {name}: {row['ms']:.1f} ms/step, {row['total']:.2f} req, "
                            f"{row['waves']:.2f} waves, cpu {row['cpu_ms']:.2f} ms",
                            flush=True,
                        )
            row, why = run_child(
                sys.executable,
                {"saver": "inmemory", "s3": {}, "repeats": args.repeats, "short": args.short, "long": args.long},
                tmp, args.timeout,
            )  # fmt: skip
            if row is None:
                results["failures"]["inmemory"] = why
            else:
                results["langgraph"] = row
            if "postgres" in chosen:
                from run import Postgres

                pg = Postgres()
                with LatencyProxy("127.0.0.1", pg.port, one_way_ms=args.postgres_rtt / 2) as proxy:
                    dsn = f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres?sslmode=disable"
                    spec = {
                        "saver": "postgres",
                        "repeats": args.repeats,
                        "short": args.short,
                        "long": args.long,
                        "s3": {"dsn": dsn},
                    }
                    row, why = run_child(sys.executable, spec, tmp, args.timeout)
                if row is None:
                    results["failures"][f"postgres @ {args.postgres_rtt:g} ms"] = why
                else:
                    results["postgres"] = row
                    print(f"postgres @ {args.postgres_rtt:g} ms: {row['ms']:.2f} ms/step", flush=True)
            with LatencyProxy(host, int(port), one_way_ms=args.throughput_rtt / 2) as proxy:
                for name in (s for s in chosen if s in ASYNC_SAVERS):
                    spec = {
                        "saver": name,
                        "threads": args.threads,
                        "thread_steps": args.thread_steps,
                        "sequential_threads": args.sequential_threads,
                        "s3": s3_of(server, proxy.url),
                        "server_pid": server.pid,
                        "proxy_pid": os.getpid(),
                    }
                    row, why = run_child(sys.executable, spec, tmp, args.timeout)
                    if row is None:
                        results["failures"][f"{name} throughput"] = why
                        continue
                    results.setdefault("throughput", {})[name] = row
                    print(f"throughput {name}: {row}", flush=True)
    finally:
        server.stop()
        if moto is not None:
            moto.stop()
        if pg is not None:
            pg.stop()
    results["load"] = {"before": load_before, "after": os.getloadavg()}
    results["started"] = started
    Path(args.out + ".json").write_text(json.dumps(results, indent=1))
    Path(args.out + ".md").write_text(report(results, args))
    plot(results, args.out)
    print(Path(args.out + ".md").read_text())


def round_trips(res: dict[str, Any], rtt: float, name: str) -> float | None:
    """Sequential round trips per superstep: the time a round trip adds over the 0 ms run, per round trip."""
    here, base = res["rows"].get(str(rtt), {}).get(name), res["rows"].get("0.0", {}).get(name)
    if here is None or base is None or rtt == 0:
        return None
    return float(here["ms"] - base["ms"]) / rtt


def plot(res: dict[str, Any], out: str) -> None:
    """``<out>.png``: ms per superstep against the round trip; ``<out>_throughput.png``: the async runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name in res["savers"]:
        points = [
            (rtt, res["rows"][str(rtt)][name]["ms"]) for rtt in res["rtts"] if name in res["rows"].get(str(rtt), {})
        ]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=LABELS[name])
    if "postgres" in res:
        ax.axhline(
            res["postgres"]["ms"],
            color="grey",
            linestyle="--",
            label=f"{LABELS['postgres']} at {res['settings']['postgres_rtt']:g} ms",
        )
    ax.set_xlabel("round trip to the server (ms)")
    ax.set_ylabel("ms per one-node superstep")
    ax.set_title('Supersteps at real latency (durability="sync")')
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out + ".png", dpi=110)
    plt.close(fig)
    rows = res.get("throughput", {})
    if rows:
        fig, ax = plt.subplots(figsize=(6, 3.2))
        names = list(rows)
        ax.barh([LABELS[n] for n in names], [rows[n]["speedup"] for n in names])
        ax.set_xlabel(f"{res['settings']['threads']} threads at once / one thread at a time (steps per second)")
        ax.set_title(f"AsyncS3Saver throughput at {res['settings']['throughput_rtt']:g} ms round trip")
        fig.tight_layout()
        fig.savefig(out + "_throughput.png", dpi=110)
        plt.close(fig)


def report(res: dict[str, Any], args: Any) -> str:
    lb, la = res["load"]["before"], res["load"]["after"]
    lines = [
        "# Supersteps at real latency (`benchmarks/latency.py`)",
        "",
        f"Started {res['started']}; {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}. "
        f"Load average (1/5/15 min) {lb[0]:.2f}/{lb[1]:.2f}/{lb[2]:.2f} before, "
        f"{la[0]:.2f}/{la[1]:.2f}/{la[2]:.2f} after (the machine is shared).",
        "",
        "SeaweedFS (`weed mini`, keeps connections alive) behind `latencyproxy.py`, which delays every chunk by "
        "half the round trip in each direction (order kept, bandwidth not serialized, `TCP_NODELAY`; the TCP "
        'handshake is not delayed). A one-node graph, `durability="sync"`, run for '
        f"{args.short} and {args.long} supersteps on fresh threads; the difference divided by "
        f"{args.long - args.short} is one more superstep. Medians of {args.repeats} repeats. "
        "Waves = requests started while none was in flight (sequential round trips on the critical path); "
        "ms / RTT = the wall time per superstep in round trips. Client CPU is the saver process's, all threads. "
        "Waves undercount when requests of consecutive supersteps overlap (a step's `put_writes` may still be in "
        "flight when the next step starts); for the peers, whose requests overlap on background threads or an "
        "event loop, a difference of medians can even be negative: read ms / RTT for them.",
        "",
    ]
    for rtt in res["rtts"]:
        rows = res["rows"].get(str(rtt), {})
        lines += [
            f"## {rtt:g} ms round trip",
            "",
            "| saver | ms / superstep | ms / RTT | round trips / superstep | requests / superstep "
            "| waves / superstep | client CPU ms / step | server CPU ms / step | proxy CPU ms / step |",
            "|---|---:|---:|---:|---|---:|---:|---:|---:|",
        ]
        for name in res["savers"]:
            r = rows.get(name)
            if r is None:
                continue
            kinds = ", ".join(f"{k} {r[k]:.2f}" for k in ("PUT", "GET", "LIST", "HEAD") if abs(r[k]) > 0.005)
            trips = round_trips(res, rtt, name)
            per_rtt = f"{r['ms'] / rtt:.2f}" if rtt else "–"
            lines.append(
                f"| {LABELS[name]} | {r['ms']:.1f} | {per_rtt} | {'–' if trips is None else f'{trips:.2f}'} | "
                f"{r['total']:.2f} ({kinds}) | {r['waves']:.2f} | {r['cpu_ms']:.2f} | "
                f"{_cpu(r, 'server_cpu_ms', name)} | {_cpu(r, 'proxy_cpu_ms', name)} |"
            )
        bare = res["bare"].get(str(rtt), {})
        if bare:
            lines += [
                "",
                "Bare 1 KiB requests through the proxy (median ms): "
                + ", ".join(f"{k} {v:.1f}" for k, v in bare.items())
                + ".",
            ]
        lines.append("")
    lines += floors(res)
    pg = res.get("postgres")
    if pg is not None:
        prtt = res["settings"]["postgres_rtt"]
        lines += [
            f"## PostgresSaver at {prtt:g} ms round trip",
            "",
            f"{pg['ms']:.2f} ms per superstep, client CPU {pg['cpu_ms']:.2f} ms (same graph, same proxy in front of "
            "a throwaway PostgreSQL on this machine). Ours at 5 ms against it: "
            + ", ".join(
                f"{LABELS[n]} {res['rows']['5.0'][n]['ms'] / pg['ms']:.2f}x"
                for n in res["savers"]
                if n in res["rows"].get("5.0", {}) and n.startswith("ours")
            )
            + ".",
            "",
        ]
    rows = res.get("throughput", {})
    if rows:
        st = res["settings"]
        lines += [
            f"## AsyncS3Saver throughput at {st['throughput_rtt']:g} ms round trip",
            "",
            f"{st['threads']} threads x {st['thread_steps']} one-node supersteps gathered on one event loop, against "
            "the same graph run one thread at a time. Client CPU per checkpoint = the process's CPU during the "
            "concurrent run / `aput` calls (SeaweedFS and the proxy share the same 2 cores). InMemorySaver runs the "
            "same graph without I/O: its CPU per checkpoint is LangGraph's own, included in every row. Machine busy = "
            "the share of all cores' time (`/proc/stat`) spent by every process during the concurrent run: near "
            "100%, the machine, not the saver, sets the concurrent rate.",
            "",
            "Server and proxy CPU per checkpoint: every thread of the SeaweedFS process, and of the process that "
            "runs the proxy, during the concurrent run. Bound by the cores = the ratio the machine would allow if "
            "it did nothing but these three processes' work for the concurrent run: cores x 1000 ms / (client + "
            "server + proxy CPU per checkpoint), as steps, over the one-at-a-time rate.",
            "",
            "| saver | one at a time, steps/s | concurrent, steps/s | ratio | client CPU ms / checkpoint "
            "| server CPU | proxy CPU | bound by the cores | machine busy during the concurrent run |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name, r in rows.items():
            lines.append(
                f"| {LABELS[name]} | {r['sequential_steps_per_s']:.1f} | {r['concurrent_steps_per_s']:.1f} | "
                f"{r['speedup']:.1f}x | {r['cpu_ms_per_checkpoint']:.2f} | "
                f"{r['server_cpu_ms_per_checkpoint']:.2f} | {r['proxy_cpu_ms_per_checkpoint']:.2f} | "
                f"{r['bound_speedup']:.1f}x | {100 * r['machine_busy']:.0f}% |"
            )
        lines.append("")
    if res["failures"]:
        lines += ["## Not measured", ""] + [f"- **{k}**: {v}" for k, v in res["failures"].items()] + [""]
    return "\n".join(lines)


def _cpu(row: dict[str, Any], key: str, name: str) -> str:
    if name == "tigris" and key == "server_cpu_ms":
        return "–"  # moto runs inside the proxy's process: counted in the proxy column
    return f"{row[key]:.2f}"


def floors(res: dict[str, Any]) -> list[str]:
    """What no saver that stores a superstep with three conditional PUTs can beat on this machine, measured
    in this run at each round trip: LangGraph alone plus the three PUTs sent together (:func:`_bare_step`)."""
    langgraph = res.get("langgraph")
    if langgraph is None:
        return []
    pg = res.get("postgres")
    lines = [
        "## Floors on this machine",
        "",
        f"LangGraph alone (InMemorySaver, same graph, no I/O): {langgraph['ms']:.2f} ms per superstep, "
        f"{langgraph['cpu_ms']:.2f} ms of CPU. Three PUTs together = the requests of one superstep (the node's "
        "writes and the record with `If-None-Match: *`, the head with `If-Match`, each on its own connection) "
        "sent by the direct transport through the proxy, median ms: one round trip, SeaweedFS's handling of three "
        "conditional PUTs on the cores this process shares with it, the proxy's forwarding and the least client "
        "work there is. Floor = LangGraph alone + three PUTs together: no saver that stores a superstep with "
        "these three requests can take less here. A target above the floor's own ratio is bound by this machine.",
        "",
        "| round trip | three PUTs together, ms | floor, ms | fastest S3 peer, ms | peer / floor | default / floor "
        "| boto3 / floor |" + (" floor / PostgresSaver |" if pg else ""),
        "|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if pg else ""),
    ]
    for rtt in res["rtts"]:
        rows = res["rows"].get(str(rtt), {})
        step = res["bare"].get(str(rtt), {}).get("direct step")
        if step is None:
            continue
        f = langgraph["ms"] + step
        peers = [rows[n]["ms"] for n in ("tigris", "objectstorage") if n in rows]
        # A saver left out of the run (--only) shows as "–", the rest of its row still measured.
        peer = f"{min(peers):.1f} | {min(peers) / f:.2f}x" if peers else "– | –"
        ours, boto3 = (f"{rows[n]['ms'] / f:.2f}x" if n in rows else "–" for n in ("ours", "ours-boto3"))
        lines.append(
            f"| {rtt:g} ms | {step:.1f} | {f:.1f} | {peer} | {ours} | {boto3} |"
            + (f" {f / pg['ms']:.2f}x |" if pg else "")
        )
    return [*lines, ""]


if __name__ == "__main__":
    main()
