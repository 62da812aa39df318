"""A child's environment: the variables that decide which pooled child can serve a
request (:func:`pool_key`), and the others, which travel with each request and are set in
the child before it imports or traces anything (:func:`unkeyed_environ`,
:func:`sync_environ`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from .._errors import FlagError
from .._flags import parse

__all__ = ["flag_base", "keyed", "pool_key", "python_path", "sync_environ", "unkeyed_environ"]

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
