"""S3Store / AsyncS3Store: differential against InMemoryStore, request counts, TTL, layout and sharing.

LangGraph's own InMemoryStore tests run against both stores in ``test_store_suite.py``. Here:

* a randomized differential test (fixed seeds): thousands of operations on ``MemoryBucket``, a few
  hundred on each live server, sync and async, with and without a vector index, compared op by op
  with InMemoryStore. Search results are compared under the documented order (object key order for
  search without a query; score, then that order, with a query); everything else must be identical;
* request counts per operation (the cost table of docs/design.md);
* TTL, long labels and keys, invalid labels, filters that cannot be compared, sharing a prefix with
  the saver, encryption.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar, cast
from uuid import uuid4

import pytest
from helpers import RequestCounter
from langchain_core.embeddings import Embeddings
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    SearchItem,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from langgraph_s3_checkpoint import (
    AsyncS3Store,
    CorruptObjectError,
    S3CheckpointError,
    S3Saver,
    S3Store,
)
from langgraph_s3_checkpoint._protocol.requests import Put
from langgraph_s3_checkpoint._protocol.store.objects import _python_scores, pack_vector, similarity_scores
from langgraph_s3_checkpoint.local import LocalS3Server
from langgraph_s3_checkpoint.memory import MemoryBucket
from langgraph_s3_checkpoint.store import BaseS3Store, StoreLayout


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------
class GridEmbeddings(Embeddings):
    """Deterministic embeddings whose components are multiples of 1/8 (exact in float32), so scores
    computed from stored float32 vectors equal InMemoryStore's float64 ones bit for bit."""

    def __init__(self, dims: int = 12) -> None:
        self.dims = dims
        self.calls = 0

    def _one(self, text: str) -> list[float]:
        digest = hashlib.sha256(text.encode()).digest()
        return [((digest[i] % 17) - 8) / 8 for i in range(self.dims)]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


def order_key(layout: StoreLayout, namespace: Sequence[str], key: str) -> bytes:
    """The documented order of search without a query: the items' object keys, ascending bytes."""
    return layout.item(namespace, key).encode("utf-8", "surrogatepass")


def plain(items: Any) -> Any:
    if items is None:
        return None
    if isinstance(items, list):
        return [plain(i) for i in items]
    if isinstance(items, tuple):  # a namespace (list_namespaces)
        return items
    out = (tuple(items.namespace), items.key, items.value)
    if isinstance(items, SearchItem):
        return (*out, items.score)
    return out


def expected_search(layout: StoreLayout, memory: InMemoryStore, op: SearchOp, has_query: bool) -> list[Any]:
    """InMemoryStore's answer under our documented order."""
    answer = memory.batch([op._replace(limit=10**9, offset=0)])[0]
    assert isinstance(answer, list)
    full = cast(list[SearchItem], answer)
    if not has_query:
        ranked = sorted(full, key=lambda i: order_key(layout, i.namespace, i.key))
        return plain(ranked[op.offset : op.offset + op.limit])
    scored = sorted(
        (i for i in full if i.score is not None),
        key=lambda i: (-cast(float, i.score), order_key(layout, i.namespace, i.key)),
    )
    kept = scored[op.offset : op.offset + op.limit]
    scoreless = sorted((i for i in full if i.score is None), key=lambda i: order_key(layout, i.namespace, i.key))
    if scoreless and len(kept) < op.limit:
        kept += scoreless[: op.limit - len(kept)]
    return plain(kept)


LABELS = ["a", "b", "ab", "a-b", "x_y", "%", "~", "a/b", "ü", "日本", "sp ace", "Z", "L" * 210]
KEYS = ["k", "k1", "", " ", "a/b", "~", "%41", "ключ", "K" * 230, "k.2"]
WORDS = ["apple", "car", "pie", "zebra", "dog", "blue"]


def random_namespace(rng: random.Random) -> tuple[str, ...]:
    return tuple(rng.choice(LABELS) for _ in range(rng.randint(1, 3)))


def random_value(rng: random.Random) -> dict[str, Any]:
    # Texts are unique: InMemoryStore fails a batch in which two fields have the same text (it embeds
    # each distinct text once, then expects one vector per field); S3Store does not (see
    # test_same_text_twice_in_a_batch).
    words = " ".join(rng.choices(WORDS, k=rng.randint(1, 3)))
    value: dict[str, Any] = {"n": rng.randint(0, 9), "text": f"{words} {rng.randrange(10**9)}"}
    if rng.random() < 0.5:
        value["color"] = rng.choice(["red", "blue", "green"])
    if rng.random() < 0.4:
        tags = [f"{w} {rng.randrange(10**9)}" for w in rng.sample(WORDS, 2)]
        value["meta"] = {"level": rng.randint(0, 3), "tags": tags}
    if rng.random() < 0.3:
        value["f"] = rng.choice([1.5, -2.0, 3.25])
    return value


def random_filter(rng: random.Random) -> dict[str, Any] | None:
    choice = rng.random()
    if choice < 0.4:
        return None
    options: list[dict[str, Any]] = [
        {"n": rng.randint(0, 9)},
        {"n": {rng.choice(["$gt", "$gte", "$lt", "$lte"]): rng.randint(0, 9)}},
        {"n": {"$ne": rng.randint(0, 9)}},
        {"color": rng.choice(["red", "blue", "green"])},
        {"color": {"$eq": "red"}},
        {"meta": {"level": rng.randint(0, 3)}},
        {"n": {"$gte": 2, "$lt": 7}, "color": "blue"},
    ]
    return rng.choice(options)


def random_prefix(rng: random.Random) -> tuple[str, ...]:
    return tuple(rng.choice(LABELS) for _ in range(rng.randint(0, 2)))


def random_conditions(rng: random.Random) -> tuple[MatchCondition, ...]:
    conditions = []
    if rng.random() < 0.5:
        conditions.append(
            MatchCondition("prefix", tuple(rng.choice([*LABELS[:4], "*"]) for _ in range(rng.randint(1, 2))))
        )
    if rng.random() < 0.3:
        conditions.append(
            MatchCondition("suffix", tuple(rng.choice([*LABELS[:4], "*"]) for _ in range(rng.randint(1, 2))))
        )
    return tuple(conditions)


def random_op(rng: random.Random, indexed: bool) -> Op:
    kind = rng.random()
    if kind < 0.45:
        index: Any = None
        if indexed and rng.random() < 0.2:
            index = ["text"] if rng.random() < 0.5 else ["meta.tags[*]", "text"]
        return PutOp(random_namespace(rng), rng.choice(KEYS), random_value(rng), index=index)
    if kind < 0.55:
        return PutOp(random_namespace(rng), rng.choice(KEYS), None)
    if kind < 0.7:
        return GetOp(random_namespace(rng), rng.choice(KEYS))
    if kind < 0.9:
        query = " ".join(rng.choices(WORDS, k=2)) if indexed and rng.random() < 0.6 else None
        return SearchOp(random_prefix(rng), random_filter(rng), rng.randint(1, 12), rng.randint(0, 6), query)
    return ListNamespacesOp(
        random_conditions(rng),
        rng.choice([None, None, 1, 2, 3, 0, -1, -2]),
        rng.randint(1, 30),
        rng.randint(0, 3),
    )


