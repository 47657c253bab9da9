"""TTL sweep: whole idle threads are removed, live ones are untouched; the cost is a flat listing of the threads
(1,000 keys a page), nothing per thread but the idle ones' deletes."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from helpers import Crash, RequestCounter, lose_first_answer, tuple_at
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_s3_checkpoint import AsyncS3Saver, S3Saver
from langgraph_s3_checkpoint import saver as saver_module
from langgraph_s3_checkpoint._protocol import committing, reading, thread_edits
from langgraph_s3_checkpoint._protocol.operator_plans import Problem, verify_thread
from langgraph_s3_checkpoint._protocol.requests import CREATE, DeleteIfMatch, Put
from langgraph_s3_checkpoint.local import LocalS3Server
from langgraph_s3_checkpoint.memory import MemoryBucket


def _history(saver: S3Saver, thread_id: str, steps: int, ns: str = "") -> None:
    config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
    for step in range(steps):
        config = saver.put(config, empty_checkpoint(), {"step": step}, {})
        saver.put_writes(config, [("ch", step)], f"task-{step}")


def test_expire_threads(
    s3_server: LocalS3Server, bucket: str, prefix: str, count_requests: Callable[[Any], RequestCounter]
) -> None:
    client = s3_server.client()
    saver = S3Saver(bucket=bucket, prefix=prefix, client=client)
    _history(saver, "old/1", 20)
    _history(saver, "old/1", 3, ns="sub:1")
    _history(saver, "old 2", 5)

    # Nothing is older than a day: nothing goes.
    assert saver.expire_threads(timedelta(days=1)) == []
    counter = count_requests(client)
    # A cutoff in the future makes every thread idle; a dry run only reports.
    assert sorted(saver.expire_threads(timedelta(seconds=-60), dry_run=True)) == ["old 2", "old/1"]
    # One flat LIST of every thread (fewer than 1,000 keys): each head's date is in it, nothing per thread.
    assert counter.snapshot() == {"ListObjectsV2": 1}
    assert saver.get_tuple({"configurable": {"thread_id": "old/1"}}) is not None

    assert sorted(saver.expire_threads(timedelta(seconds=-60))) == ["old 2", "old/1"]
    assert saver.get_tuple({"configurable": {"thread_id": "old/1"}}) is None
    assert list(saver.list(None)) == []
    assert client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/threads/").get("KeyCount") == 0
    saver.close()


def test_expire_threads_judges_age_by_the_servers_clock(
    s3_server: LocalS3Server, bucket: str, prefix: str, monkeypatch: Any
) -> None:
    """Defect: the cutoff was this machine's clock minus ``older_than``, compared with the server's
    LastModified: on a host whose clock was 3 hours ahead, expire_threads(2 hours) deleted a thread written
    a second earlier. Ages are now the server's (the listing's ``Date``), like gc's and prune's."""
    saver = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    _history(saver, "live", 2)

    class AheadClock(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz) + timedelta(hours=3)

    for module in (thread_edits, saver_module):  # wherever this machine's clock could be read
        monkeypatch.setattr(module, "datetime", AheadClock, raising=False)
    assert saver.expire_threads(timedelta(hours=2)) == []
    assert saver.get_tuple({"configurable": {"thread_id": "live"}}) is not None
    saver.close()


def test_expire_threads_keeps_a_thread_written_after_it_was_judged_idle(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """Defect: a thread written between the idle check and the delete was deleted with the write that had
    just been acknowledged. Its heads are deleted only if unchanged since they were listed."""
    saver, writer = (S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client()) for _ in range(2))
    _history(saver, "busy", 2, ns="sub:1")
    _history(saver, "busy", 2)
    _history(saver, "idle", 1)
    latest = writer.get_tuple({"configurable": {"thread_id": "busy"}})
    assert latest is not None
    name_of = saver.plans._name_of

    def name_of_then_a_write(segment: str, where: str) -> Any:
        thread_id = yield from name_of(segment, where)
        if thread_id == "busy":  # judged idle; a run commits before the delete
            writer.put(latest.config, empty_checkpoint(), {"step": 9, "source": "loop"}, {})
        return thread_id

    saver.plans._name_of = name_of_then_a_write  # type: ignore[assignment]
    assert saver.expire_threads(timedelta(seconds=-60)) == ["idle"]
    kept = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    assert tuple_at(kept, {"configurable": {"thread_id": "busy"}}).metadata["step"] == 9
    assert kept.get_tuple({"configurable": {"thread_id": "busy", "checkpoint_ns": "sub:1"}}) is not None
    assert kept.get_tuple({"configurable": {"thread_id": "idle"}}) is None
    for s in (saver, writer, kept):
        s.close()


@pytest.mark.parametrize("moment", ["before_deleting", "after_the_root_head_went"])
def test_expire_threads_keeps_a_thread_whose_subgraph_moved_after_it_was_judged_idle(
    s3_server: LocalS3Server, bucket: str, prefix: str, moment: str
) -> None:
    """Defect: the root namespace's head was deleted first and, when a subgraph's head then turned out to
    have moved (a step in progress: a subgraph checkpoints inside its parent's step, before the parent's own
    checkpoint), expire_threads left the thread alone without its root head: the conversation read as
    empty and the step in progress failed at its parent checkpoint. Heads are now read before any delete,
    and those already deleted when a later one is found moved are put back."""
    saver, writer = (S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client()) for _ in range(2))
    _history(saver, "busy", 2, ns="sub:1")
    _history(saver, "busy", 2)
    root: RunnableConfig = {"configurable": {"thread_id": "busy"}}
    sub: RunnableConfig = {"configurable": {"thread_id": "busy", "checkpoint_ns": "sub:1"}}
    sub_latest, root_latest = writer.get_tuple(sub), writer.get_tuple(root)
    assert sub_latest is not None and root_latest is not None
    root_head = saver.plans.layout.head("busy", "")
    shell = saver.bucket_io
    send = shell._send
    moved: list[bool] = []

    def subgraph_step() -> None:
        moved.append(True)
        writer.put(sub_latest.config, empty_checkpoint(), {"step": 9, "source": "loop"}, {})

    def send_racing_a_subgraph_step(request: Any, *deadline: Any) -> Any:
        if not moved and moment == "before_deleting" and isinstance(request, DeleteIfMatch):
            subgraph_step()
        reply = send(request, *deadline)
        if not moved and moment == "after_the_root_head_went" and isinstance(request, DeleteIfMatch):
            assert request.key == root_head  # the root goes first
            subgraph_step()
        return reply

    shell._send = send_racing_a_subgraph_step  # type: ignore[assignment]
    assert saver.expire_threads(timedelta(seconds=-60)) == []
    assert moved
    kept = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    again = kept.get_tuple(root)
    assert again is not None and again.checkpoint["id"] == root_latest.checkpoint["id"]
    assert tuple_at(kept, sub).metadata["step"] == 9
    # The step in progress commits its parent checkpoint on the head it read.
    assert writer.put(root_latest.config, empty_checkpoint(), {"step": 10, "source": "loop"}, {})
    assert tuple_at(kept, root).metadata["step"] == 10
    for s in (saver, writer, kept):
        s.close()


def test_an_expire_that_died_putting_heads_back_is_named_as_such(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """The window design.md lists under Known limits: expire_threads found a subgraph's head moved after it had
    deleted the root's, and died putting the root's back. Repair and verify must not advise delete_thread for a
    thread expire judged in use (found by the adversarial review: both did); they name the expiry."""
    saver, writer = (S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client()) for _ in range(2))
    _history(saver, "busy", 2, ns="sub:1")
    _history(saver, "busy", 2)
    sub_latest = writer.get_tuple({"configurable": {"thread_id": "busy", "checkpoint_ns": "sub:1"}})
    assert sub_latest is not None
    root_head = saver.plans.layout.head("busy", "")
    send = saver.bucket_io._send

    def send_and_die_putting_back(request: Any, *deadline: Any) -> Any:
        if isinstance(request, Put) and request.key == root_head and request.mode == CREATE:
            raise Crash(request)
        reply = send(request, *deadline)
        if isinstance(request, DeleteIfMatch) and request.key == root_head:
            writer.put(sub_latest.config, empty_checkpoint(), {"step": 9, "source": "loop"}, {})
        return reply

    saver.bucket_io._send = send_and_die_putting_back  # type: ignore[assignment]
    with pytest.raises(Crash):
        saver.expire_threads(timedelta(seconds=-60))
    fresh = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    outcomes = {n.checkpoint_ns: n for n in fresh.repair_thread("busy").namespaces}
    assert outcomes[""].status == "deleting" and "expire_threads" in outcomes[""].reason
    assert "put this head back" in outcomes[""].reason
    found = fresh.bucket_io.iterate(verify_thread(fresh.plans.layout, fresh.plans.codec, "busy"))
    assert [p.problem for p in found if isinstance(p, Problem) and "expire_threads" in p.problem]
    for s in (saver, writer, fresh):
        s.close()


def test_expire_threads_whose_head_delete_answer_was_lost(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    """Found by the adversarial review: a head's conditional delete landed and its answer was lost; SeaweedFS
    refuses the retry (If-Match on a missing object), which expire_threads took for a head that moved: it left the
    thread alone without that head and without a marker (repair_thread would then bring back a thread asked to
    expire). A refused delete whose head is gone counts as done."""
    client = s3_server.client()
    saver = S3Saver(bucket=bucket, prefix=prefix, client=client)
    _history(saver, "idle", 2)
    _history(saver, "idle", 2, ns="sub:1")
    lost = lose_first_answer(saver, lambda r: isinstance(r, DeleteIfMatch))
    assert saver.expire_threads(timedelta(seconds=-60)) == ["idle"] and lost
    assert client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/threads/").get("KeyCount") == 0
    saver.close()


def test_expire_threads_judges_the_head_not_a_foreign_key_beside_it(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """Found by the adversarial review: the age of a namespace was the first key listed under ``.../h``, so an
    old foreign object sorting before ``head`` (``h_notes``) made a live thread look idle and expired it."""
    client = s3_server.client()
    saver = S3Saver(bucket=bucket, prefix=prefix, client=client)
    client.put_object(Bucket=bucket, Key=saver.plans.layout.ns("live", "") + "h_notes", Body=b"not ours")
    time.sleep(2.5)
    _history(saver, "live", 1)
    assert saver.expire_threads(timedelta(seconds=2)) == []
    assert saver.get_tuple({"configurable": {"thread_id": "live"}}) is not None
    saver.close()


def test_expire_threads_judges_heads_in_namespace_folders_only(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """A ``head`` in a folder no namespace escapes to (``ns/a.b/``) is nobody's: it neither keeps an idle thread
    alive nor counts as one of its heads, and a thread folder no id escapes to is not a thread to expire."""
    client = s3_server.client()
    saver = S3Saver(bucket=bucket, prefix=prefix, client=client)
    _history(saver, "idle", 1)
    layout = saver.plans.layout
    time.sleep(2.5)
    client.put_object(Bucket=bucket, Key=f"{layout.namespaces('idle')}a.b/head", Body=b"not ours, and new")
    client.put_object(Bucket=bucket, Key=f"{layout.threads_root}x.y/ns/~/head", Body=b"not ours either")
    assert saver.expire_threads(timedelta(seconds=2)) == ["idle"]
    assert saver.get_tuple({"configurable": {"thread_id": "idle"}}) is None
    left = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=layout.threads_root)["Contents"]]
    assert left == [f"{layout.threads_root}x.y/ns/~/head"]
    saver.close()


async def test_async_expire_threads(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    sync = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    _history(sync, "t", 2)
    saver = AsyncS3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    assert await saver.aexpire_threads(timedelta(days=1)) == []
    assert await saver.aexpire_threads(timedelta(seconds=-60)) == ["t"]
    assert await saver.aget_tuple({"configurable": {"thread_id": "t"}}) is None
    saver.close()
    sync.close()


def test_lifecycle_ttl_tags_objects_and_installs_one_rule(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    """setup(ttl_days) installs an expiry rule for the prefix (keeping other rules); objects carry its tag."""
    from langgraph_s3_checkpoint.saver import EXPIRY_TAG  # type: ignore[attr-defined]

    client = s3_server.client()
    lifecycle_bucket = f"{bucket}-ttl"
    s3_server.create_bucket(lifecycle_bucket)
    other = {"ID": "someone-elses", "Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 3}}
    client.put_bucket_lifecycle_configuration(Bucket=lifecycle_bucket, LifecycleConfiguration={"Rules": [other]})
    saver = S3Saver(bucket=lifecycle_bucket, prefix=prefix, client=client, ttl_days=30, inline_threshold=100)
    saver.setup()
    saver.setup()  # idempotent: the rule is replaced, not duplicated
    rules = client.get_bucket_lifecycle_configuration(Bucket=lifecycle_bucket)["Rules"]
    assert [r["ID"] for r in rules].count(f"langgraph-s3-ttl:{prefix}/") == 1
    assert any(r["ID"] == "someone-elses" for r in rules)
    ours = next(r for r in rules if r["ID"] == f"langgraph-s3-ttl:{prefix}/")
    assert ours["Expiration"]["Days"] == 30
    key, value = EXPIRY_TAG.split("=")
    assert ours["Filter"]["And"]["Tags"] == [{"Key": key, "Value": value}]

    config: RunnableConfig = {"configurable": {"thread_id": "ttl", "checkpoint_ns": ""}}
    cp = empty_checkpoint()
    cp["channel_versions"] = {"big": saver.get_next_version(None, None)}
    cp["channel_values"] = {"big": "x" * 1000}
    config = saver.put(config, cp, {"step": 0}, dict(cp["channel_versions"]))
    saver.put_writes(config, [("big", "y")], "task")
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=lifecycle_bucket, Prefix=f"{prefix}/threads/")["Contents"]]
    assert {k.rsplit("/", 3)[-3] for k in keys} >= {"b"}  # a blob was written
    for key_ in keys:
        tags = client.get_object_tagging(Bucket=lifecycle_bucket, Key=key_)["TagSet"]
        assert tags == [{"Key": key, "Value": value}], key_
    saver.close()


def test_ttl_renews_referenced_blobs_of_a_fresh_saver(
    s3_server: LocalS3Server, bucket: str, prefix: str, count_requests: Callable[[Any], RequestCounter]
) -> None:
    """A saver that does not know a referenced blob's age rewrites it once, so expiry cannot take it."""
    client = s3_server.client()
    writer = S3Saver(bucket=bucket, prefix=prefix, client=client, ttl_days=30, inline_threshold=100)
    config: RunnableConfig = {"configurable": {"thread_id": "renew", "checkpoint_ns": ""}}
    versions = {"big": writer.get_next_version(None, None)}
    cp = empty_checkpoint()
    cp["channel_versions"] = dict(versions)
    cp["channel_values"] = {"big": "x" * 1000}
    config = writer.put(config, cp, {"step": 0}, dict(versions))
    counter = count_requests(client)
    step2 = empty_checkpoint()
    step2["channel_versions"] = dict(versions)
    step2["channel_values"] = {"big": "x" * 1000}
    counter.reset()
    config = writer.put(config, step2, {"step": 1}, {})
    assert counter.snapshot() == {"PutObject": 2}  # fresh blob: only record and head

    fresh = S3Saver(bucket=bucket, prefix=prefix, client=client, ttl_days=30, inline_threshold=100)
    fresh.get_tuple({"configurable": {"thread_id": "renew"}})  # reads the blob and learns its age
    step3 = empty_checkpoint()
    step3["channel_versions"] = dict(versions)
    step3["channel_values"] = {"big": "x" * 1000}
    counter.reset()
    config = fresh.put(config, step3, {"step": 2}, {})
    assert counter.snapshot() == {"PutObject": 2}

    unaware = S3Saver(bucket=bucket, prefix=prefix, client=client, ttl_days=30, inline_threshold=100)
    step4 = empty_checkpoint()
    step4["channel_versions"] = dict(versions)
    step4["channel_values"] = {"big": "x" * 1000}
    counter.reset()
    unaware.put(config, step4, {"step": 3}, {})
    # blob age unknown: rewritten (renewed), then record, then head; the head it continues is not remembered:
    # + GET head (it holds the parent, so the put continues it: no re-offer of the head's record as a fork makes)
    assert counter.snapshot() == {"PutObject": 3, "GetObject": 1}
    for s in (writer, fresh, unaware):
        s.close()


