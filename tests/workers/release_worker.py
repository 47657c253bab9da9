"""One operation of whichever release of the package is first on ``sys.path`` (tests/test_format_upgrade.py runs it
with release 0.1.0's source, extracted from its commit, in front), on the thread the parent names.

Reports the state the operation leaves, or the error it raised (type and message): a release meeting a format it
cannot read must raise, not guess.
"""

from __future__ import annotations

import argparse
from typing import Any

from common import ops_graph, report, saver_from_env

import langgraph_s3_checkpoint
from langgraph_s3_checkpoint.gc import gc


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("op", choices=["turns", "read", "gc", "rollback"])
    parser.add_argument("--thread", default="")
    parser.add_argument("--runs", default="", help="comma-separated run ids: one turn each, or the runs to delete")
    args = parser.parse_args()
    runs = [run for run in args.runs.split(",") if run]
    saver = saver_from_env()
    graph = ops_graph(saver)
    config: dict[str, Any] = {"configurable": {"thread_id": args.thread}}
    result: dict[str, Any] = {"package": langgraph_s3_checkpoint.__file__}
    try:
        if args.op == "turns":
            for run in runs:
                graph.invoke({"log": [f"user:{run}"]}, {**config, "metadata": {"run_id": run}})
        elif args.op == "gc":
            result["deleted"] = dict(gc(saver, grace_seconds=0).deleted)
        elif args.op == "rollback":
            saver.delete_for_runs(runs)
        if args.thread:
            result["log"] = graph.get_state(config).values.get("log")
    except Exception as exc:  # the parent asserts which error, and its message
        result["error"] = type(exc).__name__
        result["message"] = str(exc)
    report(result)
    saver.close()


if __name__ == "__main__":
    main()
