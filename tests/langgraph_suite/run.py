"""Run LangGraph's own tests with InMemorySaver and InMemoryCache (the baseline) and with S3Saver / AsyncS3Saver
and S3Cache; compare.

    python tests/langgraph_suite/run.py                 # the gate: exit 1 if S3 fails a test memory passes
    python tests/langgraph_suite/run.py -n 0 -- 'tests/test_time_travel.py::test_x[memory]' ...
    python tests/langgraph_suite/run.py -- -k 'replay or fork' tests/test_time_travel.py

Steps: fetch the sdist tests of the installed langgraph (``fetch.py``), run every ``tests/test_*.py`` that
uses the ``sync_checkpointer`` / ``async_checkpointer`` / ``cache`` fixtures in one pytest subprocess (cwd: the
extracted folder; plugin: ``lgs3_suite_plugin``; config: ``pytest.ini`` here), read its JSON-lines
report, and pair each test with an ``s3``/``s3_aio``/``s3_cache`` param with its twin whose such params are all
``memory``. A regression is a test that passes with memory and does not pass (fails, errors, is skipped, or did
not run) with S3.

The memory twins run only where they decide something (``baselines="on-demand"``, the default): the first run
deselects them (the plugin lists them in ``last-not-run.jsonl``), and only the twins of S3 tests that did
not pass run afterwards, each beside its S3 test again. A test that passes with S3 passes the gate whatever memory
does, so running its twin decides nothing; the twins were about a fifth of the gate's test time. ``--all-baselines``
runs every twin in the first run (to see upstream's own failures).

The run never passes vacuously: pytest exiting with anything but 0 or 1 (5 = nothing collected),
an empty report, or no memory / s3 / s3_aio test (nor node cache test with memory / s3_cache) having run is a
failure. Arguments after ``--`` go
to pytest; node ids or paths among them replace the default file list. The log, the raw report and
the summary are kept in the cache folder (``last-run.log``, ``last-report.jsonl``, ``last-summary.txt``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fetch import ensure_tests  # noqa: E402

PLUGIN = "lgs3_suite_plugin"
BASELINE = "memory"
OURS = {"sync": "s3", "async": "s3_aio"}
OUR_CACHE = "s3_cache"
DEFAULT_WORKERS = 2
DEFAULT_TIMEOUT = 1800.0
DEFAULT_RETRIES = 3
FEW_RETRIES = 16  # regressions rerun without xdist up to this many node ids (a real breakage has more)
FIXTURE_NAMES = ("sync_checkpointer", "async_checkpointer")
CACHE_FIXTURE = re.compile(r"\bcache\s*:\s*BaseCache\b")
"""A test requesting LangGraph's node cache fixture (its conftest's ``cache``), as the sdist's tests spell it."""


@dataclass
class TestResult:
    __test__ = False  # a result, not a test class for pytest to collect where it is imported

    nodeid: str
    key: str
    saver: str | None
    kind: str | None
    outcome: str  # passed | failed | error | skipped | xfailed | xpassed | not run (a baseline deselected)
    message: str = ""
    frames: list[str] = field(default_factory=list)
    baseline: str = ""  # for an S3 test: its memory twin's node id
    cache: str | None = None  # the node cache param, for a test that takes one

    @property
    def ours(self) -> bool:
        """Whether the test runs on any of our classes (a saver, the cache, or both)."""
        return (self.kind is not None and self.saver == OURS[self.kind]) or self.cache == OUR_CACHE

    @property
    def baseline_run(self) -> bool:
        """Whether the test runs on memory where we could stand in: what our twins must match."""
        return (self.saver, self.cache) != (None, None) and {self.saver, self.cache} <= {BASELINE, None}

    @property
    def label(self) -> str:
        saver = f"{self.saver} ({self.kind})" if self.saver else "no checkpointer"
        return saver if self.cache is None else f"{saver}, cache {self.cache}"


