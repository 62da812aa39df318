"""The profiling flow: capture (in a child) -> trace reader -> attribution -> roofline -> report.

In: a jitted function and its arguments (:mod:`.profiled`), or a trace directory written by
any JAX program (:mod:`.report`). :mod:`.xspace` decodes the XSpace protobuf,
:mod:`.attribution` maps device events to HLO ops and ops to kernels, :mod:`.roofline` holds
peak tables. Out: a :class:`.report.Profile` with one :class:`.attribution.KernelStat` per kernel.
"""
