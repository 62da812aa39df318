"""A digest of a kernel's code, so that an entry tuned for other code is never used.

The digest covers the decorated function and every function it reaches within its own
package (the top-level package of its module; JAX's functions and jaxtune's own are
outside it): functions named in its body, module-level helpers of a package module it
names, Pallas kernel bodies handed to ``pl.pallas_call`` (directly or through
``functools.partial``), closures, ``jax.custom_vjp``/``custom_jvp`` rules, other
``@autotuned`` kernels, and so on, recursively, and the module-level names they read
that their modules assign (constants such as ``A = 0.99``, tables, aliases: the assigning
statements count, :func:`_global_parts`). Each function counts by its syntax tree
without positions, comments, docstrings, ``ctx`` or empty fields (:func:`canonical`), so
reformatting, comments and blank lines change nothing; the ``@autotuned(...)`` decorator
of the kernel itself is left out (its space and prune have their own checks).

Each function is a :class:`Part` ``(module, qualname, hash)``; the digest hashes the
sorted parts. An entry stores both, so ``jaxtune cache list`` can tell whether an entry
is stale without importing the kernel: it hashes each part's function again from the
source file it finds for the module (:func:`check_parts`).

The digest of a kernel is worked out once per process, on first use (a lookup that
finds an entry, or a sweep), never on a call's hot path (:class:`KernelCode`).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib.machinery
import importlib.util
import linecache
import os
import pathlib
import sys
import threading
import types
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal

from .._core.vocabulary import CodeDigest, Part
from .state import TUNING_STATE

__all__ = [
    "CodeDigest",
    "KernelCode",
    "Part",
    "canonical",
    "check_parts",
    "code_changed",
    "code_digest",
]


#: Fields of the syntax tree that say how code is written, not what it does.
_LAYOUT_FIELDS = frozenset({"ctx", "type_comment", "kind"})

#: Attributes of a callable object that hold the functions it runs: ``functools.wraps``,
#: ``functools.partial``, ``jax.custom_vjp`` and ``jax.custom_jvp``.
_INNER = ("__wrapped__", "func", "fun", "fwd", "bwd", "jvp")


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def canonical(node: Any) -> Any:
    """``node`` as nested lists without positions, ``ctx``, string kinds, empty fields or
    docstrings: the same for code that differs only in layout and comments, and for the
    same code read by Pythons whose trees add fields (left empty for older syntax)."""
    if isinstance(node, ast.AST):
        fields: list[Any] = [type(node).__name__]
        for name, value in ast.iter_fields(node):
            if name in _LAYOUT_FIELDS or value is None or value == []:
                continue
            if name == "body" and isinstance(value, list):
                value = _without_docstring(node, value)
            fields.append([name, canonical(value)])
        return fields
    if isinstance(node, list):
        return [canonical(v) for v in node]
    return [type(node).__name__, repr(node)]


def _without_docstring(node: ast.AST, body: list[ast.stmt]) -> list[ast.stmt]:
    if (
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module))
        and body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        return body[1:]
    return body


def _is_autotuned(decorator: ast.expr) -> bool:
    """Whether a decorator is ``@autotuned(...)`` / ``@jaxtune.autotuned(...)``."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    return name == "autotuned"


def _part_hash(node: ast.AST, *, root: bool) -> str:
    if root and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        kept = [d for d in node.decorator_list if not _is_autotuned(d)]
        if len(kept) != len(node.decorator_list):
            node = _copy_with(node, decorator_list=kept)
    return _hash(repr(canonical(node)))


def _copy_with(node: ast.AST, **fields: Any) -> ast.AST:
    copy = type(node)(**{name: value for name, value in ast.iter_fields(node)})
    for name, value in fields.items():
        setattr(copy, name, value)
    return copy


# -- source trees ----------------------------------------------------------------------

_FUNCTION_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


@dataclasses.dataclass(frozen=True, slots=True)
class _Parsed:
    """A parsed source file: its tree, its function definitions by (first line, name), the
    module-level statements that assign each name, and the names it imports from modules
    (name -> (module, level, name there))."""

    tree: ast.Module
    defs: dict[tuple[int, str], list[ast.AST]]
    assigns: dict[str, list[ast.stmt]]
    imports: dict[str, tuple[str, int, str]]


