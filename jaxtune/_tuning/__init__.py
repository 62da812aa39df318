"""The tuning flow: decorator -> signature/key -> lookup -> (miss) sweep -> cache.

In: a kernel decorated with ``@autotuned`` and the arguments it is traced with. Out: the
config the trace runs with (:mod:`.lookup`), and, when a sweep ran, an :class:`~jaxtune._core.vocabulary.Entry`
written to the cache (:mod:`.cache`). :mod:`.sweep`, :mod:`.timing`, :mod:`.check` and
:mod:`.inputs` measure configs (inline, or in a child through :mod:`jaxtune._isolation`);
:mod:`.locate`, :mod:`.record` and :mod:`.tune` find the kernels a whole program reaches.
"""
