"""``repair_thread`` (and ``langgraph-s3 repair``): a damaged or lost head is rebuilt from the committed records.

A damaged head names the repair in its error; repair rebuilds the head from the newest committed record, and
brings back nothing a writer was told failed, nothing whose values are gone, and nothing a delete that runs meanwhile
condemns. On every server kind. What repair does with what a dead copy, import, delete or rollback left is tested
beside those operations (test_copy_thread.py, test_delete_thread.py, test_rollback.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from helpers import (
    Crash,
    assert_one_error_line,
    cfg,
    chat,
    chat_graph,
    cid,
    cli_env,
    crash_at,
    lose_first_answer,
    put,
    root_head_key,
    run_cli,
    send,
)
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_s3_checkpoint import AsyncS3Saver, CorruptObjectError, S3Saver
from langgraph_s3_checkpoint._protocol.keys import Layout
from langgraph_s3_checkpoint._protocol.requests import DeleteObjects, Put
from langgraph_s3_checkpoint.errors import DamagedHeadError
from langgraph_s3_checkpoint.local import LocalS3Server


@pytest.mark.parametrize("delete_done", ["heads", "all"])
def test_repair_racing_delete_thread_takes_its_head_back(
    make_saver: Callable[[], S3Saver], s3_client: Any, delete_done: str
) -> None:
    """repair_thread rebuilding a lost head while delete_thread runs on the thread may write its head after the delete
    removed the heads (or everything), and the deleted thread would read as alive again. After writing a missing head,
    repair checks that no delete began meanwhile and that the record it restored is still there; otherwise it deletes
    the head it wrote."""
    writer = make_saver()
    for n in (1, 2, 3):
        put(writer, "t", cid(n), cid(n - 1) if n > 1 else None)
    head = writer.plans.layout.head("t", "")
    s3_client.delete_object(Bucket=writer.bucket, Key=head)  # lost by hand: repair has work to do
    deleter = make_saver()
    deleting = deleter.plans.delete_thread("t")
    reply: Any = None

    def delete_until(done: Callable[[Any], bool]) -> None:
        nonlocal reply
        with contextlib.suppress(StopIteration):
            while True:
                batch = deleting.send(reply)
                reply = send(deleter, batch)
                if done(batch):
                    return

    repairer = make_saver()
    send_one = repairer.bucket_io._send

    def send_racing_a_delete(request: Any, *deadline: Any) -> Any:
        if isinstance(request, Put) and request.key == head and not reply:
            # The delete runs between repair's reads and its head PUT.
            delete_until(lambda batch: delete_done == "heads" and any(isinstance(r, DeleteObjects) for r in batch))
        return send_one(request, *deadline)

    repairer.bucket_io._send = send_racing_a_delete  # type: ignore[assignment]
    [outcome] = repairer.repair_thread("t").namespaces
    assert outcome.status == "changed" and "delete" in outcome.reason
    delete_until(lambda batch: False)
    assert make_saver().get_tuple(cfg("t")) is None
    assert s3_client.list_objects_v2(Bucket=writer.bucket, Prefix=f"{writer.prefix}/threads/").get("KeyCount") == 0


def test_a_damaged_head_names_repair_and_repair_restores_the_thread(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        graph = chat(saver, "hurt", 4)
        before = graph.get_state(cfg("hurt"))
        history = [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("hurt"))]
        client.put_object(Bucket=bucket, Key=root_head_key(saver, "hurt"), Body=b"LGS3\x01\x00garbage")
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        with pytest.raises(DamagedHeadError) as raised:
            saver.get_tuple(cfg("hurt"))
        message = str(raised.value)
        assert "repair_thread('hurt')" in message and "langgraph-s3 repair hurt" in message
        assert "do not delete the head" in message
        assert isinstance(raised.value, CorruptObjectError)

        planned = saver.repair_thread("hurt", dry_run=True)
        assert [(n.status, n.head_id) for n in planned.namespaces] == [("would-repair", history[0])]
        with pytest.raises(DamagedHeadError):
            saver.get_tuple(cfg("hurt"))  # a dry run changes nothing

        done = saver.repair_thread("hurt")
        assert [(n.status, n.head_id) for n in done.namespaces] == [("repaired", history[0])]
        assert "consistent" in done.namespaces[0].reason
        graph = chat_graph(saver)
        assert graph.get_state(cfg("hurt")).values == before.values
        assert [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("hurt"))] == history
        graph.invoke({"turns": ["user again"]}, cfg("hurt"))  # the conversation goes on where it was
        assert graph.get_state(cfg("hurt")).values["turns"][: len(before.values["turns"])] == before.values["turns"]
        assert saver.repair_thread("hurt").namespaces[0].status == "ok"


def test_repair_whose_head_write_answer_was_lost_reports_repaired(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """When repair's conditional head PUT landed but its answer was lost, the retry is refused: repair reads the head
    back, and a head holding the repair's bytes is its own, so it reports "repaired" rather than "the head changed ...
    nothing written"."""
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        chat(saver, "hurt", 2)
        client.put_object(Bucket=bucket, Key=root_head_key(saver, "hurt"), Body=b"LGS3\x01\x00garbage")
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        head_key = root_head_key(saver, "hurt")
        lost = lose_first_answer(saver, lambda r: isinstance(r, Put) and r.key == head_key)
        done = saver.repair_thread("hurt")
        assert lost and [n.status for n in done.namespaces] == ["repaired"]
        assert saver.get_tuple(cfg("hurt")) is not None