_TREES_LOCK = threading.Lock()
_TREES: dict[str, tuple[str, _Parsed | None]] = TUNING_STATE.keep(
    "parsed modules",
    dict,
    "the modules parsed for code digests, by file, with their text",
    lock=_TREES_LOCK,
)


def _first_line(node: ast.AST) -> int:
    decorators = getattr(node, "decorator_list", None)
    return decorators[0].lineno if decorators else node.lineno  # type: ignore[attr-defined]


def _parsed(filename: str, text: str) -> _Parsed | None:
    """The parsed module ``text`` of ``filename`` and its definitions (parsed once per
    text per process); ``None`` when it does not parse."""
    with _TREES_LOCK:
        known = _TREES.get(filename)
        if known is not None and known[0] == text:
            return known[1]
    parsed: _Parsed | None
    try:
        tree = ast.parse(text, filename)
    except (SyntaxError, ValueError):
        parsed = None
    else:
        index: dict[tuple[int, str], list[ast.AST]] = {}
        for node in ast.walk(tree):
            if isinstance(node, _FUNCTION_NODES):
                name = getattr(node, "name", "<lambda>")
                index.setdefault((_first_line(node), name), []).append(node)
        assigns: dict[str, list[ast.stmt]] = {}
        imports: dict[str, tuple[str, int, str]] = {}
        _module_names(tree.body, assigns, imports)
        parsed = _Parsed(tree, index, assigns, imports)
    with _TREES_LOCK:
        _TREES[filename] = (text, parsed)
    return parsed


def _module_names(
    body: list[ast.stmt],
    assigns: dict[str, list[ast.stmt]],
    imports: dict[str, tuple[str, int, str]],
) -> None:
    """Fills ``assigns`` with the module-level statements that assign (or change) each
    name, and ``imports`` with the names ``from ... import`` binds, looking through
    ``if``/``try``/``with``/``for`` but not into definitions. An ``@autotuned`` kernel
    made by a call (``k = autotuned(...)(f)``) is not an assignment of a value: its space
    has its own checks, and ``f`` counts by its code."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                imports[alias.asname or alias.name] = (node.module or "", node.level, alias.name)
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            value = node.value
            if not (isinstance(value, ast.Call) and _is_autotuned(value.func)):
                targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
            targets = [node.target]
        for target in targets:
            for name in ast.walk(target):  # a, b = ...; TABLE["k"] = ...
                if isinstance(name, ast.Name):
                    assigns.setdefault(name.id, []).append(node)
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                _module_names(inner, assigns, imports)


def _node_of(fn: types.FunctionType) -> ast.AST | None:
    """The syntax tree of ``fn``'s definition, found in its module's source by its first
    line and name; ``None`` when the source cannot be read."""
    code = fn.__code__
    filename = code.co_filename
    lines = linecache.getlines(filename, fn.__globals__)
    if not lines:
        return None
    parsed = _parsed(filename, "".join(lines))
    if parsed is None:
        return None
    found = parsed.defs.get((code.co_firstlineno, code.co_name), [])
    if len(found) > 1:  # several lambdas on one line: the one whose body starts first
        starts = [col for _, _, col, _ in code.co_positions() if col]
        first = min(starts) if starts else -1
        found = [
            n for n in found if isinstance(n, ast.Lambda) and n.body.col_offset == first
        ] or found[:1]
    return found[0] if found else None


# -- what a function reaches ---------------------------------------------------------------


def _names(code: types.CodeType) -> Iterator[str]:
    """Global and attribute names the code and the code nested in it use."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _names(const)


def _top(module: str) -> str:
    return module.split(".")[0]


#: The names a script's own module has while it runs: as the program (``__main__``), in
#: a ``multiprocessing`` spawn worker (``__mp_main__``) and in jaxtune's child.
_SCRIPT_NAMES = frozenset({"__main__", "__mp_main__", "__jaxtune_main__"})


def _script_name(globals_: dict[str, Any]) -> str | None:
    """The name a running script's module has when imported, from its own globals:
    ``pkg.mod`` when run as ``python -m pkg.mod``, ``name`` when run as ``name.py`` (also
    under ``python -m cProfile name.py``, whose ``sys.modules["__main__"]`` is cProfile);
    ``None`` without either (``python -c``, a REPL, a notebook)."""
    spec = globals_.get("__spec__")
    name = getattr(spec, "name", None)
    if isinstance(name, str) and name and name not in _SCRIPT_NAMES:
        return name
    file = globals_.get("__file__")
    if isinstance(file, str):
        stem = pathlib.Path(file).stem
        if stem.isidentifier():
            return stem
    return None


