"""The profiling flow: capture (in a child) -> trace reader -> attribution -> roofline -> report.

In: a jitted function and its arguments (:mod:`.profiled`), or a trace directory written by
any JAX program (:mod:`.report`). :mod:`.xplane` reads the XSpace protobuf (the ``protobuf`` package, on
the schema of :mod:`.schema`), :mod:`.events` totals the executed HLO ops by owner while
walking them, :mod:`.hlo` and :mod:`.recover` read the programs' HLO protos a trace carries (the kernels of a trace
without jaxtune's sidecar), :mod:`.attribution` maps ops to kernels, :mod:`.roofline` holds
peak tables. Out: a :class:`.report.Profile` with one :class:`.attribution.KernelStat` per
kernel.
"""