@dataclass
class SuiteResult:
    version: str
    root: Path
    command: list[str]
    returncode: int | None
    seconds: float
    tests: list[TestResult]
    problems: list[str] = field(default_factory=list)
    regressions: list[TestResult] = field(default_factory=list)
    baseline_failures: list[TestResult] = field(default_factory=list)
    flaky: list[TestResult] = field(default_factory=list)  # regressed, then passed on a retry
    undecided: list[TestResult] = field(default_factory=list)  # S3 tests that did not pass, their twin not run
    twins_run: int = 0  # memory twins run on demand, beside the S3 tests that did not pass

    @property
    def ok(self) -> bool:
        return not self.problems and not self.regressions

    def counts(self) -> dict[str, collections.Counter[str]]:
        by_saver: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        for test in self.tests:
            by_saver[test.label][test.outcome] += 1
            by_saver[test.label]["total"] += 1
        return dict(sorted(by_saver.items()))

    def render(self, *, frames: bool = True) -> str:
        lines = [
            f"langgraph {self.version} sdist tests in {self.root} ({self.seconds:.0f} s wall, exit {self.returncode})"
        ]
        for label, counter in self.counts().items():
            detail = ", ".join(f"{n} {k}" for k, n in sorted(counter.items()) if k != "total")
            lines.append(f"  {label}: {counter['total']} tests: {detail}")
        if self.twins_run:
            lines.append(f"  ({self.twins_run} memory twins run afterwards, for the S3 tests that did not pass)")
        if self.baseline_failures:
            lines.append(f"  ({len(self.baseline_failures)} tests fail with memory too; they are not gated)")
        for test in self.flaky:
            lines.append(f"  flaky (failed with S3, passed on retry): {test.nodeid}  {test.message}")
        for problem in self.problems:
            lines.append(f"PROBLEM: {problem}")
        if self.regressions:
            lines.append(f"{len(self.regressions)} tests pass with memory but not with S3Saver/AsyncS3Saver/S3Cache:")
            for test in self.regressions:
                lines.append(f"  {test.nodeid}  [{test.outcome}] {test.message}")
                if frames:
                    lines.extend(f"      {frame}" for frame in test.frames[-6:])
            pairs = dict.fromkeys(n for t in self.regressions for n in (t.baseline, t.nodeid) if n)
            ids = " ".join(f"'{n}'" for n in pairs)
            lines.append(f"rerun them: python tests/langgraph_suite/run.py -n 0 -- {ids}")
        elif self.ok:
            lines.append("OK: every test that passes with memory passes with S3Saver, AsyncS3Saver and S3Cache")
        return "\n".join(lines)


