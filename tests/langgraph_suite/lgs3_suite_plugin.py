"""pytest plugin that runs LangGraph's own tests (the sdist's ``tests/``) on ``S3Saver`` / ``AsyncS3Saver`` and
``S3Cache``.

Loaded by ``run.py`` with ``-p lgs3_suite_plugin``; nothing in the downloaded files is edited:

* When LangGraph's ``tests/conftest.py`` is registered, its ``sync_checkpointer`` and
  ``async_checkpointer`` fixtures are replaced (before pytest parses them) by wrappers whose params are
  the selected upstream ones (``--lgs3-savers``, default ``memory``) plus ``s3`` (sync fixture,
  ``S3Saver``) and ``s3_aio`` (async fixture, ``AsyncS3Saver``). Upstream params run upstream's own
  fixture body unchanged. Its ``cache`` fixture (the node cache) likewise gets the selected upstream params
  that it has (``memory``, ``sqlite``) plus ``s3_cache`` (``S3Cache``) when ``s3`` is selected.
* Each S3 test gets a fresh saver under a fresh random key prefix (thread isolation); all of them share
  one SeaweedFS server per session (with xdist the controller starts it and the workers share it) and
  one boto3 client per process. Such a test that also takes LangGraph's ``sync_store``/``async_store`` gets
  S3Store/AsyncS3Store on the same bucket.
* Tests that use none of these fixtures are deselected (``--lgs3-all-tests`` keeps them; ``--lgs3-cache-tests``
  keeps only those that take the node cache fixture).
* syrupy snapshots of an ``s3``/``s3_aio``/``s3_cache`` test are looked up under the ``memory`` test's name:
  the graph drawn or the state returned must not depend on where checkpoints (or cached writes) live.
* ``--lgs3-list-baselines FILE`` deselects the tests on upstream's params only and lists them in FILE (run.py runs
  the memory twins only where an S3 test did not pass).
* ``--lgs3-report FILE`` writes one JSON line per test phase (node id, saver, pairing key, outcome,
  one-line exception, the traceback lines inside ``langgraph_s3_checkpoint``) for ``run.py`` to compare.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from langgraph_s3_checkpoint import AsyncS3Saver, AsyncS3Store, S3Cache, S3Saver, S3Store, local

BUCKET = "lgs3-langgraph-suite"
S3_SYNC = "s3"
S3_ASYNC = "s3_aio"
S3_CACHE = "s3_cache"
CHECKPOINTER_FIXTURES = ("sync_checkpointer", "async_checkpointer")
CACHE_FIXTURE = "cache"
OURS_BY_FIXTURE = {"sync_checkpointer": S3_SYNC, "async_checkpointer": S3_ASYNC, CACHE_FIXTURE: S3_CACHE}
"""Our param of each fixture the plugin extends."""
UPSTREAM_CONFTEST = "tests.conftest"
_OUR_PARAM = re.compile(r"(?<=[\[-])s3(?:_aio|_cache)?(?=[\]-])")
_SERVER_KEY = "lgs3_server"

_state: dict[str, Any] = {"config": None, "pending": [], "patched": False}
_client_lock = threading.Lock()


# -- options and configuration -----------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lgs3", "S3 checkpointer in LangGraph's test suite")
    group.addoption(
        "--lgs3-savers",
        default="memory,s3",
        help="comma list of checkpointer params to run: 's3' (S3Saver and AsyncS3Saver, and S3Cache for the "
        "cache fixture) and/or upstream params of LangGraph's conftest ('memory', 'sqlite', 'sqlite_aio', ...). "
        "Default: memory,s3",
    )
    group.addoption("--lgs3-server", default="seaweedfs", help="local S3 server kind: seaweedfs (default) or moto")
    group.addoption("--lgs3-report", default=None, help="write a JSON-lines report of every test phase here")
    group.addoption(
        "--lgs3-cache-tests",
        action="store_true",
        help="keep only the tests that take the node cache fixture (a run of S3Cache alone, e.g. on moto)",
    )
    group.addoption(
        "--lgs3-list-baselines",
        default=None,
        metavar="FILE",
        help="deselect the tests on upstream's params only (memory ...) and write a line for each (outcome 'not run') "
        "to FILE, for run.py to run only the twins of S3 tests that did not pass",
    )
    group.addoption(
        "--lgs3-all-tests",
        action="store_true",
        help="keep tests that use no checkpointer fixture (they are deselected by default)",
    )


def _selected(config: pytest.Config) -> list[str]:
    names = [n.strip() for n in str(config.getoption("lgs3_savers")).split(",") if n.strip()]
    if not names:
        raise pytest.UsageError("--lgs3-savers is empty")
    return names


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    _state["config"] = config
    for module in _state["pending"]:
        _patch_conftest(module, config)
    _state["pending"].clear()
    if S3_SYNC not in _selected(config):
        return
    if _is_worker(config):
        info = config.workerinput[_SERVER_KEY]  # type: ignore[attr-defined]
        _state["server"] = local.LocalS3Server(**info)
    else:
        server = local.start(str(config.getoption("lgs3_server")))
        _state["server"] = server
        _state["owns_server"] = True
        server.create_bucket(BUCKET)
        # setup() once per session (it checks the bucket and conditional writes); per-test savers skip it,
        # because some tests patch uuid.uuid4 with a deterministic sequence that setup() would consume.
        with S3Saver.from_conn_string(f"s3://{BUCKET}/lg-setup", client=_client()) as saver:
            saver.setup()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _state.pop("owns_server", False):
        _state.pop("server").stop()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist controller: hand the running server to each worker."""
    server = _state.get("server")
    if server is not None:
        node.workerinput[_SERVER_KEY] = {
            "kind": server.kind,
            "endpoint_url": server.endpoint_url,
            "access_key": server.access_key,
            "secret_key": server.secret_key,
            "region": server.region,
        }


