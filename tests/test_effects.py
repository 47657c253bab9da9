"""Side-effect guards: idempotency_key() and EffectLedger, including under SIGKILL.

The payment test is the point of the module: a node charges a card through a service that
deduplicates by key, the process dies right after the charge and before the node returns, and the
resumed run charges again. With idempotency_key() the customer pays once; with a fresh key per call
(the control) twice.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy, Send
from workers.common import finish, run, spawn, worker_env

from langgraph_s3_checkpoint import InvalidConfigError, S3Saver, SaverMisuseError
from langgraph_s3_checkpoint.effects import EffectLedger, idempotency_key
from langgraph_s3_checkpoint.local import LocalS3Server

BUCKET = "lgs3-test"
SIGKILLED = -9


class PaymentService:
    """A fake payment API: POST /charge {key, customer, amount}; a repeated key returns the first charge."""

    def __init__(self) -> None:
        self.charges: list[dict[str, Any]] = []
        self.requests: list[str] = []
        self._by_key: dict[str, str] = {}
        self._lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with service._lock:
                    service.requests.append(body["key"])
                    if body["key"] not in service._by_key:
                        charge_id = f"ch_{len(service.charges) + 1}"
                        service.charges.append({**body, "charge_id": charge_id})
                        service._by_key[body["key"]] = charge_id
                    reply = json.dumps({"charge_id": service._by_key[body["key"]]}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> PaymentService:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.mark.parametrize("keyed", [True, False], ids=["idempotency-key", "fresh-key-control"])
def test_killed_after_charging_then_resumed_charges_once(
    weed: tuple[LocalS3Server, S3Saver], prefix: str, keyed: bool
) -> None:
    server, _ = weed
    env = worker_env(server, BUCKET, prefix)
    with PaymentService() as service:
        args = ["pay", "--thread=checkout", f"--service={service.url}", *(["--keyed"] if keyed else [])]
        code, _, err = finish(spawn("effects_worker.py", [*args, "--die-after-charge"], env))
        assert code == SIGKILLED, err[-3000:]
        assert len(service.charges) == 1
        final = run("effects_worker.py", args, env)
    assert final["status"] == "confirmed"
    assert len(service.requests) == 2, "the resumed run must have re-run the pay node"
    if keyed:
        assert service.requests[0] == service.requests[1]
        assert [c["charge_id"] for c in service.charges] == ["ch_1"] and final["charge_id"] == "ch_1"
    else:
        assert len(service.charges) == 2, "without the key the customer is charged twice"


# -- EffectLedger -------------------------------------------------------------------------------------------
def ledger_run(server: LocalS3Server, prefix: str, tmp_path: Path, mode: str, die: str) -> tuple[int, Any]:
    env = worker_env(server, BUCKET, prefix)
    args = ["ledger", f"--mode={mode}", "--key=order-17/sms", f"--effect-file={tmp_path / 'effects'}", f"--die={die}"]
    code, result, err = finish(spawn("effects_worker.py", args, env))
    assert code in (0, SIGKILLED), err[-3000:]
    return code, result


def ledger_run_after_a_kill(
    weed: tuple[LocalS3Server, S3Saver], prefix: str, tmp_path: Path, mode: str, die: str
) -> Any:
    """A ledger run killed at ``die``, then one that runs to its end: what the second reports."""
    code, _ = ledger_run(weed[0], prefix, tmp_path, mode, die)
    assert code == SIGKILLED
    code, result = ledger_run(weed[0], prefix, tmp_path, mode, "never")
    assert code == 0
    return result


def test_at_most_once_loses_the_effect_when_killed_between_marker_and_action(
    weed: tuple[LocalS3Server, S3Saver], prefix: str, tmp_path: Path
) -> None:
    result = ledger_run_after_a_kill(weed, prefix, tmp_path, "at_most_once", "before-effect")
    assert result == {"fired": False, "effects": 0}


def test_at_least_once_repeats_the_effect_when_killed_between_action_and_marker(
    weed: tuple[LocalS3Server, S3Saver], prefix: str, tmp_path: Path
) -> None:
    result = ledger_run_after_a_kill(weed, prefix, tmp_path, "at_least_once", "after-effect")
    assert result == {"fired": True, "effects": 2}
    _, result = ledger_run(weed[0], prefix, tmp_path, "at_least_once", "never")
    assert result == {"fired": False, "effects": 2}


@pytest.mark.parametrize("mode", ["at_most_once", "at_least_once"])
def test_ledger_without_crashes_fires_once(weed: tuple[LocalS3Server, S3Saver], mode: str) -> None:
    _, saver = weed
    ledger = EffectLedger(saver, mode=mode)  # type: ignore[arg-type]
    fired: list[int] = []
    assert not ledger.done("k")
    assert ledger.once("k", lambda: fired.append(1)) is True
    assert ledger.once("k", lambda: fired.append(2)) is False
    assert fired == [1] and ledger.done("k")
    ledger.forget("k")
    assert ledger.once("k", lambda: fired.append(3)) is True and fired == [1, 3]


def test_at_most_once_admits_exactly_one_of_many_concurrent_callers(weed: tuple[LocalS3Server, S3Saver]) -> None:
    server, saver = weed
    savers = [S3Saver(bucket=BUCKET, prefix=saver.prefix, client=server.client()) for _ in range(8)]
    gate = threading.Barrier(len(savers))
    fired: list[int] = []

    def call(i: int) -> None:
        gate.wait(30)
        EffectLedger(savers[i], mode="at_most_once").once("contested", lambda: fired.append(i))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(savers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(fired) == 1
    for s in savers:
        s.close()


def test_at_most_once_keeps_the_marker_when_the_action_fails(weed: tuple[LocalS3Server, S3Saver]) -> None:
    _, saver = weed
    ledger = EffectLedger(saver, mode="at_most_once")

    def boom() -> None:
        raise RuntimeError("gateway timeout")

    with pytest.raises(RuntimeError):
        ledger.once("maybe-sent", boom)
    assert ledger.done("maybe-sent")
    at_least = EffectLedger(saver, mode="at_least_once")
    with pytest.raises(RuntimeError):
        at_least.once("retry-me", boom)
    assert not at_least.done("retry-me")


async def test_async_ledger(weed: tuple[LocalS3Server, S3Saver]) -> None:
    _, saver = weed
    ledger = EffectLedger(saver, mode="at_least_once")
    fired: list[str] = []

    async def action() -> None:
        fired.append("x")

    assert await ledger.aonce("async-key", action) is True
    assert await ledger.aonce("async-key", action) is False
    assert await ledger.adone("async-key") and fired == ["x"]
    await ledger.aforget("async-key")
    assert not await ledger.adone("async-key")
    assert await ledger.amark("async-key") is True and await ledger.amark("async-key") is False


def test_ledger_markers_live_under_the_prefix(weed: tuple[LocalS3Server, S3Saver]) -> None:
    _, saver = weed
    ledger = EffectLedger(saver)
    ledger.mark("a/b c")
    key = ledger.object_key("a/b c")
    assert key.startswith(f"{saver.prefix}/effects/") and "/" not in key[len(f"{saver.prefix}/effects/") :]
    assert saver.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    with pytest.raises(InvalidConfigError):
        ledger.object_key("")
    with pytest.raises(InvalidConfigError):
        EffectLedger(saver, mode="exactly_once")  # type: ignore[arg-type]


# -- idempotency_key ------------------------------------------------------------------------------------------
class KeyState(TypedDict, total=False):
    keys: dict[str, list[str]]
    item: int


def test_idempotency_key_is_stable_per_task_and_distinct_between_tasks(weed: tuple[LocalS3Server, S3Saver]) -> None:
    _, saver = weed
    seen: dict[str, list[str]] = {}
    attempts: dict[str, int] = {}
    lock = threading.Lock()

    def record(label: str, key: str) -> None:
        with lock:
            seen.setdefault(label, []).append(key)

    def node(name: str) -> Any:
        def run(state: KeyState, config: RunnableConfig) -> KeyState:
            record(name, idempotency_key())
            record(f"{name}/explicit", idempotency_key(config))
            record(f"{name}/named", idempotency_key(name="other"))
            with lock:
                attempts[name] = attempts.get(name, 0) + 1
                first = attempts[name] == 1
            if name == "flaky" and first:
                raise ConnectionError("transient")
            return {}

        return run

    def fan_out(state: KeyState) -> list[Send]:
        return [Send("worker", {"item": i}) for i in range(3)]

    def worker(state: KeyState) -> KeyState:
        record(f"worker-{state['item']}", idempotency_key())
        return {}

    builder = StateGraph(KeyState)
    builder.add_node("a", node("a"))
    builder.add_node("b", node("b"))
    builder.add_node("flaky", node("flaky"), retry_policy=RetryPolicy(max_attempts=2, initial_interval=0.01))
    builder.add_node("again", node("again"))
    builder.add_node("worker", worker)
    builder.add_edge(START, "a")
    builder.add_edge(START, "b")
    builder.add_edge(START, "flaky")
    builder.add_edge(["a", "b", "flaky"], "again")
    builder.add_conditional_edges("again", fan_out, ["worker"])
    builder.add_edge("worker", END)
    graph = builder.compile(checkpointer=saver)
    graph.invoke({}, {"configurable": {"thread_id": "keys-1"}})
    first_thread = dict(seen)
    seen.clear()
    attempts.clear()
    graph.invoke({}, {"configurable": {"thread_id": "keys-2"}})

    assert len(set(first_thread["flaky"])) == 1 and len(first_thread["flaky"]) == 2, "retries share a key"
    for name in ("a", "b", "flaky", "again"):
        assert first_thread[name][0] == first_thread[f"{name}/explicit"][0]
        assert first_thread[name][0] != first_thread[f"{name}/named"][0]
    per_task = [first_thread[n][0] for n in ("a", "b", "flaky", "again", "worker-0", "worker-1", "worker-2")]
    assert len(set(per_task)) == len(per_task), "each task has its own key"
    other_thread = {seen[n][0] for n in ("a", "b", "flaky", "again")}
    assert not other_thread & set(per_task), "keys differ between threads"


@pytest.mark.memory
def test_idempotency_key_outside_a_task() -> None:
    with pytest.raises(SaverMisuseError):
        idempotency_key()
    with pytest.raises(InvalidConfigError):
        idempotency_key({"configurable": {"thread_id": "t"}})