def expected_namespaces(memory: InMemoryStore, op: ListNamespacesOp) -> list[tuple[str, ...]]:
    """InMemoryStore's answer, without the empty namespaces it keeps after a get or a delete (we list
    only namespaces that hold items, as PostgresStore does)."""
    for namespace in [ns for ns, items in memory._data.items() if not items]:
        del memory._data[namespace]
    answer = memory.batch([op])[0]
    assert isinstance(answer, list)
    return cast(list[tuple[str, ...]], answer)


def check_batch(layout: StoreLayout, memory: InMemoryStore, ops: list[Op], got: list[Any], before: Any) -> None:
    """``before``: InMemoryStore's search answers computed on the state before the batch."""
    for op in ops:
        if isinstance(op, PutOp):
            # A put replaces the item's vectors (InMemoryStore keeps those of fields not embedded again).
            memory._vectors[tuple(op.namespace)].pop(op.key, None)
    expected = memory.batch(ops)
    for i, op in enumerate(ops):
        if isinstance(op, (SearchOp, ListNamespacesOp)):
            assert plain(got[i]) == before[i], (i, op)
        else:
            assert plain(got[i]) == plain(expected[i]), (i, op)


def run_differential(
    store: BaseS3Store,
    memory: InMemoryStore,
    n_ops: int,
    seed: int,
    *,
    indexed: bool,
    call: Callable[[list[Op]], list[Any]],
) -> int:
    rng = random.Random(seed)
    layout = store.plans.layout
    done = 0
    while done < n_ops:
        size = 1 if rng.random() < 0.7 else rng.randint(2, 6)
        ops = [random_op(rng, indexed) for _ in range(size)]
        if size > 1 and rng.random() < 0.5:  # the same key written twice in one batch: last wins
            first = next((op for op in ops if isinstance(op, PutOp)), None)
            if first is not None:
                ops.append(first._replace(value=random_value(rng)))
        before: dict[int, Any] = {}
        for i, op in enumerate(ops):
            if isinstance(op, SearchOp):
                before[i] = expected_search(layout, memory, op, bool(op.query) and indexed)
            elif isinstance(op, ListNamespacesOp):
                before[i] = expected_namespaces(memory, op)
        got = call(ops)
        check_batch(layout, memory, ops, got, before)
        done += len(ops)
    # The final state, in full.
    everything = SearchOp((), None, 10**6, 0)
    assert plain(call([everything])[0]) == expected_search(layout, memory, everything, False)
    assert call([ListNamespacesOp(limit=10**6)])[0] == expected_namespaces(memory, ListNamespacesOp(limit=10**6))
    return done


def memory_store(indexed: bool, embeddings: Embeddings | None = None, **kwargs: Any) -> S3Store:
    index = {"dims": 12, "embed": embeddings or GridEmbeddings(), "fields": ["text"]} if indexed else None
    return S3Store(bucket="b", prefix="p", client=MemoryBucket(), index=index, **kwargs)  # type: ignore[arg-type]


def reference(indexed: bool) -> InMemoryStore:
    return InMemoryStore(index={"dims": 12, "embed": GridEmbeddings(), "fields": ["text"]} if indexed else None)


# ------------------------------------------------------------------------------------------------
# Differential
# ------------------------------------------------------------------------------------------------
@pytest.mark.memory
@pytest.mark.parametrize("indexed", [False, True], ids=["plain", "indexed"])
def test_differential_memory_bucket(indexed: bool) -> None:
    """3,000 random operations (single and batched) on MemoryBucket, compared op by op."""
    store = memory_store(indexed)
    with contextlib.closing(store):
        done = run_differential(store, reference(indexed), 3000, seed=1234, indexed=indexed, call=store.batch)
    assert done >= 3000


@pytest.mark.memory
@pytest.mark.parametrize("indexed", [False, True], ids=["plain", "indexed"])
async def test_differential_memory_bucket_async(indexed: bool) -> None:
    store = AsyncS3Store(
        bucket="b",
        prefix="p",
        client=MemoryBucket(),
        index={"dims": 12, "embed": GridEmbeddings(), "fields": ["text"]} if indexed else None,
    )
    memory = reference(indexed)
    loop = asyncio.get_running_loop()

    def call(ops: list[Op]) -> list[Any]:
        return asyncio.run_coroutine_threadsafe(store.abatch(ops), loop).result()

    with contextlib.closing(store):
        await asyncio.to_thread(run_differential, store, memory, 1000, 99, indexed=indexed, call=call)


