"""Reading ``.xplane.pb`` traces, below both flows: the protobuf schema jaxtune owns
(:mod:`.schema`), finding and reading a trace file safely (:mod:`.tracefile`), and the
XSpace decoded plane by plane and line by line (:mod:`.xplane`). The profile report and
the sweep's profiler timer read traces through it."""
