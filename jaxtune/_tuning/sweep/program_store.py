"""Lowered programs stored on disk, so that a second sweep of the same space skips tracing.

JAX's persistent compilation cache (:mod:`.compile_cache`) spares a second sweep XLA's
compile, not what comes before it: tracing and lowering each config, Python work that
holds the GIL and so runs one config at a time (0.2-0.4 s a config for Tokamax's
ragged_dot, about 150 s of its 540-config space on the TPU host). A sweep therefore lowers
each config through ``jax.export`` and keeps the serialised program (StableHLO bytes in a
msgpack file: data, nothing runs when it is read) under ``lowered/`` in the compilation
cache's folder; a second sweep deserialises it (about 15 ms) instead of tracing again.
Lowering through ``jax.export`` costs the first sweep about the same as lowering directly
(the trace is done once, for the refusal check and the export alike).

A stored program is used only under the same key (:func:`task_key`): the kernel's code
digest (:mod:`..digest`), its name and call key, the abstract arguments, the timed pass,
the toolchain and device, JAX's tracing options and the versions of every installed
distribution. What no key sees (a library edited in place without a new version, an
environment variable a kernel reads) is caught by a check: the first config a sweep takes
from the store is also lowered afresh and the two programs compared
(:func:`.same_program.program_digest`);
when they differ, the task's stored programs are set aside and written again.

Serialising needs the ``flatbuffers`` package, which the ``retune`` extra installs
(``pip install 'jaxtune[retune]'``); without it nothing is kept and every sweep traces each
config, as before. A kernel ``jax.export`` cannot serialise (a host callback, a custom call without a
compatibility guarantee) is lowered directly, as without the store, and nothing is stored.
The store lives in jaxtune's own compilation cache folder and goes with it: off with
``JAXTUNE_COMPILE_CACHE=0`` or where the user's own ``jax_compilation_cache_dir`` is in use
(jaxtune writes nothing there), removed by ``jaxtune cache clear``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import pathlib
import re
from typing import Any, ClassVar

import jax
import msgpack

from ..._core import typed
from ..._core.codec import atomic_write, packb, read_bounded, unpackb
from ..._core.settings import FLAG_VARIABLES
from ..state import TUNING_STATE
from .compile_cache import own_folder

__all__ = ["STORE_DIR", "ProgramStore", "deterministic", "serialisable", "task_key"]

#: The folder under the compilation cache's folder where lowered programs are kept.
STORE_DIR = "lowered"
_FORMAT = "jaxtune.lowered"
_VERSION = 1
#: The largest kept file read back (a kernel's serialised program is far smaller).
_LARGEST = 1 << 30


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Stored:
    """One file of the store: config ``config``'s serialised program (``exported``), or
    the failure it meets on every compile (``failed``), written and read (bounded) through
    :mod:`jaxtune._core.codec` by :mod:`jaxtune._core.typed`: a file without the format's
    tag, of another format, a later version or the wrong field types is none of this
    store's."""

    WIRE_TAG: ClassVar[tuple[str, str]] = ("format", _FORMAT)
    WIRE_TAG_REQUIRED: ClassVar[bool] = True
    WIRE_VERSION: ClassVar[int] = _VERSION

    config: str
    exported: bytes | None = dataclasses.field(default=None, metadata=typed.OMIT_DEFAULT)
    failed: str | None = dataclasses.field(default=None, metadata=typed.OMIT_DEFAULT)


#: JAX options that change what a function traces to.
_TRACING_OPTIONS = (
    "jax_enable_x64",
    "jax_default_matmul_precision",
    "jax_numpy_rank_promotion",
    "jax_numpy_dtype_promotion",
    "jax_default_prng_impl",
    "jax_threefry_partitionable",
    "jax_use_shardy_partitioner",
    "jax_enable_checks",
)


@TUNING_STATE.memo("flatbuffers", "whether jax.export can serialise here (flatbuffers found)")
@functools.cache
def serialisable() -> bool:
    """Whether ``jax.export`` can serialise here: it needs the ``flatbuffers`` package
    (``pip install 'jaxtune[retune]'``); without it nothing is stored."""
    return importlib.util.find_spec("flatbuffers") is not None


@TUNING_STATE.memo("installed", "every installed distribution's name and version")
@functools.cache
def _installed() -> tuple[tuple[str, str], ...]:
    """Every installed distribution's name and version (read once per process)."""
    found = set()
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if name:
            found.add((str(name), str(dist.version)))
    return tuple(sorted(found))


def _toolchain() -> list[str]:
    device = jax.devices()[0]
    try:
        platform_version = str(device.client.platform_version)
    except Exception:
        platform_version = ""
    import jaxlib

    return [
        jax.__version__,
        getattr(jaxlib, "__version__", ""),
        device.platform,
        device.device_kind,
        platform_version,
    ]


def _abstract(args: Any) -> list[Any]:
    """The tree of ``args`` and each leaf's shape and dtype."""
    leaves, tree = jax.tree.flatten(args)
    return [str(tree), [[list(x.shape), str(x.dtype)] for x in leaves]]


