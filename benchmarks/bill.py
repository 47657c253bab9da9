"""The bill, side by side: S3Saver, DynamoDBSaver and PostgresSaver fed the same two agents, priced.

    python benchmarks/bill.py                 # ~5 minutes: writes results/bill.md and results/bill.json

Two agents, each a LangGraph graph without a model (deterministic nodes), run turn after turn on several
threads; every turn starts with LangGraph's read of the thread's latest checkpoint, as a server does:

* **chat**: a user message in, one reply out (about 500 characters); the history grows by two messages a turn;
* **tool-heavy**: the agent asks for three tools, ``ToolNode`` runs them (4 KB of output each), the agent answers:
  four checkpoints a turn, and a history that grows by 12 KB a turn.

Savers, each measured in the same run:

* ``S3Saver`` (ours, default options) on a local SeaweedFS: requests by kind, counted in the saver's own
  senders; bytes stored = the sizes of its objects;
* ``DynamoDBSaver`` of ``langgraph-checkpoint-aws`` on moto's DynamoDB (server mode, a table with ``PK``/``SK``,
  on-demand): request units computed from the items themselves, by DynamoDB's rules (a write: 1 WRU per KB of
  the item, rounded up, per item; a read: eventually consistent, as the saver reads, 0.5 RRU per 4 KB, rounded
  up per item for GetItem and BatchGetItem and per call over the items returned for Query; a delete: the
  item's size); bytes stored = items plus DynamoDB's 100 bytes of overhead per item;
* ``PostgresSaver`` on a throwaway local PostgreSQL: bytes stored = its tables with their indexes and TOAST.

The prices (``PRICES``) are list prices of us-east-1 with their sources and the date they were looked up. The
bill per million supersteps (checkpoints) is requests x price; per GB-month of history, the storage price times
the bytes a million supersteps leave. PostgreSQL is billed by the instance, not by the request: its row gives the
instance's monthly price, what that comes to per million supersteps at 10 million supersteps a month, and its
storage.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

LOOKED_UP = "2026-12-03"
PRICES: dict[str, dict[str, Any]] = {
    "s3": {
        "put_list_per_1000": 0.005,
        "get_per_1000": 0.0004,
        "delete_per_1000": 0.0,
        "storage_gb_month": 0.023,
        "source": "aws.amazon.com/s3/pricing, S3 Standard, us-east-1: PUT, COPY, POST, LIST $0.005 per 1,000 "
        "requests; GET $0.0004 per 1,000; DELETE free; storage $0.023 per GB-month (first 50 TB)",
    },
    "dynamodb": {
        "wru_per_million": 0.625,
        "rru_per_million": 0.125,
        "storage_gb_month": 0.25,
        "source": "aws.amazon.com/dynamodb/pricing/on-demand, us-east-1, Standard table class, after the on-demand "
        "price cut of 2024-11-01: $0.625 per million write request units, $0.125 per million read request units, "
        "storage $0.25 per GB-month (the first 25 GB each month free, not counted here)",
    },
    "postgres": {
        "instance_month": 11.68,
        "storage_gb_month": 0.115,
        "minimum_storage_gb": 20,
        "source": "aws.amazon.com/rds/postgresql/pricing, us-east-1: db.t4g.micro Single-AZ on demand $0.016 per hour "
        "($11.68 per 730-hour month; 2 vCPU, 1 GiB), gp3 storage $0.115 per GB-month, 20 GB at least",
    },
}
PRICES_NOTE = (
    f"Looked up {LOOKED_UP} in stored copies of the AWS pricing pages and in secondary sources quoting them "
    "(airbyte.com's DynamoDB pricing guide of 2025-07-21, infratally.com's RDS pricing article of 2026, usage.ai's "
    "RDS pricing guide of June 2026); check the live pages before relying on them."
)
POSTGRES_VOLUME = 10_000_000
"""Supersteps a month over which the PostgreSQL instance's price is spread in the per-million column."""


# ---------------------------------------------------------------------------------------------
# the agents


class Messages(TypedDict):
    messages: Annotated[list[Any], add_messages]


def chat_agent() -> StateGraph:
    def reply(state: Messages) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"Reply to message {len(state['messages'])}: " + "lorem " * 80)]}

    g = StateGraph(Messages)
    g.add_node("reply", reply)
    g.add_edge(START, "reply")
    g.add_edge("reply", END)
    return g