class _Walk:
    """The functions of one kernel's package that its function reaches."""

    def __init__(self, root: types.FunctionType) -> None:
        module = root.__module__ or ""
        #: What the running script's module is called when imported (the kernel's own,
        #: when the kernel is defined in the script), so that a kernel's digest is the
        #: same whether its file was run or imported.
        self.script = _script_name(root.__globals__) if module in _SCRIPT_NAMES else None
        self.package = _top(self.named(module))
        self.functions: dict[int, types.FunctionType] = {}
        #: Module-level names the functions read: (module, name).
        self.read: dict[tuple[str, str], None] = {}
        #: Where each module's source is: module -> (file name, its globals).
        self.sources: dict[str, tuple[str, dict[str, Any]]] = {}
        self._seen: set[int] = set()

    def inside(self, module: Any) -> bool:
        """Whether a module name lies in the kernel's package (jaxtune's own code never)."""
        if not isinstance(module, str) or _top(self.named(module)) != self.package:
            return False
        return not (module == "jaxtune" or module.startswith("jaxtune._"))

    def named(self, module: str) -> str:
        """``module``'s name when imported (the script's, for the script's own names)."""
        return self.script or module if module in _SCRIPT_NAMES else module

    def visit(self, value: Any, names: frozenset[str], depth: int = 0) -> None:
        if id(value) in self._seen or depth > 8:
            return
        self._seen.add(id(value))
        if isinstance(value, types.FunctionType):
            if self.inside(value.__module__):
                self.functions[id(value)] = value
                self._reach(value)
            # A wrapper from outside the package (a jit) may still wrap a function of it.
            inner = getattr(value, "__wrapped__", None)
            if inner is not None:
                self.visit(inner, names, depth + 1)
            return
        if isinstance(value, types.MethodType):
            self.visit(value.__func__, names, depth + 1)
            return
        if isinstance(value, types.ModuleType):
            if self.inside(value.__name__):
                file = getattr(value, "__file__", None)
                if isinstance(file, str):
                    self.sources.setdefault(value.__name__, (file, value.__dict__))
                for name in names:
                    if name in value.__dict__:
                        self.read[value.__name__, name] = None
                    member = value.__dict__.get(name)
                    if member is not None:
                        self.visit(member, names, depth + 1)
            return
        if isinstance(value, type):
            if self.inside(value.__module__):
                for member in vars(value).values():
                    func = getattr(member, "__func__", member)  # staticmethod, classmethod
                    if isinstance(func, types.FunctionType):
                        self.visit(func, names, depth + 1)
            return
        if isinstance(value, functools.partial):
            for part in (value.func, *value.args, *value.keywords.values()):
                self.visit(part, names, depth + 1)
            return
        for attribute in _INNER:
            try:
                inner = getattr(value, attribute, None)
            except Exception:  # a property of someone's object that raises
                continue
            if inner is not None and callable(inner):
                self.visit(inner, names, depth + 1)

    def _reach(self, fn: types.FunctionType) -> None:
        names = frozenset(_names(fn.__code__))
        scope = fn.__globals__
        module = fn.__module__ or ""
        self.sources.setdefault(module, (fn.__code__.co_filename, scope))
        for name in names:
            if name in scope:
                self.read[module, name] = None
                self.visit(scope[name], names)
        for cell in fn.__closure__ or ():
            try:
                self.visit(cell.cell_contents, names)
            except ValueError:  # an empty cell
                continue
        for default in (*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()):
            self.visit(default, names)

    def source(self, module: str) -> _Parsed | None:
        """The parsed source of ``module`` (one the functions live in, or an imported one
        of the package); ``None`` when it cannot be read."""
        known = self.sources.get(module)
        if known is None:
            loaded = sys.modules.get(module)
            file = getattr(loaded, "__file__", None)
            if loaded is None or not isinstance(file, str):
                return None
            known = self.sources[module] = (file, vars(loaded))
        filename, globals_ = known
        lines = linecache.getlines(filename, globals_)
        return _parsed(filename, "".join(lines)) if lines else None

    def origin(self, module: str, imported: tuple[str, int, str]) -> str | None:
        """The module that ``from ... import`` in ``module`` reads a name from, when it
        lies in the kernel's package."""
        name, level, _ = imported
        if level:
            globals_ = self.sources.get(module, ("", {}))[1]
            package = globals_.get("__package__") or self.named(module).rpartition(".")[0]
            try:
                name = importlib.util.resolve_name("." * level + name, str(package))
            except (ImportError, ValueError):
                return None
        return name if self.inside(name) else None