@pytest.mark.parametrize("indexed", [False, True], ids=["plain", "indexed"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_differential_live(s3_server: LocalS3Server, bucket: str, prefix: str, flavour: str, indexed: bool) -> None:
    """A few hundred operations on each live server, through S3Store and AsyncS3Store."""
    index = {"dims": 12, "embed": GridEmbeddings(), "fields": ["text"]} if indexed else None
    cls = S3Store if flavour == "sync" else AsyncS3Store
    store = cls(bucket=bucket, prefix=prefix, client=s3_server.client(), index=index)  # type: ignore[arg-type]
    call: Callable[[list[Op]], list[Any]]
    if flavour == "sync":
        call = store.batch
    else:

        def call(ops: list[Op]) -> list[Any]:
            return asyncio.run(store.abatch(ops))

    with contextlib.closing(store):
        run_differential(store, reference(indexed), 250, seed=7 if indexed else 8, indexed=indexed, call=call)


# ------------------------------------------------------------------------------------------------
# Request counts
# ------------------------------------------------------------------------------------------------
Counted = tuple[S3Store, RequestCounter]


@pytest.fixture
def counted(
    s3_server: LocalS3Server, bucket: str, prefix: str, count_requests: Callable[[Any], RequestCounter]
) -> Iterator[Counted]:
    client = s3_server.client()
    store = S3Store(bucket=bucket, prefix=prefix, client=client)
    counter = count_requests(client)
    yield store, counter
    store.close()


def test_requests_get_put_delete(counted: Counted) -> None:
    store, counter = counted
    store.put(("users", "1"), "prefs", {"theme": "dark"})
    assert counter.snapshot() == {"PutObject": 1}
    counter.reset()
    assert store.get(("users", "1"), "prefs") is not None
    assert counter.snapshot() == {"GetObject": 1}
    counter.reset()
    assert store.get(("users", "1"), "missing") is None
    assert counter.snapshot() == {"GetObject": 1}
    counter.reset()
    store.delete(("users", "1"), "prefs")
    assert counter.snapshot() == {"DeleteObjects": 1}
    counter.reset()
    # A label too long to keep verbatim: its name object once, then never again from this store.
    long = ("users", "L" * 300)
    store.put(long, "k", {"v": 1})
    assert counter.snapshot() == {"PutObject": 2}
    counter.reset()
    store.put(long, "k2", {"v": 2})
    assert counter.snapshot() == {"PutObject": 1}


def test_requests_batch_is_one_round_trip_per_phase(counted: Counted) -> None:
    store, counter = counted
    store.batch([PutOp(("n",), f"k{i}", {"i": i}) for i in range(10)])
    assert counter.snapshot() == {"PutObject": 10}
    counter.reset()
    results = store.batch([GetOp(("n",), f"k{i}") for i in range(10)])
    assert [r.value["i"] for r in results] == list(range(10))  # type: ignore[union-attr]
    assert counter.snapshot() == {"GetObject": 10}


def test_requests_search(counted: Counted) -> None:
    store, counter = counted
    store.batch([PutOp(("docs", "x"), f"k{i:02d}", {"i": i, "even": i % 2 == 0}) for i in range(20)])
    counter.reset()
    assert [r.key for r in store.search(("docs",), limit=3)] == ["k00", "k01", "k02"]
    assert counter.snapshot() == {"ListObjectsV2": 1, "GetObject": 3}
    counter.reset()
    assert [r.key for r in store.search(("docs",), limit=3, offset=4)] == ["k04", "k05", "k06"]
    assert counter.snapshot() == {"ListObjectsV2": 1, "GetObject": 7}
    counter.reset()
    # A filter reads the listed items in parallel chunks of 128 until the page is full (here: all 20).
    assert len(store.search(("docs",), filter={"even": True}, limit=10)) == 10
    assert counter.snapshot() == {"ListObjectsV2": 1, "GetObject": 20}


def test_requests_list_namespaces(counted: Counted) -> None:
    store, counter = counted
    store.batch([PutOp(ns, "k", {"v": 1}) for ns in [("a", "b"), ("a", "c"), ("d",), ("a", "c", "e")]])
    counter.reset()
    assert store.list_namespaces() == [("a", "b"), ("a", "c"), ("a", "c", "e"), ("d",)]
    # One delimiter LIST per node of the tree (root, a/, d/, a/b/, a/c/, a/c/e/), and one LIST per
    # namespace found, proving it holds an item (SeaweedFS lists folders emptied by deletes).
    assert counter.snapshot() == {"ListObjectsV2": 6 + 4}
    counter.reset()
    assert store.list_namespaces(max_depth=1) == [("a",), ("d",)]
    assert counter.snapshot() == {"ListObjectsV2": 1 + 2}
    counter.reset()
    assert store.list_namespaces(prefix=("a",), max_depth=2) == [("a", "b"), ("a", "c")]
    assert counter.snapshot() == {"ListObjectsV2": 1 + 2}
    counter.reset()
    store.delete(("d",), "k")
    counter.reset()
    assert store.list_namespaces(max_depth=1) == [("a",)]


def test_requests_vector_put_and_search(
    s3_server: LocalS3Server, bucket: str, prefix: str, count_requests: Callable[[Any], RequestCounter]
) -> None:
    client = s3_server.client()
    index = {"dims": 12, "embed": GridEmbeddings(), "fields": ["text"]}
    with contextlib.closing(
        S3Store(bucket=bucket, prefix=prefix, client=client, index=index, vector_shards=4)  # type: ignore[arg-type]
    ) as store:
        counter = count_requests(client)
        store.put(("docs",), "first", {"text": "apple pie"})
        # Item PUT ∥ shard GET (absent), then shard PUT (If-None-Match) ∥ item GET (is the item still of the
        # version this put wrote? A later put of the key may have landed: see tests/test_vector_race.py).
        assert counter.snapshot() == {"PutObject": 2, "GetObject": 2}
        store.batch([PutOp(("docs",), f"k{i}", {"text": f"{WORDS[i % 6]} {i}"}) for i in range(40)])
        counter.reset()
        results = store.search(("docs",), query="apple pie", limit=3)
        assert results[0].key == "first"
        # LIST shards; GET the 4 shards; GET the 3 items returned: never one GET per item.
        assert counter.snapshot() == {"ListObjectsV2": 1, "GetObject": 4 + 3}

        counter.reset()
        # The filter is decided on the values the shards hold for the listed ETags: only the match is read.
        results = store.search(("docs",), query="apple pie", filter={"text": "apple pie"}, limit=3)
        assert [r.key for r in results] == ["first"]
        assert counter.snapshot() == {"ListObjectsV2": 2, "GetObject": 4 + 1}
        counter.reset()
        # Asking for more than the scored items: the items are listed to fill the page with unscored ones.
        store.put(("docs",), "unindexed", {"text": "apple pie"}, index=False)
        counter.reset()
        results = store.search(("docs",), query="apple pie", limit=100)
        assert len(results) == 42 and results[-1].key == "unindexed" and results[-1].score is None
        assert counter.snapshot() == {"ListObjectsV2": 2, "GetObject": 4 + 42}


def test_requests_sweep_ttl(counted: Counted) -> None:
    """A put with a TTL files an expiry marker before its item (one more PUT, one more round trip). A sweep lists
    the markers that came due, reads each and its item, deletes each expired item with one conditional DELETE
    and the markers with one DeleteObjects; with nothing due it is one LIST, however many items are stored
    (tests/test_expiry.py: the same counts at two sizes, interleavings, the migration of older items)."""
    store, counter = counted
    clock = Clock()
    store.plans.now = clock
    store.setup()
    counter.reset()
    store.batch([PutOp(("t", str(i % 3)), f"k{i}", {"v": i}, ttl=1 if i % 2 else 10) for i in range(30)])
    assert counter.snapshot() == {"PutObject": 60}
    clock.advance(2)
    counter.reset()
    assert store.sweep_ttl() == 15
    # + 1 PUT: the first sweep records where it swept (ttl-filed), then at most once an hour.
    expected = {"ListObjectsV2": 1, "GetObject": 30, "DeleteObject": 15, "DeleteObjects": 1, "PutObject": 1}
    assert counter.snapshot() == expected
    counter.reset()
    assert store.sweep_ttl() == 0
    assert counter.snapshot() == {"ListObjectsV2": 1}


def test_requests_sweep_ttl_with_an_index(
    s3_server: LocalS3Server, bucket: str, prefix: str, count_requests: Callable[[Any], RequestCounter]
) -> None:
    """With an index, each shard holding an expired item's vector is updated once per chunk of items
    judged: GET, then PUT ``If-Match`` (conditional DELETE when no entry is left)."""
    client = s3_server.client()
    index = {"dims": 12, "embed": GridEmbeddings(), "fields": ["text"]}
    with contextlib.closing(
        S3Store(bucket=bucket, prefix=prefix, client=client, index=index, vector_shards=4)  # type: ignore[arg-type]
    ) as store:
        clock = Clock()
        store.plans.now = clock
        store.setup()
        keys = [f"k{i}" for i in range(20)]
        store.batch([PutOp(("docs",), k, {"text": WORDS[i % 6]}, ttl=1 if i % 2 else 10) for i, k in enumerate(keys)])
        clock.advance(2)
        layout = store.plans.layout
        shard_of = {k: layout.shard(("docs",), k, 4) for k in keys}
        touched = {shard_of[k] for k in keys[1::2]}
        emptied = touched - {shard_of[k] for k in keys[0::2]}
        counter = count_requests(client)
        assert store.sweep_ttl() == 10
        expected = {
            "ListObjectsV2": 1,
            # each due marker, its item, each shard touched, and each deleted item again with the write of its
            # shard (a put of the key that landed since must keep its entry)
            "GetObject": 10 + 10 + len(touched) + 10,
            "DeleteObject": 10 + len(emptied),
            "DeleteObjects": 1,
            "PutObject": len(touched - emptied) + 1,
        }
        assert counter.snapshot() == {k: v for k, v in expected.items() if v}
        results = store.search(("docs",), query=WORDS[0], limit=20)
        assert sorted(r.key for r in results) == sorted(keys[0::2])
        assert all(r.score is not None for r in results)  # the survivors' vectors are all still there


# ------------------------------------------------------------------------------------------------
# Behaviour
# ------------------------------------------------------------------------------------------------
@pytest.mark.memory
def test_filters_that_cannot_compare_do_not_raise() -> None:
    with contextlib.closing(memory_store(False)) as store:
        store.put(("f",), "num", {"n": 5})
        store.put(("f",), "none", {"n": None})
        store.put(("f",), "str", {"n": "five"})
        store.put(("f",), "missing", {"other": 1})
        store.put(("f",), "dict", {"n": {"deep": 1}})
        assert [r.key for r in store.search(("f",), filter={"n": {"$gt": 1}})] == ["num"]
        assert [r.key for r in store.search(("f",), filter={"n": {"$lte": 5}})] == ["num"]
        assert sorted(r.key for r in store.search(("f",), filter={"n": {"$ne": 5}})) == [
            "dict",
            "missing",
            "none",
            "str",
        ]
        assert [r.key for r in store.search(("f",), filter={"n": {"deep": 1}})] == ["dict"]


@pytest.mark.memory
def test_same_text_twice_in_a_batch() -> None:
    with contextlib.closing(memory_store(True)) as store:
        store.batch([PutOp(("d",), "a", {"text": "apple"}), PutOp(("d",), "b", {"text": "apple"})])
        results = store.search(("d",), query="apple")
        assert [r.key for r in results] == ["a", "b"]
        assert results[0].score == results[1].score == pytest.approx(1.0)


@pytest.mark.memory
def test_invalid_labels_raise_like_langgraph() -> None:
    with contextlib.closing(memory_store(False)) as store:
        for call in (
            lambda: store.put(("a.b",), "k", {}),
            lambda: store.get(("a.b",), "k"),
            lambda: store.batch([PutOp(("a.b",), "k", {"v": 1})]),
            lambda: store.batch([GetOp(("ok", "x.y"), "k")]),
            lambda: store.batch([SearchOp(("a.b",))]),
            lambda: store.list_namespaces(prefix=("a.b",)),
        ):
            with pytest.raises(InvalidNamespaceError):
                call()


def test_long_labels_and_keys(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    """SeaweedFS refuses path parts over 255 bytes: long labels and keys become digests."""
    label, key = "é" * 200, "k" * 400
    namespace = ("users", label, "memories")
    with contextlib.closing(S3Store(bucket=bucket, prefix=prefix, client=s3_server.client())) as store:
        store.put(namespace, key, {"v": 1})
        store.put(("users", label), "short", {"v": 2})
        item = store.get(namespace, key)
        assert item is not None and item.namespace == namespace and item.key == key and item.value == {"v": 1}
        assert [(r.namespace, r.key) for r in store.search(("users", label))] == [
            (namespace, key),
            (("users", label), "short"),
        ]
        assert store.list_namespaces(prefix=("users",)) == [("users", label), namespace]
        assert store.list_namespaces(suffix=("memories",), max_depth=2) == [("users", label)]
        # Another store instance (no name cache) names the label from its name object.
        with contextlib.closing(S3Store(bucket=bucket, prefix=prefix, client=s3_server.client())) as other:
            assert other.list_namespaces() == [("users", label), namespace]
        store.delete(namespace, key)
        assert store.get(namespace, key) is None
        assert store.list_namespaces() == [("users", label)]


@pytest.mark.memory
def test_what_a_store_remembers_of_long_labels_is_bounded() -> None:
    """Issue 38: a long-lived store kept the name of every long label it ever wrote or read (a digest segment and the
    label, about 0.5 KB each for labels of 200-300 characters), never released. It keeps them in a byte budget, least
    recently used first out, and forgetting one costs only its create-only PUT again (refused: the name exists);
    listing reads the names again, and every namespace is still listed."""
    bucket = MemoryBucket(keep_log=True)
    store = S3Store(bucket="b", prefix="p", client=bucket)
    namespaces = [(f"{i:04d}-" + "L" * 1000,) for i in range(2000)]
    for i, namespace in enumerate(namespaces):
        store.put(namespace, "k", {"v": i})
    names = store.plans.names
    assert 0 < len(names) < len(namespaces)
    assert names.retained_bytes <= names.max_bytes

    def puts_of(namespace: tuple[str, ...]) -> list[str]:
        assert bucket.log is not None
        bucket.log.clear()
        store.put(namespace, "k", {"v": -1})
        return sorted(("name" if "/names/" in r.key else "item") for r, _ in bucket.log if isinstance(r, Put))

    assert puts_of(namespaces[-1]) == ["item"]  # remembered: its name is not written again
    assert puts_of(namespaces[0]) == ["item", "name"]  # forgotten: one create-only PUT again, refused
    assert puts_of(namespaces[0]) == ["item"]  # and remembered again
    assert store.list_namespaces(limit=len(namespaces)) == sorted(namespaces)
    assert len(names) < len(namespaces) and names.retained_bytes <= names.max_bytes


def test_a_forgotten_long_label_costs_one_create_only_put(
    s3_server: LocalS3Server, bucket: str, prefix: str, count_requests: Callable[[Any], RequestCounter]
) -> None:
    """On both servers: a store whose memory for names holds three of them. A put under a label it forgot sends
    one more PutObject (the name, create-only, refused); under a remembered one, the item's alone."""
    from langgraph_s3_checkpoint._protocol.store.plans import KnownNames

    client = s3_server.client()
    with contextlib.closing(S3Store(bucket=bucket, prefix=prefix, client=client)) as store:
        store.plans.names = KnownNames(max_bytes=3 * 1500)
        namespaces = [("users", f"{i}-" + "L" * 1000) for i in range(6)]
        for namespace in namespaces:
            store.put(namespace, "k", {"v": 1})
        assert len(store.plans.names) == 3
        counter = count_requests(client)
        store.put(namespaces[-1], "k", {"v": 2})
        assert counter.snapshot() == {"PutObject": 1}
        counter.reset()
        store.put(namespaces[0], "k", {"v": 2})
        assert counter.snapshot() == {"PutObject": 2}
        counter.reset()
        assert store.list_namespaces(prefix=("users",)) == sorted(namespaces)
        assert counter.snapshot().get("GetObject") == 3  # the names of the three labels it does not hold
        assert len(store.plans.names) == 3


def test_saver_and_store_share_a_prefix(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    client = s3_server.client()
    with (
        contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver,
        contextlib.closing(S3Store(bucket=bucket, prefix=prefix, client=client)) as store,
    ):
        config: Any = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
        saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
        # A namespace named like the saver's folders must not confuse either side.
        store.put(("threads", "t1"), "memory", {"fact": "likes tea"})
        store.put(("runs",), "x", {"v": 1})
        assert [t.config["configurable"]["thread_id"] for t in saver.list(None)] == ["t1"]
        assert saver.get_tuple({"configurable": {"thread_id": "t1"}}) is not None
        assert store.list_namespaces() == [("runs",), ("threads", "t1")]
        assert [r.key for r in store.search(())] == ["x", "memory"]
        # The saver's garbage collector, even with no grace period, leaves the store alone.
        from langgraph_s3_checkpoint.gc import gc

        gc(saver, grace_seconds=0)
        saver.delete_thread("t1")
        assert store.get(("threads", "t1"), "memory") is not None
        assert store.get(("runs",), "x") is not None


def test_objects_the_store_did_not_write_are_skipped(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    """Defect: search and the TTL sweep read every object under ``store/ns/`` shaped like an item, so a foreign
    object in a folder the store's escape never makes (``a.b``: it writes ``.`` as ``=2E``; ``%zz``, ``=zz``) or
    with such a key segment made them raise ``CorruptObjectError``. One rule (``store.is_own_segment``) now
    skips them in every read, listing and sweep, and nothing deletes them."""
    client = s3_server.client()
    with contextlib.closing(S3Store(bucket=bucket, prefix=prefix, client=client)) as store:
        store.put(("users", "u1"), "k", {"a": 1})
        store.put(("users", "u2"), "k", {"a": 2}, ttl=0.001)
        root = store.plans.layout.items_root
        foreign = [f"{root}users/a.b/~/k", f"{root}%zz/~/k", f"{root}=zz/~/k", f"{root}users/u1/~/x.y"]
        for key in foreign:
            client.put_object(Bucket=bucket, Key=key, Body=b"not ours")
        time.sleep(0.1)
        assert store.list_namespaces() == [("users", "u1"), ("users", "u2")]  # u2 is listed until swept
        assert [(r.namespace, r.key) for r in store.search(())] == [(("users", "u1"), "k")]
        assert [(r.namespace, r.key) for r in store.search(("users",))] == [(("users", "u1"), "k")]
        assert store.sweep_ttl() == 1  # u2's item expired
        left = {o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=root)["Contents"]}
        assert left == {*foreign, store.plans.layout.item(("users", "u1"), "k")}


def test_encrypted_serde_leaves_no_plaintext(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    pytest.importorskip("Crypto")
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef0123456789abcdef")
    secret = f"TOP-SECRET-{uuid4().hex}"
    client = s3_server.client()
    with contextlib.closing(
        S3Store(bucket=bucket, prefix=prefix, client=client, serde=serde, compress_threshold=None)
    ) as store:
        store.put(("s",), "k", {"secret": secret})
        assert store.get(("s",), "k").value == {"secret": secret}  # type: ignore[union-attr]
        keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]]
        for key in keys:
            assert secret.encode() not in client.get_object(Bucket=bucket, Key=key)["Body"].read()


def test_from_conn_string_and_setup(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    # The saver's URL, saver-only options included, opens the store too.
    url = f"s3://{bucket}/{prefix}?vector_shards=2&inline_threshold=100&ttl_days=3&read_cache_bytes=0"
    kwargs: dict[str, Any] = {
        "endpoint_url": s3_server.endpoint_url,
        "region_name": s3_server.region,
        "aws_access_key_id": s3_server.access_key,
        "aws_secret_access_key": s3_server.secret_key,
    }
    with S3Store.from_conn_string(url, **kwargs) as store:
        store.setup()
        assert store.plans.vector_shards == 2
        store.put(("a",), "k", {"v": 1})

    async def main() -> Any:
        async with AsyncS3Store.from_conn_string(url, **kwargs) as astore:
            await astore.setup()
            # Blocking methods work on the loop's thread too (they block it, as InMemoryStore's do).
            blocking = astore.get(("a",), "k")
            astore.put(("a",), "k2", {"v": 2})
            return blocking, await astore.aget(("a",), "k"), await astore.aget(("a",), "k2")

    blocking, item, other = asyncio.run(main())
    assert blocking is not None and blocking.value == {"v": 1}
    assert item is not None and item.value == {"v": 1}
    assert other is not None and other.value == {"v": 2}


def test_async_store_with_the_direct_transport_sends_from_the_loop(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    # transport="direct": the async methods send GET, PUT and LIST from the event loop (the saver's
    # native sender), so a put, get, search and list_namespaces never start the store's thread pool.
    store = AsyncS3Store(bucket=bucket, prefix=prefix, client=s3_server.client(), transport="direct")

    async def main() -> tuple[Any, list[Any], list[Any]]:
        await store.aput(("users", "ada"), "city", {"fact": "Lisbon"})
        item = await store.aget(("users", "ada"), "city")
        found = await store.asearch(("users",), filter={"fact": "Lisbon"})
        return item, found, await store.alist_namespaces(prefix=("users",))

    try:
        item, found, namespaces = asyncio.run(main())
        assert store.bucket_io.native is not None and store.bucket_io._pool is None
        assert item is not None and item.value == {"fact": "Lisbon"}
        assert [f.key for f in found] == ["city"]
        assert namespaces == [("users", "ada")]
    finally:
        store.close()


def test_agent_server_store_factory_reads_the_checkpointer_environment(
    s3_server: LocalS3Server, bucket: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph_s3_checkpoint import server

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    env = {
        "LANGGRAPH_S3_URL": f"s3://{bucket}/{prefix}?read_cache_bytes=0",
        "LANGGRAPH_S3_ENDPOINT_URL": s3_server.endpoint_url,
        "LANGGRAPH_S3_REGION": s3_server.region,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    async def main() -> Any:
        async with server.store() as store:
            assert isinstance(store, AsyncS3Store) and store.prefix == prefix
            await store.aput(("users", "u"), "k", {"v": 1})
            return await store.asearch(("users",))

    assert [r.value for r in asyncio.run(main())] == [{"v": 1}]


@pytest.mark.memory
def test_reads_in_a_batch_see_the_state_before_it() -> None:
    with contextlib.closing(memory_store(False)) as store:
        store.put(("a",), "k", {"v": 0})
        results = store.batch(
            [
                PutOp(("a",), "k", {"v": 1}),
                GetOp(("a",), "k"),
                SearchOp(("a",)),
                PutOp(("a",), "k", {"v": 2}),
                PutOp(("b",), "new", {"v": 3}),
                ListNamespacesOp(),
            ]
        )
        assert results[1].value == {"v": 0}  # type: ignore[union-attr]
        assert [r.value for r in results[2]] == [{"v": 0}]  # type: ignore[union-attr]
        assert results[5] == [("a",)]
        assert store.get(("a",), "k").value == {"v": 2}  # type: ignore[union-attr]


@pytest.mark.memory
def test_search_without_query_order_is_key_order_and_pages_are_stable() -> None:
    with contextlib.closing(memory_store(False)) as store:
        keys = [f"k{i}" for i in random.Random(3).sample(range(100), 40)]
        for key in keys:
            store.put(("p",), key, {"v": key})
        full = [r.key for r in store.search(("p",), limit=100)]
        assert full == sorted(keys)
        paged = [r.key for off in range(0, 40, 7) for r in store.search(("p",), limit=7, offset=off)]
        assert paged == full


# ------------------------------------------------------------------------------------------------
# TTL
# ------------------------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, minutes: float) -> None:
        self.now += timedelta(minutes=minutes)


StoreT = TypeVar("StoreT", S3Store, AsyncS3Store)


def ttl_store(
    ttl: Any = None,
    indexed: bool = False,
    cls: type[StoreT] = S3Store,  # type: ignore[assignment]
) -> tuple[StoreT, Clock, MemoryBucket]:
    bucket = MemoryBucket()
    index = {"dims": 12, "embed": GridEmbeddings(), "fields": ["text"]} if indexed else None
    store = cls(bucket="b", client=bucket, ttl=ttl, index=index)  # type: ignore[arg-type]
    clock = Clock()
    store.plans.now = clock
    return store, clock, bucket


@pytest.mark.memory
def test_ttl_items_expire_and_are_never_returned() -> None:
    store, clock, _ = ttl_store()
    with contextlib.closing(store):
        store.put(("t",), "short", {"v": 1}, ttl=5)
        store.put(("t",), "forever", {"v": 2})
        clock.advance(4)
        assert store.get(("t",), "short", refresh_ttl=False) is not None
        clock.advance(2)
        assert store.get(("t",), "short") is None
        assert [r.key for r in store.search(("t",))] == ["forever"]
        assert [r.key for r in store.search(("t",), filter={"v": 1})] == []


@pytest.mark.memory
def test_ttl_refresh_on_read() -> None:
    store, clock, _ = ttl_store({"refresh_on_read": True})
    with contextlib.closing(store):
        store.put(("t",), "a", {"v": 1}, ttl=10)
        store.put(("t",), "b", {"v": 2}, ttl=10)
        clock.advance(8)
        assert store.get(("t",), "a") is not None  # refreshed: expires at 18
        assert [r.key for r in store.search(("t",), filter={"v": 2})] == ["b"]  # refreshed too
        clock.advance(8)
        assert store.get(("t",), "a", refresh_ttl=False) is not None
        assert store.get(("t",), "b", refresh_ttl=False) is not None
        clock.advance(3)
        assert store.get(("t",), "a") is None
        assert store.get(("t",), "b") is None


@pytest.mark.memory
def test_ttl_no_refresh_when_configured_off() -> None:
    store, clock, _ = ttl_store({"refresh_on_read": False, "default_ttl": 10})
    with contextlib.closing(store):
        store.put(("t",), "a", {"v": 1})  # default_ttl applies
        store.put(("t",), "keep", {"v": 1}, ttl=None)  # explicit: never expires
        clock.advance(8)
        assert store.get(("t",), "a") is not None  # not refreshed
        clock.advance(3)
        assert store.get(("t",), "a") is None
        assert store.get(("t",), "keep") is not None


@pytest.mark.memory
def test_ttl_sweep_deletes_expired_items_and_vectors() -> None:
    store, clock, bucket = ttl_store({"default_ttl": 1}, indexed=True)
    with contextlib.closing(store):
        store.batch([PutOp(("t", str(i % 3)), f"k{i}", {"text": "apple"}, ttl=1) for i in range(30)])
        store.put(("t", "0"), "stay", {"text": "apple"}, ttl=None)
        clock.advance(0.5)
        assert store.sweep_ttl() == 0
        clock.advance(1)
        assert [r.key for r in store.search(("t",), query="apple")] == ["stay"]
        assert store.sweep_ttl() == 30
        assert [k for k in bucket.keys("store/ns/")] == [store.plans.layout.item(("t", "0"), "stay")]
        shards = bucket.keys("store/vec/")
        assert len(shards) == 1  # only the survivor's shard is left
        assert asyncio.run(store.asweep_ttl()) == 0


@pytest.mark.memory
def test_a_damaged_item_is_named_and_does_not_stop_the_ttl_sweep(caplog: pytest.LogCaptureFixture) -> None:
    """Defect: one damaged item made every TTL sweep raise, so the background sweeper expired nothing after it,
    and the error told the user to ``verify`` and restore a checkpoint. The sweep now logs the item and goes
    on; reading it raises ``CorruptObjectError`` naming its key, with what to do about a store item."""
    store, clock, bucket = ttl_store({"default_ttl": 1})
    with contextlib.closing(store):
        store.put(("t",), "damaged", {"v": 1})
        store.put(("t",), "expires", {"v": 2})
        damaged = store.plans.layout.item(("t",), "damaged")
        bucket.execute(Put(damaged, b"damaged"))
        with pytest.raises(CorruptObjectError, match="Put the item again") as info:
            store.get(("t",), "damaged")
        assert damaged in str(info.value) and "Other checkpoints" not in str(info.value)
        clock.advance(2)
        with caplog.at_level(logging.WARNING, logger="langgraph_s3_checkpoint.store"):
            assert store.sweep_ttl() == 1
        assert damaged in caplog.text
        assert bucket.keys("store/ns/") == [damaged]


@pytest.mark.memory
def test_ttl_sweep_deletes_expired_items_it_cannot_decrypt() -> None:
    """The sweep judges an item by its frame (expiry, namespace, key), not its value: a sweeper without the
    writers' encryption key still deletes their expired items (it used to raise ``DecryptionError``)."""
    pytest.importorskip("Crypto")
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef0123456789abcdef")
    bucket, clock = MemoryBucket(), Clock()
    writer = S3Store(bucket="b", client=bucket, serde=serde)
    sweeper = S3Store(bucket="b", client=bucket)
    for store in (writer, sweeper):
        store.plans.now = clock
    with contextlib.closing(writer), contextlib.closing(sweeper):
        writer.put(("t",), "short", {"secret": 1}, ttl=1)
        writer.put(("t",), "long", {"secret": 2}, ttl=10)
        clock.advance(2)
        assert sweeper.sweep_ttl() == 1
        assert [i.key for i in writer.search(("t",))] == ["long"]


@pytest.mark.memory
def test_ttl_sweeper_thread() -> None:
    store, clock, bucket = ttl_store({"default_ttl": 1, "sweep_interval_minutes": 1})
    with contextlib.closing(store):
        store.put(("t",), "a", {"v": 1})
        clock.advance(2)
        future = store.start_ttl_sweeper(sweep_interval_minutes=0.0005)  # every 30 ms
        deadline = time.monotonic() + 10
        while bucket.keys("store/ns/") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert bucket.keys("store/ns/") == []
        assert store.stop_ttl_sweeper(timeout=5)
        assert future.result(timeout=5) is None
    without = memory_store(False)
    assert without.start_ttl_sweeper().done()
    without.close()


@pytest.mark.memory
def test_index_configs_of_sqlite_and_postgres_stores_embed_the_same_fields() -> None:
    """SqliteStore names the paths to embed ``text_fields`` (one path may be a string); PostgresStore adds
    ``distance_type`` and ``ann_index_config``. The same items and queries score exactly as InMemoryStore's
    with ``fields``: ignoring ``text_fields`` would embed whole documents instead."""
    items = {"a": {"title": "apple pie", "body": "long text"}, "b": {"title": "pear", "body": "apple pie"}}
    reference = InMemoryStore(index={"dims": 12, "embed": GridEmbeddings(), "fields": ["title"]})
    for name, value in items.items():
        reference.put(("docs",), name, value)
    expected = [(r.key, r.score) for r in reference.search(("docs",), query="apple pie")]
    assert expected[0][0] == "a" and expected[0][1] == pytest.approx(1.0)
    for extra in (
        {"text_fields": ["title"]},
        {"text_fields": "title"},
        {"fields": ["title"], "distance_type": "cosine", "ann_index_config": {"vector_type": "vector"}},
    ):
        index = {"dims": 12, "embed": GridEmbeddings(), **extra}
        with contextlib.closing(S3Store(bucket="b", client=MemoryBucket(), index=index)) as store:  # type: ignore[arg-type]
            for name, value in items.items():
                store.put(("docs",), name, value)
            assert [(r.key, r.score) for r in store.search(("docs",), query="apple pie")] == expected, extra


@pytest.mark.memory
@pytest.mark.parametrize("distance", ["cosine", "inner_product", "l2"])
def test_distance_types_score_as_postgres_store_does(distance: str) -> None:
    """PostgresStore's ``distance_type``: cosine similarity, the inner product, or minus the Euclidean
    distance; higher is closer. GridEmbeddings' components are exact in float32, so the scores are exact."""
    embeddings = GridEmbeddings()
    texts = ["apple pie", "pear tart", "plum cake", "fig roll"]
    index = {"dims": 12, "embed": embeddings, "fields": ["text"], "distance_type": distance}
    query = embeddings.embed_query("apple")
    expected_of = {
        "cosine": lambda v: (
            sum(a * b for a, b in zip(query, v, strict=True))
            / (math.sqrt(sum(a * a for a in query)) * math.sqrt(sum(b * b for b in v)))
        ),
        "inner_product": lambda v: sum(a * b for a, b in zip(query, v, strict=True)),
        "l2": lambda v: -math.sqrt(sum((a - b) ** 2 for a, b in zip(query, v, strict=True))),
    }[distance]
    expected = sorted(((expected_of(embeddings.embed_query(t)), t) for t in texts), reverse=True)
    with contextlib.closing(S3Store(bucket="b", client=MemoryBucket(), index=index)) as store:  # type: ignore[arg-type]
        for text in texts:
            store.put(("docs",), text, {"text": text})
        found = store.search(("docs",), query="apple", limit=10)
    assert [r.key for r in found] == [t for _, t in expected]
    assert [r.score for r in found] == pytest.approx([score for score, _ in expected])
    packed = [pack_vector(embeddings.embed_query(t)) for t in texts]
    assert similarity_scores(query, packed, distance) == pytest.approx(
        _python_scores(query, [embeddings.embed_query(t) for t in texts], distance)
    )  # the path without numpy agrees


@pytest.mark.memory
async def test_async_store_ttl_methods_are_coroutines_as_in_async_postgres_store() -> None:
    """AsyncPostgresStore and AsyncSqliteStore (and LangGraph's Agent Server) await ``sweep_ttl``,
    ``start_ttl_sweeper`` and ``stop_ttl_sweeper``: on AsyncS3Store they are coroutines, and the sweeper is a
    task on the running loop that stopping (or closing the store) cancels."""
    store, clock, bucket = ttl_store({"default_ttl": 1, "sweep_interval_minutes": 1}, cls=AsyncS3Store)
    async with store:
        store.put(("t",), "a", {"v": 1})
        store.put(("t",), "b", {"v": 2})
        clock.advance(2)
        assert await store.sweep_ttl() == 2
        store.put(("t",), "c", {"v": 3})
        clock.advance(2)
        task = await store.start_ttl_sweeper(sweep_interval_minutes=0.0005)  # every 30 ms
        assert isinstance(task, asyncio.Task)
        assert await store.start_ttl_sweeper() is task  # one sweeper per store
        deadline = time.monotonic() + 10
        while bucket.keys("store/ns/") and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert bucket.keys("store/ns/") == []
        assert await store.stop_ttl_sweeper(timeout=5)
        assert task.cancelled()
        running = await store.start_ttl_sweeper()
    await asyncio.sleep(0)  # closing the store cancelled it from the loop's next turn
    await asyncio.wait({running}, timeout=5)
    assert running.cancelled()
    without, _, _ = ttl_store(None, cls=AsyncS3Store)
    async with without:
        idle = await without.start_ttl_sweeper()
        await asyncio.wait_for(idle, timeout=5)  # no ttl_config: nothing to sweep, the task ends at once
        assert await without.stop_ttl_sweeper()


@pytest.mark.memory
def test_ttl_expired_vectors_do_not_hide_live_results() -> None:
    store, clock, _ = ttl_store(indexed=True)
    with contextlib.closing(store):
        store.put(("t",), "old", {"text": "apple pie"}, ttl=1)
        store.put(("t",), "live", {"text": "apple"})
        clock.advance(2)
        assert [r.key for r in store.search(("t",), query="apple pie", limit=1)] == ["live"]


# ------------------------------------------------------------------------------------------------
# Semantic search at scale
# ------------------------------------------------------------------------------------------------
@pytest.mark.memory
def test_vector_search_cost_does_not_grow_with_items() -> None:
    """2,000 items in one namespace: a query reads the shards and the returned items, not every item."""
    bucket = MemoryBucket(keep_log=True)
    index = {"dims": 12, "embed": GridEmbeddings(), "fields": ["text"]}
    with contextlib.closing(S3Store(bucket="b", client=bucket, index=index)) as store:  # type: ignore[arg-type]
        for start in range(0, 2000, 100):
            store.batch([PutOp(("docs",), f"d{i}", {"text": f"{WORDS[i % 6]} {i}"}) for i in range(start, start + 100)])
        assert bucket.log is not None
        bucket.log.clear()
        started = time.perf_counter()
        results = store.search(("docs",), query="zebra 5", limit=10)
        elapsed = time.perf_counter() - started
        gets = sum(1 for request, _ in bucket.log if type(request).__name__ == "Get")
        assert len(results) == 10 and all(r.score is not None for r in results)
        assert gets == 16 + 10, gets
        assert elapsed < 5
        # A filter is applied to the values recorded in the shards: still no GET per item.
        bucket.log.clear()
        results = store.search(("docs",), query="zebra 5", filter={"text": {"$ne": "nothing"}}, limit=10)
        assert len(results) == 10
        assert sum(1 for request, _ in bucket.log if type(request).__name__ == "Get") == 16 + 10


@pytest.mark.parametrize("where", [pytest.param("memory", marks=pytest.mark.memory), "seaweedfs"])
def test_concurrent_writers_on_one_shard_keep_every_vector(where: str, request: pytest.FixtureRequest) -> None:
    """Several stores (processes) putting into one namespace at once: the conditional shard updates
    retry, and every item ends up ranked. Not on moto: its conditional PUT checks the ETag and then
    writes without a lock, so concurrent If-Match PUTs can both succeed there (AWS, SeaweedFS and
    MemoryBucket are atomic)."""
    import threading

    if where == "memory":
        shared: Any = MemoryBucket()
        bucket, prefix = "b", "p"

        def client() -> Any:
            return shared
    else:
        server: LocalS3Server = request.getfixturevalue("seaweedfs_server")
        server.create_bucket("lgs3-test")
        bucket, prefix = "lgs3-test", f"t/{uuid4().hex[:12]}"
        client = server.client
    index = {"dims": 12, "embed": GridEmbeddings(), "fields": ["text"]}
    stores = [
        S3Store(bucket=bucket, prefix=prefix, client=client(), index=index, vector_shards=1)  # type: ignore[arg-type]
        for _ in range(4)
    ]

    def writer(w: int) -> None:
        for i in range(8):
            stores[w].put(("shared",), f"w{w}-{i}", {"text": f"{WORDS[i % 6]} {w} {i}"})

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        results = stores[0].search(("shared",), query="apple", limit=100)
        assert len(results) == 32
        assert all(r.score is not None for r in results)
    finally:
        for store in stores:
            store.close()


@pytest.mark.memory
def test_stale_shard_entry_never_ranks_or_filters_an_item() -> None:
    """An item rewritten without its shard being updated (a put in flight, or one that crashed between
    its two PUTs): the item is the truth, its stale vector and value are not used."""
    bucket = MemoryBucket()
    index = {"dims": 12, "embed": GridEmbeddings(), "fields": ["text"]}
    with (
        contextlib.closing(S3Store(bucket="b", client=bucket, index=index)) as store,  # type: ignore[arg-type]
        contextlib.closing(S3Store(bucket="b", client=bucket)) as unindexed,
    ):
        store.put(("d",), "a", {"text": "apple pie", "color": "red"})
        store.put(("d",), "b", {"text": "zebra", "color": "red"})
        unindexed.put(("d",), "a", {"text": "something else", "color": "blue"})  # shard still says "apple pie"
        results = store.search(("d",), query="apple pie")
        assert [(r.key, r.score is None) for r in results] == [("b", False), ("a", True)]
        assert results[1].value == {"text": "something else", "color": "blue"}
        assert [r.key for r in store.search(("d",), query="apple pie", filter={"color": "red"})] == ["b"]
        assert [r.key for r in store.search(("d",), query="apple pie", filter={"color": "blue"})] == ["a"]


# ------------------------------------------------------------------------------------------------
# Bad ops: refused before anything is written, naming what is wrong
# ------------------------------------------------------------------------------------------------
@pytest.mark.memory
@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda s: s.search(("a",), filter={"n": {"$in": [1, 2]}}), ValueError, r"Unsupported operator: \$in"),
        (lambda s: s.search(("a",), filter={"n": {"$gt": 0, "eq": 1}}), ValueError, "Unsupported operator: eq"),
        (lambda s: s.search(("a",), filter={"m": {"n": {"$gte ": 1}}}), ValueError, r"Unsupported operator: \$gte "),
        (lambda s: s.search("ab"), TypeError, "not the str 'ab'"),
        (lambda s: s.batch([("a", "k")]), ValueError, "Unknown operation type"),
        (lambda s: s.get("ab", "k"), TypeError, "not the str 'ab'"),
        (lambda s: s.batch([PutOp(("a",), 5, {"v": 1})]), TypeError, "key must be a str, got int 5"),  # type: ignore[arg-type]
        (lambda s: s.put(("a",), "k", {"v": 1}, ttl=0), ValueError, "positive number of minutes"),
        (lambda s: s.put(("a",), "k", {"v": 1}, ttl=-5), ValueError, "positive number of minutes"),
        (lambda s: s.put(("a",), "k", {"v": 1}, ttl=float("nan")), ValueError, "positive number of minutes"),
        (lambda s: s.put(("a",), "k", {"v": 1}, ttl="5"), ValueError, "positive number of minutes"),
        (lambda s: s.put(("a",), "k\udcff", {"v": 1}), ValueError, "lone surrogate"),
        (lambda s: s.put(("a", "b\ud800"), "k", {"v": 1}), ValueError, "lone surrogate"),
        (
            lambda s: s.batch([PutOp(("a",), "k2", {"v": 1}), PutOp(("x" * 179,) * 6, "k", {"v": 1})]),
            ValueError,
            "S3 allows 1024",
        ),
    ],
)
def test_bad_ops_are_refused_before_writing(call: Callable[[S3Store], Any], error: type, message: str) -> None:
    """A misspelled or unknown filter operator raises like InMemoryStore's (instead of matching nothing); a str
    namespace (which would be taken letter by letter), a non-str key, a lone surrogate in a key or label (the
    item's frame cannot hold it: ormsgpack raised a bare TypeError) and a per-item ttl that is not a positive
    number of minutes are refused. Nothing is written, and a good batch still works afterwards."""
    store = memory_store(False, ttl={"default_ttl": 10})
    store.put(("a",), "kept", {"n": 1})
    with pytest.raises(error, match=message) as refused:
        call(store)
    assert isinstance(refused.value, S3CheckpointError), "a refusal is also the package's error"
    assert [i.key for i in store.search(("a",))] == ["kept"]  # "k2" of the refused batch was not written
    assert store.search(("a",), filter={"n": {"$gte": 1, "$lt": 2}})[0].key == "kept"


@pytest.mark.memory
def test_a_foreign_object_beside_the_vector_shards_is_not_taken_for_one() -> None:
    """Defect: a key another tool left in a namespace's vectors folder (``.../~/notes``) was taken for a shard,
    so every semantic search over that namespace or an ancestor raised, advising a put that could not help.
    A shard's leaf is its number in hexadecimal; anything else there is foreign and skipped."""
    bucket = MemoryBucket()
    index = {"dims": 12, "embed": GridEmbeddings(), "fields": ["text"]}
    store = S3Store(bucket="b", prefix="p", client=bucket, index=index)  # type: ignore[arg-type]
    store.put(("users", "alice"), "k1", {"text": "apple"})
    store.put(("users", "bob"), "k2", {"text": "apple"})
    for leaf in ("notes", "README", "0g", "ABC"):
        bucket.execute(Put(f"{store.plans.layout.vectors(('users', 'bob'))}~/{leaf}", b"written by another tool"))
    for namespace in [("users", "bob"), ("users",), ()]:
        found = {r.key for r in store.search(namespace, query="apple")}
        assert found == ({"k2"} if namespace == ("users", "bob") else {"k1", "k2"}), namespace