@tool
def search(query: str) -> str:
    """Search the documents."""
    return json.dumps({"query": query, "results": [f"passage {i}: " + "ipsum " * 60 for i in range(10)]})[:4096]


def tool_agent() -> StateGraph:
    def agent(state: Messages) -> dict[str, Any]:
        last = state["messages"][-1]
        if isinstance(last, HumanMessage):
            calls = [
                {"name": "search", "args": {"query": f"{last.content} #{i}"}, "id": f"call-{uuid.uuid4().hex[:12]}"}
                for i in range(3)
            ]
            return {"messages": [AIMessage(content="", tool_calls=calls)]}
        return {"messages": [AIMessage(content="Here is what I found: " + "dolor " * 60)]}

    def route(state: Messages) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    g = StateGraph(Messages)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([search]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["tools", END])
    g.add_edge("tools", "agent")
    return g


AGENTS = {"chat": (chat_agent, 10, 10), "tool-heavy": (tool_agent, 5, 6)}
"""Agent -> (graph, threads, turns per thread)."""


class Supersteps:
    """Counts the checkpoints a saver is asked to store (one per superstep)."""

    def __init__(self, saver: Any) -> None:
        self.count = 0
        original = saver.put

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return original(*args, **kwargs)

        saver.put = counted


def run_agent(saver: Any, agent: str) -> int:
    """Run one agent's turns on its threads through ``saver``; returns the supersteps stored."""
    make, threads, turns = AGENTS[agent]
    graph = make().compile(checkpointer=saver)
    steps = Supersteps(saver)
    tag = uuid.uuid4().hex[:8]
    for t in range(threads):
        config = {"configurable": {"thread_id": f"{agent}-{tag}-{t}"}}
        for turn in range(turns):
            graph.invoke({"messages": [HumanMessage(content=f"question {turn} on thread {t}")]}, config)
    return steps.count


# ---------------------------------------------------------------------------------------------
# DynamoDB request units, by DynamoDB's rules


def _value_size(value: dict[str, Any]) -> int:
    kind, inner = next(iter(value.items()))
    if kind == "S":
        return len(inner.encode("utf-8"))
    if kind == "B":
        return len(inner)
    if kind == "N":
        return math.ceil(len(str(inner).lstrip("-").replace(".", "")) / 2) + 1
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + _value_size(v) + 1 for k, v in inner.items())
    if kind == "L":
        return 3 + sum(_value_size(v) + 1 for v in inner)
    if kind in ("SS", "NS", "BS"):
        return sum(_value_size({kind[0]: v}) for v in inner)
    raise ValueError(kind)


