"""The raw saver API against InMemorySaver, randomized.

A fixed-seed random sequence of put, put_writes, get_tuple, list (bounded, filtered, across namespaces),
delete_thread, copy_thread, delete_for_runs, prune and puts that die before their head, through two savers (two
processes, each with its own memory) on every server kind, must read as InMemorySaver reads after every step.
``LGS3_DIFF_OPS`` and ``LGS3_DIFF_SEED`` change its length and seed.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable, Sequence
from typing import Any

from helpers import BIG, cfg, cid, cid_number, crash_before_head, put, ver
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_s3_checkpoint import S3Saver

DIFF_OPS = int(os.environ.get("LGS3_DIFF_OPS", "300"))
DIFF_SEED = int(os.environ.get("LGS3_DIFF_SEED", "20261130"))
DIFF_THREADS = ["a", "b", "c", "d", "long-" + "y" * 250]
DIFF_NAMESPACES = ["", "child"]


class Reference(InMemorySaver):
    """InMemorySaver plus the operations it lacks, with the meaning the S3 saver gives them."""

    def copy_thread(self, source: str, target: str) -> None:
        for ns, checkpoints in list(self.storage[source].items()):
            self.storage[target][ns] = dict(checkpoints)
        for (thread, ns, checkpoint_id), writes in list(self.writes.items()):
            if thread == source:
                self.writes[(target, ns, checkpoint_id)] = dict(writes)
        for (thread, ns, channel, version), blob in list(self.blobs.items()):
            if thread == source:
                self.blobs[(target, ns, channel, version)] = blob

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        for thread, namespaces in self.storage.items():
            for ns, checkpoints in namespaces.items():
                for checkpoint_id, (_, metadata, _) in list(checkpoints.items()):
                    if self.serde.loads_typed(metadata).get("run_id") in run_ids:
                        del checkpoints[checkpoint_id]
                        self.writes.pop((thread, ns, checkpoint_id), None)

    def prune(self, thread_ids: Sequence[str]) -> None:  # type: ignore[override]
        for thread in thread_ids:
            for ns, checkpoints in self.storage[thread].items():
                for checkpoint_id in sorted(checkpoints)[:-1]:
                    del checkpoints[checkpoint_id]
                    self.writes.pop((thread, ns, checkpoint_id), None)

    def committed(self, thread: str, ns: str) -> list[str]:
        return sorted(self.storage[thread][ns]) if thread in self.storage else []

    def empty(self, thread: str) -> bool:
        return not any(self.storage[thread].values()) if thread in self.storage else True


def _norm(tup: Any) -> Any:
    if tup is None:
        return None
    conf = tup.config["configurable"]
    parent = tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None
    return (
        conf["thread_id"],
        conf["checkpoint_ns"],
        conf["checkpoint_id"],
        tup.checkpoint["channel_values"],
        tup.metadata,
        parent,
        tup.pending_writes,
    )


def test_random_operations_through_two_savers_read_as_in_memory_saver(make_saver: Callable[[], S3Saver]) -> None:
    """A fixed-seed random sequence of put/put_writes/get_tuple/list/delete_thread/copy_thread/
    delete_for_runs/prune on a few threads, through two savers, gives what InMemorySaver gives."""
    rng = random.Random(DIFF_SEED)
    savers = [make_saver(), make_saver()]
    ref = Reference()
    log: list[str] = []
    counter = iter(range(1, 1_000_000))
    version = iter(range(1, 1_000_000))
    used: set[str] = set()
    run_of: dict[str, str] = {}
    dead_runs: set[str] = set()
    runs_seen: list[str] = []
    last_writer: dict[tuple[str, str], int] = {}

    def check(got: Any, want: Any, what: str) -> None:
        if got == want:
            return
        history = "\n".join(log[-25:])
        if isinstance(got, list) and isinstance(want, list):
            extra = [_short(x) for x in got if x not in want]
            missing = [_short(x) for x in want if x not in got]
            raise AssertionError(f"{what}: only in S3 {extra}\nonly in InMemorySaver {missing}\nlast ops:\n{history}")
        raise AssertionError(f"{what}: S3 {_short(got)}\n!= InMemorySaver {_short(want)}\nlast ops:\n{history}")

    def check_latest(thread: str, ns: str, saver: S3Saver) -> None:
        check(
            _norm(saver.get_tuple(cfg(thread, ns))), _norm(ref.get_tuple(cfg(thread, ns))), f"latest {thread[:8]}/{ns}"
        )

    def check_lists(thread: str, saver: S3Saver) -> None:
        for ns in DIFF_NAMESPACES:
            check(
                [_norm(t) for t in saver.list(cfg(thread, ns))], [_norm(t) for t in ref.list(cfg(thread, ns))], "list"
            )
            committed = ref.committed(thread, ns)
            if committed:
                bound = cfg(thread, ns, rng.choice(committed))
                limit = rng.choice([None, 1, 2, 5])
                check(
                    [_norm(t) for t in saver.list(cfg(thread, ns), before=bound, limit=limit)],
                    [_norm(t) for t in ref.list(cfg(thread, ns), before=bound, limit=limit)],
                    f"list before {bound['configurable']['checkpoint_id']} limit {limit}",
                )
        everywhere: RunnableConfig = {"configurable": {"thread_id": thread}}
        check(
            sorted(map(_norm_key, saver.list(everywhere))), sorted(map(_norm_key, ref.list(everywhere))), "list all ns"
        )
        bounds = [c for ns in DIFF_NAMESPACES for c in ref.committed(thread, ns)]
        if bounds:
            # InMemorySaver groups namespaces, the S3 saver merges them newest first: compare as sets.
            bound = cfg(thread, "", rng.choice(bounds))
            for config in (everywhere, None):
                check(
                    sorted(map(_norm_key, saver.list(config, before=bound))),
                    sorted(map(_norm_key, ref.list(config, before=bound))),
                    f"list {config and thread[:8]} before {bound['configurable']['checkpoint_id']}",
                )
        fork_filter = {"source": "fork"}
        check(
            sorted(map(_norm_key, saver.list(everywhere, filter=fork_filter))),
            sorted(map(_norm_key, ref.list(everywhere, filter=fork_filter))),
            "list filter",
        )

    def do_put(thread: str, ns: str, parent: str | None, checkpoint_id: str, source: str, s: int) -> None:
        base = ref.get_tuple(cfg(thread, ns, parent)) if parent else None
        values = dict(base.checkpoint["channel_values"]) if base else {}
        versions: dict[str, Any] = dict(base.checkpoint["channel_versions"]) if base else {}
        new: dict[str, str] = {}
        for channel in ("n", "note", "big"):
            if base is None or channel == "n" or rng.random() < 0.3:
                new[channel] = versions[channel] = ver(next(version), f"{s}")
                size = BIG if channel == "big" else 10
                values[channel] = f"{channel}-{new[channel]}-".ljust(size, "v")
        run = None
        if source != "update":
            if thread not in run_of or rng.random() < 0.3:
                run_of[thread] = f"run-{len(runs_seen)}"
                runs_seen.append(run_of[thread])
            run = run_of[thread]
        log.append(
            f"saver{s} put {thread[:8]}/{ns} {checkpoint_id[:13]} parent={parent and parent[:13]} {source} {run}"
        )
        for target in (savers[s], ref):
            put(
                target,
                thread,
                checkpoint_id,
                parent,
                ns=ns,
                values=values,
                versions=versions,
                new=new,
                source=source,
                run=run,
            )
        used.add(checkpoint_id)
        last_writer[(thread, ns)] = s

    def touched(thread: str) -> None:
        for key in [k for k in last_writer if k[0] == thread]:
            del last_writer[key]

    for _ in range(DIFF_OPS):
        s = rng.randrange(2)
        saver = savers[s]
        thread, ns = rng.choice(DIFF_THREADS), rng.choice(DIFF_NAMESPACES)
        committed = ref.committed(thread, ns)
        op = rng.choices(
            ["continue", "fork", "detached", "writes", "by_id", "list", "delete", "copy", "runs", "prune", "crash"],
            [35, 6, 4, 20, 5, 6, 2, 4, 4, 3, 3],
        )[0]
        if op == "crash":
            # A put that dies before its head PUT: InMemorySaver never sees it.
            parent = committed[-1] if committed else None
            checkpoint_id = cid(next(counter))
            run = run_of.get(thread) if rng.random() < 0.5 else None
            log.append(
                f"saver{s} crashed put {thread[:8]}/{ns} {checkpoint_id[:13]} parent={parent and parent[:13]} {run}"
            )
            values = {"n": checkpoint_id, "big": "c" * BIG}
            versions = {ch: ver(next(version), "crash") for ch in values}
            crash_before_head(saver, thread, checkpoint_id, parent, ns=ns, values=values, versions=versions, run=run)
        elif op == "continue" or (op in ("fork", "detached", "writes", "by_id") and not committed):
            if last_writer.get((thread, ns)) != s or rng.random() < 0.5:
                check_latest(thread, ns, saver)  # what LangGraph does when a run starts
            parent = committed[-1] if committed else None
            do_put(thread, ns, parent, cid(next(counter)), "loop" if parent else "input", s)
        elif op in ("fork", "detached"):
            parent = rng.choice(committed[:-1] or committed) if op == "detached" else rng.choice(committed)
            check(
                _norm(saver.get_tuple(cfg(thread, ns, parent))), _norm(ref.get_tuple(cfg(thread, ns, parent))), "by id"
            )
            if op == "fork":
                do_put(thread, ns, parent, cid(next(counter)), "fork", s)
            elif parent != committed[-1]:
                head_n = cid_number(committed[-1])
                checkpoint_id = cid(head_n - 1, rng.randrange(1, 9999))
                if checkpoint_id not in used:
                    do_put(thread, ns, parent, checkpoint_id, "update", s)
        elif op == "writes":
            target = rng.choice(committed[-3:])
            task = rng.choice(["task-1", "task-2", "task-3"])
            writes = [
                (rng.choice(["x", "y", "__interrupt__", "__resume__", "__error__"]), f"w{rng.randrange(1000)}")
                for _ in range(rng.randint(1, 3))
            ]
            log.append(f"saver{s} put_writes {thread[:8]}/{ns} {target[:13]} {task} {writes}")
            for w in (saver, ref):
                w.put_writes(cfg(thread, ns, target), writes, task)
        elif op == "by_id":
            target = rng.choice(committed)
            log.append(f"saver{s} get_tuple {thread[:8]}/{ns} {target[:13]}")
            check(
                _norm(saver.get_tuple(cfg(thread, ns, target))), _norm(ref.get_tuple(cfg(thread, ns, target))), "by id"
            )
        elif op == "list":
            log.append(f"saver{s} list {thread[:8]}")
            check_lists(thread, saver)
        elif op == "delete":
            log.append(f"saver{s} delete_thread {thread[:8]}")
            for w in (saver, ref):
                w.delete_thread(thread)
            run_of.pop(thread, None)
            touched(thread)
        elif op == "copy":
            targets = [t for t in DIFF_THREADS if t != thread and ref.empty(t)]
            if targets and not ref.empty(thread):
                target = rng.choice(targets)
                log.append(f"saver{s} copy_thread {thread[:8]} -> {target[:8]}")
                for w in (saver, ref):
                    w.copy_thread(thread, target)
                touched(target)
        elif op == "runs":
            alive = [r for r in runs_seen if r not in dead_runs]
            if alive:
                chosen = rng.sample(alive, min(len(alive), rng.randint(1, 2)))
                log.append(f"saver{s} delete_for_runs {chosen}")
                for w in (saver, ref):
                    w.delete_for_runs(chosen)
                dead_runs.update(chosen)
                for t, r in list(run_of.items()):
                    if r in chosen:
                        del run_of[t]
                last_writer.clear()
        elif op == "prune":
            log.append(f"saver{s} prune {thread[:8]}")
            for w in (saver, ref):
                w.prune([thread])
            touched(thread)
        check_latest(thread, ns, savers[1 - s])
    reader = make_saver()
    for thread in DIFF_THREADS:
        for ns in DIFF_NAMESPACES:
            check_latest(thread, ns, reader)
        check_lists(thread, reader)
    check(sorted(map(_norm_key, reader.list(None))), sorted(map(_norm_key, ref.list(None))), "list(None)")


def _short(item: Any) -> str:
    """A compared item without its large values."""
    return re.sub(r"v{50,}", "v…", str(item))[:600]


def _norm_key(tup: Any) -> str:
    return repr(_norm(tup))
