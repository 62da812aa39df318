"""Kernel side. Whether two configs lowered to the same program, so that a sweep times it once.

A config's program is its lowered module's text (``jax.stages.Lowered.as_text()``) with
the module's name left out, plus, for a module that calls back into Python, what each
callback is. The text numbers its host callbacks (``index = 0``) without showing the
functions, so two configs whose callbacks differ (a sleep of 20 or of 40 ms) print the same
text; JAX's TPU interpret mode runs every DMA, semaphore and buffer of a Pallas kernel that
way, so without the callbacks no interpret-mode kernel would ever share a program.

Each callback is described by value: a function by its code (bytecode, constants and
names), its defaults and what its closure holds; a ``functools.partial`` by
its function, arguments and keywords; a dataclass by its fields; numbers, strings, tuples,
dicts, enums, dtypes, small arrays, tree structures and abstract values by what they are.
Anything else (an object with state the description cannot see) makes the module opaque:
never taken for another's. JAX's record of where an operation came from in the user's code
(``SourceInfo``, for error messages) is left out, as is Tokamax's ``xla_metadata_payload``
attribute (the op and its config, written for Tokamax's own tools, which XLA does not read:
configs that differ only there compile to the same program). Host sends and receives stay
opaque.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import re
import threading
import types
from collections.abc import Sequence
from typing import Any

import numpy as np
from jax import tree_util

from ..._core.vocabulary import Config, config_id

__all__ = ["Programs", "program_digest"]

#: What in a module's text calls back into Python (``jax.pure_callback``, ``io_callback``,
#: ``jax.debug.print``, interpret mode's simulator): described from the lowering's own
#: callbacks (:func:`_callbacks`).
_CALLBACK = re.compile(r"callback")
#: Host transfers: what they exchange is not in the module.
_OPAQUE = re.compile(r"stablehlo\.send\b|stablehlo\.recv\b")
#: Tokamax's annotation of each operation (``jax.experimental.xla_metadata``): the op's
#: class and config as JSON, which only Tokamax's own tools read.
_TOKAMAX_PAYLOAD = re.compile(r'xla_metadata_payload = "(?:[^"\\]|\\.)*"')
#: The most objects and the deepest nesting a description follows before it calls the
#: callbacks opaque (interpret mode's flash attention: about 3,000 objects, depth 8).
_MOST_OBJECTS = 50_000
_DEEPEST = 24
#: An array captured by a callback is described by its bytes up to this size.
_LARGEST_ARRAY = 1 << 20


class Programs:
    """Each config's program, as a sweep's compiler knows it: its module's name
    (:meth:`module`), its digest where :func:`program_digest` gives one (:attr:`digests`),
    and, where twins share executables (:attr:`share`), which config compiles each program
    (:meth:`owner`, :meth:`compiled`)."""

    def __init__(self, space: Sequence[Config]) -> None:
        self._places = {config_id(c): i for i, c in enumerate(space)}
        self._past = len(space)  # the next place past the space's
        #: Each config's module name (:meth:`module`), for a device timer's trace.
        self.modules: dict[str, str] = {}
        #: Each lowered config's program digest, where its text shows all it runs.
        self.digests: dict[str, str] = {}
        #: Whether a config of a program another config compiles calls that one's
        #: executable instead of compiling its own: only where nothing tells calls apart by
        #: their executable's name (a wall-clock timer; a trace does).
        self.share = False
        self._owners: dict[str, tuple[str, threading.Event]] = {}
        self._lock = threading.Lock()

    def module(self, config: Config) -> str:
        """The HLO module name of ``config``'s executable: ``jit_jaxtune_<n>``, ``n`` its
        place in the plan's configs (past them, in the order first asked for, for a config
        outside the space, such as a default), so that two sweeps of one plan name each
        config's program alike whatever order they lower them in: the name is part of the
        program JAX's compilation cache keys on."""
        cid = config_id(config)
        if cid not in self.modules:
            if cid not in self._places:
                self._places[cid], self._past = self._past, self._past + 1
            self.modules[cid] = f"jit_jaxtune_{self._places[cid]}"
        return self.modules[cid]

    def note(self, config: Config, lowered: Any) -> None:
        """Keeps the digest of ``config``'s lowered program, where there is one."""
        if (digest := program_digest(lowered, self.module(config))) is not None:
            self.digests[config_id(config)] = digest

    def owner(self, cid: str) -> tuple[str, threading.Event] | None:
        """The config that compiles ``cid``'s program (another, which asked first: ``cid``
        is its twin), and the event set once it is done; ``None`` where ``cid`` compiles
        its own (the first of its program to ask, or twins are not shared)."""
        digest = self.digests.get(cid)
        if not self.share or digest is None:
            return None
        with self._lock:
            owner = self._owners.setdefault(digest, (cid, threading.Event()))
        return None if owner[0] == cid else owner

    def compiled(self, cid: str) -> None:
        """Tells the twins waiting on ``cid``'s program that it is compiled (or not)."""
        digest = self.digests.get(cid)
        with self._lock:
            owner = self._owners.get(digest) if digest is not None else None
        if owner is not None and owner[0] == cid:
            owner[1].set()