@pytest.mark.memory
@pytest.mark.parametrize("skew_hours", [0, 30, -30], ids=["same clock", "client 30 h behind", "client 30 h ahead"])
def test_ttl_renewal_judges_a_values_age_on_one_clock(monkeypatch: pytest.MonkeyPatch, skew_hours: int) -> None:
    """Defect: a value read back from the bucket was dated by the server's LastModified and compared with this
    machine's clock. With this machine's clock more than half the TTL behind the server's, a thread in use every
    hour never rewrote its large value, and the lifecycle rule (server time) expired it under the live head."""
    server_now = [datetime(2030, 1, 1, tzinfo=timezone.utc)]

    class ThisMachinesClock(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return server_now[0] - timedelta(hours=skew_hours)

    monkeypatch.setattr(committing, "datetime", ThisMachinesClock)
    monkeypatch.setattr(reading, "datetime", ThisMachinesClock)
    bucket = MemoryBucket(now=lambda: server_now[0])
    saver = S3Saver(bucket="b", client=bucket, prefix="p", ttl_days=2, inline_threshold=100)
    saver.setup()
    config: RunnableConfig = {"configurable": {"thread_id": "hourly", "checkpoint_ns": ""}}
    big = {"big": "x" * 1000}
    for hour in range(24 * 5):  # five days of use every hour, each step starting from a read, as a graph does
        latest = S3Saver(bucket="b", client=bucket, prefix="p", ttl_days=2, inline_threshold=100).get_tuple(config)
        saver.get_tuple(config)
        checkpoint = empty_checkpoint()
        checkpoint["id"] = f"1f0{hour:029d}"
        checkpoint["channel_versions"] = {"big": "1"}
        checkpoint["channel_values"] = big
        config = saver.put(config if latest is None else latest.config, checkpoint, {"step": hour}, {"big": "1"})
        server_now[0] += timedelta(hours=1)
        assert bucket.apply_lifecycle() is not None
        fresh = S3Saver(bucket="b", client=bucket, prefix="p").get_tuple(config)
        assert fresh is not None and fresh.checkpoint["channel_values"] == big, f"hour {hour}"
