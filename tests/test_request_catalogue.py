"""The request catalogue: every request type is in every table that must know it (docs/design.md, "To add a request").

``_protocol/requests.REQUEST_KINDS`` says what each request type is (its S3 call, whether it changes anything,
whether it waits for the conditional-write probe, whether the direct transport sends it). The tables that do something
with each type are keyed by the same types; a type added to one and forgotten in another fails here, not in a user's
process.
"""

from __future__ import annotations

import typing
from typing import Any

import pytest

from langgraph_s3_checkpoint._protocol import requests
from langgraph_s3_checkpoint._transport import boto3_calls, direct, memory_bucket

pytestmark = pytest.mark.memory

NOT_SENT = {requests.ProbeConditionalWrites}
"""Answered by the drivers themselves (the probe's verdict), never sent to a bucket."""


def _every_request_type() -> set[type[Any]]:
    found: set[type[Any]] = set()
    todo = list(requests.Request.__subclasses__())
    while todo:
        kind = todo.pop()
        found.add(kind)
        todo.extend(kind.__subclasses__())
    return found


def test_every_request_type_is_catalogued() -> None:
    assert set(requests.REQUEST_KINDS) == _every_request_type()


def test_the_boto3_shell_and_the_memory_bucket_answer_every_request_sent() -> None:
    sent = set(requests.REQUEST_KINDS) - NOT_SENT
    assert set(boto3_calls.CALLS) == sent
    assert set(memory_bucket._ANSWERS) == sent


def test_the_direct_transport_takes_what_the_catalogue_says_it_sends() -> None:
    direct_kinds = {kind for kind, entry in requests.REQUEST_KINDS.items() if entry.direct}
    taken = typing.get_type_hints(direct.DirectTransport.exchanges)["request"]
    assert direct_kinds == set(typing.get_args(taken))


def test_what_changes_nothing_waits_for_no_probe() -> None:
    for kind, entry in requests.REQUEST_KINDS.items():
        assert not (entry.reads and entry.after_probe), kind
