"""Whether anything but botocore takes part in a boto3 client's requests: what lets the default transport
(``transport="auto"``) send GET, PUT and LIST directly without taking anything from its users.

Why. The direct transport (:mod:`.direct`) costs a fraction of boto3's CPU per request, and from the
async saver it sends from the event loop without a thread hop. But it goes past everything people attach to
a boto3 client: event hooks (request counters, custom headers, signing plugins), botocore's ``Stubber``,
moto's ``mock_aws``, and patches of the client's methods or of botocore's request path (``unittest.mock``;
the OpenTelemetry, Datadog and X-Ray instrumentations wrap ``BaseClient._make_api_call``). So by default a
request goes direct only while nothing but botocore itself would take part in it, and through boto3 as soon
as something else would: from the first request after a hook is registered, a stubber is activated,
``mock_aws`` starts or a method is patched, and back when they are gone.

What counts as botocore's own:

* handlers whose code lives in ``botocore`` or ``boto3``, except ``botocore.stub`` (the Stubber's), and this
  package's own (:func:`.boto3_calls.speak_like_the_saver`: the headers the direct transport sends itself);
* moto's stubber, which moto adds to every client once it is imported, only while ``mock_aws`` enables it;
* the functions a request passes through (the client's method, ``_make_api_call``, the endpoint's
  ``make_request`` and ``_send``, the HTTP session's ``send``) only while they are botocore's own: not
  replaced on the instance, and on the class plain functions whose code is in botocore's files (a mock, a
  wrapt proxy or a ``functools.wraps`` wrapper written elsewhere is not).

Cost. The handler verdict is worked out again only when the client's registrations change: botocore replaces
the emitter's lookup cache on every ``register`` and ``unregister``, so an unchanged cache object means
unchanged handlers. What is checked per request is that object's identity, moto's flag and five attribute
checks: about 1% of a direct request's CPU (docs/benchmarks.md, "The direct transport").

botocore's emitter internals (``_emitter``, ``_lookup_cache``, ``_handlers.prefix_search``) are private API,
stable since botocore 1.x began; a client without them is judged watched, so it keeps boto3.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from types import FunctionType
from typing import Any

import botocore

_EVENTS = (
    "provide-client-params",
    "before-parameter-build",
    "before-endpoint-resolution",
    "before-call",
    "request-created",
    "choose-signer",
    "before-sign",
    "before-send",
    "response-received",
    "needs-retry",
    "after-call",
    "after-call-error",
)
"""The events botocore emits while it makes one S3 call."""

_METHOD_OF = {"GetObject": "get_object", "PutObject": "put_object", "ListObjectsV2": "list_objects_v2"}

_PATH: tuple[tuple[Callable[[Any], Any], str], ...] = (
    (lambda client: client, "_make_api_call"),
    (lambda client: client._endpoint, "make_request"),
    (lambda client: client._endpoint, "_send"),
    (lambda client: client._endpoint.http_session, "send"),
)
"""The functions every call passes through."""

_BOTOCORE_FILES = os.path.dirname(botocore.__file__) + os.sep


class ClientWatch:
    """Answers, per request, whether anything but botocore takes part in a client's S3 ``operation``."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._emitter = client.meta.events._emitter
        self._lock = threading.Lock()
        self._seen: object = None
        """The emitter's lookup cache the verdicts below were made for."""
        self._foreign: dict[str, bool] = {}
        self._switches: dict[str, tuple[Any, ...]] = {}
        """Per operation, moto stubbers: they watch while enabled."""
        self._redirected = False
        self._judge()

    def send_through_boto3(self) -> None:
        """From now on every request is watched: S3 redirected one to another region, and boto3 follows
        redirects (it re-signs for the bucket's region and remembers it) where the direct transport cannot."""
        self._redirected = True

    def watched(self, operation: str) -> bool:
        """Whether a request of ``operation`` (``GetObject``, ``PutObject``, ``ListObjectsV2``) must go
        through boto3 to reach what is attached to the client."""
        if self._redirected:
            return True
        try:
            if self._emitter._lookup_cache is not self._seen:
                self._judge()
            if self._foreign[operation] or any(stubber.enabled for stubber in self._switches[operation]):
                return True
            return not _request_path_is_botocores(self._client, _METHOD_OF[operation])
        except (AttributeError, KeyError):
            return True

    def reason(self, operation: str) -> str:
        """Why :meth:`watched` sends ``operation`` through boto3, in words (for the one-time log line)."""
        if self._redirected:
            return "S3 redirected a request to another region, and boto3 follows redirects"
        try:
            handlers = [
                (event, handler)
                for event in _EVENTS
                for handler in self._emitter._handlers.prefix_search(f"{event}.s3.{operation}")
            ]
        except AttributeError:
            return "the client's event system is not botocore's usual one"
        for event, handler in handlers:
            if _is_motos_stubber(handler) and handler.enabled:
                return "moto's mock_aws is active"
            if not _is_botocores(handler) and not _is_motos_stubber(handler):
                name = getattr(handler, "__qualname__", type(handler).__qualname__)
                return f"the handler {_module_of(handler)}.{name} is registered for {event}"
        owners: list[tuple[Any, str]] = [(self._client, _METHOD_OF[operation])]
        owners += [(owner_of(self._client), name) for owner_of, name in _PATH]
        for owner, name in owners:
            if not _is_plain(owner, name):
                return f"{type(owner).__name__}.{name} is patched (a mock or an instrumentation)"
        return "something else takes part in the client's requests"

    def _judge(self) -> None:
        with self._lock:
            seen = self._emitter._lookup_cache
            foreign: dict[str, bool] = {}
            switches: dict[str, tuple[Any, ...]] = {}
            for operation in _METHOD_OF:
                handlers = [
                    handler
                    for event in _EVENTS
                    for handler in self._emitter._handlers.prefix_search(f"{event}.s3.{operation}")
                ]
                switches[operation] = tuple(h for h in handlers if _is_motos_stubber(h))
                foreign[operation] = any(not _is_botocores(h) and not _is_motos_stubber(h) for h in handlers)
            self._foreign, self._switches, self._seen = foreign, switches, seen


def _module_of(handler: Any) -> str:
    target = handler.func if isinstance(handler, functools.partial) else getattr(handler, "__func__", handler)
    return str(getattr(target, "__module__", None) or type(target).__module__)


def _is_botocores(handler: Any) -> bool:
    module = _module_of(handler)
    return module.split(".")[0] in ("botocore", "boto3", "langgraph_s3_checkpoint") and not module.startswith(
        "botocore.stub"
    )


def _is_motos_stubber(handler: Any) -> bool:
    return type(handler).__name__ == "BotocoreStubber" and _module_of(handler).startswith("moto.")


def _request_path_is_botocores(client: Any, method: str) -> bool:
    return _is_plain(client, method) and all(_is_plain(owner(client), name) for owner, name in _PATH)


def _is_plain(owner: Any, name: str) -> bool:
    """Whether ``owner.name`` is botocore's own function: nothing set on the instance, and on the class a
    plain function whose code is in botocore's files (a mock, a wrapt proxy, a ``functools.wraps`` wrapper
    written elsewhere are not)."""
    if name in vars(owner):
        return False
    function = getattr(type(owner), name, None)
    return type(function) is FunctionType and function.__code__.co_filename.startswith(_BOTOCORE_FILES)
