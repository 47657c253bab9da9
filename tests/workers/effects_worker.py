"""Side effects under SIGKILL (tests/test_effects.py).

``pay``: a checkout graph (prepare -> pay -> confirm) whose ``pay`` node charges a fake payment
service; with ``--die-after-charge`` the process kills itself right after the charge went through,
before the node returns. With ``--keyed`` the charge carries idempotency_key(), otherwise a fresh key.

``ledger``: one EffectLedger.once() call whose action appends a line to a file, dying before or after
the effect when asked.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import urllib.request
import uuid
from pathlib import Path
from typing import TypedDict

from common import report, saver_from_env
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from langgraph_s3_checkpoint.effects import EffectLedger, idempotency_key


class Checkout(TypedDict, total=False):
    customer: str
    amount: int
    charge_id: str
    status: str


def charge(service: str, key: str, customer: str, amount: int) -> str:
    body = json.dumps({"key": key, "customer": customer, "amount": amount}).encode()
    request = urllib.request.Request(f"{service}/charge", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return str(json.loads(reply.read())["charge_id"])


def pay(args: argparse.Namespace) -> None:
    def prepare(state: Checkout) -> Checkout:
        return {"status": "prepared"}

    def pay_node(state: Checkout) -> Checkout:
        key = idempotency_key(name="charge") if args.keyed else uuid.uuid4().hex
        charge_id = charge(args.service, key, state["customer"], state["amount"])
        if args.die_after_charge:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"charge_id": charge_id, "status": "paid"}

    def confirm(state: Checkout) -> Checkout:
        return {"status": "confirmed"}

    builder = StateGraph(Checkout)
    builder.add_sequence([("prepare", prepare), ("pay", pay_node), ("confirm", confirm)])
    builder.add_edge(START, "prepare")
    builder.add_edge("confirm", END)
    saver = saver_from_env()
    graph = builder.compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": args.thread}}
    started = graph.get_state(config).created_at is not None
    start: Checkout | None = None if started else {"customer": args.customer, "amount": 4200}
    graph.invoke(start, config, durability=args.durability)
    report(dict(graph.get_state(config).values))
    saver.close()


def ledger(args: argparse.Namespace) -> None:
    saver = saver_from_env()
    effects = EffectLedger(saver, mode=args.mode)

    def action() -> None:
        if args.die == "before-effect":
            os.kill(os.getpid(), signal.SIGKILL)
        with open(args.effect_file, "a") as f:
            f.write("fired\n")
        if args.die == "after-effect":
            os.kill(os.getpid(), signal.SIGKILL)

    fired = effects.once(args.key, action)
    log = Path(args.effect_file)
    report({"fired": fired, "effects": log.read_text().count("fired") if log.exists() else 0})
    saver.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pay")
    p.add_argument("--thread", required=True)
    p.add_argument("--service", required=True)
    p.add_argument("--customer", default="cus_1")
    p.add_argument("--durability", default="sync")
    p.add_argument("--keyed", action="store_true")
    p.add_argument("--die-after-charge", action="store_true")
    p.set_defaults(run=pay)
    q = sub.add_parser("ledger")
    q.add_argument("--mode", required=True, choices=["at_most_once", "at_least_once"])
    q.add_argument("--key", required=True)
    q.add_argument("--effect-file", required=True)
    q.add_argument("--die", default="never", choices=["never", "before-effect", "after-effect"])
    q.set_defaults(run=ledger)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
