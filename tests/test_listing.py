"""``list()``: bounds, and damaged records, compared with InMemorySaver where it has an answer."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable

import pytest
from helpers import assert_one_error_line, cfg, chat, cid, cli_env, ids, put, run_cli
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_s3_checkpoint import CorruptObjectError, S3Saver
from langgraph_s3_checkpoint._protocol.keys import Layout
from langgraph_s3_checkpoint.local import LocalS3Server


def test_list_before_an_empty_checkpoint_id_is_unbounded(make_saver: Callable[[], S3Saver]) -> None:
    """``before`` with an empty checkpoint id is no bound, as InMemorySaver treats it: the listing is whole."""
    saver, memory = make_saver(), InMemorySaver()
    for target in (saver, memory):
        put(target, "t", cid(1))
        put(target, "t", cid(2), cid(1))
    unbounded: RunnableConfig = {"configurable": {"checkpoint_id": ""}}
    for config in (cfg("t"), None):
        expected = ids(memory.list(config, before=unbounded))
        assert expected == [cid(2), cid(1)] and ids(saver.list(config, before=unbounded)) == expected


def test_list_before_a_detached_checkpoint_lists_every_older_one(make_saver: Callable[[], S3Saver]) -> None:
    """``list(before=X)`` where X is detached (a fork whose id is older than the head's) returns every older checkpoint,
    as InMemorySaver does."""
    saver, memory = make_saver(), InMemorySaver()
    for target in (saver, memory):
        put(target, "t", cid(1))
        put(target, "t", cid(2), cid(1))
        put(target, "t", cid(4), cid(2))
    forker = make_saver()
    assert forker.get_tuple(cfg("t", "", cid(1))) is not None  # a fork starts by reading its checkpoint
    for target in (forker, memory):
        put(target, "t", cid(3), cid(1), source="update")  # older than the head: detached
    bound = cfg("t", "", cid(3))
    expected = ids(memory.list(cfg("t"), before=bound))
    assert expected == [cid(2), cid(1)]
    assert ids(make_saver().list(cfg("t"), before=bound)) == expected
    assert ids(make_saver().list(cfg("t"))) == ids(memory.list(cfg("t")))


def test_list_can_skip_and_report_damaged_records(s3_server: LocalS3Server, bucket: str, prefix: str) -> None:
    client = s3_server.client()
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        chat(saver, "scarred", 3)
        ids = [t.checkpoint["id"] for t in saver.list(cfg("scarred"))]
        victim = ids[3]  # an older record, in the middle of the chain
        client.put_object(Bucket=bucket, Key=Layout(prefix).record("scarred", "", victim), Body=b"LGS3\x01\x00xx")
    with contextlib.closing(S3Saver(bucket=bucket, prefix=prefix, client=client)) as saver:
        with pytest.raises(CorruptObjectError):
            list(saver.list(cfg("scarred")))
        damaged: list[CorruptObjectError] = []
        kept = [t.checkpoint["id"] for t in saver.list(cfg("scarred"), skip_damaged=True, on_damaged=damaged.append)]
        assert kept == [i for i in ids if i != victim]
        assert [e.key for e in damaged] == [Layout(prefix).record("scarred", "", victim)]

        async def alist() -> list[str]:
            return [t.checkpoint["id"] async for t in saver.alist(cfg("scarred"), skip_damaged=True)]

        assert asyncio.run(alist()) == kept
    environ = cli_env(
        s3_server, f"s3://{bucket}/{prefix}?endpoint_url={s3_server.endpoint_url}&region={s3_server.region}"
    )
    stopped = run_cli("history", "scarred", env=environ)
    assert_one_error_line(stopped, 1)
    skipped = run_cli("history", "scarred", "--skip-damaged", env=environ)
    assert skipped.returncode == 1 and "Traceback" not in skipped.stderr
    assert f"SKIPPED damaged object {Layout(prefix).record('scarred', '', victim)}" in skipped.stdout
    listed = json.loads(run_cli("--json", "history", "scarred", "--skip-damaged", env=environ).stdout)
    assert [c["checkpoint_id"] for c in listed["checkpoints"]] == kept and len(listed["damaged"]) == 1
