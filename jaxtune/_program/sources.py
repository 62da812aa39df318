"""Where a Pallas kernel is called: its ``pallas_call`` line, and the line of the program
that called into the kernel's code.

A ``pallas_call`` equation's traceback usually passes through its ``pallas_call`` line.
Under autodiff it does not: a ``custom_vjp``'s forward and backward rules are traced under
the traceback of the call of the ``custom_vjp`` function (for JAX's flash attention, the
``return _flash_attention(...)`` of its wrapper, for the forward kernel and both backward
kernels alike). The call is then found in the source of the kernel function's module: the
one ``pallas_call(...)`` written in a function that names the kernel function
(``functools.partial(_flash_attention_dkv_kernel, ...)`` in ``_flash_attention_bwd_dkv``).

A traceback also stops where the trace of its ``jit`` began, so the program's own line is
found in the tracebacks of the equations around the kernel (a ``jit`` around the kernel's
wrapper is called from it): the innermost frame outside the kernel's file, JAX and jaxtune.
"""

from __future__ import annotations

import ast
import functools
import os
import pathlib
import re
import stat
from collections.abc import Iterable, Iterator
from typing import Any

from .state import PROGRAM_STATE

__all__ = ["Frame", "call_site", "pallas_site", "user_frames"]

#: Largest source file parsed to find a ``pallas_call`` line.
MAX_SOURCE_BYTES = 4 << 20

_PALLAS_CALL = "pallas_call"
_CALLS_PALLAS = re.compile(r"(?<!\w)pallas_call\s*\(")
#: jaxtune's own package: its frames (the decorators, the capture) are no call site.
_OWN = str(pathlib.Path(__file__).resolve().parent.parent) + os.sep

Frame = tuple[str, int]  # (file, line)


def user_frames(eqn: Any) -> list[Frame]:
    """``(file, line)`` of an equation's traceback, innermost first, JAX's own frames
    left out (JAX's rule, :func:`jax._src.source_info_util.user_frames`)."""
    try:
        from jax._src import source_info_util

        frames = source_info_util.user_frames(eqn.source_info.traceback)
        return [(f.file_name, int(f.start_line)) for f in frames]
    except Exception:  # a JAX whose internals moved: no frames, never an error
        return []


def _text(frame: Frame) -> str:
    return f"{frame[0]}:{frame[1]}"


def pallas_site(eqn: Any, frames: list[Frame]) -> str | None:
    """``file:line`` of the ``pallas_call`` of a ``pallas_call`` equation whose traceback
    has ``frames`` (from :func:`user_frames`): the innermost frame whose statement calls
    ``pallas_call``; else the one ``pallas_call`` in the kernel function's module written
    in a function that names the kernel function; else the innermost frame."""
    for frame in frames:
        if _calls_pallas(*frame):
            return _text(frame)
    found = _site_of_kernel(eqn)
    if found is not None:
        return found
    return _text(frames[0]) if frames else None


def call_site(site: str | None, frames: Iterable[Frame]) -> str | None:
    """The first of ``frames`` (innermost first) outside the file of ``site`` and outside
    jaxtune: the line of the program that called into the kernel's code."""
    kernel_file = site.rpartition(":")[0] if site else None
    for file, line in frames:
        if file != kernel_file and not file.startswith(_OWN):
            return f"{file}:{line}"
    return None


def _calls_pallas(file: str, line: int) -> bool:
    """Whether the statement at ``file:line`` (that line and the two after, as a call
    written over several lines starts) calls ``pallas_call``."""
    lines = _lines(file)
    if not lines or not 0 < line <= len(lines):
        return False
    return _CALLS_PALLAS.search("\n".join(lines[line - 1 : line + 2])) is not None


def _site_of_kernel(eqn: Any) -> str | None:
    """The ``pallas_call`` written in a function of the kernel function's module that names
    the kernel function, when there is exactly one."""
    debug = getattr(eqn.params.get("jaxpr"), "debug_info", None)
    name = getattr(debug, "func_name", None)
    where = getattr(debug, "func_src_info", None) or ""
    # ``"<name> at <file>:<line>"``, as JAX writes a function's source info.
    file = where.rpartition(" at ")[2].rpartition(":")[0]
    if not name or not file:
        return None
    lines = _sites_naming(file).get(name.rsplit(".", 1)[-1], ())
    return f"{file}:{lines[0]}" if len(lines) == 1 else None


@PROGRAM_STATE.memo("source", "source files' text, by path")
@functools.lru_cache(maxsize=64)
def _source(file: str) -> str | None:
    try:
        st = os.stat(file)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SOURCE_BYTES:
            return None
        with open(file, "rb") as f:
            return f.read(MAX_SOURCE_BYTES).decode("utf-8", errors="replace")
    except (OSError, ValueError):
        return None


@PROGRAM_STATE.memo("lines", "source files' lines, by path")
@functools.lru_cache(maxsize=64)
def _lines(file: str) -> tuple[str, ...]:
    text = _source(file)
    return tuple(text.splitlines()) if text is not None else ()


@PROGRAM_STATE.memo(
    "sites naming", "the pallas_call lines of source files, by the names they mention"
)
@functools.lru_cache(maxsize=64)
def _sites_naming(file: str) -> dict[str, tuple[int, ...]]:
    """Name -> the lines of the ``pallas_call(...)`` calls written in functions that
    mention that name, in one module."""
    text = _source(file)
    try:
        tree = ast.parse(text) if text is not None else None
    except (SyntaxError, ValueError):
        tree = None
    if tree is None:
        return {}
    found: dict[str, list[int]] = {}
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        calls = [
            n.lineno for n in _own_nodes(function) if isinstance(n, ast.Call) and _is_pallas_call(n)
        ]
        if not calls:
            continue
        for name in {_name_of(n) for n in _own_nodes(function)} - {None}:
            found.setdefault(name, []).extend(calls)  # type: ignore[arg-type]
    return {name: tuple(sorted(set(lines))) for name, lines in found.items()}


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's body, not those of the functions defined inside it (a
    kernel body defined inside its wrapper is a function of its own)."""
    todo = list(ast.iter_child_nodes(function))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


def _name_of(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_pallas_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and _name_of(node.func) == _PALLAS_CALL
