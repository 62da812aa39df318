"""Finding, in the child, the function a request names: importing its module (or re-running
the script it was defined in, under another module name), with kernels called at the
module's top level kept from tuning there; and importing kernels' modules ahead of need.

A flow's handler may register an import observer (:func:`observe_imports`) that says which
kernels a module's top level called while it was imported: the parent is then told once.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import dis
import importlib
import importlib.util
import runpy
import sys
import traceback
import types
from collections.abc import Callable, Sequence
from typing import Any

from .._core.errors import describe
from .frames import SCRIPT_RERUN, FunctionRef, Module
from .state import ISOLATION_STATE

__all__ = [
    "BUSY_SCRIPTS",
    "NOTES",
    "Unresolved",
    "find",
    "namespace",
    "observe_imports",
    "preload",
    "resolve_callable",
    "script_namespaces",
]


class Unresolved(LookupError):  # noqa: N818 - a signal between processes, never raised to users
    """What a request names (a function, a kernel, a type of its arguments) cannot be
    imported or found in the child: the parent runs the work in its own process. Only this
    error means that; any other error inside the child is a fault, reported as one."""


_SCRIPTS: dict[Any, dict[str, Any]] = ISOLATION_STATE.keep(
    "scripts", dict, "the globals of scripts and files re-imported here, by path"
)

_OBSERVERS: list[Callable[[], contextlib.AbstractContextManager[list[str]]]] = ISOLATION_STATE.keep(
    "import observers",
    list,
    "entered around every import of a module a request names; each yields a list that "
    "holds, once the import is done, the kernels the module's top level called",
    never_reset="hooks registered at import",
)


def observe_imports(observer: Callable[[], contextlib.AbstractContextManager[list[str]]]) -> None:
    """Registers ``observer`` (once) to be entered around every import of a requested module."""
    if observer not in _OBSERVERS:
        _OBSERVERS.append(observer)


def namespace(ref: FunctionRef) -> dict[str, Any]:
    """The globals of the module a reference names.

    Raises:
        Unresolved: it cannot be imported here, whatever the reason.
    """
    from .._core import settings as _settings

    # Kernels the module's top level calls use cached or default configs here: a sweep
    # inside the import would tune them a second time, under the re-run script's name.
    called: list[str] = []
    try:
        with _settings.override(mode="cached"), contextlib.ExitStack() as stack:
            seen = [stack.enter_context(observer()) for observer in _OBSERVERS]
            found = _import(ref)
    except Exception as e:
        raise Unresolved(f"cannot import {ref.module}: {describe(e)}") from e
    for names in seen:
        called += [name for name in names if name not in called]
    note = _main_block_note(ref, found)
    if note is not None and note not in NOTES:
        NOTES.append(note)
    if called:
        if ref.module == "__main__":
            BUSY_SCRIPTS.add(ref.path)
        what = ref.path if ref.module == "__main__" else f"module {ref.module}"
        kernels = ", ".join(k.replace(SCRIPT_RERUN, "__main__") for k in called)
        NOTES.append(_REPEATED.format(what=what, kernels=kernels))
    return found


#: The scripts whose top level called ``@autotuned`` kernels when the child re-ran them:
#: their top level is work, not only definitions, and is not re-run in more processes.
BUSY_SCRIPTS: set[str | None] = ISOLATION_STATE.keep(
    "busy scripts", set, "the re-run scripts whose top level called autotuned kernels"
)


NOTES: list[str] = ISOLATION_STATE.keep(
    "notes",
    list,
    "notes for the parent to show once (each answer carries those gathered since the last)",
)
_REPEATED = (
    "the jaxtune child imported {what} to find a kernel, and its top level called "
    "@autotuned kernels ({kernels}): that work ran again in the child, with cached or "
    "default configs (nothing is tuned there). Put the work under an "
    '`if __name__ == "__main__":` guard (or in a function), so that importing it only '
    "defines the kernels."
)


#: A function of a script run as ``__main__`` that depends on what only the script's
#: ``if __name__ == "__main__":`` block sets: the child re-imports the script without it.
_MAIN_BLOCK = (
    "the jaxtune child process re-imported the script {path} to find {qualname}: it ran "
    'the script\'s top level but not its `if __name__ == "__main__":` block, and {what}. '
    "{fix}, or set JAXTUNE_ISOLATION=inline to tune and profile in this process."
)


def _main_block_note(ref: FunctionRef, globals_: dict[str, Any]) -> str | None:
    """Why a function re-imported from a ``__main__`` script cannot work in the child, when
    the reason is the script's ``__main__`` block: the function is defined only there, or
    it reads globals that only that block sets (a ``NameError`` when it runs). ``None``
    for any other function, and when the script's block is not the cause."""
    if ref.module != "__main__" or not ref.path:
        return None
    guarded = _guarded_names(ref.path)
    if not guarded:
        return None
    head = ref.qualname.split(".")[0]
    if head not in globals_:
        if head not in guarded:
            return None
        what = f"{head} is defined only in that block, so the child cannot find it"
        fix = f"Define {head} at the script's top level"
    else:
        unset = sorted(n for n in _globals_read(find(globals_, ref.qualname)) if n in guarded)
        if not unset:
            return None
        what = (
            f"{ref.qualname} reads {', '.join(unset)}, which only that block sets: undefined "
            "in the child (a NameError there)"
        )
        fix = "Move that setup to the script's top level (or into the function)"
    return _MAIN_BLOCK.format(path=ref.path, qualname=ref.qualname, what=what, fix=fix)


_GUARDED: dict[str, frozenset[str]] = ISOLATION_STATE.keep(
    "guarded names", dict, "the names scripts bind in their __main__ blocks, by path"
)


