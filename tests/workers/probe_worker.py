"""What a worker process starts with (tests/test_workers.py): it must be as fresh as ``python probe_worker.py``.

``report``: report the process's state, then change a module global of the package, which the next worker must
not see. ``exit CODE``, ``fail`` (an exception), ``say TEXT`` (SystemExit with a message), ``kill`` (SIGKILL right
after writing a RESULT line without flushing it), ``sleep``: end each way a script can.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

import boto3
from common import RESULT_PREFIX, report

import langgraph_s3_checkpoint
from langgraph_s3_checkpoint._protocol import plans
from langgraph_s3_checkpoint._transport import deadline


def main() -> None:
    mode = sys.argv[1]
    if mode == "report":
        print("to stderr", file=sys.stderr)
        report(
            {
                "argv": sys.argv,
                "path0": sys.path[0],
                "env": dict(os.environ),
                "pid": os.getpid(),
                "ppid": os.getppid(),
                "fork_server_threads": len(os.listdir(f"/proc/{os.getppid()}/task")),
                "threads": threading.active_count(),
                "boto3_default_session": boto3.DEFAULT_SESSION is not None,
                "deadline_watchdog": deadline._WATCHDOG._thread is not None,
                "delete_batch": plans.DELETE_BATCH,
                "package": langgraph_s3_checkpoint.__file__,
            }
        )
        plans.DELETE_BATCH = -1
    elif mode == "exit":
        raise SystemExit(int(sys.argv[2]))
    elif mode == "say":
        raise SystemExit(sys.argv[2])
    elif mode == "fail":
        raise RuntimeError("the probe failed on purpose")
    elif mode == "kill":
        sys.stdout.write(RESULT_PREFIX + json.dumps({"last words": "written"}) + "\n")
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "sleep":
        time.sleep(600)


if __name__ == "__main__":
    main()
