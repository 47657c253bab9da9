"""Encryption (client-side through the serializer, server-side through S3 options) and compression.

Client-side encryption is LangGraph's own ``EncryptedSerializer``: every value the saver stores goes
through ``serde``, so nothing of the state may appear in plain text in any object. Server-side options
are passed through to S3; which of them each local server accepts is pinned here and documented in
docs/operations.md. Compression is per object, so objects written with and without it coexist.
"""

from __future__ import annotations

import contextlib
import json
import operator
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Annotated, Any, TypedDict

import boto3
import pytest
from faultproxy import FaultProxy
from helpers import client_options, run_cli, selected_server_kinds
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from langgraph_s3_checkpoint import (
    CorruptObjectError,
    S3RequestError,
    S3Saver,
    local,
)
from langgraph_s3_checkpoint._protocol.codec import MAGIC
from langgraph_s3_checkpoint.errors import DecryptionError

AES_KEY = "0123456789abcdef0123456789abcdef"
SSE_BUCKET = "lgs3-sse"


class State(TypedDict, total=False):
    secret: str
    dossier: str
    notes: Annotated[list[str], operator.add]


def _collect(state: State) -> State:
    # The dossier is large enough to be stored as a separate blob object.
    return {"dossier": state["secret"] * 400, "notes": [f"collected {state['secret']}"]}


def _confirm(state: State) -> State:
    # The interrupt value is stored as a pending write.
    answer = interrupt({"confirm": state["secret"]})
    return {"notes": [f"confirmed {answer}"]}


def _graph(saver: S3Saver) -> Any:
    builder = StateGraph(State)
    builder.add_sequence([("collect", _collect), ("confirm", _confirm)])
    builder.add_edge(START, "collect")
    builder.add_edge("confirm", END)
    return builder.compile(checkpointer=saver)


def _objects(client: Any, bucket: str, prefix: str) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        for obj in page.get("Contents", ()):
            found[obj["Key"]] = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
    return found


def _run_thread(saver: S3Saver, thread_id: str, secret: str) -> Any:
    graph = _graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    graph.invoke({"secret": secret}, config)
    graph.invoke(Command(resume=f"yes {secret}"), config)
    # A second pause leaves a pending interrupt write holding the secret in the bucket.
    graph.invoke({"secret": secret}, config)
    return graph.get_state(config)


def _encrypted() -> EncryptedSerializer:
    # Needs pycryptodome (test extra); without it these tests fail with LangGraph's install hint.
    return EncryptedSerializer.from_pycryptodome_aes(key=AES_KEY.encode())


# -- client-side encryption ------------------------------------------------------------------------
def test_encrypted_serializer_leaves_no_plaintext(s3_server: local.LocalS3Server, bucket: str, prefix: str) -> None:
    secret = f"TOP-SECRET-{uuid.uuid4().hex}"
    # Compression off, so that a missing plaintext is due to encryption and not to zlib.
    with contextlib.closing(
        S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client(), serde=_encrypted(), compress_threshold=None)
    ) as saver:
        state = _run_thread(saver, "vault", secret)
    assert state.values["secret"] == secret
    assert state.values["dossier"] == secret * 400
    assert state.values["notes"] == [f"collected {secret}", f"confirmed yes {secret}", f"collected {secret}"]
    assert state.tasks[0].interrupts[0].value == {"confirm": secret}

    objects = _objects(s3_server.client(), bucket, prefix)
    # Heads, records, blobs and pending writes were all written ...
    assert any(k.endswith("/head") for k in objects)
    assert any("/b/" in k for k in objects)
    assert any("/w/" in k for k in objects)
    # ... and none of them holds the secret, nor its random part alone.
    leaked = [k for k, body in objects.items() if secret.encode() in body or secret[11:].encode() in body]
    assert leaked == []

    # Readable only with the key: a saver without it, or with another key, raises DecryptionError (a
    # CorruptObjectError too) that says the data is intact and never advises deleting it.
    plain = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client())
    with contextlib.closing(plain), pytest.raises(DecryptionError, match="has no key") as missing:
        plain.get_tuple({"configurable": {"thread_id": "vault"}})
    other = EncryptedSerializer.from_pycryptodome_aes(key=b"fedcba9876543210fedcba9876543210")
    wrong = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client(), serde=other)
    with contextlib.closing(wrong), pytest.raises(DecryptionError, match="does not match") as mismatch:
        wrong.get_tuple({"configurable": {"thread_id": "vault"}})
    for raised in (missing, mismatch):
        assert isinstance(raised.value, CorruptObjectError)
        message = str(raised.value)
        assert "data is intact" in message and "delete or restore" not in message


