"""Every notebook in notebooks/ runs top to bottom without an error.

Each notebook starts its own SeaweedFS server on 127.0.0.1 and asserts its own claims (one charge, one
committed worker, a pruned footprint ...), so a cell that raises means the demonstrated behaviour broke.
Outputs are not written back: the committed notebooks keep the outputs of a deliberate run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))

# The kernel must run this interpreter, or the notebooks would test whatever langgraph_s3_checkpoint
# another Python has installed. jupyter_client swaps a kernelspec's bare "python" for sys.executable,
# but a user-level "python3" kernelspec could point elsewhere; this cell turns that into a clear failure.
_SAME_PYTHON_CHECK = f"""
import sys
assert sys.prefix == {sys.prefix!r}, f"the python3 kernel runs {{sys.executable}}, not {sys.executable!r}"
"""


def test_every_notebook_is_collected() -> None:
    assert len(NOTEBOOKS) >= 5, f"expected at least 5 notebooks in {NOTEBOOKS_DIR}, found {NOTEBOOKS}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_without_errors(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(_SAME_PYTHON_CHECK))
    client = NotebookClient(
        nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(NOTEBOOKS_DIR)}}
    )
    client.execute()  # raises CellExecutionError, naming the cell, on the first error
