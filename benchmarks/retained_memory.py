"""What one long-lived saver keeps between calls: bytes retained per thread after many one-step threads.

    python benchmarks/retained_memory.py                  # 20,000 threads on a local SeaweedFS (~10 min on 2 cores)
    python benchmarks/retained_memory.py --threads 2000   # a quick look

One ``S3Saver`` serves every thread, as one server process does. Each thread is a real one-node graph run
(``invoke``: a latest read that finds the thread empty, the input checkpoint, the node's writes, the step's
checkpoint), so what LangGraph itself keeps is counted too. Python's ``tracemalloc`` measures the bytes allocated
and still alive after a full garbage collection: once after a warm-up of ``--warmup`` threads, then after every
``--every`` threads. Reported: the total retained growth, the saver's own accounted tables (its memory of heads,
``Recall.retained_bytes``, bounded by ``memory_bytes``; its read cache of bodies, bounded by ``read_cache_bytes``),
and the growth per thread beyond those budgets. Results go to ``results/retained_memory.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import operator
import platform
import time
import tracemalloc
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_s3_checkpoint import S3Saver, local

RESULTS = Path(__file__).resolve().parent / "results"


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def build(saver: S3Saver) -> Any:
    builder = StateGraph(State)
    builder.add_node("step", lambda state: {"log": ["done"]})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=saver)


def retained() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def read_cache_bytes(saver: S3Saver) -> int:
    cache = saver.bucket_io.cache
    return 0 if cache is None else cache.retained_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=20_000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--every", type=int, default=5_000)
    args = parser.parse_args()
    server = local.start("seaweedfs")
    try:
        server.create_bucket("retained")
        saver = S3Saver(bucket="retained", prefix="bench", client=server.client())
        graph = build(saver)
        tracemalloc.start()
        started = time.perf_counter()
        for n in range(args.warmup):
            graph.invoke({"log": ["in"]}, {"configurable": {"thread_id": f"warm-{n}"}})
        baseline = retained()
        samples: list[dict[str, Any]] = []
        for n in range(1, args.threads + 1):
            graph.invoke({"log": ["in"]}, {"configurable": {"thread_id": f"t-{n}"}})
            if n % args.every == 0 or n == args.threads:
                total = retained() - baseline
                accounted = saver.plans.recall.retained_bytes + read_cache_bytes(saver)
                previous = samples[-1] if samples else {"threads": 0, "retained_growth_bytes": 0}
                samples.append(
                    {
                        "threads": n,
                        "retained_growth_bytes": total,
                        "saver_memory_bytes": saver.plans.recall.retained_bytes,
                        "read_cache_bytes": read_cache_bytes(saver),
                        "beyond_budgets_per_thread": max(0, total - accounted) / n,
                        # Once the budgets are full, this is what each further thread costs.
                        "growth_per_thread_since_previous": (total - previous["retained_growth_bytes"])
                        / (n - previous["threads"]),
                    }
                )
                print(json.dumps(samples[-1]), flush=True)
        result = {
            "date": datetime.now(timezone.utc).isoformat(timespec="minutes"),
            "machine": f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}",
            "threads": args.threads,
            "warmup": args.warmup,
            "memory_bytes_budget": saver.plans.recall.max_bytes,
            "cache_bytes_budget": saver.bucket_io.cache.max_bytes if saver.bucket_io.cache else 0,
            "seconds": round(time.perf_counter() - started, 1),
            "samples": samples,
        }
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "retained_memory.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
        saver.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
