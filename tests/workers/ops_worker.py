"""Run delete_thread / copy_thread / prune (tests/test_crash.py), SIGKILLed at the N-th S3 request."""

from __future__ import annotations

import argparse

from common import kill_at_request, report, saver_from_env

from langgraph_s3_checkpoint._protocol import plans


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("op", choices=["delete", "copy", "prune"])
    parser.add_argument("--thread", required=True)
    parser.add_argument("--target", default="")
    parser.add_argument("--kill-at", type=int, default=0)
    parser.add_argument("--kill-op", default="", help="count only requests of this operation")
    parser.add_argument("--delete-batch", type=int, default=0, help="smaller DeleteObjects batches")
    parser.add_argument("--max-concurrency", type=int, default=32, help="1 sends a batch in order")
    args = parser.parse_args()

    if args.delete_batch:
        # Small batches put crash points between deletes of a small thread, as a huge one would have.
        plans.DELETE_BATCH = args.delete_batch
    saver = saver_from_env(max_concurrency=args.max_concurrency)
    sent = kill_at_request(saver.client, args.kill_at, args.kill_op)
    if args.op == "delete":
        saver.delete_thread(args.thread)
    elif args.op == "copy":
        saver.copy_thread(args.thread, args.target)
    else:
        saver.prune([args.thread], strategy="keep_latest")
    report({"requests": sent()})
    saver.close()


if __name__ == "__main__":
    main()
