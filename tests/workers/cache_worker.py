"""One worker process of the node-cache test: runs a graph whose expensive node has a ``CachePolicy``, with an
``S3Cache`` on the bucket and prefix the parent names, and reports how often the node ran and which requests the
cache sent (by type, counted where the cache's I/O shell sends them, whatever the transport).

    python cache_worker.py INPUT      # RESULT {"runs": 0 or 1, "output": {...}, "requests": {"Get": 1, ...}}
"""

from __future__ import annotations

import collections
import os
import sys
from typing import Any, TypedDict

from common import client_from_env, report
from langgraph.graph import START, StateGraph
from langgraph.types import CachePolicy

from langgraph_s3_checkpoint import S3Cache

RUNS: list[str] = []


class Question(TypedDict, total=False):
    text: str
    answer: str


def expensive(state: Question) -> Question:
    """Stands in for an LLM call: what the cache saves the second process."""
    RUNS.append(state["text"])
    return {"answer": state["text"].upper()}


def main(text: str) -> None:
    builder = StateGraph(Question)
    builder.add_node("expensive", expensive, cache_policy=CachePolicy(ttl=3600))
    builder.add_edge(START, "expensive")
    with S3Cache(bucket=os.environ["LGS3_BUCKET"], prefix=os.environ["LGS3_PREFIX"], client=client_from_env()) as cache:
        cache.setup()  # the conditional-write probe, once per process: not what a cached step costs
        sent: collections.Counter[str] = collections.Counter()
        io = cache.bucket_io
        send = io._send

        def counted(request: Any, deadline: Any) -> Any:
            sent[type(request).__name__] += 1
            return send(request, deadline)

        io._send = counted
        output = builder.compile(cache=cache).invoke({"text": text})
    report({"runs": len(RUNS), "output": output, "requests": dict(sent)})


if __name__ == "__main__":
    main(sys.argv[1])
