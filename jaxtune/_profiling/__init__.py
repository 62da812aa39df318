"""The profiling flow: capture (in a child) -> trace reader -> attribution -> roofline -> report.

In: a jitted function and its arguments (:mod:`.profiled`), or a trace directory written by
any JAX program (:mod:`.report`). :mod:`.xspace` decodes the XSpace protobuf (over
:mod:`.protowire`), :mod:`.events` lists the executed HLO ops, :mod:`.hloproto` and
:mod:`.recover` read the programs' HLO protos a trace carries (the kernels of a trace
without jaxtune's sidecar), :mod:`.attribution` maps ops to kernels, :mod:`.roofline` holds
peak tables. Out: a :class:`.report.Profile` with one :class:`.attribution.KernelStat` per
kernel.
"""
