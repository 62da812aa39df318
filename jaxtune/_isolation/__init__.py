"""Crash isolation: run sweeps and trace captures in a re-exec'd child Python process.

In: a request (a sweep plan, or a capture) plus the caller's JAX state (:mod:`.context`).
:mod:`.runner` is the parent side (inline or child runner, one protocol); :mod:`.process`
starts, pools and kills children; :mod:`.child` is the child's entry point
(``python -m jaxtune._isolation.child``); :mod:`.wire` frames msgpack messages over pipes.
Out: measurements, failures (a crash, a timeout) or a captured trace.
"""
