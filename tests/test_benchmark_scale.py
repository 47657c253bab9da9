"""``benchmarks/scale.py`` runs end to end, at toy sizes.

The scale benchmark is run by hand (the full run takes hours), so nothing else would notice when a rename in the
package breaks it: a run of 904ff3d failed at ``langgraph-s3 threads`` after the CLI's ``Context`` had renamed
its argument. This runs every section (throughput rounds, load, every operation, the report and the plot) on
two tiny sizes and checks what each section measured, not how fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = (4, 8)


def test_the_scale_benchmark_measures_every_operation_at_toy_sizes(tmp_path: Path) -> None:
    command = [sys.executable, str(ROOT / "benchmarks" / "scale.py"), "--sizes", ",".join(map(str, SIZES))]
    command += ["--workers", "2", "--concurrency", "3", "--steps", "1", "--rounds", "1", "--out", str(tmp_path)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # the package of this tree, whatever is installed
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    result = json.loads((tmp_path / "scale.json").read_text())
    assert [row["threads"] for row in result["sizes"]] == list(SIZES)
    for row in result["sizes"]:
        n = row["threads"]
        # One chat turn per thread: the input checkpoint, the loop's first and the reply's.
        assert row["list_none"]["checkpoints"] == 3 * n
        assert row["threads_command"]["value"] == n
        assert row["expire_threads"]["value"] == 0  # nothing is 30 days old
        assert row["gc_first"]["value"]["deleted"] == 0
        assert row["gc_second"]["value"]["read"] == 0  # the first gc sealed every record
        assert row["sweep_due"]["value"] == max(1, int(n * 0.01))
        assert row["sweep_nothing_due"]["requests"]["total"] == 1
        assert row["sweep_full"]["value"] == 0
    for kind in ("ours", "floor", "langgraph"):
        assert result["throughput"][kind]["per_second"] > 0
    report = (tmp_path / "scale.md").read_text()
    assert "| list(None) |" in report and "Ours / floor" in report
    assert (tmp_path / "scale.png").stat().st_size > 0
