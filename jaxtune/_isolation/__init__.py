"""Crash isolation: a child-process service that knows no flow.

In: a :class:`~.frames.Request` (the handler it names, its fields) plus the caller's JAX
state (:mod:`.context`, :mod:`.environ`). :mod:`.service` picks the pooled child and its
environment; :mod:`.process` starts, pools and kills children and watches for crashes and
hangs; :mod:`.child` is the child's server (``python -m jaxtune._isolation.child``), which
imports the function a request names (:mod:`.resolve`) and runs the handler; :mod:`.frames`
types every frame both ends exchange, and :mod:`.wire` carries them as msgpack over pipes.
Out: events, then the answer (or an error reply, or a lost child).
"""
