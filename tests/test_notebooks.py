"""The tutorial notebooks run from top to bottom without an error, in their small setting.

Each notebook is copied to a temporary folder (its saved outputs stay untouched) and
executed there with nbclient in a fresh ``python3`` kernel, with ``QUANTAX_LITE_SMALL=1``
in the kernel's environment. A cell that raises fails the test and names the cell.
"""
import os
import pathlib
import shutil

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 300


def test_every_notebook_is_collected():
    names = {p.name for p in NOTEBOOKS}
    assert {"01_train_heisenberg.ipynb", "02_chunk_map.ipynb", "03_gspmd_vs_shard_map.ipynb"} <= names


def _kernel_env() -> dict:
    env = dict(os.environ)
    env["QUANTAX_LITE_SMALL"] = "1"
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path):
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    nb = nbformat.read(copy, as_version=4)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    client = nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(tmp_path)}},  # the kernel's working directory
    )
    try:
        client.execute(env=_kernel_env())
    except nbclient.exceptions.CellExecutionError as err:
        pytest.fail(f"{path.name}: a cell raised:\n{err}")
    except nbclient.exceptions.CellTimeoutError as err:
        pytest.fail(f"{path.name}: a cell ran longer than {CELL_TIMEOUT_S} s:\n{err}")
    errors = [o for cell in nb.cells if cell.cell_type == "code"
              for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{path.name}: error outputs {errors}"
    # the small setting really ran (the first code cell reads the variable)
    first_code = next(cell for cell in nb.cells if cell.cell_type == "code")
    assert "QUANTAX_LITE_SMALL" in first_code.source
    assert nb.cells[0].cell_type == "markdown"