def task_key(*, kernel: str, key: str, code: str, timing: str, args: Any) -> str | None:
    """The key under which a task's programs are stored, ``None`` without a code digest
    (programs of code jaxtune cannot tell apart are never reused)."""
    if not code:
        return None
    parts = [
        _FORMAT,
        _VERSION,
        kernel,
        key,
        code,
        timing,
        _abstract(args),
        _toolchain(),
        [[name, str(getattr(jax.config, name, None))] for name in _TRACING_OPTIONS],
        _installed(),
    ]
    # The backend's flags decide some compiles' failures, which are kept (scoped VMEM:
    # Mosaic's own refusals and the refusal filter's rule). Only where set, so that the
    # folders kept without them keep their names.
    flags = [[var, os.environ[var]] for var in FLAG_VARIABLES if os.environ.get(var)]
    if flags:
        parts.append(flags)
    # A digest's input, not a record: plain msgpack (tuples as lists), as it has always
    # been, so that the folders of programs kept so far keep their names.
    return hashlib.blake2b(msgpack.packb(parts), digest_size=16).hexdigest()


@dataclasses.dataclass
class ProgramStore:
    """One task's lowered programs on disk, one file per config."""

    folder: pathlib.Path
    #: Whether the stored programs matched a fresh lowering (``None``: not checked yet).
    trusted: bool | None = None
    #: Whether ``jax.export`` serialises this kernel (``False`` once it failed where a
    #: direct lowering did not).
    exportable: bool = True

    @classmethod
    def for_task(cls, key: str | None) -> ProgramStore | None:
        """The store for the task keyed ``key`` (:func:`task_key`), ``None`` when off."""
        root = own_folder()
        if key is None or root is None or not serialisable():
            return None
        return cls(root / STORE_DIR / key)

    def _path(self, cid: str) -> pathlib.Path:
        return self.folder / (
            hashlib.blake2b(cid.encode(), digest_size=16).hexdigest() + ".msgpack"
        )

    def load(self, cid: str) -> bytes | None:
        """Config ``cid``'s serialised program, ``None`` when none is kept (or unreadable)."""
        if self.trusted is False or not self.exportable:
            return None
        found = self._read(self._path(cid), cid)
        return found.exported if found is not None else None

    def save(self, cid: str, exported: bytes) -> None:
        """Keeps ``exported`` (config ``cid``'s serialised program); a failure to write
        only costs the next sweep a lowering."""
        self._write(self._path(cid), _Stored(config=cid, exported=exported))

    def failure(self, cid: str) -> str | None:
        """Why config ``cid`` failed deterministically in an earlier sweep under the same
        key (:meth:`remember_failure`), ``None`` when it did not (or the store is not
        trusted yet: a failure is taken only once a stored program matched a fresh lowering)."""
        if not self.trusted:
            return None
        found = self._read(self._failure_path(cid), cid)
        return found.failed if found is not None else None

    def _read(self, path: pathlib.Path, cid: str) -> _Stored | None:
        """Config ``cid``'s record at ``path``, ``None`` where there is none or it is not
        one of this store's."""
        try:
            record = typed.decode(_Stored, unpackb(read_bounded(path, limit=_LARGEST)))
        except (OSError, ValueError):  # UnsafeFileError, DecodeError, MismatchError included
            return None
        return record if record.config == cid else None

    def remember_failure(self, cid: str, reason: str) -> bool:
        """Keeps config ``cid``'s failure, where it is one the same program always meets
        (:func:`deterministic`): refused from its traced program, or by Mosaic. Whether it
        was stored."""
        if not deterministic(reason):
            return False
        return self._write(self._failure_path(cid), _Stored(config=cid, failed=reason))

    def has(self, cid: str) -> bool:
        """Whether a program or a failure of config ``cid`` is kept (not read: cheap)."""
        return self._path(cid).exists() or self._failure_path(cid).exists()

    def forget_failures(self) -> None:
        """Removes the task's kept failures (its programs no longer match the code's)."""
        for path in self.folder.glob("*.failure"):
            path.unlink(missing_ok=True)

    def _failure_path(self, cid: str) -> pathlib.Path:
        return self._path(cid).with_suffix(".failure")

    def _write(self, path: pathlib.Path, record: _Stored) -> bool:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_write(path, packb(typed.encode(record)))
            return True
        except OSError:
            return False


#: Failures the same program meets on every compile: Mosaic's refusals (tile alignment,
#: scoped VMEM) and the refusal rules' (:mod:`.refusals`). Anything else (a host out of
#: memory, a compile cancelled) may not recur and is compiled again.
_DETERMINISTIC = re.compile(r"mosaic|vmem|refused", re.IGNORECASE)


def deterministic(reason: str) -> bool:
    """Whether a compile failure's ``reason`` is one the same program always meets."""
    return bool(_DETERMINISTIC.search(reason))
