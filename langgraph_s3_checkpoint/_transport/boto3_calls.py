"""The boto3 calls the I/O shell makes for each request type, and what their replies and errors mean.

``BucketIO`` sends a request through boto3 when the direct transport does not (``transport="boto3"``, a watched
client, a request it does not send); :class:`Boto3Calls` turns the request into its S3 call and the reply (or the
error) back into what plans receive. The handlers registered on the client (:func:`speak_like_the_saver`) add the
saver's extra headers and Content-MD5 to its own calls only.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

from botocore.exceptions import ClientError

from .._protocol.requests import (
    PRECONDITION_FAILED,
    BucketExists,
    Copy,
    CreateBucket,
    DeleteIfMatch,
    DeleteObjects,
    EnsureExpiryRule,
    ExpiryRule,
    Get,
    ListKeys,
    Page,
    Put,
    RemoveExpiryRule,
    Request,
    StoredObject,
    Written,
    condition_failed,
)
from ..errors import S3RequestError
from .direct import list_arguments, put_arguments

_MISSING_CODES = {"NoSuchKey", "404", "NotFound"}
_PRECONDITION_CODES = {"PreconditionFailed", "412"}
"""Not ``ConditionalRequestConflict`` (409): a raced conditional write, sent again (:mod:`.retries`)."""


def served_at(reply: Mapping[str, Any]) -> datetime | None:
    """The server's clock at the time of a reply (its ``Date`` header)."""
    date = reply.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    return parsedate_to_datetime(date) if date else None


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def http_status(exc: ClientError) -> int | None:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status else None


def attempts_made(exc: ClientError) -> int:
    """How many attempts botocore made before it raised."""
    return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0) + 1


OURS = threading.local()
"""While a :class:`BucketIO` makes a boto3 call on this thread, the headers it adds (``headers``); the handlers
below do nothing outside such a call, so a client shared with the application sends its own calls unchanged."""


def _add_extra_headers(request: Any, **_: Any) -> None:
    """``before-sign.s3``: the saver's ``extra_headers``, signed with the rest (once, even when re-signed)."""
    for name, value in getattr(OURS, "headers", None) or ():
        if name in request.headers:
            del request.headers[name]
        request.headers[name] = value


def _content_md5_instead_of_crc32(params: Any, **_: Any) -> None:
    """``before-call.s3`` of the calls S3 requires a checksum for (DeleteObjects, PutBucketLifecycleConfiguration):
    Content-MD5, as botocore sent before 1.36 and every S3 server accepts (older MinIO rejects DeleteObjects
    without it), not the CRC32 botocore sends now (Backblaze B2 does not support ``x-amz-checksum-*``)."""
    if getattr(OURS, "headers", None) is None:
        return
    checksum = params["context"].get("checksum", {})
    checksum.pop("request_algorithm", None)
    checksum.pop("request_algorithm_header", None)
    body = params.get("body") or b""
    digest = hashlib.md5(body.encode() if isinstance(body, str) else bytes(body), usedforsecurity=False).digest()
    params["headers"]["Content-MD5"] = base64.b64encode(digest).decode()


def speak_like_the_saver(client: Any) -> None:
    """Register the handlers above on ``client`` (once: by unique id). They act only on the saver's own calls."""
    events = client.meta.events
    events.register("before-sign.s3", _add_extra_headers, unique_id="langgraph-s3-extra-headers")
    for operation in ("DeleteObjects", "PutBucketLifecycleConfiguration"):
        events.register(
            f"before-call.s3.{operation}", _content_md5_instead_of_crc32, unique_id=f"langgraph-s3-md5-{operation}"
        )


def answer_of(exc: ClientError) -> str:
    """What the server answered, in a few words: status, content type, server, start of the message."""
    meta = exc.response.get("ResponseMetadata", {})
    headers = meta.get("HTTPHeaders", {}) or {}
    parts = [f"HTTP {meta.get('HTTPStatusCode', '?')}"]
    for name in ("content-type", "server"):
        if headers.get(name):
            parts.append(f"{name} {headers[name]!r}")
    message = str(exc.response.get("Error", {}).get("Message", "") or "")[:120]
    if message:
        parts.append(f"message {message!r}")
    return ", ".join(parts)


def _reply_answer(reply: Mapping[str, Any], what: str) -> str:
    """A successful-looking reply that lacks what every S3 server sends, in a few words."""
    meta = reply.get("ResponseMetadata", {})
    headers = meta.get("HTTPHeaders", {}) or {}
    parts = [f"HTTP {meta.get('HTTPStatusCode', '?')} without {what}"]
    for name in ("content-type", "server"):
        if headers.get(name):
            parts.append(f"{name} {headers[name]!r}")
    return ", ".join(parts)


