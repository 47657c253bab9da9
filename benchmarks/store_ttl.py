"""Cost of an S3Store TTL sweep: wall time and requests for ``sweep_ttl()`` over N items.

    python benchmarks/store_ttl.py                          # 1,000 and 10,000 items on a local SeaweedFS
    python benchmarks/store_ttl.py --items 1000 5000 --server moto
    python benchmarks/store_ttl.py --index                  # with a vector index (shard updates too)

For each N, on a fresh prefix set up first (``setup()`` files an empty store: its sweeps read only the items
whose expiry marker came due): N items are put in batches of 200, one namespace per 100 items; even items get a
TTL short enough to have passed when the sweep starts, odd ones a TTL of an hour. Then:

* ``sweep, half expired``: deletes the N/2 expired items;
* ``sweep, none expired``: the N/2 survivors again, nothing to delete;
* ``sweep, none expired (N)``: a second prefix of N items with the hour-long TTL only;
* ``sweep full=True (N)``: the same N items read one by one, as every sweep did before expiry markers (and each
  filed again: a PUT per item).

Requests are counted with botocore's ``before-send`` hook (one per HTTP attempt). Embeddings (with
``--index``) are a deterministic hash, so the numbers are the store's own cost.
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import closing
from typing import Any

from langgraph.store.base import PutOp
from store_search import Counter, HashEmbeddings

from langgraph_s3_checkpoint import S3Store, local

SHORT_TTL_MINUTES = 0.001
"""60 ms: expired by the time the load is done."""
LONG_TTL_MINUTES = 60.0
BATCH = 200
PER_NAMESPACE = 100


def load(store: S3Store, items: int, expiring: bool) -> float:
    """Put ``items`` items (every other one with the short TTL when ``expiring``); the seconds taken."""
    started = time.perf_counter()
    for start in range(0, items, BATCH):
        store.batch(
            [
                PutOp(
                    ("mem", f"ns{i // PER_NAMESPACE:04d}"),
                    f"item-{i:06d}",
                    {"text": f"memory {i}", "n": i},
                    ttl=SHORT_TTL_MINUTES if expiring and i % 2 == 0 else LONG_TTL_MINUTES,
                )
                for i in range(start, min(items, start + BATCH))
            ]
        )
    return time.perf_counter() - started


def sweep(store: S3Store, counter: Counter, label: str, items: int, full: bool = False) -> dict[str, Any]:
    """One timed ``sweep_ttl()`` over ``items`` stored items; prints and returns its row."""
    counter.reset()
    started = time.perf_counter()
    deleted = store.sweep_ttl(full=full)
    elapsed = time.perf_counter() - started
    requests = counter.snapshot()
    total = sum(requests.values())
    row = {
        "op": label,
        "items": items,
        "deleted": deleted,
        "seconds": round(elapsed, 3),
        "requests": requests,
        "requests_per_item": round(total / items, 3) if items else None,
        "ms_per_item": round(1000 * elapsed / items, 3) if items else None,
    }
    print(json.dumps(row))
    return row


def run(client: Any, counter: Counter, bucket: str, items: int, index: Any) -> list[dict[str, Any]]:
    """The three sweeps of the module docstring for one N, each on fresh prefixes."""
    rows = []
    tag = f"{items}-{int(time.time())}"
    with closing(S3Store(bucket=bucket, prefix=f"ttl-{tag}", client=client, index=index)) as store:
        store.setup()
        seconds = load(store, items, expiring=True)
        print(json.dumps({"op": f"put {items} items (batches of {BATCH})", "seconds": round(seconds, 2)}))
        time.sleep(SHORT_TTL_MINUTES * 60 + 0.5)
        rows.append(sweep(store, counter, "sweep, half expired", items))
        rows.append(sweep(store, counter, "sweep, none expired", items - rows[-1]["deleted"]))
    with closing(S3Store(bucket=bucket, prefix=f"live-{tag}", client=client, index=index)) as store:
        store.setup()
        load(store, items, expiring=False)
        rows.append(sweep(store, counter, f"sweep, none expired ({items})", items))
        rows.append(sweep(store, counter, f"sweep full=True ({items})", items, full=True))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--server", choices=["seaweedfs", "moto"], default="seaweedfs")
    parser.add_argument("--index", action="store_true", help="configure a 64-dim index on the 'text' field")
    args = parser.parse_args()
    index: Any = {"dims": 64, "embed": HashEmbeddings(64), "fields": ["text"]} if args.index else None
    with local.start(args.server) as server:
        server.create_bucket("bench-ttl")
        client = server.client()
        counter = Counter(client)
        for items in args.items:
            run(client, counter, "bench-ttl", items, index)


if __name__ == "__main__":
    main()
