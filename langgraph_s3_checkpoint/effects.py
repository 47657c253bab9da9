"""Guards for side effects of graph nodes: a stable idempotency key per task, and a ledger of effects.

A checkpoint makes a thread's *data* durable: once ``put`` returns, the state survives any crash. It
does not make a node's *effects* happen exactly once. A node that charges a card, sends an e-mail or
calls any other service can run more than once:

* the process dies after the call but before the node's writes are stored, and the resumed run
  executes the node again;
* two workers race on one thread: both execute the node, one loses the commit
  (:class:`~langgraph_s3_checkpoint.errors.CheckpointConflictError`), but its call already happened;
* a ``RetryPolicy`` retries a node that failed after its call went through.

Two tools deal with that.

:func:`idempotency_key` names the current task. It is the same on every execution of the same task
(retries, resumes after a crash, the racing twin on another worker) and different for any other task,
so a service that deduplicates requests by key (most payment APIs do) performs the call once.

:class:`EffectLedger` is for services that do not deduplicate: it records in the bucket that an effect
fired, with a conditional create, and skips it next time. Without the service's cooperation there is
no exactly-once, only a choice of failure mode, made by ``mode``:

``"at_least_once"`` (default)
    The marker is written *after* the action. A crash between the two repeats the action on resume.
``"at_most_once"``
    The marker is written *before* the action. A crash between the two loses the action for good.
    Concurrent callers cannot both fire: the conditional create admits exactly one.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Literal

from langchain_core.runnables import RunnableConfig

from ._protocol.keys import escape
from ._protocol.plans import Steps, one
from ._protocol.requests import CREATE, PRECONDITION_FAILED, DeleteObjects, Get, Plan, Put
from .errors import InvalidConfigError, SaverMisuseError

if TYPE_CHECKING:
    from .saver import BaseS3Saver

Mode = Literal["at_most_once", "at_least_once"]

# LangGraph puts the running task's id here; its public mirror is Runtime.execution_info.task_id,
# which is only reachable from inside the task, while this also works with an explicit config.
_TASK_ID = "__pregel_task_id"


def idempotency_key(config: RunnableConfig | None = None, *, name: str = "") -> str:
    """A key that identifies the running task, for services that deduplicate requests by key.

    LangGraph derives a task's id from the checkpoint it runs on, its namespace, step, node and path,
    so the key is the same whenever that task executes again (retry policy, resume after a crash,
    another worker racing on the thread) and differs between tasks, steps, subgraphs and threads.
    ``name`` tells apart several effects of one task (``name="charge"``, ``name="receipt"``).

    The key is stable only if the checkpoint the task runs on is stored before the task's effect:
    always with ``durability="sync"``; with ``"async"`` a crash can lose the newest checkpoint, and
    with ``"exit"`` every checkpoint of the run, in which case the re-executed task gets a new id.

    Call it inside a node (``config`` defaults to the running task's config) or pass the node's
    ``config`` argument.

    Args:
        config: The config a node receives; ``None``: the running task's.
        name: Tells apart several effects of one task.

    Returns:
        ``"lgs3-"`` and a SHA-256 of the thread, namespace, task id and ``name``.

    Raises:
        SaverMisuseError: No ``config`` was given and it is called outside a graph node.
        InvalidConfigError: The config belongs to no running task (it has no task id).
    """
    if config is None:
        from langgraph.config import get_config

        try:
            config = get_config()
        except RuntimeError as exc:
            raise SaverMisuseError("idempotency_key() without a config must be called inside a graph node") from exc
    configurable = config.get("configurable") or {}
    task_id = configurable.get(_TASK_ID)
    if not task_id:
        raise InvalidConfigError(
            "idempotency_key(): this config belongs to no running task; pass the config a node receives"
        )
    parts = (str(configurable.get("thread_id", "")), str(configurable.get("checkpoint_ns", "")), str(task_id), name)
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()
    return f"lgs3-{digest}"


class EffectLedger:
    """Markers in the saver's bucket recording that an effect fired, one per key.

    ``once(key, action)`` runs ``action`` unless the key is already marked, and marks it, in the order
    ``mode`` chooses (see the module docstring for the trade-off). Markers live under
    ``{prefix}effects/`` and are never deleted by the saver, ``prune`` or ``gc``: remove them with
    :meth:`forget` or an S3 lifecycle rule once a repeat can no longer happen.

    Use ``idempotency_key()`` as the key inside a node, so the marker belongs to the task::

        ledger = EffectLedger(saver, mode="at_most_once")

        def notify(state):
            ledger.once(idempotency_key(name="sms"), lambda: sms.send(state["phone"], "Shipped"))
            return {}

    Args:
        saver: The saver whose bucket, prefix and I/O the markers use.
        mode: ``"at_least_once"`` (the marker after the action) or ``"at_most_once"`` (the marker first).

    Raises:
        InvalidConfigError: ``mode`` is neither.

    Errors every method taking a ``key`` may raise, besides those its docstring names: :class:`InvalidConfigError`
    (``key`` is empty) and the saver's I/O errors (all are :class:`S3CheckpointError`: :class:`S3RequestError`,
    :class:`S3AccessError`, :class:`BucketNotFoundError`, :class:`ConditionalWritesUnsupportedError` at the first
    write).
    """

    def __init__(self, saver: BaseS3Saver, *, mode: Mode = "at_least_once") -> None:
        if mode not in ("at_most_once", "at_least_once"):
            raise InvalidConfigError(f"mode must be 'at_most_once' or 'at_least_once', got {mode!r}")
        self._bucket_io = saver._bucket_io
        self._root = f"{saver._plans.layout.prefix}effects/"
        self.mode: Mode = mode

    def object_key(self, key: str) -> str:
        """The S3 key of ``key``'s marker.

        Raises:
            InvalidConfigError: ``key`` is empty.
        """
        if not key:
            raise InvalidConfigError("an effect key must be a non-empty string")
        return self._root + escape(key)

    # -- plans ----------------------------------------------------------------------------------
    def _exists(self, key: str) -> Plan[bool]:
        return (yield from one(Get(self.object_key(key)))) is not None

    def _create(self, key: str) -> Plan[bool]:
        body = json.dumps({"mode": self.mode, "marked_at": time.time()}).encode()
        return (yield from one(Put(self.object_key(key), body, mode=CREATE))) is not PRECONDITION_FAILED

    def _remove(self, key: str) -> Plan[None]:
        yield [DeleteObjects((self.object_key(key),))]

    # -- sync -----------------------------------------------------------------------------------
    def done(self, key: str) -> bool:
        """Whether ``key`` is marked."""
        return self._bucket_io.run(self._exists(key))

    def mark(self, key: str) -> bool:
        """Mark ``key`` with a create-only PUT.

        Returns:
            ``True`` if this call created the marker, ``False`` if it already existed.
        """
        return self._bucket_io.run(self._create(key))

    def forget(self, key: str) -> None:
        """Remove ``key``'s marker, so the next ``once`` fires again."""
        self._bucket_io.run(self._remove(key))

    def once(self, key: str, action: Callable[[], object]) -> bool:
        """Run ``action`` unless ``key`` is marked; ``True`` if it ran in this call.

        at_most_once: the marker is created first and ``action`` runs only if this call created it,
        so among concurrent callers exactly one runs it; if ``action`` raises, the marker stays
        (the action may have taken effect) and the exception propagates.
        at_least_once: ``action`` runs if the key is unmarked, then the marker is written; if
        ``action`` raises, nothing is marked and the next call tries again.

        Args:
            key: The effect's key (:func:`idempotency_key` inside a node).
            action: The effect; its result is ignored.

        Returns:
            Whether ``action`` ran in this call.

        Raises:
            Exception: Whatever ``action`` raises, unchanged.
        """
        steps = Steps(self._order())
        for step in steps:
            if step == "act":
                action()
            else:
                steps.answer(self.mark(key) if step == "mark" else self.done(key))
        return steps.result

    def _order(self) -> Generator[str, bool | None, bool]:
        """The order of :meth:`once` for this mode, once for both the sync and the async form: yields
        ``"mark"`` (create the marker: True if this call created it), ``"done"`` (is it marked?) or
        ``"act"`` (run the action), receives the answer, and returns whether the action ran."""
        if self.mode == "at_most_once":
            if not (yield "mark"):
                return False
            yield "act"
            return True
        if (yield "done"):
            return False
        yield "act"
        yield "mark"
        return True

    # -- async ----------------------------------------------------------------------------------
    async def adone(self, key: str) -> bool:
        """:meth:`done`, awaited: same arguments, result and errors."""
        return await self._bucket_io.arun(self._exists(key))

    async def amark(self, key: str) -> bool:
        """:meth:`mark`, awaited: same arguments, result and errors."""
        return await self._bucket_io.arun(self._create(key))

    async def aforget(self, key: str) -> None:
        """:meth:`forget`, awaited: same arguments and errors."""
        await self._bucket_io.arun(self._remove(key))

    async def aonce(self, key: str, action: Callable[[], Awaitable[object]]) -> bool:
        """:meth:`once`, awaited; ``action`` returns an awaitable. Same result and errors."""
        steps = Steps(self._order())
        for step in steps:
            if step == "act":
                await action()
            else:
                steps.answer(await (self.amark(key) if step == "mark" else self.adone(key)))
        return steps.result


__all__ = ["EffectLedger", "Mode", "idempotency_key"]