def _client() -> Any:
    with _client_lock:
        if "client" not in _state:
            _state["client"] = _state["server"].client()
        return _state["client"]


# -- replacing LangGraph's checkpointer fixtures -------------------------------------------------------
@pytest.hookimpl(tryfirst=True)
def pytest_plugin_registered(plugin: Any, manager: Any) -> None:
    if getattr(plugin, "__name__", None) != UPSTREAM_CONFTEST:
        return
    config = _state["config"]
    if config is None:  # an initial conftest, loaded before pytest_configure: patch it there
        _state["pending"].append(plugin)
    else:
        _patch_conftest(plugin, config)


def _unwrap(fixture_def: Any) -> tuple[Callable[..., Any], list[str]]:
    """The plain function and params of a ``@pytest.fixture`` object (pytest >= 8.4, then older)."""
    if hasattr(fixture_def, "_get_wrapped_function"):
        return fixture_def._get_wrapped_function(), list(fixture_def._fixture_function_marker.params or ())
    marker = fixture_def._pytestfixturefunction
    return fixture_def.__pytest_wrapped__.obj, list(marker.params or ())


def _patch_conftest(module: Any, config: pytest.Config) -> None:
    if getattr(module, "_lgs3_patched", False):
        return
    selected = _selected(config)
    sync_fn, sync_params = _unwrap(module.sync_checkpointer)
    async_fn, async_params = _unwrap(module.async_checkpointer)
    unknown = [n for n in selected if n != S3_SYNC and n not in sync_params and n not in async_params]
    if unknown:
        raise pytest.UsageError(
            f"--lgs3-savers: unknown {unknown}; LangGraph's params are {sync_params} (sync) and {async_params} (async)"
        )
    sync_ids = [n for n in selected if n in sync_params] + ([S3_SYNC] if S3_SYNC in selected else [])
    async_ids = [n for n in selected if n in async_params] + ([S3_ASYNC] if S3_SYNC in selected else [])

    @pytest.fixture(scope="function", params=sync_ids)
    def sync_checkpointer(request: pytest.FixtureRequest) -> Iterator[Any]:
        if request.param == S3_SYNC:
            url = f"s3://{BUCKET}/{_fresh_prefix()}?transport={TRANSPORT}"
            with S3Saver.from_conn_string(url, client=_client(), **_serde()) as saver:
                yield saver
        else:
            yield from sync_fn(request)

    @pytest.fixture(scope="function", params=async_ids)
    async def async_checkpointer(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
        if request.param == S3_ASYNC:
            url = f"s3://{BUCKET}/{_fresh_prefix()}?transport={TRANSPORT}"
            async with AsyncS3Saver.from_conn_string(url, client=_client(), **_serde()) as saver:
                yield saver
        else:
            async for saver in async_fn(request):
                yield saver

    module.sync_checkpointer = sync_checkpointer
    module.async_checkpointer = async_checkpointer
    if hasattr(module, "sync_store") and hasattr(module, "async_store"):
        _patch_stores(module)
    if hasattr(module, CACHE_FIXTURE):
        _patch_cache(module, selected)
    module._lgs3_patched = True
    _state["patched"] = True


def _patch_stores(module: Any) -> None:
    """A test that runs on our saver and takes LangGraph's ``sync_store``/``async_store`` gets S3Store/AsyncS3Store
    on the same bucket (one bucket, no database, as in production); its memory twin keeps upstream's store. The
    store fixtures keep their params (ids), so pairing and snapshots are unchanged."""
    sync_fn, sync_params = _unwrap(module.sync_store)
    async_fn, async_params = _unwrap(module.async_store)

    def on_our_saver(request: pytest.FixtureRequest, fixture: str, ours: str) -> bool:
        params = getattr(getattr(request.node, "callspec", None), "params", {}) or {}
        return params.get(fixture) == ours

    @pytest.fixture(scope="function", params=sync_params)
    def sync_store(request: pytest.FixtureRequest) -> Iterator[Any]:
        if on_our_saver(request, "sync_checkpointer", S3_SYNC):
            with S3Store.from_conn_string(f"s3://{BUCKET}/{_fresh_prefix()}", client=_client()) as store:
                yield store
        else:
            yield from sync_fn(request)

    @pytest.fixture(scope="function", params=async_params)
    async def async_store(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
        if on_our_saver(request, "async_checkpointer", S3_ASYNC):
            async with AsyncS3Store.from_conn_string(f"s3://{BUCKET}/{_fresh_prefix()}", client=_client()) as store:
                yield store
        else:
            async for store in async_fn(request):
                yield store

    module.sync_store = sync_store
    module.async_store = async_store


def _patch_cache(module: Any, selected: list[str]) -> None:
    """LangGraph's node cache fixture: the selected upstream params it has (``memory``, ``sqlite``), plus
    ``s3_cache`` (S3Cache on the suite's bucket, a fresh prefix per test) when ``s3`` is selected."""
    cache_fn, cache_params = _unwrap(module.cache)
    ids = [n for n in selected if n in cache_params] + ([S3_CACHE] if S3_SYNC in selected else [])

    @pytest.fixture(scope="function", params=ids)
    def cache(request: pytest.FixtureRequest) -> Iterator[Any]:
        if request.param == S3_CACHE:
            url = f"s3://{BUCKET}/{_fresh_prefix()}?transport={TRANSPORT}"
            with S3Cache.from_conn_string(url, client=_client()) as opened:
                yield opened
        else:
            yield from cache_fn(request)

    module.cache = cache


TRANSPORT = os.environ.get("LGS3_TRANSPORT", "auto")
"""The savers' transport: the package's default (``auto``: the direct transport, the async saver's native
sender, while nothing watches the client), or ``LGS3_TRANSPORT=boto3``; the CI gate runs the default."""


def _fresh_prefix() -> str:
    # Not uuid.uuid4(): tests using `deterministic_uuids` patch it and count its calls.
    return f"lg/{os.urandom(8).hex()}"


def _serde() -> dict[str, Any]:
    """Honour LangGraph's LANGGRAPH_STRICT_MSGPACK switch like its own savers do."""
    try:
        from tests import conftest_checkpointer as upstream  # type: ignore[attr-defined]  # LangGraph's tests/
    except ImportError:  # pragma: no cover - layout changed; run with the default serde
        return {}
    if getattr(upstream, "STRICT_MSGPACK", False):
        return {"serde": upstream._strict_msgpack_serde()}
    return {}


# -- syrupy: s3 tests compare against the memory test's snapshots ----------------------------------
def _alias_snapshots() -> None:
    try:
        from syrupy.location import PyTestLocation
    except ImportError:  # pragma: no cover - syrupy absent: LangGraph's snapshot tests fail to import anyway
        return
    original = PyTestLocation.__post_init__
    if getattr(original, "_lgs3", False):
        return

    def __post_init__(self: Any) -> None:
        original(self)
        for attr in ("nodename", "testname"):
            value = getattr(self, attr, None)
            if value and "[" in value:
                object.__setattr__(self, attr, _OUR_PARAM.sub("memory", value))

    __post_init__._lgs3 = True  # type: ignore[attr-defined]
    PyTestLocation.__post_init__ = __post_init__


_alias_snapshots()


# -- botocore: keep it off LangGraph's patched uuid.uuid4 ------------------------------------------
def _shield_botocore() -> None:
    """LangGraph's ``deterministic_uuids`` fixture patches ``uuid.uuid4`` process-wide and its tests
    expect exact message ids from that sequence; botocore calls ``uuid.uuid4()`` once per request
    (the ``amz-sdk-invocation-id`` header), which would consume the sequence. Give botocore's modules
    a ``uuid`` namespace holding the real functions, taken before any test patches the module."""
    import importlib
    import types
    import uuid

    real = types.SimpleNamespace(**{name: getattr(uuid, name) for name in dir(uuid) if not name.startswith("__")})
    for module_name in ("botocore.endpoint", "botocore.handlers", "botocore.credentials"):
        module = importlib.import_module(module_name)
        if getattr(module, "uuid", None) is uuid:
            module.uuid = real  # type: ignore[attr-defined]


_shield_botocore()


# -- selection -------------------------------------------------------------------------------------
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _state["patched"]:
        raise pytest.UsageError(
            f"lgs3_suite_plugin: {UPSTREAM_CONFTEST} with sync_checkpointer/async_checkpointer was never "
            "registered; run from the extracted sdist folder with its tests/ (see tests/langgraph_suite/run.py)"
        )
    if config.getoption("lgs3_all_tests"):
        return
    fixtures = (CACHE_FIXTURE,) if config.getoption("lgs3_cache_tests") else tuple(OURS_BY_FIXTURE)
    keep, drop = [], []
    for item in items:
        uses = any(name in getattr(item, "fixturenames", ()) for name in fixtures)
        (keep if uses else drop).append(item)
    if config.getoption("lgs3_list_baselines"):
        listed, ours = [], []
        for item in keep:
            (listed if _is_baseline(item) else ours).append(item)
        keep = ours
        drop += listed
        _list_not_run(config, listed)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _is_baseline(item: pytest.Item) -> bool:
    """Whether the test runs on upstream's params only (a saver or cache of LangGraph's, none of ours)."""
    info = _describe(item)
    ours = OURS_BY_FIXTURE.values()
    return (info["saver"], info["cache"]) != (None, None) and info["saver"] not in ours and info["cache"] not in ours


def _list_not_run(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A line for each deselected baseline test (outcome ``not run``, as the report's lines), written once: by the
    only process, or under xdist by the first worker (every worker collects the same items, the controller none;
    a file of its own, as the controller appends to the report meanwhile)."""
    if _is_worker(config) and config.workerinput["workerid"] != "gw0":  # type: ignore[attr-defined]
        return
    with open(config.getoption("lgs3_list_baselines"), "w", encoding="utf-8") as fh:
        for item in items:
            fh.write(json.dumps({"nodeid": item.nodeid, "when": "collect", "outcome": "not run", **_describe(item)}))
            fh.write("\n")


# -- the report ------------------------------------------------------------------------------------
def _describe(item: pytest.Item) -> dict[str, Any]:
    """The saver and kind of a test, its node cache, and its pairing key: its own node id, or for a test with any
    of our params (``s3``/``s3_aio``, ``s3_cache``) the node id of its memory twin (the same test with each of
    those id components replaced by ``memory``)."""
    params = dict(getattr(getattr(item, "callspec", None), "params", {}) or {})
    saver, kind = None, None
    for name in CHECKPOINTER_FIXTURES:
        if name in params:
            saver, kind = str(params[name]), name.split("_")[0]
    cache = str(params[CACHE_FIXTURE]) if CACHE_FIXTURE in params else None
    ours = [mine for fixture, mine in OURS_BY_FIXTURE.items() if params.get(fixture) == mine]
    key: str | None = item.nodeid
    if ours and item.nodeid.endswith("]"):
        head, _, ids = item.nodeid[:-1].partition("[")
        parts = ids.split("-")
        # None if another param's id looks like ours: refuse to guess
        twin = "-".join("memory" if p in ours else p for p in parts)
        key = f"{head}[{twin}]" if all(parts.count(mine) == 1 for mine in ours) else None
    return {"saver": saver, "kind": kind, "cache": cache, "key": key}


def _exception_summary(excinfo: pytest.ExceptionInfo[BaseException]) -> tuple[str, list[str]]:
    message = str(excinfo.value).strip().splitlines()
    line = f"{excinfo.typename}: {message[0]}" if message else excinfo.typename
    frames = []
    for entry in excinfo.traceback:
        path = str(entry.path)
        if "langgraph_s3_checkpoint" in Path(path).parts:
            frames.append(f"{path}:{entry.lineno + 1} in {entry.name}")
    return line[:500], frames


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    info = _describe(item)
    if call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception):
        info["message"], info["frames"] = _exception_summary(call.excinfo)
    report.user_properties.append(("lgs3", info))
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    config = _state["config"]
    path = config.getoption("lgs3_report") if config is not None else None
    if not path or _is_worker(config):
        return
    info: dict[str, Any] = next((cast(dict[str, Any], v) for name, v in report.user_properties if name == "lgs3"), {})
    outcome: str = report.outcome
    if hasattr(report, "wasxfail"):
        outcome = "xfailed" if report.skipped else "xpassed"
    line = {
        "nodeid": report.nodeid,
        "when": report.when,
        "outcome": outcome,
        "seconds": round(report.duration, 4),
        **info,
    }
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")