def checkpointer_test_files(root: Path) -> list[str]:
    """The sdist test modules that request a checkpointer or the node cache fixture (relative to ``root``)."""
    files = []
    for path in sorted((root / "tests").glob("test_*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if any(name in text for name in FIXTURE_NAMES) or CACHE_FIXTURE.search(text):
            files.append(str(path.relative_to(root)))
    return files


def cache_test_files(root: Path) -> list[str]:
    """The sdist test modules that request the node cache fixture (relative to ``root``)."""
    paths = sorted((root / "tests").glob("test_*.py"))
    wanted = [p for p in paths if CACHE_FIXTURE.search(p.read_text(encoding="utf-8", errors="replace"))]
    return [str(p.relative_to(root)) for p in wanted]


def _not_run_file(report: Path) -> Path:
    """Where the plugin lists the baseline tests it deselected, beside ``report``."""
    return report.with_name(report.name.replace("report.jsonl", "not-run.jsonl"))


def _aggregate(report: Path) -> list[TestResult]:
    """One result per test from the per-phase lines (setup, call, teardown), and the baselines listed, not run."""
    phases: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for path in (report, _not_run_file(report)):
        if path.is_file():
            for raw in path.read_text(encoding="utf-8").splitlines():
                if raw.strip():
                    line = json.loads(raw)
                    phases[line["nodeid"]].append(line)
    results = []
    for nodeid, lines in phases.items():
        first = lines[0]
        failed = next((ln for ln in lines if ln["outcome"] == "failed"), None)
        call = next((ln for ln in lines if ln["when"] == "call"), None)
        if failed is not None:
            outcome = "failed" if failed["when"] == "call" else "error"
            source = failed
        elif first["outcome"] == "not run":
            outcome, source = "not run", first
        elif call is not None:
            outcome, source = call["outcome"], call
        else:
            outcome, source = "skipped", first
        results.append(
            TestResult(
                nodeid=nodeid,
                key=first.get("key") or "",
                saver=first.get("saver"),
                kind=first.get("kind"),
                cache=first.get("cache"),
                outcome=outcome,
                message=source.get("message", ""),
                frames=list(source.get("frames", [])),
            )
        )
    return results


def compare(result: SuiteResult, savers: list[str], *, complete: bool = True, with_cache: bool = True) -> None:
    """Fill ``problems``, ``regressions`` and ``baseline_failures`` from ``tests``.

    ``complete``: the whole default selection ran, so each saver and kind must have run tests, and, ``with_cache``
    (the selection holds tests taking the node cache fixture), each node cache.
    """
    if result.returncode not in (0, 1):
        result.problems.append(f"pytest exited {result.returncode} (0 or 1 expected; 5 means no test collected)")
    if not result.tests:
        result.problems.append("the report is empty: no test ran")
    counts = collections.Counter((t.saver, t.kind) for t in result.tests if t.outcome != "skipped")
    caches = collections.Counter(t.cache for t in result.tests if t.outcome != "skipped" and t.cache)
    wanted = []
    if BASELINE in savers:
        wanted += [(BASELINE, "sync"), (BASELINE, "async")]
    if "s3" in savers:
        wanted += [(OURS["sync"], "sync"), (OURS["async"], "async")]
    for saver, kind in wanted if complete else []:
        if not counts[(saver, kind)]:
            result.problems.append(f"no {kind} test ran with {saver}")
    wanted_caches = [c for c, selected in ((BASELINE, BASELINE in savers), (OUR_CACHE, "s3" in savers)) if selected]
    for cache in wanted_caches if complete and with_cache else []:
        if not caches[cache]:
            result.problems.append(f"no node cache test ran with {cache}")
    if BASELINE not in savers or "s3" not in savers:
        return
    ours: dict[str, list[TestResult]] = collections.defaultdict(list)
    for test in result.tests:
        if test.ours:
            if not test.key:
                result.problems.append(f"cannot tell the memory twin of {test.nodeid}")
            ours[test.key].append(test)
    for test in result.tests:
        if not test.baseline_run:
            continue
        if test.outcome not in ("passed", "not run"):
            result.baseline_failures.append(test)
            continue
        # A twin listed but not run cannot judge its S3 test yet: run_suite runs it beside the S3 test that failed.
        failing = result.undecided if test.outcome == "not run" else result.regressions
        twins = ours.get(test.key, [])
        if not twins:
            result.regressions.append(
                TestResult(test.nodeid, test.key, None, test.kind, "missing", "no S3 twin ran", cache=test.cache)
            )
        for twin in twins:
            if twin.outcome != "passed":
                twin.baseline = test.nodeid
                failing.append(twin)
    result.regressions.sort(key=lambda t: t.nodeid)


def _run_pytest(
    root: Path,
    args: list[str],
    *,
    tag: str,
    workers: int,
    savers: str,
    timeout: float,
    echo: bool,
    list_baselines: bool = False,
) -> tuple[list[str], int | None, float, list[TestResult], Path]:
    """One pytest subprocess in ``root``; returns (command, exit code or None if killed, seconds, tests, log).
    ``list_baselines``: the memory twins are listed, not run (``--lgs3-list-baselines``)."""
    report = root / f"last-{tag}report.jsonl"
    log = root / f"last-{tag}run.log"
    report.unlink(missing_ok=True)
    _not_run_file(report).unlink(missing_ok=True)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(HERE / "pytest.ini"),
        "--rootdir",
        str(root),
        "-p",
        PLUGIN,
        f"--lgs3-savers={savers}",
        f"--lgs3-report={report}",
        "-q",
        "--tb=short",
        "--durations=10",
    ]
    if list_baselines:
        command.append(f"--lgs3-list-baselines={_not_run_file(report)}")
    if workers > 0:
        command += ["-n", str(workers)]
    command += args
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), str(root), env.get("PYTHONPATH", "")) if p)
    env["NO_DOCKER"] = "true"  # LangGraph's conftest: no postgres / redis params
    for name in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PYTEST_CURRENT_TEST"):
        env.pop(name, None)
    start = time.monotonic()
    returncode: int | None
    with open(log, "w", encoding="utf-8") as out:
        process = subprocess.Popen(
            command,
            cwd=root,
            env=env,
            stdout=None if echo else out,
            stderr=None if echo else subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            returncode = None
    return command, returncode, time.monotonic() - start, _aggregate(report), log


def run_suite(
    *,
    package: str = "langgraph",
    workers: int = DEFAULT_WORKERS,
    savers: str = "memory,s3",
    pytest_args: list[str] | None = None,
    retries: int = DEFAULT_RETRIES,
    timeout: float = DEFAULT_TIMEOUT,
    echo: bool = False,
    tag: str = "",
    baselines: str = "on-demand",
) -> SuiteResult:
    """Fetch (if needed), run and compare; raises if the sdist cannot be fetched.

    ``retries``: regressions are run again (with their memory twins) up to this many times; one that
    passes on a retry is reported as flaky and does not fail the gate. A regression that is one (it fails
    every time) still fails it; a few tests upstream order their stream by 10 ms sleeps (``test_imp_nested``), and
    on a loaded machine they lose that race now and then with any saver that does I/O, so one retry was not
    enough (it failed twice in a row in CI). A handful of retries run in one process, no xdist workers to start.
    ``tag`` starts the names of this run's files (``last-{tag}summary.txt`` ...), so that another run in the
    same folder keeps its own. ``baselines``: ``on-demand`` (memory twins only for S3 tests that did not pass: see
    the module's doc) or ``all``.
    """
    if baselines not in ("on-demand", "all"):
        raise ValueError(f"baselines must be 'on-demand' or 'all', got {baselines!r}")
    root = ensure_tests(package=package)
    for stale in root.glob(f"last-{tag}*"):
        stale.unlink()
    extra = list(pytest_args or [])
    explicit = any(a.startswith(("tests/", "tests\\")) for a in extra)
    targets = [] if explicit else checkpointer_test_files(root)
    saver_list = [s.strip() for s in savers.split(",") if s.strip()]
    options: dict[str, Any] = {"workers": workers, "savers": savers, "timeout": timeout, "echo": echo}
    on_demand = baselines == "on-demand" and BASELINE in saver_list and "s3" in saver_list
    command, returncode, seconds, tests, log = _run_pytest(
        root, targets + extra, tag=tag, list_baselines=on_demand, **options
    )
    result = SuiteResult(root.name, root, command, returncode, seconds, tests)
    if returncode is None:
        result.problems.append(f"pytest did not finish within {timeout:.0f} s (killed); see {log}")
    compare(result, saver_list, complete=not extra, with_cache=bool(cache_test_files(root)))
    if result.undecided and not result.problems:
        _judge_with_twins(result, saver_list, tag=tag, options=options)
    if result.problems and not echo:
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        result.problems.append(f"last lines of {log}:\n{tail}")
    for attempt in range(1, retries + 1):
        if result.problems or not result.regressions:
            break
        ids = list(dict.fromkeys(n for t in result.regressions for n in (t.baseline, t.nodeid) if n))
        retry = _rerun(root, ids, tag=f"{tag}retry{attempt}-", options=options)
        result.seconds += retry.seconds
        compare(retry, saver_list, complete=False)
        if retry.returncode not in (0, 1) or not retry.tests:
            break  # the retry itself broke: keep the first verdict
        still = {t.nodeid for t in retry.regressions}
        result.flaky += [t for t in result.regressions if t.nodeid not in still]
        result.regressions = [t for t in result.regressions if t.nodeid in still]
    (root / f"last-{tag}summary.txt").write_text(result.render() + "\n", encoding="utf-8")
    return result


def _rerun(root: Path, ids: list[str], *, tag: str, options: dict[str, Any]) -> SuiteResult:
    """These node ids (S3 tests and their memory twins) in a pytest of their own: without xdist when they are few."""
    few = {**options, "workers": 0} if len(ids) <= FEW_RETRIES else options
    command, code, seconds, tests, _ = _run_pytest(root, ids, tag=tag, **few)
    return SuiteResult(root.name, root, command, code, seconds, tests)


def _judge_with_twins(result: SuiteResult, savers: list[str], *, tag: str, options: dict[str, Any]) -> None:
    """Run the memory twins of the S3 tests that did not pass, each beside its S3 test again, and judge them as a
    full run would: a regression if memory passes and S3 does not, nothing if memory fails too; an S3 test that
    passes this time (it failed the first time) is flaky."""
    ids = list(dict.fromkeys(n for t in result.undecided for n in (t.baseline, t.nodeid)))
    judged = _rerun(result.root, ids, tag=f"{tag}twins-", options=options)
    result.seconds += judged.seconds
    result.twins_run = sum(1 for t in judged.tests if t.baseline_run)
    compare(judged, savers, complete=False)
    if judged.returncode not in (0, 1) or not judged.tests:
        result.problems.append(f"the run of the memory twins broke (exit {judged.returncode}): {' '.join(ids)}")
        return
    ran = {t.nodeid: t for t in judged.tests}
    missing = [n for n in ids if n not in ran]
    if missing:
        result.problems.append(f"the run of the memory twins did not run {missing}")
        return
    result.regressions += judged.regressions
    result.baseline_failures += judged.baseline_failures
    regressed = {t.nodeid for t in judged.regressions}
    result.flaky += [t for t in result.undecided if ran[t.nodeid].outcome == "passed" and t.nodeid not in regressed]
    result.regressions.sort(key=lambda t: t.nodeid)


def main() -> None:
    parser = argparse.ArgumentParser(description="LangGraph's own tests as a gate for S3Saver / AsyncS3Saver")
    parser.add_argument(
        "--package", default="langgraph", help="whose sdist tests: langgraph (default) or langgraph-prebuilt"
    )
    parser.add_argument("-n", "--workers", type=int, default=DEFAULT_WORKERS, help="xdist workers (0: no xdist)")
    parser.add_argument("--savers", default="memory,s3", help="checkpointer params (see lgs3_suite_plugin)")
    parser.add_argument(
        "--retries", type=int, default=DEFAULT_RETRIES, help="reruns of regressions before they count (0: none)"
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds before the run is killed")
    parser.add_argument("--echo", action="store_true", help="show pytest's output instead of logging it")
    parser.add_argument(
        "--all-baselines",
        action="store_true",
        help="run every memory twin (default: only those of S3 tests that did not pass)",
    )
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest (node ids replace the file list)")
    args = parser.parse_args()
    result = run_suite(
        package=args.package,
        workers=args.workers,
        savers=args.savers,
        pytest_args=args.pytest_args,
        retries=args.retries,
        timeout=args.timeout,
        echo=args.echo,
        baselines="all" if args.all_baselines else "on-demand",
    )
    print(result.render())
    sys.exit(0 if result.ok else 1)


if __name__ == "__main__":
    main()
