"""The whole bill: S3Saver, DynamoDBSaver and PostgresSaver fed the same agents, measured, then priced.

    python benchmarks/bill.py                 # ~5 minutes: writes results/bill.md and results/bill.json
    python benchmarks/bill.py --quick         # a smoke run (fewer turns), same sections

Agents, each a LangGraph graph without a model (deterministic nodes; text is seeded pseudo-random words, which
zlib compresses about as much as prose, not a repeated word), run turn after turn on several threads; every
turn starts with LangGraph's read of the thread's latest checkpoint, as a server does:

* **chat**: a user message in, one reply out (about 500 characters); the history grows by two messages a turn;
* **tool-heavy**: the agent asks for three tools, ``ToolNode`` runs them (4 KB of output each), the agent answers:
  five checkpoints a turn, and a history that grows by 12 KB a turn;
* **growth** (for the model): the chat agent on one thread with 2,000-character replies, until the state is about
  200 KB, each turn's cost recorded against the state's size.

What is measured, in one run:

* **The hot path**, per superstep (checkpoint) and per turn. ``S3Saver`` (default options) on a local SeaweedFS,
  twice: with a new ``run_id`` in the config each turn, as the Agent Server sends it (each run's first checkpoint
  in a namespace also PUTs its two run-index entries), and without. Requests by kind are counted in the saver's
  own senders, after the process's conditional-write probe (a warm-up write first); bytes stored are the sizes
  of its objects. ``DynamoDBSaver`` of ``langgraph-checkpoint-aws`` on moto's DynamoDB (server mode, a
  ``PK``/``SK`` table, on demand) with ``enable_checkpoint_compression`` off (its default) and on: request units
  computed from the items by DynamoDB's rules (a write: 1 WRU per KB of the item, rounded up, per item; a read:
  eventually consistent, as the saver reads, 0.5 RRU per 4 KB, rounded up per item for GetItem and BatchGetItem
  and per call over the items returned for Query; a delete: the item's size), bytes = items plus DynamoDB's 100
  bytes per item. ``PostgresSaver`` on a throwaway local PostgreSQL: bytes = its tables with indexes and TOAST.
  Both peers run with a ``run_id`` each turn.
* **The probe**: a fresh process's first write checks the bucket and the server's conditional writes once per
  endpoint and bucket; counted in a child process as its first turn's requests minus its second's.
* **Maintenance**: ``gc`` and ``expire_threads(30 days)`` over the chat agent's threads with nothing new (gc's
  first pass, which reads every record and seals, not counted), at 10 threads and again after deleting half, so
  that the requests per thread and the fixed requests per pass are both measured; then ``expire_threads`` of
  the remaining threads once they are idle (what retention costs per thread, once).

The prices (``PRICES``) are list prices of us-east-1 with their sources and the date they were looked up. Per
million supersteps: requests x price. History: the bytes a million supersteps leave, kept a month (retention of
30 days). PostgreSQL is billed by the instance and its provisioned storage (20 GB at least), not by the request.
The cheapest-saver table is a model fitted from the growth run (per-superstep requests and bytes interpolated
against the state's size), not a measurement of each cell.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import random
import string
import subprocess
import sys
import time
import uuid
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

LOOKED_UP = "2026-12-03"
CHECKED_AGAIN = "2026-12-07"
PRICES: dict[str, dict[str, Any]] = {
    "s3": {
        "put_list_per_1000": 0.005,
        "get_per_1000": 0.0004,
        "delete_per_1000": 0.0,
        "storage_gb_month": 0.023,
        "source": "https://aws.amazon.com/s3/pricing/, S3 Standard, us-east-1: PUT, COPY, POST, LIST $0.005 per "
        "1,000 requests; GET (and HEAD) $0.0004 per 1,000; DELETE free; storage $0.023 per GB-month (first 50 TB)",
    },
    "dynamodb": {
        "wru_per_million": 0.625,
        "rru_per_million": 0.125,
        "storage_gb_month": 0.25,
        "source": "https://aws.amazon.com/dynamodb/pricing/on-demand/, us-east-1, Standard table class, after the "
        "on-demand price cut of 2024-11-01: $0.625 per million write request units, $0.125 per million read request "
        "units, storage $0.25 per GB-month (the first 25 GB each month free, not counted here); TTL deletes free",
    },
    "postgres": {
        "instance_month": 11.68,
        "storage_gb_month": 0.115,
        "minimum_storage_gb": 20,
        "source": "https://aws.amazon.com/rds/postgresql/pricing/, us-east-1: db.t4g.micro Single-AZ on demand $0.016 "
        "per hour ($11.68 per 730-hour month; 2 vCPU, 1 GiB), gp3 storage $0.115 per GB-month; gp3 allocated storage "
        "20 GiB at least (https://docs.aws.amazon.com/AmazonRDS/latest/UserGuide/CHAP_Storage.html, General Purpose "
        "SSD storage)",
    },
}
PRICES_NOTE = (
    f"Looked up {LOOKED_UP} in stored copies of the AWS pricing pages and in secondary sources quoting them "
    "(airbyte.com's DynamoDB pricing guide of 2025-07-21, infratally.com's RDS pricing article of 2026, usage.ai's "
    f"RDS pricing guide of June 2026), and checked again {CHECKED_AGAIN} against the same secondary sources "
    "(unchanged; the live AWS pages cannot be reached from the benchmark machine): check the live pages before "
    "relying on them."
)
POSTGRES_VOLUME = 10_000_000
"""Supersteps a month over which the PostgreSQL instance's price is spread in the per-million column."""
PASSES_PER_MONTH = 30
"""Maintenance cadence: one ``gc`` and one ``expire_threads`` a day. The docs recommend no cadence (operations.md
and safety.md describe both, neither says how often); daily is the cadence the bill assumes."""
WEEKLY = 30 / 7
"""Passes a month at one a week: the bill also shows the maintenance at that cadence."""
SUPERSTEPS_PER_THREAD_MONTH = 30
"""For the table of the cheapest saver: the threads a month's supersteps live on (the chat agent's threads: 10
turns of 3 supersteps), each kept a month, swept daily, then expired."""
GRID_STATE_BYTES = (1_000, 4_000, 16_000, 64_000, 160_000)
GRID_SUPERSTEPS = (10**4, 10**5, 10**6, 10**7, 10**8, 10**9)
SECONDS_A_MONTH = 30 * 86400
SEALED_AFTER = 3.0
"""Seconds to wait before a gc with ``grace_seconds=0`` may seal records: LastModified counts whole seconds."""
S3_KINDS = ("PUT", "GET", "LIST", "HEAD", "DELETE", "OTHER")