def test_plaintext_is_visible_without_encryption(s3_server: local.LocalS3Server, bucket: str, prefix: str) -> None:
    """The control for the test above: the same scan does find the secret when nothing encrypts it."""
    secret = f"TOP-SECRET-{uuid.uuid4().hex}"
    with contextlib.closing(
        S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client(), compress_threshold=None)
    ) as saver:
        _run_thread(saver, "open", secret)
    objects = _objects(s3_server.client(), bucket, prefix)
    leaked = {k for k, body in objects.items() if secret.encode() in body}
    assert any(k.endswith("/head") for k in leaked)
    assert any("/b/" in k for k in leaked)
    assert any("/w/" in k for k in leaked)


def test_cli_reads_encrypted_checkpoints_with_serde_option(seaweedfs_server: local.LocalS3Server, prefix: str) -> None:
    seaweedfs_server.create_bucket(SSE_BUCKET)
    secret = f"TOP-SECRET-{uuid.uuid4().hex}"
    with contextlib.closing(
        S3Saver(bucket=SSE_BUCKET, prefix=prefix, client=seaweedfs_server.client(), serde=_encrypted())
    ) as saver:
        _run_thread(saver, "vault", secret)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LANGGRAPH_"))}
    environ.update(
        AWS_ACCESS_KEY_ID=seaweedfs_server.access_key,
        AWS_SECRET_ACCESS_KEY=seaweedfs_server.secret_key,
        LANGGRAPH_S3_URL=f"s3://{SSE_BUCKET}/{prefix}?endpoint_url={seaweedfs_server.endpoint_url}",
        LANGGRAPH_AES_KEY=AES_KEY,
    )
    serde = "--serde=langgraph.checkpoint.serde.encrypted:EncryptedSerializer.from_pycryptodome_aes"

    def cli(*args: str, env_key: str | None = AES_KEY) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, env={**environ, "LANGGRAPH_AES_KEY": env_key} if env_key is not None else environ)

    shown = cli("--json", serde, "show", "vault")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["channel_values"]["secret"] == secret
    assert cli(serde, "verify").returncode == 0
    without = cli("show", "vault")
    assert without.returncode == 2  # a configuration error: the data is intact, the key is missing
    assert "could not be decrypted" in without.stderr and "data is intact" in without.stderr
    assert "delete" not in without.stderr.replace("do not delete", "")
    _verify_without_the_key_is_a_configuration_error(cli, serde)
    bad = cli("--serde=langgraph.checkpoint.serde.encrypted:NoSuchThing", "show", "vault")
    assert bad.returncode == 2


def _verify_without_the_key_is_a_configuration_error(
    cli: Callable[..., subprocess.CompletedProcess[str]], serde: str
) -> None:
    """``verify`` with no key or a wrong one exits 2 naming the key, not 1 ("damaged"), which would invite a
    restore from backup of objects that are intact."""
    for env_key, args in ((None, ()), ("0" * 32, (serde,))):
        done = cli(*args, "verify", env_key=env_key)
        assert done.returncode == 2, (env_key, done.stdout, done.stderr)
        error = done.stderr.strip()
        assert error.startswith("langgraph-s3: error:") and "\n" not in error, error
        assert "key is wrong or missing" in error and "not damaged" in error
        assert "UNDECRYPTABLE" in done.stdout and "PROBLEM" not in done.stdout, done.stdout
        listed = json.loads(cli("--json", *args, "verify", env_key=env_key).stdout)
        assert listed["problems"] and all(p["undecryptable"] for p in listed["problems"])
    assert cli(serde, "verify").returncode == 0  # the right key again: nothing was wrong


