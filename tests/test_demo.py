"""The README's demo command works: the crashed tool re-runs alone, the finished siblings do not."""

from __future__ import annotations

import subprocess
import sys


def test_demo_crashes_and_resumes() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "langgraph_s3_checkpoint.demo"], capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stdout + out.stderr
    first, _, rest = out.stdout.partition("2) A fresh process B")
    assert "process A exited with SIGKILL" in first
    for tool in ("order_lookup", "refund_policy", "carrier_status"):
        assert f"ran {tool}" in first
    resumed = rest.partition("3) The bucket")[0]
    assert "ran carrier_status" in resumed and "ran answer" in resumed
    assert "ran order_lookup" not in resumed and "ran refund_policy" not in resumed and "ran plan" not in resumed
    assert "Resolved using 4 findings." in resumed
