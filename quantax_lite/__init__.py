"""quantax_lite: neural quantum states in JAX, built around one batching engine."""
__version__ = "0.1.0"
