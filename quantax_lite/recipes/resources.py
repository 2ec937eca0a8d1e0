"""How a run bounds its memory, kept apart from what it computes: :class:`Resources`.

A recipe's physics does not depend on them (a run may be continued or measured on another
machine with others); :func:`~quantax_lite.recipes.assembly.build` takes them beside the recipe
(``build(recipe, resources=Resources(chunk_size=64))``). The flat form keeps them as the
recipe's fields ``chunk_size`` and ``memory_budget`` (``recipe.resources``), checked here.
"""
from __future__ import annotations

import dataclasses

from quantax_lite.utils.errors import concerning
from quantax_lite.driver.memory import check_budget_applies, check_chunk_size, check_memory_budget, is_auto_chunk


@dataclasses.dataclass(frozen=True)
class Resources:
    """How a run bounds its memory, checked on construction (errors name the field).

    chunk_size: samples per device per chunk of local energies and Jacobians; 'auto' (or
      None): the library's chunks, each at most the largest whose compiled program fits
      ``memory_budget``; an int: as given (the sampler's calls are chunked by it too).
    memory_budget: memory per device for 'auto' chunks: bytes (a number > 1) or a fraction
      of the device's memory (<= 1); None: the device's memory.
    """

    chunk_size: int | str | None = "auto"
    memory_budget: float | None = None

    def __post_init__(self):
        with concerning():
            check_chunk_size(self.chunk_size)
            check_memory_budget(self.memory_budget)
            check_budget_applies(self.chunk_size, self.memory_budget)

    @property
    def fixed_chunk(self) -> int | None:
        """The chunk of the sampler's calls (one configuration per chain): the int
        ``chunk_size``, None with 'auto'."""
        return None if is_auto_chunk(self.chunk_size) else self.chunk_size


# the recipe's fields that are resources, not physics (not part of what a run computes)
RESOURCE_FIELDS = tuple(f.name for f in dataclasses.fields(Resources))