def _guarded_names(path: str) -> frozenset[str]:
    """The names a script binds in its top-level ``if __name__ == "__main__":`` blocks."""
    if path not in _GUARDED:
        try:
            with open(path, "rb") as f:
                tree = ast.parse(f.read(), path)
        except (OSError, SyntaxError, ValueError):
            tree = ast.Module(body=[], type_ignores=[])
        names: set[str] = set()
        for stmt in tree.body:
            if isinstance(stmt, ast.If) and _is_main_test(stmt.test):
                for inner in stmt.body:
                    names |= _bound(inner)
        _GUARDED[path] = frozenset(names)
    return _GUARDED[path]


def _is_main_test(test: ast.expr) -> bool:
    """Whether ``test`` is ``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    if not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and any(
        isinstance(s, ast.Constant) and s.value == "__main__" for s in sides
    )


def _bound(stmt: ast.stmt) -> set[str]:
    """The global names a statement of a script's top level binds (not those local to the
    functions and classes it defines)."""
    names: set[str] = set()
    todo: list[ast.AST] = [stmt]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        todo.extend(ast.iter_child_nodes(node))
    return names


def _globals_read(obj: Any) -> set[str]:
    """The global names ``obj`` (a function of the re-run script, or what wraps one: a
    ``jax.jit``, an ``@autotuned`` kernel, ``@profiled``, ``functools.partial``) and the
    script's functions it calls read that its globals lack, builtins aside."""
    missing: set[str] = set()
    seen: set[int] = set()
    todo = [obj]
    while todo:
        item = todo.pop()
        if item is None or isinstance(item, types.ModuleType) or id(item) in seen:
            continue
        seen.add(id(item))
        for attribute in ("__wrapped_profiled__", "__wrapped__", "func"):
            todo.append(getattr(item, attribute, None))
        code, globals_ = getattr(item, "__code__", None), getattr(item, "__globals__", None)
        if code is None or not isinstance(globals_, dict):
            continue
        if globals_.get("__name__") != SCRIPT_RERUN:
            continue  # another module's function: its globals are its own
        for name in _loaded_globals(code):
            if name in globals_:
                if callable(globals_[name]):
                    todo.append(globals_[name])
            elif not hasattr(builtins, name):
                missing.add(name)
    return missing


def _loaded_globals(code: Any) -> set[str]:
    """The names a code object (and the functions nested in it) loads as globals."""
    names: set[str] = set()
    todo = [code]
    while todo:
        current = todo.pop()
        for ins in dis.get_instructions(current):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str):
                names.add(ins.argval)
        todo.extend(c for c in current.co_consts if hasattr(c, "co_code"))
    return names


def script_namespaces() -> list[dict[str, Any]]:
    """The globals of every script the child re-ran (a parent's ``__main__``)."""
    return [ns for key, ns in _SCRIPTS.items() if not isinstance(key, tuple)]


def _import(ref: FunctionRef) -> dict[str, Any]:
    if ref.module == "__main__":
        if not ref.path:
            raise ImportError("a function of a script run as __main__ travels with its path")
        if ref.path not in _SCRIPTS:
            _SCRIPTS[ref.path] = _rerun_script(ref.path)
        return _SCRIPTS[ref.path]
    try:
        return vars(importlib.import_module(ref.module))
    except ImportError:
        if not ref.path:
            raise
    key = ("file", ref.path)
    if key not in _SCRIPTS:
        spec = importlib.util.spec_from_file_location(ref.module, ref.path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {ref.module} from {ref.path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[ref.module] = module
        spec.loader.exec_module(module)
        _SCRIPTS[key] = vars(module)
    return _SCRIPTS[key]


_UNGUARDED = (
    "the jaxtune child re-imported the script {path} to find the function (it runs the "
    'script\'s top level, not its `if __name__ == "__main__":` block), and line {line} '
    "(`{code}`) raised {error}. Put the script's work under an "
    '`if __name__ == "__main__":` guard, or define the kernel in a module outside the '
    "script."
)


def _rerun_script(path: str) -> dict[str, Any]:
    """Runs a script's top level under another module name, with ``sys.argv`` holding
    only its path (not the child's own options); a script that exits or raises on import
    becomes an ImportError that says why and what to do."""
    saved = sys.argv
    sys.argv = [path]
    try:
        return runpy.run_path(path, run_name=SCRIPT_RERUN)
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == path]
        line, code = (frames[-1].lineno, frames[-1].line) if frames else ("?", "?")
        error = f"{describe(e)}"
        raise ImportError(_UNGUARDED.format(path=path, line=line, code=code, error=error)) from e
    finally:
        sys.argv = saved


def find(globals_: dict[str, Any], qualname: str) -> Any:
    """The object at ``qualname`` in a module's globals (``None`` when missing)."""
    obj: Any = globals_
    for part in qualname.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def resolve_callable(ref: FunctionRef) -> Any:
    """The function a reference names (unwrapping ``@jaxtune.profiled``)."""
    obj = find(namespace(ref), ref.qualname)
    if obj is None:
        raise Unresolved(f"no function at {ref.module}:{ref.qualname}")
    return getattr(obj, "__wrapped_profiled__", obj)


def preload(modules: Sequence[Module]) -> list[str]:
    """Imports the modules of kernels the parent decorated, ahead of their first sweep
    (each with the parent's variables when it decorated them); returns those imported. One
    that fails is left for its sweep to report."""
    from .environ import sync_environ

    imported = []
    for module in modules:
        sync_environ(module.environ)
        with contextlib.suppress(LookupError):
            namespace(module.ref)
            imported.append(module.ref.module)
    return imported