# -- server-side encryption ------------------------------------------------------------------------
def _sse_roundtrip(saver: S3Saver) -> None:
    secret = f"sse-{uuid.uuid4().hex}"
    saver.setup()
    state = _run_thread(saver, "sse", secret)
    assert state.values["dossier"] == secret * 400
    tup = saver.get_tuple({"configurable": {"thread_id": "sse"}})
    assert tup is not None
    assert tup.checkpoint["channel_values"]["dossier"] == secret * 400


@pytest.mark.parametrize("kind", ["seaweedfs", "moto"])
def test_sse_s3_aes256_is_applied(kind: str, request: pytest.FixtureRequest, prefix: str) -> None:
    server = _server(kind, request)
    with contextlib.closing(
        S3Saver(bucket=SSE_BUCKET, prefix=prefix, client=server.client(), server_side_encryption="AES256")
    ) as saver:
        _sse_roundtrip(saver)
        saver.copy_thread("sse", "sse-copy")
        assert saver.get_tuple({"configurable": {"thread_id": "sse-copy"}}) is not None
    client = server.client()
    keys = list(_objects(client, SSE_BUCKET, prefix))
    assert keys
    for key in keys:
        assert client.head_object(Bucket=SSE_BUCKET, Key=key).get("ServerSideEncryption") == "AES256", key


def test_sse_kms_passthrough_on_moto(request: pytest.FixtureRequest, prefix: str) -> None:
    server = _server("moto", request)
    with contextlib.closing(
        S3Saver(bucket=SSE_BUCKET, prefix=prefix, client=server.client(), server_side_encryption="aws:kms")
    ) as saver:
        _sse_roundtrip(saver)
    client = server.client()
    for key in _objects(client, SSE_BUCKET, prefix):
        assert client.head_object(Bucket=SSE_BUCKET, Key=key).get("ServerSideEncryption") == "aws:kms"


def test_sse_kms_without_a_kms_fails_at_setup_on_seaweedfs(request: pytest.FixtureRequest, prefix: str) -> None:
    """SeaweedFS without a configured KMS refuses aws:kms; setup()'s probe write surfaces it at once. (The probe
    runs once per process and endpoint: behind a proxy of its own, this test's endpoint is new.)"""
    server = _server("seaweedfs", request)
    with FaultProxy(server.endpoint_url) as proxy:
        client = boto3.session.Session().client("s3", **client_options(server, proxy.url))
        saver = S3Saver(bucket=SSE_BUCKET, prefix=prefix, client=client, server_side_encryption="aws:kms")
        with contextlib.closing(saver), pytest.raises(S3RequestError):
            saver.setup()


def _sse_c_roundtrip_on(kind: str, request: pytest.FixtureRequest, prefix: str) -> tuple[local.LocalS3Server, Any, str]:
    """The round trip with a customer key on a ``kind`` server; the server, a client without the key, and the key of
    the thread's head."""
    server = _server(kind, request)
    with contextlib.closing(
        S3Saver(bucket=SSE_BUCKET, prefix=prefix, client=server.client(), sse_customer_key=AES_KEY)
    ) as saver:
        _sse_roundtrip(saver)
    client = server.client()
    return server, client, next(k for k in _objects_keys(client, prefix) if k.endswith("/head"))


def test_sse_c_is_enforced_by_seaweedfs(request: pytest.FixtureRequest, prefix: str) -> None:
    server, client, head = _sse_c_roundtrip_on("seaweedfs", request, prefix)
    # Objects are only readable with the customer key.
    with pytest.raises(client.exceptions.ClientError):
        client.get_object(Bucket=SSE_BUCKET, Key=head)
    keyless = S3Saver(bucket=SSE_BUCKET, prefix=prefix, client=server.client())
    with contextlib.closing(keyless), pytest.raises(S3RequestError):
        keyless.get_tuple({"configurable": {"thread_id": "sse"}})


