"""One of several processes committing to the same thread at once (tests/test_fencing.py).

Each attempt invokes the fencing graph with a unique marker. A run that returns committed its marker;
a run that raises CheckpointConflictError lost a race: reload the thread and try again.
"""

from __future__ import annotations

import argparse
import time

from common import barrier, fence_graph, report, saver_from_env
from langchain_core.runnables import RunnableConfig

from langgraph_s3_checkpoint import CheckpointConflictError


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--thread", required=True)
    parser.add_argument("--worker", required=True)
    parser.add_argument("--commits", type=int, default=10, help="stop after this many successful runs")
    parser.add_argument("--attempts", type=int, default=200, help="stop after this many runs")
    parser.add_argument("--seconds", type=float, default=60, help="stop after this long")
    parser.add_argument("--durability", default="sync")
    parser.add_argument("--saver-per-attempt", action="store_true")
    parser.add_argument("--jitter", type=float, default=0.02)
    parser.add_argument("--barrier", default="", help="directory of a start barrier shared with the parent")
    args = parser.parse_args()

    config: RunnableConfig = {"configurable": {"thread_id": args.thread}}
    saver = saver_from_env()
    graph = fence_graph(saver, jitter=args.jitter)
    committed: list[str] = []
    conflicts = 0
    lost: list[str] = []
    attempts = 0
    barrier(args.barrier, args.worker)
    deadline = time.monotonic() + args.seconds
    while len(committed) < args.commits and attempts < args.attempts and time.monotonic() < deadline:
        attempts += 1
        if args.saver_per_attempt:
            saver.close()
            saver = saver_from_env(client=saver.client)
            graph = fence_graph(saver, jitter=args.jitter)
        marker = f"{args.worker}-{attempts}"
        try:
            graph.invoke({"pending": marker}, config, durability=args.durability)
        except CheckpointConflictError:
            conflicts += 1
            lost.append(marker)
            graph.get_state(config)  # reload: the next attempt continues from the winner's head
            continue
        committed.append(marker)
    saver.close()
    report({"committed": committed, "conflicts": conflicts, "lost": lost, "attempts": attempts})


if __name__ == "__main__":
    main()
