"""Any thread id or namespace is valid: escaped into keys, never rejected, never a prefix of another."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import cfg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_s3_checkpoint import S3Saver
from langgraph_s3_checkpoint._protocol.keys import (
    MAX_SEGMENT,
    KeyKind,
    Layout,
    classify,
    classify_in_namespace,
    escape,
    invert_id,
    revert_id,
    unescape,
)
from langgraph_s3_checkpoint.local import LocalS3Server

HOSTILE = ["a", "a/b", "a/", "/a", "..", "../..", ".", "a|b", "a b", "ünïcödé ✓", "%2F", "~", "", "x" * 2000]


@pytest.fixture
def saver(s3_server: LocalS3Server, bucket: str, prefix: str) -> Iterator[S3Saver]:
    s = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    yield s
    s.close()


def _put(saver: S3Saver, thread_id: str, ns: str = "", value: Any = "v") -> RunnableConfig:
    cp = empty_checkpoint()
    cp["channel_values"] = {"ch": value}
    cp["channel_versions"] = {"ch": saver.get_next_version(None, None)}
    config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
    return saver.put(config, cp, {"step": 0, "source": "input"}, cp["channel_versions"])


@pytest.mark.memory
@given(st.text(max_size=300))
def test_escape_round_trips_and_stays_one_safe_segment(value: str) -> None:
    seg = escape(value)
    assert "/" not in seg and "." not in seg and seg
    assert len(seg) <= MAX_SEGMENT + 1 + 64
    if not seg.startswith("~") or seg == "~":
        assert unescape(seg) == value


@pytest.mark.memory
@given(st.text(min_size=1, max_size=50), st.text(min_size=1, max_size=50))
def test_inverted_ids_sort_in_reverse(a: str, b: str) -> None:
    assert revert_id(invert_id(a)) == a
    if a != b:
        raw_a, raw_b = a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass")
        assert (invert_id(a) < invert_id(b)) == (raw_a > raw_b)


@pytest.mark.memory
def test_no_thread_prefix_matches_another() -> None:
    layout = Layout("p")
    prefixes = [layout.thread(t) for t in HOSTILE]
    for i, a in enumerate(prefixes):
        for j, b in enumerate(prefixes):
            if i != j:
                assert not b.startswith(a), (HOSTILE[i], HOSTILE[j])


LAYOUT_WORDS = ["head", "name", "deleting", "copying", "checkpoint", "c", "w", "b", "r", "ns"]
"""Ids spelled like the layout's own words."""
_IDS = st.text(max_size=40) | st.sampled_from([*HOSTILE, *LAYOUT_WORDS])


@pytest.mark.memory
@given(thread_id=_IDS, ns=_IDS, checkpoint_id=st.text(min_size=1, max_size=40), other=_IDS, version=_IDS)
def test_every_key_the_layout_makes_classifies_as_its_kind(
    thread_id: str, ns: str, checkpoint_id: str, other: str, version: str
) -> None:
    """``keys.classify`` is the one rule of which keys under a thread are the saver's (copy, export, stats,
    verify, gc and prune ask it): every key the layout makes, for any ids, is what it was made as, seen from
    the thread and, inside a namespace, from the namespace."""
    layout = Layout("p")
    thread, namespace = layout.thread(thread_id), layout.ns(thread_id, ns)
    in_namespace = {
        layout.head(thread_id, ns): KeyKind.HEAD,
        layout.ns_name(thread_id, ns): KeyKind.NS_NAME,
        Layout.deleting_in(namespace): KeyKind.MARKER,
        layout.record(thread_id, ns, checkpoint_id): KeyKind.RECORD,
        layout.task_writes(thread_id, ns, checkpoint_id, other): KeyKind.WRITE,
        layout.blob(thread_id, ns, other, version): KeyKind.BLOB,
    }
    at_thread = {
        layout.thread_name(thread_id): KeyKind.THREAD_NAME,
        layout.deleting(thread_id): KeyKind.MARKER,
        layout.copying(thread_id): KeyKind.MARKER,
        layout.thread_run_entry(other, thread_id, ns): KeyKind.RUN_ENTRY,
    }
    for key, kind in in_namespace.items():
        assert classify_in_namespace(key[len(namespace) :]) is kind, key
    for key, kind in {**in_namespace, **at_thread}.items():
        assert classify(key[len(thread) :]) is kind, key