def test_sse_c_copy_thread_on_seaweedfs(request: pytest.FixtureRequest, prefix: str) -> None:
    server = _server("seaweedfs", request)
    with contextlib.closing(
        S3Saver(bucket=SSE_BUCKET, prefix=prefix, client=server.client(), sse_customer_key=AES_KEY)
    ) as saver:
        _sse_roundtrip(saver)
        saver.copy_thread("sse", "sse-copy")
        copy = saver.get_tuple({"configurable": {"thread_id": "sse-copy"}})
        assert copy is not None and copy.checkpoint["channel_values"]["dossier"].startswith("sse-")


def test_sse_c_is_accepted_but_not_enforced_by_moto(request: pytest.FixtureRequest, prefix: str) -> None:
    """moto stores SSE-C objects and serves them without the key: it cannot test SSE-C semantics."""
    _, client, head = _sse_c_roundtrip_on("moto", request, prefix)
    assert client.get_object(Bucket=SSE_BUCKET, Key=head)["Body"].read().startswith(MAGIC)


def _objects_keys(client: Any, prefix: str) -> list[str]:
    return [o["Key"] for o in client.list_objects_v2(Bucket=SSE_BUCKET, Prefix=f"{prefix}/").get("Contents", ())]


def _server(kind: str, request: pytest.FixtureRequest) -> local.LocalS3Server:
    """A server of ``kind`` from the session pool, with the SSE bucket (skipped if S3_SERVERS excludes it)."""
    if kind not in selected_server_kinds():
        pytest.skip(f"{kind} not selected by S3_SERVERS")
    server: local.LocalS3Server = request.getfixturevalue("_server_pool").get(kind)
    server.create_bucket(SSE_BUCKET)
    return server


# -- compression -----------------------------------------------------------------------------------
@pytest.fixture
def savers(s3_server: local.LocalS3Server, bucket: str, prefix: str) -> Iterator[tuple[S3Saver, S3Saver]]:
    plain = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client(), compress_threshold=None)
    packing = S3Saver(bucket=bucket, prefix=prefix, client=s3_server.client(), compress_threshold=1024)
    try:
        yield plain, packing
    finally:
        plain.close()
        packing.close()


def _compression_flags(client: Any, bucket: str, prefix: str, thread_id: str) -> dict[str, int]:
    objects = _objects(client, bucket, f"{prefix}/threads/{thread_id}")
    return {k: body[5] for k, body in objects.items() if body.startswith(MAGIC)}


def test_large_values_are_stored_compressed(
    s3_server: local.LocalS3Server, bucket: str, prefix: str, savers: tuple[S3Saver, S3Saver]
) -> None:
    plain, packing = savers
    secret = "compressible " * 10
    _run_thread(packing, "packed", secret)
    _run_thread(plain, "unpacked", secret)
    packed = _compression_flags(s3_server.client(), bucket, prefix, "packed")
    unpacked = _compression_flags(s3_server.client(), bucket, prefix, "unpacked")
    blobs = [k for k in packed if "/b/" in k]
    assert blobs and all(packed[k] == 1 for k in blobs)
    # Small objects stay uncompressed even with compression on.
    assert any(flag == 0 for k, flag in packed.items() if "/w/" in k)
    assert set(unpacked.values()) == {0}
    packed_sizes = sum(len(b) for k, b in _objects(s3_server.client(), bucket, f"{prefix}/threads/packed").items())
    plain_sizes = sum(len(b) for k, b in _objects(s3_server.client(), bucket, f"{prefix}/threads/unpacked").items())
    assert packed_sizes < plain_sizes


def test_compressed_and_plain_objects_stay_readable_together(savers: tuple[S3Saver, S3Saver]) -> None:
    plain, packing = savers
    secret = "mixed " * 20
    for writer, reader, thread_id in ((plain, packing, "a"), (packing, plain, "b")):
        state = _run_thread(writer, thread_id, secret)
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        assert _graph(reader).get_state(config).values == state.values
        assert [t.config for t in reader.list(config)] == [t.config for t in writer.list(config)]
        # The reader continues the thread with its own setting: one thread now holds both encodings.
        _graph(reader).invoke(Command(resume="continued"), config)
        final = _graph(writer).get_state(config)
        assert final.values["notes"][-1] == "confirmed continued"
        assert final.values["dossier"] == secret * 400
