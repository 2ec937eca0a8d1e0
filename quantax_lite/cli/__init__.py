"""The ``quantax-lite`` command and the library calls behind it.

- :mod:`.command`: the command line (:func:`main`); :mod:`.options`: its options and
  ``--config FILE``.
- :mod:`.training`: ``train``, a recipe trained in a run folder; :mod:`.measure_run`:
  ``measure``, the observables of a trained run; :mod:`.evolve_run`: ``evolve``, time
  evolution in a run folder.
- :mod:`.report`: what a finished run reports (summary, tables, plots).
"""
from quantax_lite.cli.command import main

__all__ = ["main"]
