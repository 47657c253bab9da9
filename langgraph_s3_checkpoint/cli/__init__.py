"""``langgraph-s3``: inspect and maintain the checkpoints of a bucket prefix from a shell.

Examples::

    export LANGGRAPH_S3_URL=s3://agent-checkpoints/prod
    langgraph-s3 threads
    langgraph-s3 history support-42 --limit 5
    langgraph-s3 show support-42
    langgraph-s3 export support-42 support-42.tar && langgraph-s3 import support-42.tar --thread support-42-copy
    langgraph-s3 verify --json
    langgraph-s3 gc --dry-run
    langgraph-s3 repair support-42 --dry-run
    langgraph-s3 store ls memories
    langgraph-s3 store put memories.user-1 color '{"value": "teal"}' && langgraph-s3 store get memories.user-1 color
    langgraph-s3 cache ls && langgraph-s3 cache clear '["__pregel_ns_writes", "app.nodes.search", "search"]'
    langgraph-s3 import-from sqlite:///checkpoints.db --dry-run && langgraph-s3 import-from sqlite:///checkpoints.db
    langgraph-s3 store export-to postgresql://app@db/agents

``import-from`` / ``export-to`` (and ``store import-from`` / ``store export-to``) copy threads (memories) between
the location and another checkpointer (store): :mod:`langgraph_s3_checkpoint.migrate`, docs/migration.md.

``store`` commands work on the long-term memory store (:class:`~langgraph_s3_checkpoint.store.S3Store`) at
the same location; a namespace is written with its labels joined by dots (``memories.user-1``), which is
unambiguous because LangGraph forbids dots in labels. ``cache`` commands work on the node cache
(:class:`~langgraph_s3_checkpoint.cache.S3Cache`), whose labels may hold dots: a namespace is a JSON list.

Exit codes: 0 success, 1 problems found, thread/checkpoint not found, or a question answered "no",
2 usage or configuration error (including a missing or wrong decryption key), 3 S3 error (unreachable
or silent endpoint, an endpoint that is not S3, missing bucket, refused or missing credentials),
130 interrupted. Every failure prints one ``langgraph-s3: error: ...`` line on stderr, never a traceback.

Destructive commands (``delete``, ``prune``, ``expire``, ``gc``, ``import --replace``, ``store rm``, ``cache clear``,
``cache sweep``) take ``--dry-run``
(report, change nothing) and ask for confirmation when stdin is a terminal; ``--yes`` answers for them.
Without a terminal (a pipe, a cron job) nothing is asked.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .context import EXIT_OK, EXIT_PROBLEMS, EXIT_S3, EXIT_USAGE, Context
from .parser import build_parser, close_context, exit_status, fail, open_context


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ctx: Context | None = None
    try:
        ctx = open_context(args)
        code: int = args.handler(ctx, args)
        return code
    except BrokenPipeError:
        # Output piped into a command that stopped reading (e.g. `| head`): not an error.
        sys.stderr.close()
        return EXIT_OK
    except (Exception, KeyboardInterrupt) as exc:
        fail(*exit_status(exc))
    finally:
        if ctx is not None:
            close_context(ctx)


__all__ = ["EXIT_OK", "EXIT_PROBLEMS", "EXIT_S3", "EXIT_USAGE", "Context", "build_parser", "main"]
