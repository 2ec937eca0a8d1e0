"""Optimization: from a network and samples to a parameter update.

- :mod:`.log_derivatives`: per-sample Jacobians O[s, k] = d log psi(s) / d theta_k, in
  chunks, over every device (:func:`jacobian`, :func:`make_jacobian`).
- :mod:`.stochastic_reconfiguration`: the SR and MinSR direction (:func:`sr_direction`).
- :mod:`.preconditioners`: the :class:`Preconditioner` contract and its instances
  (``preconditioners.sr``, ``spring``, ``gradient``).
- :mod:`.update`: the preconditioned update of a network (:func:`natural_gradient`).
"""
from quantax_lite.optimizer.log_derivatives import jacobian, make_jacobian
from quantax_lite.optimizer.preconditioners import Preconditioner
from quantax_lite.optimizer.stochastic_reconfiguration import sr_direction
from quantax_lite.optimizer.update import natural_gradient

__all__ = ["jacobian", "make_jacobian", "sr_direction", "Preconditioner", "natural_gradient"]
