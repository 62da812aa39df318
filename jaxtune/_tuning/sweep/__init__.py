"""A sweep, by where its code runs (each module is named in one of the four groups below,
and ``tests/test_architecture.py`` checks that the kernel side and the wire import nothing
of the parent's):

- **parent** (:data:`PARENT`): the process that asks for a sweep decides, drives and keeps
  it: the loop that drives its search (``drive``), where it runs (``runner``: a child, or
  this process), its batches measured in children (``children``; ``flight``: what is in
  flight when a child dies), a sweep shared over a
  job's processes (``shard``), its progress line (``progress``) and the cache entry it
  becomes (``entry``);
- **wire** (:data:`WIRE`): what travels to the child (or a recording file) as plain data:
  the sweep's ``SweepPlan`` and ``SweepTask`` (``work``), its request frames
  (``requests``);
- **kernel side** (:data:`KERNEL_SIDE`): where the kernel runs, the child (``serve``, its
  handler there) or this process for the inline runner: the ``Sweeper`` (``engine``) over
  ``compile`` (with ``compile_cache``, ``program_store``, ``refusals`` and ``same_program``,
  and processes lowering side by side, ``lowering_pool``, each running ``lowering_worker``),
  ``first_run``
  (checked by ``check``), ``first_pass``, interleaved ``rounds``, each config's calls timed
  by ``measure`` under ``timers`` (a device timer's calls ``in_flight``, and the ``heap``
  its first trace's stop needs), the vjp pass (``backward``);
- **both sides** (:data:`BOTH`): rules and values both read: the search strategies
  (``search``), the decision rule (``stats``, its intervals in ``intervals``), a sweep's
  options and samples (``samples``), its inputs and their summaries (``inputs``), where its
  time went (``breakdown``).
"""

__all__ = ["BOTH", "KERNEL_SIDE", "PARENT", "WIRE"]

#: Modules of the process that asks for the sweep.
PARENT = ("drive", "runner", "children", "flight", "shard", "progress", "entry")
#: Modules of what travels between the parent and the kernel side.
WIRE = ("work", "requests")
#: Modules of where the kernel runs (the child, or this process inline).
KERNEL_SIDE = (
    "serve",
    "engine",
    "compile",
    "compile_cache",
    "program_store",
    "same_program",
    "lowering_pool",
    "lowering_worker",
    "refusals",
    "first_run",
    "check",
    "first_pass",
    "rounds",
    "measure",
    "timers",
    "in_flight",
    "heap",
    "backward",
)
#: Modules both sides read.
BOTH = ("search", "stats", "intervals", "samples", "inputs", "breakdown")