def speaks_s3(exc: ClientError) -> bool:
    """Whether an error reply came from an S3 server: an S3 error code parsed from an XML body, or the
    request-id headers every S3 implementation sends. A web page or a bare 404 from another HTTP
    server has neither. A bare 403 is taken for S3's (refused credentials are the likelier diagnosis)
    unless it is a web page."""
    code = error_code(exc)
    meta = exc.response.get("ResponseMetadata", {})
    headers = meta.get("HTTPHeaders", {}) or {}
    if str(headers.get("content-type", "")).startswith("text/html"):
        return False
    if code and not code.isdigit():
        return True
    if any(h in headers for h in ("x-amz-request-id", "x-amz-id-2", "x-amz-bucket-region")):
        return True
    return bool(meta.get("HTTPStatusCode") == 403)


class Boto3Calls:
    """The boto3 call of each request on one bucket, with the encryption arguments and retention tag every PUT, GET
    and copy of it carries."""

    def __init__(
        self,
        client: Any,
        bucket: str,
        *,
        put_args: Mapping[str, Any],
        get_args: Mapping[str, Any],
        copy_args: Mapping[str, Any],
        expiry_tag: str | None,
        not_s3: Callable[[str], Exception],
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.put_args = dict(put_args)
        self.get_args = dict(get_args)
        self.copy_args = dict(copy_args)
        self.expiry_tag = expiry_tag
        self.not_s3 = not_s3

    def call(self, request: Request) -> Any:
        handler = CALLS.get(type(request))
        if handler is None:
            raise TypeError(f"unknown request {request!r}")
        return handler(self, request)

    def _get(self, request: Get) -> StoredObject | None:
        try:
            reply = self.client.get_object(Bucket=self.bucket, Key=request.key, **self.get_args)
        except ClientError as exc:
            if error_code(exc) in _MISSING_CODES:
                return None
            raise
        if "ETag" not in reply:
            raise self.not_s3(_reply_answer(reply, f"an ETag to GetObject {request.key!r}"))
        return StoredObject(reply["Body"].read(), reply["ETag"], reply.get("LastModified"), served_at(reply))

    def _put(self, request: Put) -> Any:
        kwargs = put_arguments(request, self.put_args, self.expiry_tag)
        try:
            reply = self.client.put_object(Bucket=self.bucket, Key=request.key, Body=request.body, **kwargs)
        except ClientError as exc:
            code = error_code(exc)
            if condition_failed(request, refused=code in _PRECONDITION_CODES, missing=code in _MISSING_CODES):
                return PRECONDITION_FAILED
            raise
        if "ETag" not in reply:
            raise self.not_s3(_reply_answer(reply, f"an ETag to PutObject {request.key!r}"))
        return Written(reply["ETag"])

    def _list(self, request: ListKeys) -> Page:
        reply = self.client.list_objects_v2(Bucket=self.bucket, **list_arguments(request))
        if "IsTruncated" not in reply:
            raise self.not_s3(_reply_answer(reply, "a ListBucketResult to ListObjectsV2"))
        contents = reply.get("Contents", ())
        return Page(
            keys=[o["Key"] for o in contents],
            prefixes=[p["Prefix"] for p in reply.get("CommonPrefixes", ())],
            token=reply.get("NextContinuationToken") if reply.get("IsTruncated") else None,
            modified=[o["LastModified"] for o in contents],
            etags=[o.get("ETag", "") for o in contents],
            sizes=[int(o.get("Size", 0)) for o in contents],
            served=served_at(reply),
        )

    def _delete(self, request: DeleteObjects) -> None:
        if not request.keys:
            return
        reply = self.client.delete_objects(
            Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in request.keys], "Quiet": True}
        )
        errors = [e for e in reply.get("Errors", ()) if e.get("Code") not in _MISSING_CODES]
        if errors:
            first = errors[0]
            raise S3RequestError(
                f"DeleteObjects failed for {len(errors)} key(s), e.g. {first.get('Key')!r}: {first.get('Code')}"
            )

    def _delete_if_match(self, request: DeleteIfMatch) -> Any:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=request.key, IfMatch=request.etag)
        except ClientError as exc:
            if error_code(exc) in _PRECONDITION_CODES:
                return PRECONDITION_FAILED
            if error_code(exc) in _MISSING_CODES:
                return None
            raise
        return None

    def _copy(self, request: Copy) -> bool:
        try:
            self.client.copy_object(
                Bucket=self.bucket,
                Key=request.target,
                CopySource={"Bucket": self.bucket, "Key": request.source},
                **self.put_args,
                **self.copy_args,
            )
        except ClientError as exc:
            if error_code(exc) not in _MISSING_CODES:
                raise
            return False  # deleted since it was listed
        return True

    def _bucket_exists(self, request: BucketExists) -> bool:
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if error_code(exc) not in _MISSING_CODES | {"NoSuchBucket"}:
                raise
            return self._bucket_listed(exc)
        return True

    def _bucket_listed(self, head_error: ClientError) -> bool:
        """After a 404 to HeadBucket: a HEAD reply has no body, and any web server says 404 to it. An S3
        server names the missing bucket in the body of a GET; anything else is not S3."""
        try:
            listing = self.client.list_objects_v2(Bucket=self.bucket, MaxKeys=1)
        except ClientError as listed:
            if error_code(listed) == "NoSuchBucket":
                return False
            if not speaks_s3(listed):
                answer = f"{answer_of(head_error)} to HeadBucket, {answer_of(listed)} to a listing"
                raise self.not_s3(answer) from None
            raise
        if "IsTruncated" not in listing:
            answer = f"{answer_of(head_error)} to HeadBucket, "
            raise self.not_s3(answer + _reply_answer(listing, "a ListBucketResult to a listing"))
        return True

    def _create_bucket(self, request: CreateBucket) -> None:
        self.client.create_bucket(Bucket=self.bucket)

    def _ensure_expiry_rule(self, request: EnsureExpiryRule) -> ExpiryRule | None:
        """Add or replace our rule, keeping every other lifecycle rule of the bucket; then read it back."""
        tag_key, _, tag_value = request.tag.partition("=")
        ours = {
            "ID": request.rule_id,
            "Status": "Enabled",
            "Filter": {"And": {"Prefix": request.prefix, "Tags": [{"Key": tag_key, "Value": tag_value}]}},
            "Expiration": {"Days": request.days},
        }
        rules = [r for r in self._lifecycle_rules() if r.get("ID") != request.rule_id] + [ours]
        self.client.put_bucket_lifecycle_configuration(Bucket=self.bucket, LifecycleConfiguration={"Rules": rules})
        kept = [r for r in self._lifecycle_rules() if r.get("ID") == request.rule_id]
        return _expiry_rule(kept[0]) if kept else None

    def _remove_expiry_rule(self, request: RemoveExpiryRule) -> None:
        rules = self._lifecycle_rules()
        others = [r for r in rules if r.get("ID") != request.rule_id]
        if len(others) == len(rules):
            return
        if others:
            config = {"Rules": others}
            self.client.put_bucket_lifecycle_configuration(Bucket=self.bucket, LifecycleConfiguration=config)
        else:
            self.client.delete_bucket_lifecycle(Bucket=self.bucket)

    def _lifecycle_rules(self) -> list[dict[str, Any]]:
        try:
            return list(self.client.get_bucket_lifecycle_configuration(Bucket=self.bucket).get("Rules", []))
        except ClientError as exc:
            if error_code(exc) != "NoSuchLifecycleConfiguration":
                raise
            return []


