"""A child's environment: the variables that decide which pooled child can serve a
request (:func:`pool_key`), and the others, which travel with each request and are set in
the child before it imports or traces anything (:func:`unkeyed_environ`,
:func:`sync_environ`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping

from .._core.errors import CustomCallTracingWarning, FlagError, warn_once
from .._core.flags import (
    CUSTOM_CALL_TRACING,
    custom_call_tracing_on,
    parse,
    without_custom_call_tracing,
)

__all__ = [
    "HOLD",
    "SWEEP_PREMAPPED_BYTES",
    "TRACING_IN_PROCESS",
    "TRACING_STRIPPED",
    "flag_base",
    "keyed",
    "pool_key",
    "python_path",
    "strip_tracing",
    "sweep_premapped",
    "sync_environ",
    "tracing_vars",
    "unkeyed_environ",
    "warn_tracing_inline",
]

TRACING_STRIPPED = (
    f"jaxtune: custom-call tracing (--{CUSTOM_CALL_TRACING}=true in {{where}}) adds trace "
    "points that change a kernel's schedule and its time, so it was removed from the "
    "sweep's child: configs are timed without it. Keep it for `jaxtune profile "
    "--custom-call-tracing`, and take it out of {where} where you tune."
)

TRACING_IN_PROCESS = (
    f"jaxtune: custom-call tracing (--{CUSTOM_CALL_TRACING}=true in {{where}}) is in effect "
    "in this process, and a sweep that runs here cannot turn it off: its timings include "
    "the trace points, which change a kernel's schedule. Take the flag out of {where}, or "
    "tune in a child process (JAXTUNE_ISOLATION=process, with the TPU not yet opened here)."
)


def tracing_vars(env: Mapping[str, str]) -> tuple[str, ...]:
    """The flag variables of ``env`` that turn custom-call tracing on."""
    return tuple(
        v for v in ("XLA_FLAGS", "LIBTPU_INIT_ARGS") if custom_call_tracing_on(env.get(v, ""))
    )


def _warn_once(template: str, where: tuple[str, ...]) -> None:
    message = template.format(where=" and ".join(where))
    warn_once(("custom-call tracing", message), message, CustomCallTracingWarning, stacklevel=4)


def strip_tracing(env: MutableMapping[str, str]) -> tuple[str, ...]:
    """For a sweep's child: removes custom-call tracing from ``env``'s ``XLA_FLAGS`` and
    ``LIBTPU_INIT_ARGS`` where it is on, says so once (:data:`TRACING_STRIPPED`), and
    returns the variables it was removed from."""
    where = tracing_vars(env)
    for var in where:
        text = without_custom_call_tracing(env[var])
        if text:
            env[var] = text
        else:
            del env[var]
    if where:
        _warn_once(TRACING_STRIPPED, where)
    return where


#: The variable that starts a child on hold (:meth:`.process.ChildPool.hold`): the handler
#: modules it imports while it waits (comma-separated, possibly none).
HOLD = "JAXTUNE_CHILD_HOLD"

#: Host memory libtpu pins for transfers in a sweep's child, in bytes
#: (``TPU_PREMAPPED_BUFFER_SIZE``; libtpu's default is 4 GiB). Pinning the default took
#: 7.7 s of a TPU v5e's 9.2 s start, and 1.8 s to release at the end, where the host has no
#: transparent hugepages; 256 MiB started in 1.8 s and moved gmm's 160 MiB of arguments as
#: fast (``tools/tpu/probe_premapped.py``, 2026-12-07). A larger transfer is done in parts.
SWEEP_PREMAPPED_BYTES = 256 << 20


def sweep_premapped(env: MutableMapping[str, str]) -> None:
    """For a sweep's child: a small premapped host buffer (:data:`SWEEP_PREMAPPED_BYTES`)
    unless ``env`` sets any of libtpu's ``TPU_PREMAPPED_*`` variables (the user's buffer,
    or a transfer threshold sized for it, is kept as it is). Only libtpu reads it."""
    if not any(name.startswith("TPU_PREMAPPED_") for name in env):
        env["TPU_PREMAPPED_BUFFER_SIZE"] = str(SWEEP_PREMAPPED_BYTES)


def warn_tracing_inline() -> None:
    """For a sweep in this process: says once (:data:`TRACING_IN_PROCESS`) that custom-call
    tracing is in effect here, where it cannot be turned off."""
    where = tracing_vars(os.environ)
    if where:
        _warn_once(TRACING_IN_PROCESS, where)


# The variables that can change what a child's backend does; the pool keys children on
# these only, so that a library that sets an unrelated variable after a child was started
# ahead of need (Tokamax sets MOSAIC_GPU_CUDA_ROOT at import) does not cost a new child.
_BACKEND_PREFIXES = ("JAX_", "XLA_", "LIBTPU_", "TPU_", "OMP_", "MKL_", "TF_CPP_", "LD_")
_ACCELERATOR_PREFIXES = ("CUDA_", "NVIDIA_", "NCCL_", "MOSAIC_", "ROCR_", "HIP_", "GPU_")
_CHILD_VARIABLES = (
    "PYTHONPATH",
    "JAXTUNE_ISOLATION",
    "JAXTUNE_CHILD_MEMORY_LIMIT",
    "JAXTUNE_CHILD_TOKEN",  # marks what the child starts (strays.py): never synced away
)


def keyed(name: str, platforms: str | None) -> bool:
    """Whether variable ``name`` decides which child can serve (see :func:`pool_key`) for
    a child started with ``JAX_PLATFORMS=platforms``. The others travel with each request
    and are set in the child before it runs anything (:func:`unkeyed_environ`)."""
    prefixes: tuple[str, ...] = _BACKEND_PREFIXES
    if (platforms or "").strip().lower() != "cpu":
        prefixes += _ACCELERATOR_PREFIXES
    return name.startswith(prefixes) or name in _CHILD_VARIABLES or name == "JAXTUNE_PARENT_PID"


def pool_key(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The part of a child's environment that decides whether a live child can serve it:
    JAX, XLA, TPU and threading variables, accelerator variables unless the child runs
    on CPU only, and what jaxtune itself sets for its children."""
    platforms = env.get("JAX_PLATFORMS")
    return tuple(sorted((k, v) for k, v in env.items() if keyed(k, platforms)))