#: The qualified name of a module-level name's part (its assignments, not a function).
_GLOBAL = "global "

#: At most this many module-level names are followed per kernel (a bound, not a budget:
#: real kernels read a few dozen).
_MAX_GLOBALS = 4096


def _global_hash(statements: Sequence[ast.stmt]) -> str:
    return _hash(repr([canonical(s) for s in statements]))


def _global_parts(walk: _Walk) -> list[Part]:
    """A part for each module-level name the kernel's functions read that its module
    assigns (``A = 0.99``, ``BLOCKS = (128, 256)``, ``act = jax.nn.gelu``): the statements
    that assign it, and in turn those of the module-level names their values read; a name
    imported from another module of the package (``from .consts import A``) counts by
    that module's assignment. Definitions count by their code (:func:`code_digest`), and
    imports of other packages not at all."""
    out: list[Part] = []
    pending = list(walk.read)
    seen: set[tuple[str, str]] = set()
    while pending and len(seen) < _MAX_GLOBALS:
        module, name = pending.pop()
        if (module, name) in seen:
            continue
        seen.add((module, name))
        parsed = walk.source(module)
        if parsed is None:
            continue
        statements = parsed.assigns.get(name)
        if statements:
            out.append((module, _GLOBAL + name, _global_hash(statements)))
            values = [v for s in statements if (v := getattr(s, "value", None)) is not None]
            pending += [
                (module, n.id) for v in values for n in ast.walk(v) if isinstance(n, ast.Name)
            ]
            continue
        imported = parsed.imports.get(name)
        origin = walk.origin(module, imported) if imported else None
        if imported and origin:
            pending.append((origin, imported[2]))
    return out


def code_digest(fn: Any) -> CodeDigest:
    """The digest of ``fn``'s code and the code it reaches in its package; empty when
    ``fn`` is no Python function or its source cannot be read."""
    while not isinstance(fn, types.FunctionType) and getattr(fn, "__wrapped__", None):
        fn = fn.__wrapped__
    if not isinstance(fn, types.FunctionType):
        return CodeDigest()
    walk = _Walk(fn)
    walk.functions[id(fn)] = fn
    walk._seen.add(id(fn))
    walk._reach(fn)
    parts: list[Part] = []
    for f in walk.functions.values():
        node = _node_of(f)
        if node is None:
            if f is fn:
                return CodeDigest()  # no source for the kernel itself: nothing to compare
            continue
        parts.append((f.__module__, f.__qualname__, _part_hash(node, root=f is fn)))
    parts += _global_parts(walk)
    ordered = tuple(sorted(set(parts)))
    # The digest hashes the names the modules have when imported; the parts keep the names
    # they have here, so ``cache list`` says "unknown" for a script's functions rather
    # than guess which file on its path a script's name means.
    named = tuple(sorted({(walk.named(m), q, h) for m, q, h in ordered}))
    return CodeDigest(digest=_hash(repr(named)), parts=ordered)


def _safe_digest(fn: Any) -> CodeDigest:
    """:func:`code_digest`, or none (entries of unknown code, never stale) when reading the
    code fails in a way nobody foresaw: a lookup must never fail for it."""
    try:
        return code_digest(fn)
    except (Exception, RecursionError):
        return CodeDigest()