def program_digest(lowered: Any, module: str) -> str | None:
    """A digest of ``lowered``'s program (``jax.stages.Lowered``, without debug
    information) with its name ``module`` (``jit_jaxtune_<n>``, one per config) left out:
    two configs with the same digest lower to the same program. ``None`` for a module whose
    text does not show all it runs: host transfers, or callbacks that hold what cannot be
    described. About 10 ms for JAX's flash attention in interpret mode (a 100 kB module),
    and 5-10 ms more to describe Tokamax's flash attention's 88 callbacks there, against
    hundreds of milliseconds to lower either."""
    stem = module.removeprefix("jit_")
    text = lowered.as_text()
    if _OPAQUE.search(text):
        return None
    digest = hashlib.blake2b(digest_size=16)
    if _CALLBACK.search(text):
        described = _callbacks(lowered)
        if described is None:
            return None
        digest.update(described.encode())
    text = _TOKAMAX_PAYLOAD.sub('xla_metadata_payload = ""', text)
    text = text.replace(module, "jit_M")
    text = re.sub(rf"\b{re.escape(stem)}\b", "M", text)
    digest.update(text.encode())
    return digest.hexdigest()


def _callbacks(lowered: Any) -> str | None:
    """A description of ``lowered``'s host callbacks, in the order the text numbers them;
    ``None`` where JAX does not show them or one holds what cannot be described."""
    # JAX keeps them on the lowering it wraps (``MeshComputation.compile_args``).
    compile_args = getattr(getattr(lowered, "_lowering", None), "compile_args", None)
    callbacks = compile_args.get("host_callbacks") if isinstance(compile_args, dict) else None
    if callbacks is None:
        return None
    out: list[str] = []
    try:
        _Describe(out).value(list(callbacks), 0)
    except _OpaqueError:
        return None
    return "\n".join(out)


class _OpaqueError(Exception):
    """A callback holds something the description cannot see into."""