def test_repair_rebuilds_a_deleted_head_async(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        graph = chat(saver, "lost", 3)
        before = graph.get_state(cfg("lost")).values
        latest = graph.get_state(cfg("lost")).config["configurable"]["checkpoint_id"]
    client.delete_object(Bucket=bucket, Key=Layout(prefix).head("lost", ""))

    async def main() -> None:
        saver = AsyncS3Saver(bucket=bucket, prefix=prefix, client=client)
        try:
            assert await saver.aget_tuple(cfg("lost")) is None  # what deleting the head does: an empty thread
            report = await saver.arepair_thread("lost")
            assert [(n.status, n.head_id) for n in report.namespaces] == [("repaired", latest)]
            assert (await chat_graph(saver).aget_state(cfg("lost"))).values == before
        finally:
            saver.close()

    asyncio.run(main())


def test_repair_does_not_promote_the_first_put_of_a_thread_whose_head_never_landed(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """A new thread's first put that died between its record and its head (or lost the race for the head) leaves a lone
    record whose writer was told it failed: repair_thread must not make it the head and the thread's history. Without a
    head nothing in a namespace is committed (chain.py)."""
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        head_key = root_head_key(saver, "new")
        crash_at(saver, lambda r: isinstance(r, Put) and r.key == head_key)
        with pytest.raises(Crash):
            saver.put(cfg("new"), empty_checkpoint(), {"step": -1, "source": "input"}, {})
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        assert client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/threads/").get("KeyCount", 0) >= 1
        report = saver.repair_thread("new")
        [outcome] = report.namespaces
        assert outcome.status == "unrepairable" and "continues no earlier checkpoint" in outcome.reason
        assert saver.get_tuple(cfg("new")) is None


def test_repair_does_not_restore_a_head_whose_large_values_are_gone(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """A copy or a delete that died part-way can leave records whose large values are not stored: repair checks that a
    record's large values exist before making it the head, so a thread that read as empty does not become one whose
    every read raises."""
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client, inline_threshold=16)) as saver:
        chat(saver, "big", 3)
        blobs = f"{saver.plans.layout.blobs('big', '')}"
        stored = client.list_objects_v2(Bucket=bucket, Prefix=blobs).get("Contents", [])
        assert stored  # the turns are large values
        for obj in stored:
            client.delete_object(Bucket=bucket, Key=obj["Key"])
        client.delete_object(Bucket=bucket, Key=root_head_key(saver, "big"))
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        [outcome] = saver.repair_thread("big").namespaces
        assert outcome.status == "unrepairable" and "not stored" in outcome.reason
        assert saver.get_tuple(cfg("big")) is None  # still reads as empty, not as damaged


def test_show_names_the_repair_command_and_repair_restores_the_head(
    s3_server: LocalS3Server, bucket: str, prefix: str
) -> None:
    """``langgraph-s3 show`` on a damaged head fails naming ``langgraph-s3 repair``; ``repair --dry-run`` says what it
    would do and changes nothing; ``repair`` restores the head, and ``show`` works again."""
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        chat(saver, "cli-hurt", 2)
        latest = saver.get_tuple(cfg("cli-hurt"))
        assert latest is not None
        client.put_object(Bucket=bucket, Key=root_head_key(saver, "cli-hurt"), Body=b"not ours")
    environ = cli_env(
        s3_server, f"s3://{bucket}/{prefix}?endpoint_url={s3_server.endpoint_url}&region={s3_server.region}"
    )
    shown = run_cli("show", "cli-hurt", env=environ)
    assert "langgraph-s3 repair cli-hurt" in assert_one_error_line(shown, 1)
    dry = run_cli("repair", "cli-hurt", "--dry-run", env=environ)
    assert dry.returncode == 0, dry.stderr
    assert "would-repair" in dry.stdout and latest.checkpoint["id"] in dry.stdout
    done = run_cli("--json", "repair", "cli-hurt", env=environ)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True and report["namespaces"][0]["status"] == "repaired"
    assert run_cli("show", "cli-hurt", env=environ).returncode == 0
