"""Transition rules for :class:`~quantax_lite.sampler.MetropolisSampler`, one per module,
each satisfying :class:`~quantax_lite.sampler.TransitionRule`."""
from quantax_lite.sampler.base import TransitionRule
from .exchange import Exchange
from .local_flip import LocalFlip
from .mixture import Mixture

__all__ = ["TransitionRule", "LocalFlip", "Exchange", "Mixture"]