class KernelCode:
    """A kernel's :class:`CodeDigest`, worked out on first use and kept (thread-safe).

    ``enabled`` is false when the kernel gave ``version=``: its author says when it
    changed, and its digest stays empty.
    """

    def __init__(self, fn: Any, *, enabled: bool = True) -> None:
        self._fn = fn
        self._enabled = enabled
        self._value: CodeDigest | None = None
        self._lock = threading.Lock()

    @property
    def value(self) -> CodeDigest:
        """The digest and its parts (computed now if not yet)."""
        value = self._value
        if value is None:
            with self._lock:
                if self._value is None:
                    self._value = _safe_digest(self._fn) if self._enabled else CodeDigest()
                value = self._value
        return value

    @property
    def digest(self) -> str:
        """The digest (``""``: none)."""
        return self.value.digest

    def changed(self, recorded: str) -> bool:
        """Whether an entry that recorded ``recorded`` was tuned for other code
        (:func:`code_changed` against this kernel's digest)."""
        if not recorded or not self._enabled:
            return False  # unknown code: no digest to work out
        return code_changed(self.digest, recorded)


def code_changed(current: str, recorded: str) -> bool:
    """Whether an entry that recorded the digest ``recorded`` was tuned for other code than
    the digest ``current``: both known and different (an entry or a kernel without one is
    of unknown code, never stale for it). The one rule: the lookup asks it through
    :meth:`KernelCode.changed`, ``jaxtune tune --from-profile`` of a recorded call's digest."""
    return bool(current and recorded) and current != recorded


# -- staleness without importing the kernel ------------------------------------------------

Freshness = Literal["fresh", "changed", "unknown"]


def _module_file(module: str, search: Sequence[str]) -> pathlib.Path | None:
    """The source file of ``module`` found on ``search`` without importing anything."""
    if module == "__main__" or not module:
        return None
    top, *rest = module.split(".")
    spec = importlib.machinery.PathFinder.find_spec(top, list(search))
    if spec is None:
        return None
    if not rest:
        return pathlib.Path(spec.origin) if spec.origin and spec.has_location else None
    locations = list(spec.submodule_search_locations or ())
    for location in locations:
        base = pathlib.Path(location, *rest[:-1])
        for candidate in (base / f"{rest[-1]}.py", base / rest[-1] / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def _scopes(body: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """The definitions directly in ``body``, looking through ``if``/``try``/``with`` but
    not into other definitions."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node
        else:
            for child in ast.iter_child_nodes(node):
                yield from _scopes([child])


def _candidates(tree: ast.Module, qualname: str) -> list[ast.AST]:
    """Every definition ``qualname`` may name in ``tree``."""
    scopes: list[ast.AST] = [tree]
    names = [n for n in qualname.split(".") if n != "<locals>"]
    for i, name in enumerate(names):
        found: list[ast.AST] = []
        for scope in scopes:
            body = getattr(scope, "body", [])
            if name == "<lambda>" and i == len(names) - 1:
                found.extend(n for n in ast.walk(scope) if isinstance(n, ast.Lambda))
            else:
                found.extend(n for n in _scopes(body) if getattr(n, "name", None) == name)
        scopes = found
    return scopes


def check_parts(parts: Sequence[Part], *, search: Sequence[str] | None = None) -> Freshness:
    """Whether the code an entry was tuned for is the code on disk now, read from the
    modules' source files on ``search`` (default: ``sys.path`` and the working
    directory) without importing them: ``changed`` when a part's function changed or is
    gone from a module file that exists, ``unknown`` when a module's file is not found
    (or the entry has no parts), else ``fresh``."""
    if not parts:
        return "unknown"
    try:
        return _check_parts(parts, search)
    except (Exception, RecursionError):  # a file that cannot be read as expected
        return "unknown"


def _check_parts(parts: Sequence[Part], search: Sequence[str] | None) -> Freshness:
    where = list(search) if search is not None else [*sys.path, os.getcwd()]
    files: dict[str, pathlib.Path | None] = {}
    unknown = False
    for module, qualname, recorded in parts:
        if module not in files:
            files[module] = _module_file(module, where)
        path = files[module]
        if path is None:
            unknown = True
            continue
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            unknown = True
            continue
        parsed = _parsed(str(path), text)
        if parsed is None:
            return "changed"
        if qualname.startswith(_GLOBAL):
            statements = parsed.assigns.get(qualname.removeprefix(_GLOBAL))
            if not statements or _global_hash(statements) != recorded:
                return "changed"
            continue
        hashes = set()
        for node in _candidates(parsed.tree, qualname):
            hashes.add(_part_hash(node, root=False))
            hashes.add(_part_hash(node, root=True))
        if recorded not in hashes:
            return "changed"
    return "unknown" if unknown else "fresh"