def item_size(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB counts it: attribute names plus values."""
    return sum(len(name.encode("utf-8")) + _value_size(value) for name, value in item.items())


class DynamoMeter:
    """Wraps a DynamoDB client's calls to count request units and the bytes stored."""

    def __init__(self, client: Any) -> None:
        self.wru = 0.0
        self.rru = 0.0
        self.calls: dict[str, int] = {}
        self.sizes: dict[tuple[str, str], int] = {}
        for name in ("put_item", "get_item", "query", "batch_get_item", "batch_write_item", "delete_item"):
            setattr(client, name, self._wrap(name, getattr(client, name)))

    @staticmethod
    def _key(item: dict[str, Any]) -> tuple[str, str]:
        return item["PK"]["S"], item["SK"]["S"]

    def _full_size(self, item: dict[str, Any]) -> int:
        return self.sizes.get(self._key(item), item_size(item)) if "PK" in item and "SK" in item else item_size(item)

    def _wrap(self, name: str, call: Any) -> Any:
        def metered(**params: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            if name == "put_item":
                size = item_size(params["Item"])
                self.sizes[self._key(params["Item"])] = size
                self.wru += math.ceil(size / 1024)
            response = call(**params)
            if name == "get_item" and "Item" in response:
                self.rru += 0.5 * math.ceil(self._full_size(response["Item"]) / 4096)
            elif name == "query":
                total = sum(self._full_size(item) for item in response.get("Items", []))
                self.rru += 0.5 * max(1, math.ceil(total / 4096))
            elif name == "batch_get_item":
                for items in response.get("Responses", {}).values():
                    self.rru += sum(0.5 * math.ceil(self._full_size(item) / 4096) for item in items)
            elif name == "batch_write_item":
                for requests in params["RequestItems"].values():
                    for request in requests:
                        if "DeleteRequest" in request:
                            key = request["DeleteRequest"]["Key"]
                            self.wru += math.ceil(self.sizes.pop(self._key(key), 1) / 1024)
                        else:
                            item = request["PutRequest"]["Item"]
                            self.sizes[self._key(item)] = item_size(item)
                            self.wru += math.ceil(self.sizes[self._key(item)] / 1024)
            return response

        return metered

    @property
    def stored_bytes(self) -> int:
        return sum(self.sizes.values()) + 100 * len(self.sizes)


# ---------------------------------------------------------------------------------------------
# the savers


def measure_s3(server: Any, bucket: str, agent: str) -> dict[str, Any]:
    from worker import Counter

    from langgraph_s3_checkpoint import S3Saver

    prefix = f"bill/{agent}/{uuid.uuid4().hex[:8]}"
    options = {
        "endpoint_url": server.endpoint_url,
        "aws_access_key_id": server.access_key,
        "aws_secret_access_key": server.secret_key,
        "region_name": server.region,
    }
    with S3Saver(bucket=bucket, prefix=prefix, **options) as saver:
        counter = Counter()
        counter.attach_saver(saver)
        started = time.perf_counter()
        supersteps = run_agent(saver, agent)
        seconds = time.perf_counter() - started
        requests = counter.snapshot()
    client = server.client()
    stored = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        stored += sum(obj["Size"] for obj in page.get("Contents", []))
    return {"supersteps": supersteps, "seconds": round(seconds, 2), "requests": requests, "stored_bytes": stored}


def measure_dynamodb(moto: Any, agent: str) -> dict[str, Any]:
    import boto3
    from langgraph_checkpoint_aws import DynamoDBSaver

    os.environ.setdefault("AWS_ACCESS_KEY_ID", moto.access_key)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", moto.secret_key)
    table = f"checkpoints-{agent}-{uuid.uuid4().hex[:6]}"
    dynamodb = boto3.client(
        "dynamodb",
        endpoint_url=moto.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id=moto.access_key,
        aws_secret_access_key=moto.secret_key,
    )
    dynamodb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "PK", "AttributeType": "S"},
            {"AttributeName": "SK", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    saver = DynamoDBSaver(table_name=table, region_name="us-east-1", endpoint_url=moto.endpoint_url)
    meter = DynamoMeter(saver.client)
    started = time.perf_counter()
    supersteps = run_agent(saver, agent)
    seconds = time.perf_counter() - started
    return {
        "supersteps": supersteps,
        "seconds": round(seconds, 2),
        "wru": meter.wru,
        "rru": meter.rru,
        "calls": meter.calls,
        "stored_bytes": meter.stored_bytes,
    }


def measure_postgres(dsn: str, agent: str) -> dict[str, Any]:
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import Connection
    from psycopg.rows import dict_row

    schema = f"bill_{agent.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
    with Connection.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"SET search_path TO {schema}")
        saver = PostgresSaver(conn)
        saver.setup()
        started = time.perf_counter()
        supersteps = run_agent(saver, agent)
        seconds = time.perf_counter() - started
        conn.execute("VACUUM ANALYZE")
        row = conn.execute(
            "SELECT sum(pg_total_relation_size(c.oid))::bigint AS bytes FROM pg_class c "
            "ON_HEAD pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
    return {"supersteps": supersteps, "seconds": round(seconds, 2), "stored_bytes": int(row["bytes"])}


# ---------------------------------------------------------------------------------------------
# the bill


def s3_dollars(m: dict[str, Any]) -> float:
    r, p = m["requests"], PRICES["s3"]
    return (r["PUT"] + r["LIST"]) / 1000 * p["put_list_per_1000"] + r["GET"] / 1000 * p["get_per_1000"]


def dynamodb_dollars(m: dict[str, Any]) -> float:
    p = PRICES["dynamodb"]
    return m["wru"] / 1e6 * p["wru_per_million"] + m["rru"] / 1e6 * p["rru_per_million"]


def bill(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for agent, by_saver in results.items():
        s3, ddb, pg = by_saver["s3"], by_saver["dynamodb"], by_saver["postgres"]
        per_million: dict[str, dict[str, float]] = {}
        per_million["s3"] = {
            "requests": s3_dollars(s3) / s3["supersteps"] * 1e6,
            "gb": s3["stored_bytes"] / s3["supersteps"] * 1e6 / 1e9,
        }
        per_million["dynamodb"] = {
            "requests": dynamodb_dollars(ddb) / ddb["supersteps"] * 1e6,
            "gb": ddb["stored_bytes"] / ddb["supersteps"] * 1e6 / 1e9,
        }
        per_million["postgres"] = {
            "requests": PRICES["postgres"]["instance_month"] / POSTGRES_VOLUME * 1e6,
            "gb": pg["stored_bytes"] / pg["supersteps"] * 1e6 / 1e9,
        }
        for saver, row in per_million.items():
            row["storage_per_month"] = row["gb"] * PRICES[saver]["storage_gb_month"]
        out[agent] = per_million
    return out


def report(meta: dict[str, Any], results: dict[str, dict[str, Any]], dollars: dict[str, Any]) -> str:
    lines = [
        "# The bill, side by side: S3Saver, DynamoDBSaver, PostgresSaver",
        "",
        f"Run of {meta['date']} on {meta['machine']}. Measured with `benchmarks/bill.py`: the same agents through each "
        "saver; requests, request units and bytes measured, then priced.",
        "",
        "## Measured",
        "",
        "| agent | saver | supersteps | per superstep | bytes stored per superstep |",
        "|---|---|---:|---|---:|",
    ]
    for agent, by_saver in results.items():
        s3, ddb, pg = by_saver["s3"], by_saver["dynamodb"], by_saver["postgres"]
        r = s3["requests"]
        n = s3["supersteps"]
        lines.append(
            f"| {agent} | S3Saver | {n} | {r['PUT'] / n:.2f} PUT, {r['GET'] / n:.2f} GET, {r['LIST'] / n:.2f} LIST, "
            f"{r['DELETE'] / n:.2f} DELETE | {s3['stored_bytes'] / n:,.0f} |"
        )
        m = ddb["supersteps"]
        lines.append(
            f"| {agent} | DynamoDBSaver | {m} | {ddb['wru'] / m:.2f} WRU, {ddb['rru'] / m:.2f} RRU "
            f"({', '.join(f'{k} {v}' for k, v in sorted(ddb['calls'].items()))}) | {ddb['stored_bytes'] / m:,.0f} |"
        )
        lines.append(
            f"| {agent} | PostgresSaver | {pg['supersteps']} | – | {pg['stored_bytes'] / pg['supersteps']:,.0f} |"
        )
    lines += [
        "",
        "## Dollars",
        "",
        "| agent | saver | $ per million supersteps | GB of history per million supersteps | "
        "$ per GB-month | $ a month to keep a million supersteps' history |",
        "|---|---|---:|---:|---:|---:|",
    ]
    names = {"s3": "S3Saver (S3 Standard)", "dynamodb": "DynamoDBSaver (on-demand)", "postgres": "PostgresSaver (RDS)"}
    for agent, per_million in dollars.items():
        for saver, row in per_million.items():
            requests = f"{row['requests']:.2f}"
            if saver == "postgres":
                requests += (
                    f" (the instance, ${PRICES['postgres']['instance_month']}/month, at {POSTGRES_VOLUME:,}/month)"
                )
            lines.append(
                f"| {agent} | {names[saver]} | {requests} | {row['gb']:.2f} | {PRICES[saver]['storage_gb_month']} | "
                f"{row['storage_per_month']:.3f} |"
            )
    lines += ["", "## Prices", "", "| service | prices and source |", "|---|---|"]
    lines += [f"| {name} | {PRICES[key]['source']} |" for key, name in names.items()]
    lines += ["", PRICES_NOTE, ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args()
    from run import Postgres

    from langgraph_s3_checkpoint import local

    seaweedfs = local.start_seaweedfs()
    moto = local.start_moto()
    postgres = Postgres()
    try:
        bucket = "lgs3-bill"
        seaweedfs.create_bucket(bucket)
        results: dict[str, dict[str, Any]] = {}
        for agent in AGENTS:
            results[agent] = {
                "s3": measure_s3(seaweedfs, bucket, agent),
                "dynamodb": measure_dynamodb(moto, agent),
                "postgres": measure_postgres(postgres.dsn, agent),
            }
            print(agent, json.dumps(results[agent]), flush=True)
    finally:
        postgres.stop()
        moto.stop()
        seaweedfs.stop()
    meta = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}",
        "prices": PRICES,
    }
    dollars = bill(results)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bill.json").write_text(json.dumps({"meta": meta, "results": results, "dollars": dollars}, indent=1))
    (out / "bill.md").write_text(report(meta, results, dollars))
    print(report(meta, results, dollars))


if __name__ == "__main__":
    main()
