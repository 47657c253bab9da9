"""Crash an agent on purpose and resume it from the bucket: ``python -m langgraph_s3_checkpoint.demo``.

The demo starts an embedded SeaweedFS server (no cloud account), then runs an agent-like graph in a
child process: ``plan`` → three tools in parallel → ``answer``. One tool kills its own process with
SIGKILL after its siblings have finished. A *fresh* process then resumes the thread with
``invoke(None, config)``: the finished tools are not run again, because their writes were already in
the bucket; only the killed one re-runs.
"""

from __future__ import annotations

import argparse
import operator
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

from typing_extensions import TypedDict

BUCKET = "demo-checkpoints"
THREAD = {"configurable": {"thread_id": "support-ticket-42"}}
WORKER = [sys.executable, "-m", "langgraph_s3_checkpoint.demo", "--worker"]


class AgentState(TypedDict):
    question: str
    findings: Annotated[list[str], operator.add]
    answer: str


def _log(event: str) -> None:
    with open(os.environ["DEMO_LOG"], "a") as f:
        f.write(event + "\n")


def _tool(name: str, result: str, *, crash: bool = False) -> Any:
    def run(state: AgentState) -> dict[str, Any]:
        _log(f"ran {name}")
        if crash and os.environ.get("DEMO_CRASH") == "1":
            # Let the sibling tools finish and store their writes, then die the hard way.
            time.sleep(1.0)
            _log(f"{name} killed its process (SIGKILL) mid-step")
            os.kill(os.getpid(), signal.SIGKILL)
        return {"findings": [f"{name}: {result}"]}

    return run


def build_graph(checkpointer: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    def plan(state: AgentState) -> dict[str, Any]:
        _log("ran plan")
        return {"findings": ["plan: look up order, policy and shipping"]}

    def answer(state: AgentState) -> dict[str, Any]:
        _log("ran answer")
        return {"answer": f"Resolved using {len(state['findings'])} findings."}

    builder = StateGraph(AgentState)
    builder.add_node("plan", plan)
    builder.add_node("order_lookup", _tool("order_lookup", "order #42 shipped 2026-11-27"))
    builder.add_node("refund_policy", _tool("refund_policy", "refunds within 30 days"))
    builder.add_node("carrier_status", _tool("carrier_status", "parcel delayed", crash=True))
    builder.add_node("answer", answer)
    builder.add_edge(START, "plan")
    for tool in ("order_lookup", "refund_policy", "carrier_status"):
        builder.add_edge("plan", tool)
        builder.add_edge(tool, "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=checkpointer)


def worker() -> None:
    """Runs in a child process: resume the thread if it exists, else start it."""
    from langgraph_s3_checkpoint import S3Saver

    with S3Saver.from_conn_string(
        f"s3://{BUCKET}/demo",
        endpoint_url=os.environ["DEMO_ENDPOINT"],
        region_name="us-east-1",
        aws_access_key_id=os.environ["DEMO_KEY"],
        aws_secret_access_key=os.environ["DEMO_SECRET"],
    ) as saver:
        graph = build_graph(saver)
        existing = graph.get_state(THREAD)
        inputs = None if existing.next else {"question": "Where is my order?", "findings": []}
        result = graph.invoke(inputs, THREAD, durability="sync")
        print(f"  final answer: {result['answer']}")
        print(f"  findings: {result['findings']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    if parser.parse_args().worker:
        worker()
        return

    from langgraph_s3_checkpoint import local

    print("Starting an embedded SeaweedFS S3 server on 127.0.0.1 ...")
    with local.start_seaweedfs() as server, tempfile.TemporaryDirectory() as tmp:
        server.create_bucket(BUCKET)
        log = Path(tmp) / "events.log"
        env = {
            **os.environ,
            "DEMO_ENDPOINT": server.endpoint_url,
            "DEMO_KEY": server.access_key,
            "DEMO_SECRET": server.secret_key,
            "DEMO_LOG": str(log),
        }
        print(f"  endpoint {server.endpoint_url}, bucket {BUCKET!r}\n")

        print("1) Child process A runs the agent; one tool will crash it.")
        sys.stdout.flush()  # the children write to the same stdout: keep the story in order
        first = subprocess.run(WORKER, env={**env, "DEMO_CRASH": "1"})
        died = -first.returncode == signal.SIGKILL
        print(f"  process A exited with {'SIGKILL' if died else first.returncode}")
        _show(log)
        log.write_text("")

        print("\n2) A fresh process B resumes the same thread from the bucket (invoke(None, config)).")
        sys.stdout.flush()
        second = subprocess.run(WORKER, env={**env, "DEMO_CRASH": "0"})
        _show(log)
        if not died or second.returncode != 0:
            raise SystemExit("demo failed: expected A to be killed and B to finish")

        keys = [o["Key"] for o in server.client().list_objects_v2(Bucket=BUCKET).get("Contents", [])]
        print(f"\n3) The bucket now holds {len(keys)} objects for the thread, e.g.:")
        for key in keys[:4]:
            print(f"  {key}")
        print("\nThe tools that finished before the crash were not run again: their writes were already stored.")


def _show(log: Path) -> None:
    for line in log.read_text().splitlines():
        print(f"  - {line}")


if __name__ == "__main__":
    main()
