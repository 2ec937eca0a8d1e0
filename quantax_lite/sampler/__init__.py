"""Sampling spin configurations s ~ |psi(s)|^2 (see :mod:`quantax_lite.sampler.metropolis`)."""
from .metropolis import *  # noqa: F401,F403
from .metropolis import __all__  # noqa: F401
