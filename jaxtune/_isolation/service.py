"""The child-process service: which child serves a caller, with what environment, and how
one request travels to it and back.

A :class:`ChildService` knows no flow. A flow (tuning, profiling) builds its request frames,
names the module whose ``handle(server, msg)`` answers them in the child (``handler``), and
reads the answer; the service starts the pooled child with the environment the caller
needs (flags, ``JAX_PLATFORMS``, device visibility, ``PYTHONPATH``), set before the child
imports JAX, checks that it came up on the expected platform, and carries the caller's JAX
state and variables with each request.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from .._core.errors import SweepError
from .._core.flags import child_env, normalise_platform, requested_platform
from .devices import parent_backend
from .environ import flag_base, python_path, strip_tracing
from .frames import Ready
from .process import POOL, ChildProcess

__all__ = ["ChildService"]


class ChildService:
    """Where requests run: a long-lived pooled child for an environment.

    ``platform`` defaults to the backend this process uses (or ``JAX_PLATFORMS``);
    ``env`` adds variables (extra ``XLA_FLAGS`` merge with the user's); ``memory_limit``
    caps the child's address space in bytes. ``device`` pins the child to one accelerator
    (``CUDA_VISIBLE_DEVICES`` on GPU; ``TPU_VISIBLE_CHIPS`` and the process-bounds variables
    on TPU). ``profiling`` starts it with the profiling flags (``{"llo": ...,
    "custom_call_tracing": ...}``); without it, trace points are stripped from the flags.
    """

    def __init__(
        self,
        *,
        platform: str | None = None,
        env: Mapping[str, str] | None = None,
        memory_limit: int | None = None,
        device: int | None = None,
        profiling: Mapping[str, bool] | None = None,
    ) -> None:
        self.profiling = dict(profiling) if profiling is not None else None
        self.platform = platform
        self.extra_env = dict(env or {})
        self.memory_limit = memory_limit
        self.device = device
        #: The ready message of the last child this service used (platform, device kind...).
        self.ready: Ready | None = None
        #: The child this service last talked to, and a flag that stops its work (set when
        #: another device's share was interrupted).
        self.held: ChildProcess | None = None
        self.stop = threading.Event()

    def expected_platform(self) -> str | None:
        """The platform the child must come up on: ``platform=``, else this process's
        backend, else what ``JAX_PLATFORMS`` asks for (``None``: whatever JAX picks)."""
        return (
            normalise_platform(self.platform)
            or normalise_platform(parent_backend())
            or requested_platform()
        )

    def environment(self) -> dict[str, str]:
        """The child's environment."""
        platform = self.expected_platform()
        extra = dict(self.extra_env)
        xla = extra.pop("XLA_FLAGS", "")
        libtpu = extra.pop("LIBTPU_INIT_ARGS", "")
        env = child_env(
            platform or "cpu",
            base=flag_base(platform),
            xla_flags=xla.split(),
            libtpu_args=libtpu.split(),
            profiling=self.profiling is not None,
            llo=bool((self.profiling or {}).get("llo", True)),
            custom_call_tracing=bool((self.profiling or {}).get("custom_call_tracing")),
            check_binary=self.profiling is not None,
        )
        if platform is None:
            env.pop("JAX_PLATFORMS", None)
            if "JAX_PLATFORMS" in os.environ:
                env["JAX_PLATFORMS"] = os.environ["JAX_PLATFORMS"]
        env.update(extra)
        if self.profiling is None:  # a sweep: trace points would change what it times
            strip_tracing(env)
        env["PYTHONPATH"] = python_path()
        env["JAXTUNE_ISOLATION"] = "inline"
        env["JAXTUNE_PARENT_PID"] = str(os.getpid())
        if self.memory_limit:
            env["JAXTUNE_CHILD_MEMORY_LIMIT"] = str(int(self.memory_limit))
        if self.device is not None and platform == "gpu":
            env["CUDA_VISIBLE_DEVICES"] = str(self.device)
        if self.device is not None and platform == "tpu":
            env["TPU_VISIBLE_CHIPS"] = str(self.device)
            env["TPU_PROCESS_BOUNDS"] = "1,1,1"
            env["TPU_CHIPS_PER_PROCESS_BOUNDS"] = "1,1,1"
        return env

    def child(self) -> ChildProcess:
        """The pooled child for this service's environment (started when needed).

        Raises:
            SweepError: the child came up on another platform than expected, or the work
                was interrupted (:attr:`stop`).
        """
        expected = self.expected_platform()

        def check(child: ChildProcess) -> None:
            got = normalise_platform(child.ready.platform)
            if expected and got != expected:
                child.close()
                raise SweepError(
                    f"the jaxtune child came up on {got!r}, expected {expected!r} like this "
                    "process; check JAX_PLATFORMS and the accelerator's visibility variables."
                )

        if self.stop.is_set():
            raise SweepError("the sweep was interrupted")
        child = POOL.get(self.environment(), check, slot=self.device)
        self.ready = child.ready
        self.held = child
        return child

    def on_platform(self, platform: str) -> ChildService:
        """This service for a child on ``platform`` (its pool key is that of a service that
        finds ``platform`` in this process once JAX has started it)."""
        return ChildService(
            platform=platform,
            env=self.extra_env,
            memory_limit=self.memory_limit,
            device=self.device,
            profiling=self.profiling,
        )
