"""The profiling flow: capture (in a child) -> trace reader -> attribution -> roofline -> report.

In: a jitted function and its arguments (:mod:`.profiled`; :mod:`.capture` sends it to a
child, where :mod:`.serve` captures the trace), or a trace directory written by any JAX
program (:mod:`.report`). The XSpace is read by :mod:`jaxtune._core.xspace`, below both
flows; :mod:`.events` and :mod:`.totals` total the executed HLO ops by owner while walking
them, :mod:`.hlo` and :mod:`.recover` read the programs' HLO protos a trace carries (the
kernels of a trace without jaxtune's sidecar), :mod:`.attribution` maps ops to kernels,
:mod:`jaxtune._core.roofline` holds peak tables. Out: a :class:`.report.Profile` with one
:class:`.attribution.KernelStat` per kernel, saved as the typed records of :mod:`.saved`.
"""
