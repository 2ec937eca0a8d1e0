"""The driver: a VMC run and what keeps it safe for weeks.

- :mod:`.vmc`: the variational Monte Carlo driver (:class:`VMC`, :func:`run`,
  :func:`energy_estimate`).
- :mod:`.memory`: a chunk size chosen from a memory budget.
- :mod:`.draws`: fresh samples of a driver's wavefunction, kept.
- :mod:`.checkpoint`: a run's whole state in one file; :mod:`.run_folder`: who owns a run
  folder, its checkpoints and log; :mod:`.wavefunction_io`: trained parameters on disk;
  :mod:`.warm_start`: a run's first parameters taken from another run.
"""
from quantax_lite.driver.checkpoint import load_checkpoint, load_latest_checkpoint, save_checkpoint
from quantax_lite.driver.run_folder import RunFolderBusy, lock_run_folder
from quantax_lite.driver.vmc import VMC, ChunkSizes, Diverged, VMCState, energy_estimate, run
from quantax_lite.driver.wavefunction_io import load_params, save_params

__all__ = [
    "VMC", "VMCState", "ChunkSizes", "Diverged", "energy_estimate", "run",
    "save_checkpoint", "load_checkpoint", "load_latest_checkpoint", "lock_run_folder", "RunFolderBusy",
    "save_params", "load_params",
]
