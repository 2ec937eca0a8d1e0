"""The observables :func:`~quantax_lite.observables.measure` reports, registered in the
order of its dict. A new built-in observable: its own module and one line here."""
from __future__ import annotations

from .contract import register_observable
from .correlations import SPIN_CORRELATIONS
from .dimers import DIMER_CORRELATIONS
from .distance import CORRELATION_VS_DISTANCE
from .energy import ENERGY
from .magnetization import SZ_MOMENTS
from .order_parameter import STAGGERED_MAGNETIZATION
from .structure_factors import STRUCTURE_FACTOR
from .zz_correlations import SZ_CORRELATIONS

BUILT_IN = (
    ENERGY,
    SPIN_CORRELATIONS,
    SZ_CORRELATIONS,
    CORRELATION_VS_DISTANCE,
    STRUCTURE_FACTOR,
    STAGGERED_MAGNETIZATION,
    SZ_MOMENTS,
    DIMER_CORRELATIONS,
)

for _observable in BUILT_IN:
    register_observable(_observable)
