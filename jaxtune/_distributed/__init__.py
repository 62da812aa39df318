"""Multi-host agreement through ``jax.distributed``'s coordination service.

``coordination`` wraps the service's key-value store; ``agree`` runs the leader/follower protocol
that makes every process use the same config, and shares a sweep across processes through
the flow's ``Sharing`` (the tuning flow's is ``jaxtune._tuning.sweep.shard``).
"""