# ---------------------------------------------------------------------------------------------
# text: seeded pseudo-random words, compressing like prose (zlib about 2.3x, not 50x as "lorem " * 80 does)

_VOCABULARY_RNG = random.Random(40)
VOCABULARY = [
    "".join(_VOCABULARY_RNG.choices(string.ascii_lowercase, k=_VOCABULARY_RNG.randint(2, 9))) for _ in range(3000)
]
ZIPF = [1 / (rank + 1) for rank in range(len(VOCABULARY))]


def prose(seed: str, chars: int) -> str:
    """``chars`` characters of words drawn by a Zipf law from a fixed vocabulary, the same for the same seed."""
    words = random.Random(seed).choices(VOCABULARY, weights=ZIPF, k=chars // 4 + 1)
    return " ".join(words)[:chars]


def zlib_ratio(text: str) -> float:
    return len(text.encode()) / len(zlib.compress(text.encode(), 3))


# ---------------------------------------------------------------------------------------------
# the agents


class Messages(TypedDict):
    messages: Annotated[list[Any], add_messages]


def _replying(chars: int) -> Callable[[Messages], dict[str, Any]]:
    def reply(state: Messages) -> dict[str, Any]:
        last = state["messages"][-1].content
        return {"messages": [AIMessage(content=prose(f"{last}/{len(state['messages'])}", chars))]}

    return reply


def chat_agent() -> StateGraph:
    g = StateGraph(Messages)
    g.add_node("reply", _replying(500))
    g.add_edge(START, "reply")
    g.add_edge("reply", END)
    return g


def growth_agent() -> StateGraph:
    g = StateGraph(Messages)
    g.add_node("reply", _replying(2000))
    g.add_edge(START, "reply")
    g.add_edge("reply", END)
    return g


@tool
def search(query: str) -> str:
    """Search the documents."""
    return json.dumps({"query": query, "results": prose(query, 4000)})[:4096]


def tool_agent() -> StateGraph:
    def agent(state: Messages) -> dict[str, Any]:
        last = state["messages"][-1]
        if isinstance(last, HumanMessage):
            calls = [
                {"name": "search", "args": {"query": f"{last.content} #{i}"}, "id": f"call-{uuid.uuid4().hex[:12]}"}
                for i in range(3)
            ]
            return {"messages": [AIMessage(content="", tool_calls=calls)]}
        return {"messages": [AIMessage(content="Here is what I found: " + prose(str(len(state["messages"])), 360))]}

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


AGENTS: dict[str, tuple[Callable[[], StateGraph], int, int]] = {
    "chat": (chat_agent, 10, 10),
    "tool-heavy": (tool_agent, 5, 6),
    "growth": (growth_agent, 1, 100),
}
"""Agent -> (graph, threads, turns per thread)."""
HOT_PATH_AGENTS = ("chat", "tool-heavy")


def agent_shape(agent: str, quick: bool) -> tuple[Callable[[], StateGraph], int, int]:
    make, threads, turns = AGENTS[agent]
    if quick:
        threads, turns = min(threads, 4), min(turns, 3 if agent != "growth" else 12)
    return make, threads, turns


@contextlib.contextmanager
def counting_supersteps(saver: Any) -> Iterator[list[int]]:
    """Counts the checkpoints a saver is asked to store (one per superstep) while the block runs."""
    count = [0]
    original = saver.put

    def counted(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return original(*args, **kwargs)

    saver.put = counted
    try:
        yield count
    finally:
        del saver.put


SERDE = JsonPlusSerializer()


def state_bytes(values: Mapping[str, Any]) -> int:
    """The state's size: its messages as LangGraph's serializer writes them, uncompressed."""
    return len(SERDE.dumps_typed(values["messages"])[1])


def run_agent(
    saver: Any,
    agent: str,
    *,
    run_ids: bool,
    quick: bool = False,
    threads: int | None = None,
    on_turn: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Run one agent's turns on its threads (``threads`` of them, if given) through ``saver``, with LangGraph's
    default durability ("async", as the Agent Server's runs); a new ``run_id`` in the config each turn when
    ``run_ids``, as the Agent Server does. ``on_turn`` gets the state's size after each turn."""
    make, default_threads, turns = agent_shape(agent, quick)
    threads = threads or default_threads
    graph = make().compile(checkpointer=saver)
    tag = uuid.uuid4().hex[:8]
    thread_ids = [f"{agent}-{tag}-{t}" for t in range(threads)]
    with counting_supersteps(saver) as supersteps:
        for t, thread_id in enumerate(thread_ids):
            for turn in range(turns):
                configurable: dict[str, Any] = {"thread_id": thread_id}
                if run_ids:
                    configurable["run_id"] = str(uuid.uuid4())
                message = HumanMessage(content=f"question {turn} on thread {t}")
                values = graph.invoke({"messages": [message]}, {"configurable": configurable})
                if on_turn is not None:
                    on_turn(state_bytes(values))
    return {"supersteps": supersteps[0], "turns": threads * turns, "threads": threads, "thread_ids": thread_ids}


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


def write_units(size: int) -> int:
    """Write request units of one item write: 1 per KB, rounded up."""
    return math.ceil(size / 1024)


def read_units(size: int) -> float:
    """Read request units of an eventually consistent read of ``size`` bytes: 0.5 per 4 KB, rounded up, at least
    one 4 KB block (a Query of nothing still reads)."""
    return 0.5 * max(1, math.ceil(size / 4096))


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
                self.wru += write_units(size)
            elif name == "delete_item":
                self.wru += write_units(self.sizes.pop(self._key(params["Key"]), 1))
            response = call(**params)
            if name == "get_item" and "Item" in response:
                self.rru += read_units(self._full_size(response["Item"]))
            elif name == "query":
                self.rru += read_units(sum(self._full_size(item) for item in response.get("Items", [])))
            elif name == "batch_get_item":
                for items in response.get("Responses", {}).values():
                    self.rru += sum(read_units(self._full_size(item)) for item in items)
            elif name == "batch_write_item":
                for requests in params["RequestItems"].values():
                    for request in requests:
                        if "DeleteRequest" in request:
                            key = request["DeleteRequest"]["Key"]
                            self.wru += write_units(self.sizes.pop(self._key(key), 1))
                        else:
                            item = request["PutRequest"]["Item"]
                            self.sizes[self._key(item)] = item_size(item)
                            self.wru += write_units(self.sizes[self._key(item)])
            return response

        return metered

    @property
    def stored_bytes(self) -> int:
        return sum(self.sizes.values()) + 100 * len(self.sizes)


# ---------------------------------------------------------------------------------------------
# the savers


def s3_options(server: Any) -> dict[str, Any]:
    return {
        "endpoint_url": server.endpoint_url,
        "aws_access_key_id": server.access_key,
        "aws_secret_access_key": server.secret_key,
        "region_name": server.region,
    }


def prefix_bytes(client: Any, bucket: str, prefix: str) -> int:
    stored = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        stored += sum(obj["Size"] for obj in page.get("Contents", []))
    return stored


def kinds(snapshot: Mapping[str, int]) -> dict[str, int]:
    return {k: snapshot.get(k, 0) for k in S3_KINDS}


def minus(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    return {k: a.get(k, 0) - b.get(k, 0) for k in a}


def measure_s3(
    server: Any, bucket: str, agent: str, *, run_ids: bool, quick: bool, threads: int | None = None
) -> dict[str, Any]:
    from worker import Counter

    from langgraph_s3_checkpoint import S3Saver

    prefix = f"bill/{agent}/{uuid.uuid4().hex[:8]}"
    client = server.client()
    points: list[dict[str, Any]] = []
    with S3Saver(bucket=bucket, prefix=prefix, **s3_options(server)) as saver:
        counter = Counter()
        counter.attach_saver(saver)
        last = {"requests": kinds(counter.snapshot()), "bytes": 0, "state": 0}

        def on_turn(size: int) -> None:
            if agent != "growth":
                return
            now = {"requests": kinds(counter.snapshot()), "bytes": prefix_bytes(client, bucket, prefix)}
            points.append(
                {
                    "state_bytes": (last["state"] + size) / 2,
                    **minus(now["requests"], last["requests"]),
                    "bytes": now["bytes"] - last["bytes"],
                }
            )
            last.update(now, state=size)

        started = time.perf_counter()
        run = run_agent(saver, agent, run_ids=run_ids, quick=quick, threads=threads, on_turn=on_turn)
        seconds = time.perf_counter() - started
        requests = kinds(counter.snapshot())
    out = {
        **run,
        "prefix": prefix,
        "seconds": round(seconds, 2),
        "requests": requests,
        "stored_bytes": prefix_bytes(client, bucket, prefix),
    }
    if points:
        out["points"] = points
    return out


def measure_dynamodb(moto: Any, agent: str, *, compression: bool, quick: bool) -> dict[str, Any]:
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
    saver = DynamoDBSaver(
        table_name=table,
        region_name="us-east-1",
        endpoint_url=moto.endpoint_url,
        enable_checkpoint_compression=compression,
    )
    meter = DynamoMeter(saver.client)
    points: list[dict[str, Any]] = []
    last = {"wru": 0.0, "rru": 0.0, "bytes": 0, "state": 0}

    def on_turn(size: int) -> None:
        if agent != "growth":
            return
        now = {"wru": meter.wru, "rru": meter.rru, "bytes": meter.stored_bytes}
        points.append({"state_bytes": (last["state"] + size) / 2, **minus(now, last)})
        last.update(now, state=size)

    started = time.perf_counter()
    run = run_agent(saver, agent, run_ids=True, quick=quick, on_turn=on_turn)
    seconds = time.perf_counter() - started
    out = {
        **run,
        "compression": compression,
        "seconds": round(seconds, 2),
        "wru": meter.wru,
        "rru": meter.rru,
        "calls": meter.calls,
        "stored_bytes": meter.stored_bytes,
    }
    if points:
        out["points"] = points
    return out


def _postgres_bytes(conn: Any, schema: str) -> int:
    row = conn.execute(
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint AS bytes FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
        (schema,),
    ).fetchone()
    return int(row["bytes"])


def measure_postgres(dsn: str, agent: str, *, quick: bool) -> dict[str, Any]:
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import Connection
    from psycopg.rows import dict_row

    schema = f"bill_{agent.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
    points: list[dict[str, Any]] = []
    with Connection.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"SET search_path TO {schema}")
        saver = PostgresSaver(conn)
        saver.setup()
        empty = _postgres_bytes(conn, schema)
        last = {"bytes": empty, "state": 0}

        def on_turn(size: int) -> None:
            if agent != "growth":
                return
            now = _postgres_bytes(conn, schema)
            points.append({"state_bytes": (last["state"] + size) / 2, "bytes": now - last["bytes"]})
            last.update(bytes=now, state=size)

        started = time.perf_counter()
        run = run_agent(saver, agent, run_ids=True, quick=quick, on_turn=on_turn)
        seconds = time.perf_counter() - started
        conn.execute("VACUUM ANALYZE")
        stored = _postgres_bytes(conn, schema)
    out = {**run, "seconds": round(seconds, 2), "stored_bytes": stored - empty, "empty_tables_bytes": empty}
    if points:
        out["points"] = points
    return out


# ---------------------------------------------------------------------------------------------
# the probe and maintenance (S3Saver only: the peers have neither)


def probe_child(spec: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: the requests of its first chat turn (which pays the probe) and of a second turn on
    another new thread (which does not); their difference is the probe."""
    from worker import Counter

    from langgraph_s3_checkpoint import S3Saver

    with S3Saver(bucket=spec["bucket"], prefix=spec["prefix"], **spec["options"]) as saver:
        counter = Counter()
        counter.attach_saver(saver)
        turns = []
        for _ in range(2):
            counter.reset()
            make, _, _ = AGENTS["chat"]
            graph = make().compile(checkpointer=saver)
            config = {"configurable": {"thread_id": uuid.uuid4().hex, "run_id": str(uuid.uuid4())}}
            graph.invoke({"messages": [HumanMessage(content="hello")]}, config)
            snapshot = counter.snapshot()
            turns.append({**kinds(snapshot), "waves": snapshot["waves"]})
    return {"first_turn": turns[0], "second_turn": turns[1], "probe": minus(turns[0], turns[1])}


def measure_probe(server: Any, bucket: str) -> dict[str, Any]:
    spec = {"bucket": bucket, "prefix": f"bill/probe/{uuid.uuid4().hex[:8]}", "options": s3_options(server)}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")])))
    res = subprocess.run(
        [sys.executable, __file__, "--probe-child", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    if res.returncode:
        raise RuntimeError(f"probe child failed: {res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def _maintenance_pass(saver: Any, counter: Any) -> dict[str, Any]:
    from langgraph_s3_checkpoint.gc import gc

    counter.reset()
    report = gc(saver, grace_seconds=0)
    gc_requests = kinds(counter.snapshot())
    counter.reset()
    expired = saver.expire_threads(timedelta(days=30))
    return {
        "gc": gc_requests,
        "gc_deleted": report.total,
        "gc_records_read": report.records_read,
        "expire": kinds(counter.snapshot()),
        "expired": len(expired),
    }


def per_thread(large: Mapping[str, float], small: Mapping[str, float], n_large: int, n_small: int) -> dict[str, Any]:
    """Requests per thread and per pass from two passes over ``n_large`` and ``n_small`` threads."""
    each = {k: (large[k] - small[k]) / (n_large - n_small) for k in large}
    return {"per_thread": each, "fixed": {k: large[k] - n_large * each[k] for k in large}}


def measure_maintenance(server: Any, bucket: str, written: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One daily pass of each over two prefixes of the chat agent's threads (``written``: two ``measure_s3``
    results, with more and fewer threads), after gc's first pass on each; then the expiry of the smaller one's
    threads once idle. Two prefixes, not one thinned by deletes: a server may go on listing a deleted thread's
    folder (SeaweedFS does), which a later pass would pay for."""
    from worker import Counter

    from langgraph_s3_checkpoint import S3Saver
    from langgraph_s3_checkpoint.gc import gc

    time.sleep(SEALED_AFTER)
    passes, first_read = [], []
    for w in written:
        with S3Saver(bucket=bucket, prefix=w["prefix"], **s3_options(server)) as saver:
            counter = Counter()
            counter.attach_saver(saver)
            first_read.append(gc(saver, grace_seconds=0).records_read)  # reads every record, seals: not daily
            passes.append(_maintenance_pass(saver, counter))
    with S3Saver(bucket=bucket, prefix=written[-1]["prefix"], **s3_options(server)) as saver:
        counter = Counter()
        counter.attach_saver(saver)
        expired = saver.expire_threads(timedelta(0))
        expiry = kinds(counter.snapshot())
    (large, n_large), (small, n_small) = ((p, w["threads"]) for p, w in zip(passes, written, strict=True))
    return {
        "threads": [n_large, n_small],
        "first_gc_records_read": first_read,
        "passes": {"large": large, "small": small},
        "gc": per_thread(large["gc"], small["gc"], n_large, n_small),
        "expire_threads": per_thread(large["expire"], small["expire"], n_large, n_small),
        "expiry_of_idle_threads": {
            "threads": len(expired),
            "requests": expiry,
            "per_thread": {k: v / max(1, len(expired)) for k, v in expiry.items()},
        },
    }


# ---------------------------------------------------------------------------------------------
# pricing (pure functions: tests/test_bill.py)


def s3_request_dollars(counts: Mapping[str, float], prices: Mapping[str, Any] | None = None) -> float:
    """Dollars of S3 requests by kind: PUT, LIST and the rest (COPY, POST, bucket calls) at the PUT price, GET and
    HEAD at the GET price, DELETE (DeleteObject, DeleteObjects) at the DELETE price (free on AWS)."""
    p = prices or PRICES["s3"]
    tier1 = counts.get("PUT", 0) + counts.get("LIST", 0) + counts.get("OTHER", 0)
    tier2 = counts.get("GET", 0) + counts.get("HEAD", 0)
    return (
        tier1 / 1000 * p["put_list_per_1000"]
        + tier2 / 1000 * p["get_per_1000"]
        + counts.get("DELETE", 0) / 1000 * p["delete_per_1000"]
    )


def dynamodb_request_dollars(wru: float, rru: float, prices: Mapping[str, Any] | None = None) -> float:
    p = prices or PRICES["dynamodb"]
    return wru / 1e6 * p["wru_per_million"] + rru / 1e6 * p["rru_per_million"]


def storage_dollars(saver: str, gb: float, prices: Mapping[str, Mapping[str, Any]] | None = None) -> float:
    """A month of keeping ``gb`` gigabytes (10^9 bytes); PostgreSQL pays for at least its minimum storage."""
    p = (prices or PRICES)[saver]
    return max(gb, p.get("minimum_storage_gb", 0)) * p["storage_gb_month"]


def postgres_month(gb: float, prices: Mapping[str, Mapping[str, Any]] | None = None) -> float:
    """A month of RDS: the instance and the provisioned storage (its minimum, or what the history needs)."""
    return (prices or PRICES)["postgres"]["instance_month"] + storage_dollars("postgres", gb, prices)


def maintenance_thread_month(
    gc_per_thread: Mapping[str, float],
    expire_per_thread: Mapping[str, float],
    passes: float = PASSES_PER_MONTH,
    prices: Mapping[str, Any] | None = None,
) -> float:
    """Dollars a month of ``passes`` gc and expire_threads passes, per thread (the passes' fixed requests are
    spread over so many threads that they are left out)."""
    return passes * (s3_request_dollars(gc_per_thread, prices) + s3_request_dollars(expire_per_thread, prices))


def per(counts: Mapping[str, float], n: float) -> dict[str, float]:
    return {k: v / n for k, v in counts.items()}


# ---------------------------------------------------------------------------------------------
# the model: per-superstep costs against the state's size, from the growth run


def smooth(values: Sequence[float], window: int = 5) -> list[float]:
    """Centered moving average (the window shrinks at the ends): PostgreSQL's sizes grow by pages, not bytes."""
    half = window // 2
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - half) : i + half + 1]
        out.append(sum(chunk) / len(chunk))
    return out


def least_squares(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Intercept and slope of the least-squares line through the points."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = 0.0 if sxx == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return my - slope * mx, slope


def interpolate(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """Piecewise-linear through the points (``xs`` increasing); beyond the last, on from it with the slope of the
    least-squares line of the upper half of the points (below the first, the first point's value)."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        half = len(xs) // 2
        _, slope = least_squares(xs[half:], ys[half:])
        return ys[-1] + slope * (x - xs[-1])
    i = next(j for j in range(len(xs) - 1) if xs[j] <= x <= xs[j + 1])
    x0, x1, y0, y1 = xs[i], xs[i + 1], ys[i], ys[i + 1]
    return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def fit(points: Sequence[Mapping[str, float]], supersteps_per_turn: float, *, straight: bool = False) -> dict[str, Any]:
    """Per-superstep curves of every metric of the growth run's turns against the state's size: each turn's value
    smoothed over 5 turns, or with ``straight`` the least-squares line through them all (PostgreSQL's tables grow
    by 8 KB pages, so one turn's growth is a page or none)."""
    ordered = sorted(points, key=lambda p: p["state_bytes"])
    xs = [p["state_bytes"] for p in ordered]
    curve: dict[str, Any] = {"state_bytes": xs}
    for metric in (k for k in ordered[0] if k != "state_bytes"):
        ys = [p[metric] / supersteps_per_turn for p in ordered]
        if straight:
            intercept, slope = least_squares(xs, ys)
            curve[metric] = [intercept + slope * x for x in xs]
        else:
            curve[metric] = smooth(ys)
    return curve


def at(curve: Mapping[str, Any], metric: str, state: float) -> float:
    return max(0.0, interpolate(curve["state_bytes"], curve[metric], state))


def model_month(
    saver: str,
    curve: Mapping[str, Any],
    state: float,
    supersteps: float,
    maintenance: Mapping[str, float] | None = None,
    supersteps_per_thread: float = SUPERSTEPS_PER_THREAD_MONTH,
    prices: Mapping[str, Mapping[str, Any]] | None = None,
) -> float:
    """A month's bill for ``supersteps`` supersteps at a state of ``state`` bytes, by the fitted curve: requests,
    a month of the history they leave, and for S3Saver its maintenance (per thread-month, ``maintenance``:
    ``{"thread_month": $, "expiry": $ once per thread}``) on ``supersteps / supersteps_per_thread`` threads."""
    p = prices or PRICES
    gb = supersteps * at(curve, "bytes", state) / 1e9
    if service(saver) == "s3":
        counts = {k: supersteps * at(curve, k, state) for k in S3_KINDS if k in curve}
        threads = supersteps / supersteps_per_thread
        upkeep = threads * sum((maintenance or {}).values())
        return s3_request_dollars(counts, p["s3"]) + storage_dollars("s3", gb, p) + upkeep
    if service(saver) == "dynamodb":
        requests = dynamodb_request_dollars(
            supersteps * at(curve, "wru", state), supersteps * at(curve, "rru", state), p["dynamodb"]
        )
        return requests + storage_dollars("dynamodb", gb, p)
    return postgres_month(gb, p)


def cheapest(bills: Mapping[str, float]) -> tuple[str, float, float]:
    """The cheapest saver, its bill, and how many times dearer the next one is."""
    ranked = sorted(bills.items(), key=lambda kv: kv[1])
    (name, best), (_, second) = ranked[0], ranked[1]
    return name, best, (second / best if best else math.inf)


# ---------------------------------------------------------------------------------------------
# the bill


NAMES = {
    "s3": "S3Saver",
    "s3-no-run-id": "S3Saver, no run_id",
    "dynamodb": "DynamoDBSaver",
    "dynamodb-gzip": "DynamoDBSaver, compression on",
    "postgres": "PostgresSaver",
}


def service(key: str) -> str:
    """The priced service of a saver's key in the results (``dynamodb-gzip`` is DynamoDB)."""
    return key.split("-")[0]


def bill(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"hot_path": {}}
    m = results["maintenance"]
    thread_month = maintenance_thread_month(m["gc"]["per_thread"], m["expire_threads"]["per_thread"])
    weekly = maintenance_thread_month(m["gc"]["per_thread"], m["expire_threads"]["per_thread"], passes=WEEKLY)
    expiry = s3_request_dollars(m["expiry_of_idle_threads"]["per_thread"])
    out["maintenance"] = {
        "passes_per_month": PASSES_PER_MONTH,
        "per_thread_month": thread_month,
        "per_million_thread_months": thread_month * 1e6,
        "per_thread_month_weekly": weekly,
        "per_million_thread_months_weekly": weekly * 1e6,
        "expiry_per_thread": expiry,
        "per_million_supersteps": (thread_month + expiry) / SUPERSTEPS_PER_THREAD_MONTH * 1e6,
        "per_million_supersteps_weekly": (weekly + expiry) / SUPERSTEPS_PER_THREAD_MONTH * 1e6,
    }
    probe = s3_request_dollars(results["probe"]["probe"])
    out["probe"] = {"per_process": probe, "per_million_cold_starts": probe * 1e6}
    for agent in HOT_PATH_AGENTS:
        rows: dict[str, dict[str, float]] = {}
        for key, r in results[agent].items():
            n, turns = r["supersteps"], r["turns"]
            saver = service(key)
            if saver == "s3":
                dollars = s3_request_dollars(r["requests"])
            elif saver == "dynamodb":
                dollars = dynamodb_request_dollars(r["wru"], r["rru"])
            else:
                dollars = 0.0  # billed by the instance and its storage: below
            gb = r["stored_bytes"] / n * 1e6 / 1e9
            row = {
                "requests_per_million_supersteps": dollars / n * 1e6,
                "requests_per_million_turns": dollars / turns * 1e6,
                "gb_per_million_supersteps": gb,
                "history_month_per_million_supersteps": gb * PRICES[saver]["storage_gb_month"],
            }
            if saver == "postgres":
                volume_gb = gb * POSTGRES_VOLUME / 1e6
                row["month_at_volume"] = postgres_month(volume_gb)
                row["per_million_at_volume"] = postgres_month(volume_gb) / (POSTGRES_VOLUME / 1e6)
            rows[key] = row
        s3, bare = rows["s3"], rows["s3-no-run-id"]
        s3["run_index_per_million_supersteps"] = (
            s3["requests_per_million_supersteps"] - bare["requests_per_million_supersteps"]
        )
        s3["maintenance_per_million_supersteps"] = out["maintenance"]["per_million_supersteps"]
        out["hot_path"][agent] = rows
    out["grid"] = grid(results, {"thread_month": thread_month, "expiry": expiry})
    out["grid_weekly"] = grid(results, {"thread_month": weekly, "expiry": expiry})
    return out


def grid(results: dict[str, Any], upkeep: Mapping[str, float]) -> dict[str, Any]:
    """The cheapest saver at each state size and monthly volume, by the curves fitted to the growth run, with
    S3Saver's maintenance (``upkeep``: per thread-month, and its expiry once) at one cadence."""
    growth = results["growth"]
    per_turn = {key: r["supersteps"] / r["turns"] for key, r in growth.items()}
    curves = {key: fit(r["points"], per_turn[key], straight=key == "postgres") for key, r in growth.items()}
    measured_up_to = min(max(c["state_bytes"]) for c in curves.values())
    cells = []
    for state in GRID_STATE_BYTES:
        for supersteps in GRID_SUPERSTEPS:
            bills = {key: model_month(key, curve, state, supersteps, upkeep) for key, curve in curves.items()}
            name, _, ratio = cheapest(bills)
            cells.append(
                {
                    "state_bytes": state,
                    "supersteps_per_month": supersteps,
                    "bills": bills,
                    "cheapest": name,
                    "next": sorted(bills, key=bills.__getitem__)[1],
                    "next_is_dearer_by": ratio,
                    "extrapolated": state > measured_up_to,
                }
            )
    per_superstep = {
        key: {m: {str(s): at(c, m, s) for s in GRID_STATE_BYTES} for m in c if m != "state_bytes"}
        for key, c in curves.items()
    }
    return {
        "measured_state_bytes": [min(min(c["state_bytes"]) for c in curves.values()), measured_up_to],
        "per_superstep": per_superstep,
        "cells": cells,
    }


# ---------------------------------------------------------------------------------------------
# the report


def req(counts: Mapping[str, float], n: float) -> str:
    shown = [f"{counts[k] / n:.2f} {k}" for k in ("PUT", "GET", "LIST", "DELETE", "HEAD") if counts.get(k)]
    return ", ".join(shown) or "0"


def money(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def report(meta: dict[str, Any], results: dict[str, Any], dollars: dict[str, Any]) -> str:
    lines = [
        "# The whole bill: S3Saver, DynamoDBSaver, PostgresSaver",
        "",
        f"Run of {meta['date']} on {meta['machine']}{' (quick)' if meta['quick'] else ''}. Measured with "
        "`benchmarks/bill.py`: the same agents through each saver; requests, request units and bytes measured, "
        f"then priced. Text is seeded pseudo-random words (zlib at level 3: {meta['text_zlib_ratio']:.2f}x, about "
        "as much as prose).",
        "",
        "## The hot path, measured",
        "",
        "Each turn is one run: `S3Saver` with a new `run_id` in the config each turn (as the Agent Server sends it) "
        "and without; the peers with it. The process's conditional-write probe is paid before counting.",
        "",
        "| agent | saver | supersteps (turns) | per superstep | per turn | bytes stored per superstep |",
        "|---|---|---:|---|---|---:|",
    ]
    for agent in HOT_PATH_AGENTS:
        for key, r in results[agent].items():
            n, turns = r["supersteps"], r["turns"]
            if key.startswith("s3"):
                each, per_turn = req(r["requests"], n), req(r["requests"], turns)
            elif key.startswith("dynamodb"):
                calls = ", ".join(f"{k} {v}" for k, v in sorted(r["calls"].items()))
                each = f"{r['wru'] / n:.2f} WRU, {r['rru'] / n:.2f} RRU ({calls})"
                per_turn = f"{r['wru'] / turns:.2f} WRU, {r['rru'] / turns:.2f} RRU"
            else:
                each = per_turn = "–"
            lines.append(
                f"| {agent} | {NAMES[key]} | {n} ({turns}) | {each} | {per_turn} | {r['stored_bytes'] / n:,.0f} |"
            )
    lines += [
        "",
        "## Dollars per million supersteps",
        "",
        "| agent | saver | requests | requests per million turns | history kept a month | GB of history |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for agent, rows in dollars["hot_path"].items():
        for key, row in rows.items():
            requests = money(row["requests_per_million_supersteps"])
            per_turn = money(row["requests_per_million_turns"])
            if key == "postgres":
                requests = (
                    f"{money(row['per_million_at_volume'])} at {POSTGRES_VOLUME:,} a month "
                    f"(${row['month_at_volume']:.2f} a month: the instance and "
                    f"{PRICES['postgres']['minimum_storage_gb']} GB at least)"
                )
                per_turn = "–"
            lines.append(
                f"| {agent} | {NAMES[key]} | {requests} | {per_turn} | "
                f"{money(row['history_month_per_million_supersteps'])} | {row['gb_per_million_supersteps']:.2f} |"
            )
    lines += ["", _run_index(dollars), ""]
    lines += _probe(results, dollars) + _maintenance(results, dollars) + _grid(results, dollars)
    lines += ["", "## Prices", "", "| service | prices and source |", "|---|---|"]
    lines += [f"| {NAMES[key]} | {PRICES[key]['source']} |" for key in ("s3", "dynamodb", "postgres")]
    lines += ["", PRICES_NOTE, ""]
    return "\n".join(lines)


def _run_index(dollars: dict[str, Any]) -> str:
    parts = []
    for agent, rows in dollars["hot_path"].items():
        parts.append(f"{agent} ${money(rows['s3']['run_index_per_million_supersteps'])}")
    return (
        "The run index (the Agent Server's `run_id`): per million supersteps, " + ", ".join(parts) + " of the S3Saver "
        "rows above are its entries (the difference between the rows with and without a `run_id`)."
    )


def _probe(results: dict[str, Any], dollars: dict[str, Any]) -> list[str]:
    p = results["probe"]
    return [
        "## The probe, per process",
        "",
        f"A fresh process's first turn: {req(p['first_turn'], 1)} ({p['first_turn']['waves']} waves); its second, "
        f"on another new thread: {req(p['second_turn'], 1)} ({p['second_turn']['waves']} waves). The probe (the "
        f"difference): **{req(p['probe'], 1)}**, ${dollars['probe']['per_process']:.7f} per process and endpoint "
        f"and bucket, once: ${money(dollars['probe']['per_million_cold_starts'])} per million processes (a serverless "
        "function pays it at every cold start).",
        "",
    ]


def _maintenance(results: dict[str, Any], dollars: dict[str, Any]) -> list[str]:
    m, d = results["maintenance"], dollars["maintenance"]
    n_full, n_half = m["threads"]
    return [
        "## Maintenance, per thread-month",
        "",
        f"`gc(grace_seconds=0)` and `expire_threads(30 days)` with nothing new over the chat agent's threads (with "
        f"`run_id`), on two prefixes of {n_full} and {n_half} threads, after gc's first pass on each (which read "
        f"{' and '.join(map(str, m['first_gc_records_read']))} records and sealed them); per thread = the difference "
        f"/ {n_full - n_half}, fixed = the rest.",
        "",
        "| pass | per thread | fixed per pass |",
        "|---|---|---|",
        f"| gc, nothing new | {req(m['gc']['per_thread'], 1)} | {req(m['gc']['fixed'], 1)} |",
        f"| expire_threads, none idle | {req(m['expire_threads']['per_thread'], 1)} | "
        f"{req(m['expire_threads']['fixed'], 1)} |",
        f"| expire_threads of {m['expiry_of_idle_threads']['threads']} idle threads (once per thread) | "
        f"{req(m['expiry_of_idle_threads']['per_thread'], 1)} | – |",
        "",
        f"At one pass of each a day ({d['passes_per_month']} a month; the docs recommend no cadence): "
        f"${d['per_thread_month']:.6f} per thread-month, ${money(d['per_million_thread_months'])} per million "
        f"thread-months (weekly: ${money(d['per_million_thread_months_weekly'])}); expiring a thread "
        f"${d['expiry_per_thread']:.7f} once. For threads of {SUPERSTEPS_PER_THREAD_MONTH} supersteps a month, "
        f"with their expiry: ${money(d['per_million_supersteps'])} per million supersteps (weekly: "
        f"${money(d['per_million_supersteps_weekly'])}). DynamoDBSaver (TTL deletes are free) and PostgresSaver "
        "send no such requests.",
        "",
    ]


SHORT = {"s3": "S3", "dynamodb": "DDB", "dynamodb-gzip": "DDB gzip", "postgres": "PG"}


def per_second(supersteps_a_month: float) -> str:
    rate = supersteps_a_month / SECONDS_A_MONTH
    return f"{rate:,.0f}" if rate >= 10 else f"{rate:.2g}"


def grid_table(g: Mapping[str, Any]) -> list[str]:
    lines = [
        "| state \\ supersteps a month (a second) | "
        + " | ".join(f"10^{round(math.log10(n))} ({per_second(n)})" for n in GRID_SUPERSTEPS)
        + " |",
        "|---|" + "---|" * len(GRID_SUPERSTEPS),
    ]
    for state in GRID_STATE_BYTES:
        row = [c for c in g["cells"] if c["state_bytes"] == state]
        mark = " (extrapolated)" if row[0]["extrapolated"] else ""
        cells = [
            f"**{SHORT[c['cheapest']]}** ${money(c['bills'][c['cheapest']])} ({SHORT[c['next']]} "
            f"x{c['next_is_dearer_by']:.1f})"
            for c in row
        ]
        lines.append(f"| {state / 1000:,.0f} KB{mark} | " + " | ".join(cells) + " |")
    return lines


def _grid(results: dict[str, Any], dollars: dict[str, Any]) -> list[str]:
    g = dollars["grid"]
    low, high = g["measured_state_bytes"]
    lines = [
        "## Where each saver is cheapest (a model fitted from the measurement)",
        "",
        f"From the growth run (the chat agent on one thread, 2,000-character replies, a `run_id` each turn): every "
        f"turn's requests, request units and bytes per superstep against the state's size (its messages serialized, "
        f"{low:,.0f} to {high:,.0f} bytes), smoothed over 5 turns and interpolated (PostgreSQL's bytes: the "
        "least-squares line, as its tables grow by 8 KB pages). A month's bill = the supersteps' requests + a month "
        "of the history they leave (30-day retention) + for S3Saver daily maintenance of "
        f"supersteps / {SUPERSTEPS_PER_THREAD_MONTH} threads and their expiry; PostgresSaver = a db.t4g.micro and "
        f"max({PRICES['postgres']['minimum_storage_gb']} GB, history) of gp3, whatever the volume (its capacity is not "
        "measured: each column says the supersteps a second on average). DynamoDB's 25 free GB are not counted. "
        "Each cell: the cheapest (S3 = S3Saver, DDB = DynamoDBSaver, DDB gzip = with "
        "`enable_checkpoint_compression=True`, PG = PostgresSaver), its monthly bill, and the next cheapest with how "
        "many times dearer it is.",
        "",
        *grid_table(g),
        "",
        "The same with S3Saver's maintenance once a week instead of daily:",
        "",
        *grid_table(dollars["grid_weekly"]),
        "",
        "Per superstep by the fitted curves:",
        "",
        "| state | S3Saver | DynamoDBSaver | DynamoDBSaver, compression on | PostgresSaver |",
        "|---|---|---|---|---|",
    ]
    ps = g["per_superstep"]
    for state in GRID_STATE_BYTES:
        s = str(state)
        s3 = ps["s3"]
        cells = [
            f"{s3['PUT'][s]:.2f} PUT, {s3['GET'][s]:.2f} GET, {s3['LIST'][s]:.2f} LIST, {s3['bytes'][s]:,.0f} B",
            *(
                f"{ps[k]['wru'][s]:.1f} WRU, {ps[k]['rru'][s]:.1f} RRU, {ps[k]['bytes'][s]:,.0f} B"
                for k in ("dynamodb", "dynamodb-gzip")
            ),
            f"{ps['postgres']['bytes'][s]:,.0f} B",
        ]
        lines.append(f"| {state / 1000:,.0f} KB | " + " | ".join(cells) + " |")
    return lines


# ---------------------------------------------------------------------------------------------


def measure_all(quick: bool) -> dict[str, Any]:
    from run import Postgres

    from langgraph_s3_checkpoint import S3Saver, local

    seaweedfs = local.start_seaweedfs()
    moto = local.start_moto()
    postgres = Postgres()
    results: dict[str, Any] = {}
    try:
        bucket = "lgs3-bill"
        seaweedfs.create_bucket(bucket)
        with S3Saver(bucket=bucket, prefix="bill/warm-up", **s3_options(seaweedfs)) as saver:
            saver.setup()  # this process's probe, paid before anything is counted
        for agent in (*HOT_PATH_AGENTS, "growth"):
            results[agent] = {"s3": measure_s3(seaweedfs, bucket, agent, run_ids=True, quick=quick)}
            if agent != "growth":
                results[agent]["s3-no-run-id"] = measure_s3(seaweedfs, bucket, agent, run_ids=False, quick=quick)
            results[agent]["dynamodb"] = measure_dynamodb(moto, agent, compression=False, quick=quick)
            results[agent]["dynamodb-gzip"] = measure_dynamodb(moto, agent, compression=True, quick=quick)
            results[agent]["postgres"] = measure_postgres(postgres.dsn, agent, quick=quick)
            shown = {k: {kk: vv for kk, vv in v.items() if kk != "points"} for k, v in results[agent].items()}
            print(agent, json.dumps(shown), flush=True)
        results["probe"] = measure_probe(seaweedfs, bucket)
        print("probe", json.dumps(results["probe"]), flush=True)
        chat = results["chat"]["s3"]
        fewer = measure_s3(seaweedfs, bucket, "chat", run_ids=True, quick=quick, threads=chat["threads"] // 2)
        results["maintenance"] = measure_maintenance(seaweedfs, bucket, [chat, fewer])
        print("maintenance", json.dumps(results["maintenance"]), flush=True)
    finally:
        postgres.stop()
        moto.stop()
        seaweedfs.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--quick", action="store_true", help="fewer threads and turns: a smoke run")
    parser.add_argument("--reprice", metavar="BILL_JSON", help="price the measurements of an earlier run again")
    parser.add_argument("--probe-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe_child:
        print(json.dumps(probe_child(json.loads(args.probe_child))))
        return
    if args.reprice:
        earlier = json.loads(Path(args.reprice).read_text())
        meta, results = earlier["meta"], earlier["results"]
    else:
        results = measure_all(args.quick)
        meta = {
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}",
            "quick": args.quick,
            "text_zlib_ratio": zlib_ratio(prose("sample", 8000)),
        }
    meta.update(
        prices=PRICES, passes_per_month=PASSES_PER_MONTH, supersteps_per_thread_month=SUPERSTEPS_PER_THREAD_MONTH
    )
    dollars = bill(results)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bill.json").write_text(json.dumps({"meta": meta, "results": results, "dollars": dollars}, indent=1))
    (out / "bill.md").write_text(report(meta, results, dollars))
    print(report(meta, results, dollars))


if __name__ == "__main__":
    main()