@pytest.mark.memory
@pytest.mark.parametrize(
    "relative",
    [
        "",
        "ns/",
        "ns/x/",
        "ns//head",
        "ns/x/b/",
        "ns/x/b/ch/",
        "ns/x/b//1",
        "ns/x/b/ch/1/2",
        "ns/x/c/",
        "ns/x/c/ff~/",
        "ns/x/c/ff~/checkpoint/",
        "ns/x/c/not-inverted/checkpoint",
        "ns/x/c/ff~/w/",
        "ns/x/c/ff~/w//1",
        "ns/x/heads",
        "r/run/",
        "r//x",
        "r/run/x/y",
        "name/",
        "names",
        "x",
    ],
)
def test_keys_that_are_not_the_layouts_are_unknown(relative: str) -> None:
    """Folder markers (``.../``), empty segments (the layout makes none: :func:`escape` gives ``~`` for ``""``)
    and shapes the layout does not make are foreign: every tool leaves them, none counts them as its own."""
    assert classify(relative) is KeyKind.UNKNOWN
    if relative.startswith("ns/x/"):
        assert classify_in_namespace(relative[len("ns/x/") :]) is KeyKind.UNKNOWN


@pytest.mark.parametrize("thread_id", HOSTILE[:-2] + HOSTILE[-1:])
@pytest.mark.parametrize("ns", ["", "outer:1|inner:2", "../x", "x" * 500])
def test_hostile_ids_round_trip(saver: S3Saver, thread_id: str, ns: str) -> None:
    stored = _put(saver, thread_id, ns)
    got = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}})
    assert got is not None and got.config == stored
    assert got.checkpoint["channel_values"] == {"ch": "v"}
    listed = [t.config for t in saver.list({"configurable": {"thread_id": thread_id}})]
    assert listed == [stored]


def test_list_none_recovers_long_and_odd_thread_ids(saver: S3Saver) -> None:
    for thread_id in HOSTILE[:-2] + HOSTILE[-1:]:
        _put(saver, thread_id)
    assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == set(HOSTILE[:-2] + HOSTILE[-1:])


def test_delete_thread_a_leaves_a_slash_b(saver: S3Saver, s3_server: LocalS3Server, bucket: str) -> None:
    for thread_id in ("a", "a/b", "a b", "ab"):
        _put(saver, thread_id)
    saver.delete_thread("a")
    assert saver.get_tuple({"configurable": {"thread_id": "a"}}) is None
    for survivor in ("a/b", "a b", "ab"):
        assert saver.get_tuple({"configurable": {"thread_id": survivor}}) is not None
    keys = [
        o["Key"]
        for o in s3_server.client()
        .list_objects_v2(Bucket=bucket, Prefix=saver.plans.layout.thread("a"))
        .get("Contents", [])
    ]
    assert keys == []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(thread_id=st.text(min_size=1, max_size=80), ns=st.text(max_size=40), value=st.text(max_size=100))
def test_hypothesis_ids_round_trip(saver: S3Saver, thread_id: str, ns: str, value: str) -> None:
    stored = _put(saver, thread_id, ns, value)
    got = saver.get_tuple(stored)
    assert got is not None
    assert got.config == stored
    assert got.checkpoint["channel_values"] == {"ch": value}


@pytest.mark.memory
def test_the_empty_thread_id_maps_to_a_key() -> None:
    assert escape("") == "~" and unescape("~") == ""
    assert Layout("p").thread("") == "p/threads/~/"


def test_the_empty_thread_id_is_accepted_like_inmemorysaver(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    memory = InMemorySaver()
    memory.put(cfg(""), empty_checkpoint(), {"step": 0}, {})
    assert memory.get_tuple(cfg("")) is not None
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())) as saver:
        saver.put(cfg(""), empty_checkpoint(), {"step": 0}, {})
        assert saver.get_tuple(cfg("")) is not None
        assert [t.config["configurable"]["thread_id"] for t in saver.list(None)] == [""]
