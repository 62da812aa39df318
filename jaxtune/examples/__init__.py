"""Example kernels that ship with jaxtune: readable templates, and what ``jaxtune demo`` tunes.

- :mod:`jaxtune.examples.chunked`: a pure-JAX streaming log-sum-exp whose chunk size changes
  its speed on every backend, CPU included.
- :mod:`jaxtune.examples.pallas_matmul`: a tiled Pallas matmul (interpret mode on CPU) with
  block sizes to tune.
"""
