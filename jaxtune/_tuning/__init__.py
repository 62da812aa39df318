"""The tuning flow: decorator -> signature/key -> bound call (lookup, (miss) sweep) -> store.

In: a kernel decorated with ``@autotuned`` (:mod:`.decorator`, :mod:`.autotuned`) and the
arguments it is traced with, bound into a :class:`~.bound.BoundCall`. Out: the config the
trace runs with (``BoundCall.choose``, over the cache layers of :mod:`.lookup`), and,
when a sweep ran, an :class:`~jaxtune._core.vocabulary.Entry` written to the cache
(:mod:`.store.cache`). :mod:`.sweep` measures configs (inline, or in a child through
:mod:`jaxtune._isolation`); :mod:`.record` and :mod:`.tune` find the kernels a whole
program reaches.
"""
