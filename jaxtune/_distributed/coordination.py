"""The key-value store agreement runs on: JAX's coordination service.

``jax.distributed.initialize`` starts a coordination service in process 0 and connects
every process to it; its key-value store answers plain RPCs, so it works while a process is
tracing under ``jax.jit`` (no collective, no device). Writes are create-only: the first
value under a key is the one everybody reads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = [
    "CoordinationKeyValue",
    "KeyValue",
    "KeyValueLostError",
    "KeyValueTimeoutError",
    "agreement_key",
    "current",
]

#: Every key jaxtune writes starts with this, so they never collide with other users.
PREFIX = "jaxtune/v1"


class KeyValueTimeoutError(Exception):
    """Nothing was published under the key in time."""


class KeyValueLostError(Exception):
    """The key-value store stopped answering (the process that hosts it died)."""


class KeyValue(Protocol):
    """A create-only key-value store shared by every process of a job."""

    process_id: int
    process_count: int
    #: Identifies the job (the same for every handle on one key-value store), for per-job memos.
    job: Any

    def publish(self, key: str, value: bytes) -> bool:
        """Stores ``value`` unless ``key`` exists; ``False`` when it already did."""
        ...

    def wait(self, key: str, timeout_s: float) -> bytes:
        """The value under ``key``, waiting up to ``timeout_s`` for it to appear.

        Raises:
            KeyValueTimeoutError: nothing was published in time.
            KeyValueLostError: the key-value store is gone.
        """
        ...


def agreement_key(
    kernel: str, version: str, key: str, device_kind: str, toolchain: Mapping[str, Any], round: int
) -> str:
    """The key of one decision: a sha256 of everything that must match, never
    Python's salted ``hash()``, so every process derives the same key."""
    parts = [kernel, version, key, device_kind, repr(sorted(toolchain.items())), str(round)]
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]
    return f"{PREFIX}/{digest}"


class CoordinationKeyValue:
    """The key-value store of the coordination service behind ``jax.distributed``."""

    def __init__(self, client: Any, process_id: int, process_count: int) -> None:
        self._client = client
        self.job = id(client)
        self.process_id = process_id
        self.process_count = process_count

    def publish(self, key: str, value: bytes) -> bool:
        try:
            self._client.key_value_set_bytes(key, value, allow_overwrite=False)
        except RuntimeError as e:  # the client's (jax.errors.JaxRuntimeError); others are bugs
            if "ALREADY_EXISTS" in str(e):
                return False
            raise KeyValueLostError(_first_line(e)) from e
        return True

    def wait(self, key: str, timeout_s: float) -> bytes:
        try:
            value: bytes = self._client.blocking_key_value_get_bytes(
                key, max(1, int(timeout_s * 1000))
            )
        except RuntimeError as e:  # the client's (jax.errors.JaxRuntimeError); others are bugs
            if "DEADLINE_EXCEEDED" in str(e):
                raise KeyValueTimeoutError(_first_line(e)) from e
            raise KeyValueLostError(_first_line(e)) from e
        return value


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def current() -> KeyValue | None:
    """The coordination service's key-value store when ``jax.distributed`` is initialised with more than one
    process, else ``None``. Never starts a backend."""
    try:
        from jax._src import distributed
    except ImportError:  # a JAX without the module has no coordination service either
        return None
    state = distributed.global_state
    client = getattr(state, "client", None)
    count = getattr(state, "num_processes", None) or 1
    if client is None or count <= 1:
        return None
    return CoordinationKeyValue(client, int(getattr(state, "process_id", 0) or 0), int(count))
