"""The Hilbert space of N spins 1/2: configurations as int8 arrays of +1 / -1, magnetization
sectors, and the integer codes that index them (:mod:`.configurations`)."""
from quantax_lite.hilbert.configurations import (
    all_states, codes_to_states, n_up, random_states, sector_size, state_index, states_to_codes, total_sz_of,
)

__all__ = [
    "random_states", "all_states", "n_up", "sector_size", "states_to_codes", "codes_to_states", "state_index",
    "total_sz_of",
]
