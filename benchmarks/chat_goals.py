"""Issue 40's chat, measured as its goals table counts it: requests and bytes per superstep of a long chat.

A plain ``MessagesState`` chat, one model node appending a reply of about 1.1 KB to a user message of about 1.1 KB
(seeded pseudo-random words, zlib about 2.3x as prose), ``durability="sync"``, no ``DeltaChannel``, 120 turns on
one thread, through ``S3Saver`` on the in-memory bucket (``MemoryBucket``: every request and body counted; the
same plans as on a server). Reported: PUT-class requests per superstep, LISTs per invoke, bytes uploaded per
superstep over turns 111-120 against turns 1-10, bytes stored against the conversation serialized once, and what a
fresh process's latest ``get_tuple`` sends. ``--appended-tail-bytes 0`` stores every large list whole (each version
a new base), the layout before large lists were stored as what was appended, for comparison in the same run.

    python benchmarks/chat_goals.py                 # ~20 s
    python benchmarks/chat_goals.py --turns 200 --appended-tail-bytes 0
"""

from __future__ import annotations

import argparse
import random
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_s3_checkpoint import S3Saver
from langgraph_s3_checkpoint._protocol.requests import Copy, Get, ListKeys, Put
from langgraph_s3_checkpoint.memory import MemoryBucket

SUPERSTEPS_PER_TURN = 3  # the input checkpoint, __start__'s, the model's
"""PUT-class: PUT, COPY and LIST, which S3 bills alike (us-east-1: $0.005 per 1,000)."""


def _texts(seed: int) -> Any:
    rnd = random.Random(seed)
    words = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(2, 9))) for _ in range(2000)]

    def text(size: int) -> str:
        out: list[str] = []
        while sum(len(w) + 1 for w in out) < size:
            out.append(rnd.choice(words))
        return " ".join(out)

    return text


def measure(turns: int, tail_bytes: int | None) -> dict[str, Any]:
    text = _texts(1)

    def model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content=text(1100))]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    bucket = MemoryBucket(keep_log=True)
    saver = S3Saver(bucket="chat", client=bucket)
    if tail_bytes is not None:
        saver.plans.appended_tail_bytes = tail_bytes
    graph = builder.compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": "chat"}}
    assert bucket.log is not None
    per_turn = []
    for _ in range(turns):
        start = len(bucket.log)
        graph.invoke({"messages": [HumanMessage(content=text(1100))]}, config, durability="sync")
        sent = [request for request, _ in bucket.log[start:]]
        writes = [r for r in sent if isinstance(r, (Put, Copy))]
        per_turn.append(
            {
                "put_class": sum(1 for r in sent if isinstance(r, (Put, Copy, ListKeys))),  # billed alike
                "lists": sum(1 for r in sent if isinstance(r, ListKeys)),
                "uploaded": sum(len(getattr(r, "body", b"")) for r in writes),
            }
        )
    stored = sum(len(obj.body) for obj in map(bucket.object, bucket.keys("")) if obj is not None)
    conversation = len(JsonPlusSerializer().dumps_typed(graph.get_state(config).values["messages"])[1])
    start = len(bucket.log)
    latest = S3Saver(bucket="chat", client=bucket).get_tuple(config)
    cold = [request for request, _ in bucket.log[start:]]
    assert latest is not None
    head_key = saver.plans.layout.head("chat", "")
    head = bucket.object(head_key)
    assert head is not None
    window = min(10, turns // 2)
    early = sum(t["uploaded"] for t in per_turn[:window]) / (window * SUPERSTEPS_PER_TURN)
    late = sum(t["uploaded"] for t in per_turn[-window:]) / (window * SUPERSTEPS_PER_TURN)
    return {
        "turns": turns,
        "put_class_per_superstep": sum(t["put_class"] for t in per_turn) / (turns * SUPERSTEPS_PER_TURN),
        "lists_per_invoke": sum(t["lists"] for t in per_turn) / turns,
        "uploaded_per_superstep_first": early,
        "uploaded_per_superstep_last": late,
        "stored_bytes": stored,
        "conversation_bytes": conversation,
        "head_large_values": len(saver.plans.codec.decode_record(head_key, head.body).blobs),
        "cold_get_tuple": {
            "GET": sum(1 for r in cold if isinstance(r, Get)),
            "LIST": sum(1 for r in cold if isinstance(r, ListKeys)),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=120)
    parser.add_argument("--appended-tail-bytes", type=int, default=None, help="0: every large list stored whole")
    args = parser.parse_args()
    rows = [("this release", measure(args.turns, args.appended_tail_bytes))]
    if args.appended_tail_bytes is None:
        rows.append(("lists stored whole (appended_tail_bytes=0)", measure(args.turns, 0)))
    window = min(10, args.turns // 2)
    print(f"Chat of {args.turns} turns ({SUPERSTEPS_PER_TURN} supersteps a turn), S3Saver on MemoryBucket\n")
    print(
        f"| layout | PUT-class per superstep | LIST per invoke | bytes uploaded per superstep, last {window} turns"
        f" vs first {window} | bytes stored / conversation | cold latest get_tuple |"
    )
    print("|---|---:|---:|---:|---:|---|")
    for name, r in rows:
        first, last = r["uploaded_per_superstep_first"], r["uploaded_per_superstep_last"]
        cold = r["cold_get_tuple"]
        print(
            f"| {name} | {r['put_class_per_superstep']:.2f} | {r['lists_per_invoke']:.2f} | "
            f"{last / 1024:.1f} KB vs {first / 1024:.1f} KB ({last / first:.1f}x) | "
            f"{r['stored_bytes'] / 1e6:.2f} MB / {r['conversation_bytes'] / 1e3:.0f} KB "
            f"({r['stored_bytes'] / r['conversation_bytes']:.1f}x) | {cold['GET']} GET + {cold['LIST']} LIST |"
        )


if __name__ == "__main__":
    main()