@dataclasses.dataclass
class _Describe:
    out: list[str]
    seen: int = 0
    #: Each code object's digest, once (a callback's functions recur across callbacks).
    codes: dict[types.CodeType, str] = dataclasses.field(default_factory=dict)

    def value(self, obj: Any, depth: int) -> None:
        self.seen += 1
        if depth > _DEEPEST or self.seen > _MOST_OBJECTS:
            raise _OpaqueError("too large")
        kind = type(obj)
        if obj is None or kind in (bool, int, float, complex, str, bytes):
            self.out.append(f"{kind.__name__}:{obj!r}")
        elif kind in (tuple, list):
            self.each(f"{kind.__name__}[", obj, depth)
        elif kind in (set, frozenset):
            self.each(f"{kind.__name__}[", sorted(obj, key=repr), depth)
        elif kind is dict:
            self.out.append(f"dict{{{len(obj)}")
            for key in sorted(obj, key=repr):
                self.value(key, depth + 1)
                self.value(obj[key], depth + 1)
        elif isinstance(obj, enum.Enum):
            self.out.append(f"enum:{_name(kind)}.{obj.name}")
        elif isinstance(obj, np.dtype):
            self.out.append(f"dtype:{obj.str}")
        elif isinstance(obj, np.generic):
            self.out.append(f"scalar:{obj.dtype.str}:{obj!r}")
        elif isinstance(obj, np.ndarray):
            if obj.dtype.hasobject or obj.nbytes > _LARGEST_ARRAY:
                raise _OpaqueError("array")
            data = hashlib.blake2b(np.ascontiguousarray(obj).tobytes(), digest_size=16)
            self.out.append(f"array:{obj.dtype.str}{obj.shape}:{data.hexdigest()}")
        elif isinstance(obj, functools.partial):
            self.each("partial[", (obj.func, obj.args, dict(obj.keywords)), depth)
        elif isinstance(obj, types.FunctionType):
            self.function(obj, depth)
        elif isinstance(obj, types.MethodType):
            self.each("method[", (obj.__func__, obj.__self__), depth)
        elif isinstance(obj, type) or (
            isinstance(obj, types.BuiltinFunctionType)
            and (obj.__self__ is None or isinstance(obj.__self__, types.ModuleType))
        ):
            self.out.append(f"named:{_name(obj)}")  # a class, or a module's own builtin
        elif isinstance(obj, tree_util.PyTreeDef):
            self.out.append(f"tree:{obj}")
        elif _jax_type(kind, "SourceInfo", "NameStack"):
            self.out.append("source")  # where the operation came from, for messages
        elif _jax_type(kind, "ShapedArray", "AbstractToken", "ShapeDtypeStruct"):
            self.out.append(f"aval:{obj!r}")
        elif dataclasses.is_dataclass(obj):
            fields = dataclasses.fields(obj)
            self.out.append(f"dataclass:{_name(kind)}:{len(fields)}")
            for field in fields:
                self.out.append(field.name)
                self.value(getattr(obj, field.name), depth + 1)
        else:
            raise _OpaqueError(_name(kind))

    def each(self, head: str, items: Any, depth: int) -> None:
        self.out.append(f"{head}{len(items)}")
        for item in items:
            self.value(item, depth + 1)

    def function(self, fn: types.FunctionType, depth: int) -> None:
        code = self.codes.get(fn.__code__)
        if code is None:
            code = self.codes[fn.__code__] = _code(fn.__code__)
        self.out.append(f"function:{fn.__module__}.{fn.__qualname__}:{code}")
        self.value(fn.__defaults__, depth + 1)
        self.value(fn.__kwdefaults__, depth + 1)
        cells = fn.__closure__ or ()
        self.out.append(f"closure:{len(cells)}")
        for cell in cells:
            try:
                held = cell.cell_contents
            except ValueError:  # a cell not filled yet
                self.out.append("empty")
                continue
            self.value(held, depth + 1)


def _code(code: types.CodeType) -> str:
    """A digest of what ``code`` runs: its bytecode, names and constants (nested code
    included), where it was defined. Not ``marshal``: its bytes depend on reference counts
    at the time (two dumps of one function differed within a sweep)."""
    parts = [
        code.co_code.hex(),
        code.co_filename,
        code.co_qualname,
        str(code.co_firstlineno),
        repr((code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount)),
        repr((code.co_flags, code.co_names, code.co_varnames)),
        repr((code.co_freevars, code.co_cellvars)),
    ]
    parts += [_code(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts]
    return hashlib.blake2b("\0".join(parts).encode(), digest_size=16).hexdigest()


def _name(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', repr(obj))}"


def _jax_type(kind: type, *names: str) -> bool:
    """Whether ``kind`` is JAX's own class of one of ``names`` (not a user's namesake)."""
    module = kind.__module__
    return kind.__name__ in names and (module == "jax" or module.startswith(("jax.", "jaxlib.")))