def unkeyed_environ(platforms: str | None) -> dict[str, str]:
    """This process's variables that do not key the pool: a request carries them, so a
    kernel that reads ``os.environ`` in the child sees what it would see here."""
    return {k: v for k, v in os.environ.items() if not keyed(k, platforms)}


def sync_environ(wanted: Mapping[str, str] | None) -> None:
    """In a child: makes the variables that do not key the pool what ``wanted`` says."""
    if wanted is None:
        return
    platforms = os.environ.get("JAX_PLATFORMS")
    for name in [k for k in os.environ if not keyed(k, platforms) and k not in wanted]:
        del os.environ[name]
    for name, value in wanted.items():
        if not keyed(name, platforms) and os.environ.get(name) != value:
            os.environ[name] = value


def python_path() -> str:
    """``sys.path`` as a ``PYTHONPATH`` value, so the child imports what this process does."""
    entries = []
    for entry in sys.path:
        path = os.path.abspath(entry or os.getcwd())
        if path not in entries and os.path.exists(path):
            entries.append(path)
    return os.pathsep.join(entries)


def flag_base(platform: str | None) -> dict[str, str]:
    """This process's environment as the base of a child's for ``platform``, its flag
    variables checked: ``LIBTPU_INIT_ARGS`` is dropped off TPU (only libtpu reads it, so a
    bad value must not stop a CPU or GPU sweep).

    Raises:
        FlagError: ``XLA_FLAGS`` (or, for TPU, ``LIBTPU_INIT_ARGS``) is malformed; the
            message names the variable.
    """
    base = dict(os.environ)
    if platform not in (None, "tpu"):
        base.pop("LIBTPU_INIT_ARGS", None)
    for var in ("XLA_FLAGS", "LIBTPU_INIT_ARGS"):
        try:
            parse(base.get(var, ""))
        except FlagError as e:
            raise FlagError(f"{var} in this process's environment: {e}") from e
    return base
