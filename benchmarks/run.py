"""Benchmark suite: our S3 checkpointer against peer savers on the same machine, in the same run.

    python benchmarks/run.py [--quick] [--only ours,postgres,...]

Starts a throwaway SeaweedFS (``langgraph_s3_checkpoint.local``) and a throwaway PostgreSQL cluster
(``initdb``/``pg_ctl`` from the Debian ``postgresql`` package, run as the ``postgres`` user when we
are root), runs ``worker.py`` once per saver in a subprocess (peers whose pins conflict with ours run
from their own virtualenv, see README), then writes ``results/latest.{md,json}`` and PNG plots and
prints the markdown.  Setup is documented in ``benchmarks/README.md``; nothing is installed here.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import pwd
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
BUCKET = "bench"

# Peer virtualenvs (see README): these peers pin boto3/botocore versions that conflict with ours.
PEER_VENVS = {
    "tigris": os.environ.get("BENCH_TIGRIS_PYTHON", "/tmp/lg-bench-tigris/bin/python"),
    "objectstorage": os.environ.get("BENCH_OBJECTSTORAGE_PYTHON", "/tmp/lg-bench-objstore/bin/python"),
}
OURS = ["ours", "ours-async", "ours-direct", "ours-async-direct"]
SAVERS = [*OURS, "tigris", "objectstorage", "postgres", "sqlite", "inmemory"]
S3_SAVERS = {*OURS, "tigris", "objectstorage"}
LABELS = {
    "ours": "S3Saver (ours, transport=boto3)",
    "ours-async": "AsyncS3Saver (ours, transport=boto3)",
    "ours-direct": "S3Saver (ours, default: direct)",
    "ours-async-direct": "AsyncS3Saver (ours, default: direct)",
    "tigris": "TigrisSaver",
    "objectstorage": "ObjectStorageSaver (s3fs)",
    "postgres": "PostgresSaver",
    "sqlite": "SqliteSaver (file)",
    "inmemory": "InMemorySaver",
}


def params(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "supersteps": {"steps": 50, "repeats": 2},
            "history": {"sizes": [10, 100, 1000], "memory_sizes": [100, 1000], "repeats": 5},
            "storage": {"turns": 50},
            "throughput": {"threads": 100, "steps": 20},
        }
    return {
        "supersteps": {"steps": 50, "repeats": 5},
        "history": {"sizes": [10, 100, 1000, 10000], "memory_sizes": [1000, 10000], "repeats": 7},
        "storage": {"turns": 200},
        "throughput": {"threads": 100, "steps": 20},
    }


# ---------------------------------------------------------------------------------------------
# PostgreSQL


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Postgres:
    """A throwaway cluster in a temp dir; as root, runs as the ``postgres`` user (postgres refuses root)."""

    def __init__(self) -> None:
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
        if not bins:
            raise RuntimeError("PostgreSQL not found under /usr/lib/postgresql (apt-get install -y postgresql)")
        self.bin = bins[-1]
        self.dir = tempfile.mkdtemp(prefix="lg-bench-pg-")
        self.port = free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = "postgres"
            pw = pwd.getpwnam(self.user)
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        self.data = os.path.join(self.dir, "data")
        self._cmd([f"{self.bin}/initdb", "-D", self.data, "-U", "postgres", "-A", "trust", "--no-sync"])
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c fsync=on"
        self._cmd(
            [f"{self.bin}/pg_ctl", "-D", self.data, "-o", opts, "-l", os.path.join(self.dir, "log"), "-w", "start"]
        )
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres?sslmode=disable"

    def _cmd(self, argv: list[str]) -> None:
        if self.user:
            argv = ["runuser", "-u", self.user, "--", *argv]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if res.returncode:
            raise RuntimeError(f"{' '.join(argv)} failed: {res.stderr.strip()[-800:]}")

    def stop(self) -> None:
        try:
            self._cmd([f"{self.bin}/pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop"])
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# helpers


def bare_latency(server: Any) -> dict[str, float]:
    """Median wall time and mean client CPU of bare PutObject / GetObject round trips, per transport.

    The floor any S3 saver pays per request, and what the client itself costs: boto3's full pipeline
    against our direct transport (SigV4 over blocking sockets) sending the same requests to the same server.
    """
    from worker import process_cpu_s

    from langgraph_s3_checkpoint._protocol.requests import Get, Put
    from langgraph_s3_checkpoint._transport.direct import DirectTransport

    client = server.client()
    direct = DirectTransport(client, BUCKET)
    body = b"x" * 1024
    senders = {
        "boto3": (
            lambda key: client.put_object(Bucket=BUCKET, Key=key, Body=body),
            lambda key: client.get_object(Bucket=BUCKET, Key=key)["Body"].read(),
        ),
        "direct": (lambda key: direct.execute(Put(key, body)), lambda key: direct.execute(Get(key))),
    }
    out: dict[str, float] = {}
    for name, (put, get) in senders.items():
        walls: dict[str, list[float]] = {"put": [], "get": []}
        cpu = {"put": 0.0, "get": 0.0}
        for i in range(200):
            key = f"bare/{name}/{i}"
            for op, send in (("put", put), ("get", get)):
                c0, t0 = time.process_time(), time.perf_counter()
                send(key)
                t1, c1 = time.perf_counter(), time.process_time()
                if i >= 20:
                    walls[op].append(t1 - t0)
                    cpu[op] += c1 - c0
        suffix = "" if name == "boto3" else "_direct"
        for op in ("put", "get"):
            out[f"{op}_ms{suffix}"] = statistics.median(walls[op]) * 1000
            out[f"{op}_cpu_ms{suffix}"] = cpu[op] / 180 * 1000
    # The server's own CPU per request: it shares the machine's cores with the savers.
    pid = getattr(getattr(server, "_process", None), "pid", None)
    if pid is not None:
        for op, send in (("put", senders["direct"][0]), ("get", senders["direct"][1])):
            before = process_cpu_s(pid)
            for i in range(500):
                send(f"bare/server/{i}")
            out[f"server_{op}_cpu_ms"] = (process_cpu_s(pid) - before) / 500 * 1000
    direct.close()
    return out


def prefix_bytes(client: Any, prefix: str) -> tuple[int, int]:
    total = count = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/"):
        for obj in page.get("Contents", []):
            total += obj["Size"]
            count += 1
    return total, count


def run_worker(saver: str, spec: dict[str, Any], timeout: float, tmp: str) -> dict[str, Any]:
    python = PEER_VENVS.get(saver, sys.executable)
    if not os.path.exists(python):
        return {"saver": saver, "fatal": f"peer virtualenv missing: {python} (see benchmarks/README.md)"}
    spec_path = os.path.join(tmp, f"{saver}.spec.json")
    out_path = os.path.join(tmp, f"{saver}.out.json")
    Path(spec_path).write_text(json.dumps({**spec, "saver": saver}))
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)} if saver in OURS else dict(os.environ)
    proc = subprocess.Popen(
        [python, str(HERE / "worker.py"), spec_path, out_path],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    timed_out = False
    try:
        log, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, 9)
        log, _ = proc.communicate()
    result: dict[str, Any] = {"saver": saver}
    if os.path.exists(out_path):
        result = json.loads(Path(out_path).read_text())
    result["wall_s"] = time.perf_counter() - t0
    if timed_out:
        result["fatal"] = f"timed out after {timeout:.0f}s (partial results kept)"
    elif proc.returncode:
        result["fatal"] = f"exit {proc.returncode}: {log.decode(errors='replace')[-800:]}"
    for name, data in list(result.get("workloads", {}).items()):
        if isinstance(data, dict) and data.get("running"):
            data.pop("running")
            if not data:
                result["workloads"].pop(name)
            result.setdefault("errors", {})[name] = "did not finish in the per-saver time budget (partial rows kept)"
    return result


# ---------------------------------------------------------------------------------------------
# report


def fmt(x: Any, nd: int = 2) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        if abs(x) >= 100:
            return f"{x:,.0f}"
        return f"{x:.{nd}f}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def ratio(peer: float | None, ours: float | None) -> str:
    if not peer or not ours:
        return "n/a"
    return f"{peer / ours:.2f}×"


def req_str(c: dict[str, float] | None) -> str:
    if not c:
        return "n/a"
    parts = [f"{k} {c[k]:.2f}" for k in ("PUT", "GET", "LIST", "HEAD", "DELETE", "OTHER") if c.get(k)]
    return ", ".join(parts) + f" (= {c['total']:.2f}; waves {c['waves']:.2f})"


def wl(res: dict[str, Any], name: str) -> Any:
    return res.get("workloads", {}).get(name)


def err(res: dict[str, Any], name: str) -> str:
    e = res.get("errors", {}).get(name) or res.get("fatal") or "not run"
    return "FAILED: " + e.replace("\n", " ").replace("|", "/")[:220]


def report(meta: dict[str, Any], results: dict[str, dict[str, Any]], p: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    L: list[str] = []
    targets: dict[str, Any] = {}
    L.append(f"# Benchmark results ({'quick' if meta['quick'] else 'full'} run)\n")
    L.append(
        f"Machine: {meta['nproc']} cores (`nproc`), {meta['arch']} (`uname -m`), {meta['kernel']}, "
        f"Python {meta['python']}. "
        f"S3: SeaweedFS `weed mini` on localhost; PostgreSQL {meta.get('postgres_version', 'n/a')} on localhost. "
        f"Started {meta['started']}, took {meta['elapsed_s']:.0f}s. Medians of repeats; ratios are peer ÷ ours "
        f"(>1× means ours is faster/smaller), computed within this run.\n"
    )
    bare = meta.get("bare")
    if bare:
        L.append(
            f"Bare SeaweedFS round trip (1 KiB, median of 180; client CPU per request in brackets): boto3 PutObject "
            f"{bare['put_ms']:.2f} ms ({bare['put_cpu_ms']:.2f}), GetObject {bare['get_ms']:.2f} ms "
            f"({bare['get_cpu_ms']:.2f}); direct transport PutObject {bare['put_ms_direct']:.2f} ms "
            f"({bare['put_cpu_ms_direct']:.2f}), GetObject {bare['get_ms_direct']:.2f} ms "
            f"({bare['get_cpu_ms_direct']:.2f})."
            + (
                f" SeaweedFS's own CPU per request (same cores): PutObject {bare['server_put_cpu_ms']:.2f} ms, "
                f"GetObject {bare['server_get_cpu_ms']:.2f} ms.\n"
                if "server_put_cpu_ms" in bare
                else "\n"
            )
        )
    # failures up front
    fails = [(s, r) for s, r in results.items() if r.get("fatal") or r.get("errors")]
    if fails:
        L.append("## Failures\n")
        for s, r in fails:
            if r.get("fatal"):
                L.append(f"- **{LABELS[s]}**: {r['fatal'][:400]}")
            for name, e in r.get("errors", {}).items():
                L.append(f"- **{LABELS[s]}** / {name}: {e[:400]}")
        L.append("")

    # 1. supersteps
    steps = p["supersteps"]["steps"]
    L.append(f"## 1. {steps}-superstep graph (one node per step, one 4-way fan-out step)\n")
    ours_ss = wl(results.get("ours", {}), "supersteps")
    for mode in ("sync", "async", "exit"):
        L.append(f"### durability={mode}\n")
        L.append("| saver | ms / superstep | vs ours | S3 requests / superstep (by kind) |")
        L.append("|---|---:|---:|---|")
        for s in SAVERS:
            r = results.get(s, {})
            d = wl(r, "supersteps")
            if not d:
                L.append(f"| {LABELS[s]} | {err(r, 'supersteps')} | | |")
                continue
            m = d.get(mode)
            if not m:
                L.append(f"| {LABELS[s]} | {err(r, 'supersteps')} | | |")
                continue
            base = ours_ss[mode]["per_step_ms"] if ours_ss else None
            rq = req_str(m["requests_per_step"]) if s in S3_SAVERS else "— (not S3)"
            L.append(f"| {LABELS[s]} | {fmt(m['per_step_ms'])} | {ratio(m['per_step_ms'], base)} | {rq} |")
        L.append("")
    if ours_ss and ours_ss.get("profile_tottime"):
        L.append(
            "<details><summary>cProfile of S3Saver, durability=sync (main thread; pool threads not sampled)</summary>\n"
        )
        L.append("```\n" + trim_profile(ours_ss["profile_tottime"]) + "\n```\n</details>\n")

    # 2. resume
    L.append("## 2. Resume cost: `graph.get_state(config)` by history length\n")
    sizes = p["history"]["sizes"]
    L.append(
        "| saver | " + " | ".join(f"{n:,} cps: ms (requests)" for n in sizes) + f" | {sizes[-1]:,} vs {sizes[0]} |"
    )
    L.append("|---|" + "---:|" * (len(sizes) + 1))
    for s in SAVERS:
        r = results.get(s, {})
        d = wl(r, "history") or (r.get("partial_history"))
        if not d or not d.get("get_state"):
            L.append(f"| {LABELS[s]} | {err(r, 'history')} |" + " |" * len(sizes))
            continue
        cells = []
        for n in sizes:
            g = d["get_state"].get(str(n))
            if not g:
                cells.append("n/a")
                continue
            rq = f" ({g['requests']['total']})" if g.get("requests") else ""
            cells.append(f"{fmt(g['ms'])}{rq}")
        first, last = d["get_state"].get(str(sizes[0])), d["get_state"].get(str(sizes[-1]))
        growth = f"{last['ms'] / first['ms']:.2f}×" if first and last else "n/a"
        L.append(f"| {LABELS[s]} | " + " | ".join(cells) + f" | {growth} |")
    L.append("")
    ours_h = wl(results.get("ours", {}), "history")

    def get_state_ms(history: dict[str, Any] | None) -> Any:
        return ((history or {}).get("get_state", {}).get(str(sizes[-1])) or {}).get("ms")

    L.append(
        f"Peer ÷ ours at {sizes[-1]:,} checkpoints: "
        + ", ".join(
            f"{LABELS[s]} {ratio(get_state_ms(wl(results.get(s, {}), 'history')), get_state_ms(ours_h))}"
            for s in SAVERS
            if s != "ours"
        )
        + "\n"
    )

    # 3. list / history pages
    L.append(f"## 3. First page at {sizes[-1]:,} checkpoints\n")
    L.append(
        "| saver | `list(limit=10)` ms | requests | vs ours | `get_state_history` first 10 ms | requests | vs ours |"
    )
    L.append("|---|---:|---:|---:|---:|---:|---:|")
    for s in SAVERS:
        r = results.get(s, {})
        d = wl(r, "history")
        if not d or "list10" not in d:
            L.append(f"| {LABELS[s]} | {err(r, 'history')} | | | | | |")
            continue
        a, h = d["list10"], d["history10"]
        oa = ours_h["list10"]["ms"] if ours_h and "list10" in ours_h else None
        oh = ours_h["history10"]["ms"] if ours_h and "history10" in ours_h else None
        ra = a["requests"]["total"] if a.get("requests") else "n/a"
        rh = h["requests"]["total"] if h.get("requests") else "n/a"
        L.append(
            f"| {LABELS[s]} | {fmt(a['ms'])} | {ra} | {ratio(a['ms'], oa)} "
            f"| {fmt(h['ms'])} | {rh} | {ratio(h['ms'], oh)} |"
        )
    L.append("")

    # 4. storage
    turns = p["storage"]["turns"]
    L.append(f"## 4. Storage after a {turns}-turn chat (`add_messages`), without / with `DeltaChannel`\n")
    L.append("| saver | bytes (plain) | objects | vs ours | bytes (DeltaChannel) | objects | vs ours | delta ÷ plain |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    ours_st = wl(results.get("ours", {}), "storage") or {}
    for s in SAVERS:
        if s in ("ours-async", "ours-direct", "ours-async-direct"):
            continue
        r = results.get(s, {})
        d = wl(r, "storage")
        if not d:
            L.append(f"| {LABELS[s]} | {err(r, 'storage')} | | | | | | |")
            continue
        cells = []
        for key in ("plain", "delta"):
            v = d.get(key, {})
            if "error" in v:
                cells += [f"FAILED: {v['error'][:120]}", "", ""]
                continue
            o = ours_st.get(key, {}).get("bytes")
            cells += [fmt(v.get("bytes")), fmt(v.get("objects")), ratio(v.get("bytes"), o)]
        pb, db = d.get("plain", {}).get("bytes"), d.get("delta", {}).get("bytes")
        dp = f"{db / pb:.2f}" if pb and db else "n/a"
        L.append(f"| {LABELS[s]} | " + " | ".join(cells) + f" | {dp} |")
    L.append(
        "\n(S3 savers: sum of object sizes under the saver's prefix; PostgreSQL: `pg_column_size` of the "
        "thread's rows; SQLite: payload column lengths; InMemory: serialized payload lengths.)\n"
    )

    # 5. throughput
    L.append("## 5. Throughput: AsyncS3Saver, concurrent vs sequential\n")
    L.append(
        "| saver | threads × steps | sequential steps/s | concurrent (asyncio.gather) steps/s | speedup "
        "| CPU per step, saver process + S3 server | CPU ceiling, steps/s (speedup) |"
    )
    L.append("|---|---|---:|---:|---:|---:|---:|")
    for s in ("ours-async", "ours-async-direct"):
        tp = wl(results.get(s, {}), "throughput")
        if tp:
            cpu = tp.get("cpu_ms_per_step")
            bound = (
                f" | {cpu['client']:.2f} + {cpu['server']:.2f} ms | {fmt(tp['cpu_ceiling_steps_per_s'])} "
                f"({tp['cpu_ceiling_speedup']:.2f}×)"
                if cpu and cpu.get("server")
                else " | n/a | n/a"
            )
            L.append(
                f"| {LABELS[s]} | {tp['threads']} × {tp['steps']} | {fmt(tp['sequential_steps_per_s'])} | "
                f"{fmt(tp['concurrent_steps_per_s'])} | {tp['speedup']:.2f}×{bound} |"
            )
        else:
            L.append(f"| {LABELS[s]} | {err(results.get(s, {}), 'throughput')} | | | | | |")
    L.append("")

    # 6. memory
    L.append("## 6. Peak traced memory of iterating `list()` over the whole thread (tracemalloc)\n")
    msizes = p["history"]["memory_sizes"]
    L.append("| saver | " + " | ".join(f"{n:,} cps: KiB (s)" for n in msizes) + " | growth |")
    L.append("|---|" + "---:|" * (len(msizes) + 1))
    for s in SAVERS:
        r = results.get(s, {})
        d = wl(r, "history")
        mem = (d or {}).get("list_memory", {})
        if not mem:
            L.append(f"| {LABELS[s]} | {err(r, 'history')} |" + " |" * len(msizes))
            continue
        cells = [f"{fmt(mem[str(n)]['peak_kib'])} ({mem[str(n)]['s']:.1f})" if str(n) in mem else "n/a" for n in msizes]
        a, b = mem.get(str(msizes[0])), mem.get(str(msizes[-1]))
        growth = f"{b['peak_kib'] / a['peak_kib']:.2f}×" if a and b and a["peak_kib"] else "n/a"
        L.append(f"| {LABELS[s]} | " + " | ".join(cells) + f" | {growth} |")
    L.append("")

    # targets
    L.append("## Targets (ours, this run)\n")
    for sync_key, async_key, variant, heading in (
        ("ours", "ours-async", "boto3", 'With `transport="boto3"`'),
        ("ours-direct", "ours-async-direct", "direct", "With the default transport (direct)"),
    ):
        if sync_key in results or async_key in results:
            L.append(f"{heading}:\n")
            L.extend(check_targets(results, p, meta, targets, sync_key, async_key, variant))
            L.append("")
    return "\n".join(L) + "\n", targets


def trim_profile(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    keep = [ln for ln in lines if "ncalls" in ln or ln.strip()[:1].isdigit()]
    return "\n".join(ln[:160] for ln in keep[:20])


def check_targets(
    results: dict[str, Any],
    p: dict[str, Any],
    meta: dict[str, Any],
    t: dict[str, Any],
    sync_key: str,
    async_key: str,
    variant: str,
) -> list[str]:
    out: list[str] = []
    ours = results.get(sync_key, {})
    ss = wl(ours, "supersteps")
    h = wl(ours, "history")
    bare = meta.get("bare") or {}

    def line(name: str, ok: bool | None, detail: str) -> None:
        t[f"{name} [{variant}]"] = {"met": ok, "detail": detail}
        mark = "n/a" if ok is None else ("met" if ok else "MISSED")
        out.append(f"- **{name}**: {mark} — {detail}")

    if ss:
        rq = ss["sync"]["requests_per_step"]
        one = ss["sync"].get("one_node_step")
        if one:
            line(
                "≤ 3 S3 requests for a one-node superstep (≤ 2 sequential)",
                one["total"] <= 3 and rq["waves"] <= 2,
                f"durability=sync, one more one-node step adds {one['total']} requests "
                f"({', '.join(f'{k} {v}' for k, v in one.items() if v and k not in ('total', 'waves'))}); "
                f"{rq['waves']:.2f} sequential waves per superstep; over the whole graph (input, fan-out) "
                f"{rq['total']:.2f} requests per superstep (async: {ss['async']['requests_per_step']['total']:.2f}, "
                f"exit: {ss['exit']['requests_per_step']['total']:.2f})",
            )
        ours_ms = ss["sync"]["per_step_ms"]
        s3_peers = [(s, wl(results.get(s, {}), "supersteps")) for s in ("tigris", "objectstorage")]
        s3_peers = [(s, d["sync"]["per_step_ms"]) for s, d in s3_peers if d and "sync" in d]
        if s3_peers:
            s, best = min(s3_peers, key=lambda x: x[1])
            line(
                "50-step run ≥ 2× faster than fastest working S3 peer",
                best / ours_ms >= 2,
                f"sync: ours {ours_ms:.2f} ms/step vs {LABELS[s]} {best:.2f} ms/step = {best / ours_ms:.2f}×",
            )
        else:
            line("50-step run ≥ 2× faster than fastest working S3 peer", None, "no S3 peer completed")
        pg = wl(results.get("postgres", {}), "supersteps")
        if pg and all(m in pg for m in ("sync", "async", "exit")):
            r = ours_ms / pg["sync"]["per_step_ms"]
            floor = ""
            if bare:
                floor = (
                    f"; bound: {ss['sync']['requests_per_step']['waves']:.2f} sequential S3 round trips/step × "
                    f"~{(bare['put_ms'] + bare['get_ms']) / 2:.2f} ms bare SeaweedFS latency"
                )
            line(
                "within 1.5× of PostgresSaver",
                r <= 1.5,
                f"sync: ours {ours_ms:.2f} vs Postgres {pg['sync']['per_step_ms']:.2f} ms/step = {r:.2f}× "
                f"(async: {ss['async']['per_step_ms'] / pg['async']['per_step_ms']:.2f}×, "
                f"exit: {ss['exit']['per_step_ms'] / pg['exit']['per_step_ms']:.2f}×){floor}",
            )
        else:
            line("within 1.5× of PostgresSaver", None, err(results.get("postgres", {}), "supersteps"))
    if h:
        sizes = p["history"]["sizes"]
        gs = h["get_state"]
        a, b = gs.get(str(sizes[0])), gs.get(str(sizes[-1]))
        if a and b:
            reqs = [gs[str(n)]["requests"]["total"] for n in sizes if str(n) in gs]
            line(
                "get_state requests constant in history length",
                len(set(reqs)) == 1,
                f"requests at {', '.join(f'{n:,}' for n in sizes)} checkpoints: {reqs}",
            )
            line(
                f"get_state latency at {sizes[-1]:,} within 1.2× of at {sizes[0]}",
                b["ms"] / a["ms"] <= 1.2,
                f"{a['ms']:.2f} ms → {b['ms']:.2f} ms = {b['ms'] / a['ms']:.2f}×",
            )
        mem = h.get("list_memory", {})
        ms = p["history"]["memory_sizes"]
        if str(ms[0]) in mem and str(ms[-1]) in mem:
            g = mem[str(ms[-1])]["peak_kib"] / max(mem[str(ms[0])]["peak_kib"], 1e-9)
            line(
                "list() memory flat in history length",
                g <= 1.5,
                f"peak {mem[str(ms[0])]['peak_kib']:.0f} KiB at {ms[0]:,} "
                f"vs {mem[str(ms[-1])]['peak_kib']:.0f} KiB at {ms[-1]:,} ({g:.2f}×)",
            )
    tp = wl(results.get(async_key, {}), "throughput")
    if tp:
        line(
            "async throughput at 100 concurrent threads ≥ 5× sequential",
            tp["speedup"] >= 5,
            f"{tp['sequential_steps_per_s']:.0f} → {tp['concurrent_steps_per_s']:.0f} steps/s = {tp['speedup']:.2f}× "
            f"on {meta['nproc']} cores"
            + (
                f"; bound: {tp['cpu_ms_per_step']['client']:.2f} ms of saver-process CPU + "
                f"{tp['cpu_ms_per_step']['server']:.2f} ms of SeaweedFS CPU per step on the same cores cap it at "
                f"{tp['cpu_ceiling_steps_per_s']:.0f} steps/s ({tp['cpu_ceiling_speedup']:.2f}× the sequential rate)"
                if tp.get("cpu_ms_per_step", {}).get("server")
                else ""
            ),
        )
    return out


def plots(results: dict[str, Any], p: dict[str, Any]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    # supersteps
    fig, ax = plt.subplots(figsize=(9, 4.5))
    modes = ("sync", "async", "exit")
    names = [s for s in SAVERS if wl(results.get(s, {}), "supersteps")]
    width = 0.8 / max(len(names), 1)
    for i, s in enumerate(names):
        d = wl(results[s], "supersteps")
        if not all(m in d for m in modes):
            continue
        ax.bar([m + i * width for m in range(3)], [d[m]["per_step_ms"] for m in modes], width, label=LABELS[s])
    ax.set_xticks([m + width * (len(names) - 1) / 2 for m in range(3)], [f"durability={m}" for m in modes])
    ax.set_ylabel("ms per superstep (median)")
    ax.set_yscale("log")
    ax.set_title(f"{p['supersteps']['steps']}-superstep graph")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "supersteps.png", dpi=110)
    plt.close(fig)
    made.append("supersteps.png")
    # get_state
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for s in SAVERS:
        d = wl(results.get(s, {}), "history")
        if not d:
            continue
        xs = [int(n) for n in d["get_state"]]
        ax.plot(xs, [d["get_state"][str(n)]["ms"] for n in xs], marker="o", label=LABELS[s])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("checkpoints in thread")
    ax.set_ylabel("get_state ms (median)")
    ax.set_title("Resume cost")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "get_state.png", dpi=110)
    plt.close(fig)
    made.append("get_state.png")
    # memory
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for s in SAVERS:
        d = wl(results.get(s, {}), "history")
        mem = (d or {}).get("list_memory") or {}
        if mem:
            xs = sorted(int(n) for n in mem)
            ax.plot(xs, [mem[str(n)]["peak_kib"] for n in xs], marker="o", label=LABELS[s])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("checkpoints listed")
    ax.set_ylabel("peak traced KiB")
    ax.set_title("Memory of iterating list()")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "list_memory.png", dpi=110)
    plt.close(fig)
    made.append("list_memory.png")
    return made


# ---------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller histories and fewer repeats (a few minutes)")
    ap.add_argument("--only", help="comma list of savers to run: " + ",".join(SAVERS))
    ap.add_argument("--timeout", type=float, default=None, help="per-saver timeout in seconds")
    args = ap.parse_args()
    savers = args.only.split(",") if args.only else list(SAVERS)
    # Report only what was selected.
    SAVERS[:] = [s for s in SAVERS if s in savers]
    p = params(args.quick)
    timeout = args.timeout or (150 if args.quick else 420)

    from langgraph_s3_checkpoint import local

    RESULTS.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    meta: dict[str, Any] = {
        "quick": args.quick,
        "nproc": os.cpu_count(),
        "arch": platform.machine(),
        "kernel": platform.platform(),
        "python": platform.python_version(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "params": p,
    }
    nproc = subprocess.run(["nproc"], capture_output=True, text=True)
    if nproc.returncode == 0:
        meta["nproc"] = int(nproc.stdout.strip())
    tmp = tempfile.mkdtemp(prefix="lg-bench-")
    results: dict[str, dict[str, Any]] = {}
    pg: Postgres | None = None
    server = local.start_seaweedfs()
    try:
        server.create_bucket(BUCKET)
        meta["bare"] = bare_latency(server)
        pg_error = None
        if "postgres" in savers:
            try:
                pg = Postgres()
                meta["postgres_version"] = os.path.basename(os.path.dirname(pg.bin))
            except Exception as exc:
                pg_error = f"PostgreSQL could not be started: {exc}"
        spec = {
            "s3": {
                "endpoint_url": server.endpoint_url,
                "access_key": server.access_key,
                "secret_key": server.secret_key,
                "region": server.region,
                "bucket": BUCKET,
                "server_pid": getattr(getattr(server, "_process", None), "pid", None),
            },
            "postgres_dsn": pg.dsn if pg else None,
            "tmp_dir": tmp,
        }
        client = server.client()
        for saver in savers:
            if saver == "postgres" and pg_error:
                results[saver] = {"saver": saver, "fatal": pg_error}
                continue
            workloads = {k: v for k, v in p.items() if k != "throughput"}
            if saver.startswith("ours-async"):
                workloads = {k: v for k, v in p.items() if k in ("supersteps", "history", "throughput")}
            if saver in ("ours", "ours-direct"):
                workloads["supersteps"] = {**p["supersteps"], "profile": True}
            if saver == "ours-direct":
                workloads.pop("storage", None)  # the same objects as with boto3
            print(f"[bench] {saver} ...", file=sys.stderr, flush=True)
            res = run_worker(saver, {**spec, "workloads": workloads}, timeout, tmp)
            st = wl(res, "storage")
            if st and saver in S3_SAVERS:
                for key in ("plain", "delta"):
                    v = st.get(key, {})
                    if v.get("prefix"):
                        v["bytes"], v["objects"] = prefix_bytes(client, v["prefix"])
            results[saver] = res
            print(
                f"[bench] {saver} done in {res['wall_s']:.0f}s {res.get('fatal', '')[:200]}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        if pg is not None:
            pg.stop()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    meta["elapsed_s"] = time.perf_counter() - t_start
    md, targets = report(meta, results, p)
    try:
        pngs = plots(results, p)
        md += "\nPlots: " + ", ".join(f"![{n}]({n})" for n in pngs) + "\n"
    except Exception as exc:
        md += f"\nPlots failed: {exc}\n"
    suffix = "quick" if args.quick else "full"
    (RESULTS / "latest.md").write_text(md)
    (RESULTS / f"{suffix}.md").write_text(md)
    payload = json.dumps({"meta": meta, "targets": targets, "results": results}, indent=1, default=str)
    (RESULTS / "latest.json").write_text(payload)
    (RESULTS / f"{suffix}.json").write_text(payload)
    print(md)


if __name__ == "__main__":
    main()