CALLS: dict[type, Callable[[Boto3Calls, Any], Any]] = {
    Get: Boto3Calls._get,
    Put: Boto3Calls._put,
    ListKeys: Boto3Calls._list,
    DeleteObjects: Boto3Calls._delete,
    DeleteIfMatch: Boto3Calls._delete_if_match,
    Copy: Boto3Calls._copy,
    BucketExists: Boto3Calls._bucket_exists,
    CreateBucket: Boto3Calls._create_bucket,
    EnsureExpiryRule: Boto3Calls._ensure_expiry_rule,
    RemoveExpiryRule: Boto3Calls._remove_expiry_rule,
}
"""The boto3 call for each request type (``Boto3Calls._execute``)."""


def _expiry_rule(rule: Mapping[str, Any]) -> ExpiryRule:
    """A lifecycle rule as boto3 parses it (``Filter`` with ``And`` or a lone ``Prefix``/``Tag``, or the older
    top-level ``Prefix``), reduced to what the saver's rule is made of."""
    found = rule.get("Filter") or {}
    both = found.get("And") or {}
    prefix = both.get("Prefix", found.get("Prefix", rule.get("Prefix")))
    tags = [*both.get("Tags", ()), *([found["Tag"]] if "Tag" in found else [])]
    days = (rule.get("Expiration") or {}).get("Days")
    return ExpiryRule(
        prefix=prefix,
        tags=tuple((str(t.get("Key")), str(t.get("Value"))) for t in tags),
        days=int(days) if days is not None else None,
        answer=f"Filter {found!r}, Expiration {rule.get('Expiration')!r}",
    )
