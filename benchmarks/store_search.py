"""Semantic search cost of S3Store at scale: requests and time for a query over N items.

    python benchmarks/store_search.py                      # 10,000 items on MemoryBucket
    python benchmarks/store_search.py --server seaweedfs   # the same on a local SeaweedFS
    python benchmarks/store_search.py --items 2000 --dims 256 --shards 32

Items are put in batches of 200 (one vector-shard update per shard touched per batch). Embeddings are
a deterministic hash (no model), so the numbers are the store's own cost.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import threading
import time
from typing import Any

from langchain_core.embeddings import Embeddings
from langgraph.store.base import PutOp

from langgraph_s3_checkpoint import S3Store, local
from langgraph_s3_checkpoint.memory import MemoryBucket

WORDS = ["apple", "car", "pie", "zebra", "dog", "blue", "river", "stone", "cloud", "music"]


class HashEmbeddings(Embeddings):
    def __init__(self, dims: int) -> None:
        self.dims = dims

    def _one(self, text: str) -> list[float]:
        out: list[float] = []
        counter = 0
        while len(out) < self.dims:
            digest = hashlib.sha256(f"{counter}:{text}".encode()).digest()
            out += [(b - 128) / 128 for b in digest]
            counter += 1
        return out[: self.dims]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


class Counter:
    """Counts requests by operation: botocore hooks for a real client, the log for MemoryBucket."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.counts: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()
        if isinstance(client, MemoryBucket):
            client.log = []
        else:
            client.meta.events.register("before-send.s3", self._on_send)

    def _on_send(self, event_name: str, **_: Any) -> None:
        with self.lock:
            self.counts[event_name.rsplit(".", 1)[-1]] += 1

    def reset(self) -> None:
        self.counts.clear()
        if isinstance(self.client, MemoryBucket):
            self.client.log = []

    def snapshot(self) -> dict[str, int]:
        if isinstance(self.client, MemoryBucket):
            assert self.client.log is not None
            return dict(collections.Counter(type(r).__name__ for r, _ in self.client.log))
        return dict(self.counts)


def measure(store: S3Store, counter: Counter, label: str, call: Any) -> dict[str, Any]:
    counter.reset()
    started = time.perf_counter()
    result = call()
    elapsed = time.perf_counter() - started
    row = {"op": label, "seconds": round(elapsed, 3), "requests": counter.snapshot(), "results": len(result)}
    print(json.dumps(row))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--dims", type=int, default=128)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--server", choices=["memory", "seaweedfs", "moto"], default="memory")
    args = parser.parse_args()

    server = None
    if args.server == "memory":
        client: Any = MemoryBucket()
        bucket = "bench"
    else:
        server = local.start(args.server)
        server.create_bucket("bench-store")
        client, bucket = server.client(), "bench-store"
    try:
        index: Any = {"dims": args.dims, "embed": HashEmbeddings(args.dims), "fields": ["text"]}
        store = S3Store(bucket=bucket, prefix="bench", client=client, index=index, vector_shards=args.shards)
        counter = Counter(client)
        started = time.perf_counter()
        for start in range(0, args.items, 200):
            store.batch(
                [
                    PutOp(
                        ("docs",),
                        f"doc-{i:06d}",
                        {"text": f"{WORDS[i % 10]} {WORDS[(i // 10) % 10]} {i}", "n": i % 100},
                    )
                    for i in range(start, min(args.items, start + 200))
                ]
            )
        load = time.perf_counter() - started
        print(
            json.dumps(
                {
                    "op": f"put {args.items} items (batches of 200)",
                    "seconds": round(load, 2),
                    "requests": counter.snapshot(),
                }
            )
        )
        measure(store, counter, "put 1 item", lambda: [store.put(("docs",), "one-more", {"text": "apple"})])
        measure(store, counter, "search query limit=10", lambda: store.search(("docs",), query="zebra pie", limit=10))
        measure(
            store,
            counter,
            "search query + filter limit=10",
            lambda: store.search(("docs",), query="zebra pie", filter={"n": {"$lt": 5}}, limit=10),
        )
        measure(store, counter, "search no query limit=10", lambda: store.search(("docs",), limit=10))
        measure(store, counter, "search filter limit=10", lambda: store.search(("docs",), filter={"n": 99}, limit=10))
        measure(store, counter, "get", lambda: [store.get(("docs",), "doc-000042")])
        measure(store, counter, "list_namespaces", lambda: store.list_namespaces())
        store.close()
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
