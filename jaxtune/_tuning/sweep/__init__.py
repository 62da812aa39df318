"""A sweep: its plan and the loop that drives its search (``drive``), where it runs
(``runner``: a child, or this process; ``serve``: its handler in the child), the work of
measuring configs wherever the kernel runs (``engine``, over ``compile``, ``first_run``,
``first_pass`` and ``measure``; interleaved ``rounds`` timed by ``timers``), the decision
rule (``stats``), and the cache entry it becomes (``entry``)."""
