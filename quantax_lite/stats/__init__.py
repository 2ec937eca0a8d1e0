"""Statistics of Monte Carlo samples.

- :mod:`.chains`: means, error bars, autocorrelation times and split R-hat of Markov-chain
  sample series (:class:`Stats`, :func:`statistics`, :func:`exact_statistics`).
- :mod:`.estimates`: estimates derived from a run's history, reported beside the
  variational energy (the zero-variance extrapolation).
"""
from quantax_lite.stats.chains import Stats, autocorrelation, exact_statistics, integrated_time, split_r_hat, statistics
from quantax_lite.stats.estimates import ZeroVarianceFit, zero_variance_extrapolation

__all__ = [
    "Stats", "statistics", "exact_statistics", "autocorrelation", "integrated_time", "split_r_hat",
    "ZeroVarianceFit", "zero_variance_extrapolation",
]
