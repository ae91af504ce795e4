"""The notebooks run top to bottom on the example snapshot, their outputs are stripped in the
repository, and their own asserts catch a wrong number (shown by forging one)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
CELL_TIMEOUT = 180        # seconds per cell: the longest cell is a 16-cycle simulation

# Code run first in the kernel to make a number wrong; each notebook must then fail an assert.
FORGE_INVALID = ("import kai_cp.explore.cycle as _c\n"
                 "_c.Cycle.invalid = lambda self: ['forged: a pod on a full node']")
FORGE_FAIR_SHARE = ("import kai_cp.explore.tables as _t\n"
                    "_orig = _t.queues_table\n"
                    "_t.queues_table = lambda *a, **k: _orig(*a, **k).assign(fair_share=lambda d: d.fair_share * 1.1)")
FORGE_DEVICE = ("import kai_cp.explore.cycle as _c\n"
                "_orig = _c.Cycle.shared_devices\n"
                "_c.Cycle.shared_devices = lambda self: _orig(self).assign(fraction=lambda d: d.fraction * 2)")


def execute(path: Path, prelude: str | None = None) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    if prelude:
        nb.cells.insert(0, nbformat.v4.new_code_cell(prelude))
    NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    return nb


def test_the_five_notebooks_are_there() -> None:
    assert [p.stem for p in PATHS] == ["01-quickstart", "02-fair-share", "03-solver", "04-topology-and-sharing",
                                       "05-simulate"]


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_outputs_are_stripped(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: outputs not stripped"


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_runs_and_draws(path: Path) -> None:
    nb = execute(path)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name} shows no plot"
    if path.stem == "05-simulate":       # the simulation shows its progress
        streams = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
        assert "simulate (cp-sat)" in streams and "16/16" in streams


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_asserts_catch_a_forged_violation(path: Path) -> None:
    with pytest.raises(CellExecutionError, match="forged: a pod on a full node"):
        execute(path, FORGE_INVALID)


@pytest.mark.parametrize("name, forgery", [("02-fair-share", FORGE_FAIR_SHARE),
                                           ("04-topology-and-sharing", FORGE_DEVICE)])
def test_notebook_asserts_catch_a_wrong_number(name: str, forgery: str) -> None:
    with pytest.raises(CellExecutionError, match="AssertionError"):
        execute(NOTEBOOKS / f"{name}.ipynb", forgery)

