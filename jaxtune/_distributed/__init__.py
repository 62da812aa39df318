"""Multi-host agreement through ``jax.distributed``'s coordination service.

``store`` wraps the service's key-value store (and an in-memory one for tests); ``agree``
runs the leader/follower protocol that makes every process use the same config; ``shard``
splits one sweep's configs across processes and merges their measurements.
"""
