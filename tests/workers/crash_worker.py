"""Run or resume the crash graph (tests/test_crash.py), optionally SIGKILLed at the N-th S3 request.

``run``: start (or continue) one thread, dying just before the ``--kill-at``-th HTTP request.
``resume``: continue each of several threads from its latest checkpoint until the graph is done,
reporting the final ``log`` of each.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import crash_graph, crash_input, crash_saver, drive, kill_at_request, report, saver_from_env
from langchain_core.runnables import RunnableConfig

from langgraph_s3_checkpoint import CheckpointConflictError

RESUME_ATTEMPTS = 3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["run", "resume"])
    parser.add_argument("--threads", required=True, help="comma-separated thread ids")
    parser.add_argument("--durability", required=True)
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--execdir", required=True, help="one execution log per thread goes here")
    parser.add_argument("--kill-at", type=int, default=0)
    args = parser.parse_args()

    saver = crash_saver(saver_from_env())
    sent = kill_at_request(saver.client, args.kill_at)
    finals: dict[str, list[str]] = {}
    conflicts = 0
    for thread in args.threads.split(","):
        graph = crash_graph(saver, rounds=args.rounds, execlog=Path(args.execdir) / f"{thread}.log")
        config: RunnableConfig = {"configurable": {"thread_id": thread}}
        for _ in range(RESUME_ATTEMPTS):
            try:
                drive(graph, config, crash_input(), args.durability)
            except CheckpointConflictError:
                # A request the killed process sent just before dying can land after we read the head.
                conflicts += 1
                continue
            state = graph.get_state(config)
            if not state.next and state.values.get("round") == args.rounds:
                break
            if args.mode == "run":
                break
        finals[thread] = graph.get_state(config).values.get("log", [])
    report({"finals": finals, "requests": sent(), "conflicts": conflicts})
    saver.close()


if __name__ == "__main__":
    main()
