"""A trace without jaxtune's sidecar: what the trace itself says about its kernels.

A trace written by plain ``jax.profiler.trace`` carries, on its ``/host:metadata`` plane,
the HLO proto of every program it ran: each instruction's op name (its name stack) and the
Python stack that traced it. On CPU that is all there is to find an interpret-mode Pallas
kernel, whose compiled ops keep no ``pallas_call`` in their names
(``jit(step)/jit(flash_attention)/while/...``):

- TPU interpret mode runs a kernel's memory operations as ``io_callback``s. Those outside
  the kernel's grid loop (name stack ``<scope>/io_callback``) were traced at the
  ``pallas_call`` line, so their Python stack ends there: that stack is the kernel's *site*
  (callbacks of index maps that read scalar-prefetch operands, traced at the same line,
  are part of it).
- An op whose stack passes through a site, and whose name stack through the site's scope,
  is the kernel's: its grid loop, its body, its callbacks. The kernel is named as the
  jaxpr names it, as far as the trace tells: ``pallas_call(name=...)`` runs the call under
  a scope of that name; else the function the site runs (the first frame below the site
  that is not the site's own code: ``_flash_attention_kernel``, ``matmul_kernel``); else
  (under autodiff, whose stacks stop at the user's call) the innermost named scope or
  ``jit``. Its source is the site's line.
- Other ops inside the kernel's scope (the glue of a wrapper such as ``jit(flash_attention)``)
  are the kernel's by the rule a capture applies (:func:`jaxtune._program.markers.owner_of`); a
  fusion belongs to the kernels of the instructions fused into it.
- A site surrounded by no loop or branch (its name stack holds no ``while``, ``cond``,
  ``branch_*``, ...) runs once per run of its program, so such a kernel's calls are exact:
  its sites times the runs (``run_id``) of the program the trace shows. Otherwise, or when
  the kernel appears in several programs, the calls are read off the trace and flagged.

Kernels that leave no callback behind (the generic ``pallas_call(..., interpret=True)``
interpreter, which runs the kernel as a ``while`` loop over its grid) are found by their
stacks instead (:func:`generic_sites`): the grid loop's own ops were traced at the
``pallas_call`` line (their stack ends there, under a ``while``), the kernel body's one
frame further, in the kernel function, which names the kernel. A ``lax.fori_loop`` looks
the same, so the call line must read ``pallas_call`` in its source file (read as text, a
regular file only, bounded; without the file such a kernel stays XLA ops).
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .._core.vocabulary import PallasKernel
from .._core.xspace import xplane as _xplane
from .._program import markers as _markers
from .hlo import Frame, HloInstruction, HloModule, parse_hlo_proto

__all__ = ["CALLBACK_TARGETS", "Recovered", "Site", "read_programs", "recover", "sites"]

#: Custom-call targets of a host callback (``io_callback``, ``pure_callback``) on CPU.
CALLBACK_TARGETS = ("xla_ffi_python_cpu_callback", "xla_python_cpu_callback")

#: Most kinds of callback (scope, stack) a program may have for its kernels to be searched.
MAX_CALLBACK_KINDS = 2000

#: Name-stack frames of loops and branches: a kernel under one may run any number of times.
_REPEATING = frozenset({"while", "body", "cond", "scan", "map", "fori_loop", "switch"})

#: Scopes JAX itself adds, never a kernel's name.
_NOT_NAMES = _REPEATING | {"eval_jaxpr", "closed_call", "core_call", "checkpoint", "remat"}
#: A named scope (not ``jit(...)``, a transform or a ``jaxtune[...]`` marker).
_SCOPE_NAME = re.compile(r"^[^()\[\]\s]+$")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Site:
    """One ``pallas_call`` of a program, as its interpret-mode callbacks show it."""

    name: str
    scope: tuple[str, ...]
    frames: tuple[Frame, ...]
    once: bool

    @property
    def source(self) -> str | None:
        return str(self.frames[-1]) if self.frames else None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Recovered:
    """What a trace's HLO protos say about its kernels: the sites found in each program
    (by program id), and the kernel each instruction belongs to (``(program id, op) ->
    names``: several kernels for a fusion of their ops)."""

    sites: dict[int, list[Site]]
    claims: dict[tuple[int, str], tuple[str, ...]]
    skipped: tuple[str, ...] = ()

    def kernels(self) -> list[PallasKernel]:
        """The sites as a capture records its Pallas calls (``name``, ``scope``,
        ``per_step``, ``source``): ``per_step`` is 1 for a site that runs once per run of
        its program, ``None`` when that is unknown (a loop around it, or the kernel in
        several programs, whose runs the trace cannot tell apart per kernel)."""
        programs: dict[str, set[int]] = collections.defaultdict(set)
        for pid, found in self.sites.items():
            for site in found:
                programs[site.name].add(pid)
        return [
            PallasKernel(
                name=site.name,
                scope=tuple(site.scope),
                per_step=1 if site.once and len(programs[site.name]) == 1 else None,
                source=site.source,
            )
            for found in self.sites.values()
            for site in found
        ]


def read_programs(
    space: _xplane.Space, wanted: set[int] | None = None
) -> tuple[dict[int, HloModule], list[str]]:
    """The decoded HLO module of each program (by program id) in ``wanted`` (all when
    ``None``), and the names of programs whose proto could not be decoded (skipped: a
    damaged proto costs only the op names of its program)."""
    modules: dict[int, HloModule] = {}
    unreadable: list[str] = []
    for pid, name, proto in space.hlo_programs():
        if pid is None or (wanted is not None and pid not in wanted):
            continue
        try:
            modules[pid] = parse_hlo_proto(proto)
        except _xplane.DecodeError:
            unreadable.append(name)
    return modules, unreadable


def _starts(seq: Sequence[Any], prefix: Sequence[Any]) -> bool:
    return len(seq) >= len(prefix) and tuple(seq[: len(prefix)]) == tuple(prefix)


def _kernel_name(
    frames: tuple[Frame, ...], scope: tuple[str, ...], members: list[tuple[Frame, ...]]
) -> str:
    """The kernel's name as the jaxpr gives it: ``pallas_call(name=...)``, which runs the
    call under a scope of that name; else the function the site runs (the commonest first
    frame below the site that is not the site's own code); else the innermost ``jit`` of
    the scope; else ``pallas_call``."""
    last = scope[-1] if scope else ""
    if _SCOPE_NAME.match(last) and last not in _NOT_NAMES and not last.startswith("branch_"):
        return last
    own = {f.function for f in frames}
    below = collections.Counter(
        stack[len(frames)].function
        for stack in members
        if len(stack) > len(frames) and stack[len(frames)].function not in own
    )
    if below:
        return below.most_common(1)[0][0].rsplit(".", 1)[-1]
    for frame in reversed(scope):
        if frame.startswith(("jit(", "pjit(")) and frame.endswith(")"):
            return frame[frame.index("(") + 1 : -1] or _markers.PALLAS_CALL
    return _markers.PALLAS_CALL


def _once(scope: tuple[str, ...]) -> bool:
    return not any(f in _REPEATING or f.startswith("branch_") for f in scope)


def _head(stack: tuple[Frame, ...], frame: Frame) -> tuple[Frame, ...]:
    """``stack`` down to the first time it reaches ``frame`` (empty when it never does)."""
    return stack[: stack.index(frame) + 1] if frame in stack else ()


def _same_call(stack: tuple[Frame, ...], site: Site) -> bool:
    """Whether ``stack`` was traced during ``site``'s call: it extends the site's stack,
    or it reaches the site's line from the same outer stack (an index map that reads a
    scalar-prefetch operand runs as a callback of its own, traced at the call)."""
    line = site.frames[-1]
    return _starts(stack, site.frames) or _head(stack, line) == _head(site.frames, line)


def _callbacks(module: HloModule) -> collections.Counter[tuple[tuple[str, ...], Any]]:
    """How many host callbacks of each (scope, Python stack) the program has."""
    return collections.Counter(
        (_markers.frames(i.op_name)[:-1], i.frames)
        for i in module.instructions.values()
        if i.target in CALLBACK_TARGETS and i.frames and i.op_name
    )


def sites(module: HloModule) -> list[Site]:
    """The interpret-mode Pallas kernel sites of a program, from its host callbacks (none
    past :data:`MAX_CALLBACK_KINDS` kinds of callback: the search is quadratic in them)."""
    calls = _callbacks(module)
    if len(calls) > MAX_CALLBACK_KINDS:
        return []

    # A callback whose scope and stack extend another's runs inside that kernel (its grid
    # loop, its body); the others were traced at a pallas_call line. The call with most
    # callbacks inside it is the site; others traced at the same call are part of it.
    outer = [
        (scope, stack)
        for scope, stack in calls
        if not any(
            len(s) < len(scope) and _starts(scope, s) and _starts(stack, f) for s, f in calls
        )
    ]
    outer.sort(key=lambda k: (-sum(calls[c] for c in calls if _inside(c, k)), len(k[1])))
    found: list[Site] = []
    for scope, stack in outer:
        if any(s.scope == scope and _same_call(stack, s) for s in found):
            continue
        inner = [c[1] for c in calls if _inside(c, (scope, stack))]
        name = _kernel_name(stack, scope, inner)
        found.append(Site(name=name, scope=scope, frames=stack, once=_once(scope)))
    return found


def _inside(call: tuple[Any, Any], site: tuple[Any, Any]) -> bool:
    return _starts(call[0], site[0]) and _starts(call[1], site[1])


def _claim(
    ins: HloInstruction,
    by_depth: list[Site],
    scopes: list[tuple[tuple[str, ...], tuple[str, ...]]],
) -> tuple[str, ...] | None:
    here = _markers.frames(ins.op_name)
    for site in by_depth:
        if _starts(ins.frames, site.frames) and _starts(here, site.scope):
            return (site.name,)
    if scopes and ins.op_name:
        owner = _markers.owner_of(ins.op_name, ins.target, ins.name, scopes)
        if owner.kind == "pallas":
            return owner.names
    return None


def claims(module: HloModule, found: list[Site]) -> dict[str, tuple[str, ...]]:
    """Instruction -> the kernel(s) it belongs to, for the instructions of ``found``'s
    kernels (by stack, then by scope, then fusions by what they fuse)."""
    if not found:
        return {}
    # The most specific site first: a backward kernel's scope extends the forward's.
    by_depth = sorted(found, key=lambda s: (-len(s.scope), -len(s.frames)))
    scopes = _markers.scope_table(found)
    out: dict[str, tuple[str, ...]] = {}
    for ins in module.instructions.values():
        owner = _claim(ins, by_depth, scopes)
        if owner is not None:
            out[ins.name] = owner
    for fusion, parts in module.fused.items():
        inner = {out[p] for p in parts if p in out}
        if fusion not in out and inner:
            out[fusion] = _markers.fused_names(inner)
    # Copies XLA added without metadata belong to the kernel that owns every other
    # instruction of their computation (a loop body of the kernel's).
    owners: dict[int, set[tuple[str, ...] | None]] = collections.defaultdict(set)
    for ins in module.instructions.values():
        if ins.op_name:
            owners[ins.computation].add(out.get(ins.name))
    for ins in module.instructions.values():
        only = owners.get(ins.computation, set())
        owner = next(iter(only)) if len(only) == 1 else None
        if not ins.op_name and owner is not None:
            out[ins.name] = owner
    return out


#: Largest source file read to check a call line (a trace names any path it likes).
MAX_SOURCE_BYTES = 4 << 20
#: Most source files read per report.
MAX_SOURCE_FILES = 64


class _Sources:
    """Lines of the source files a trace's stack frames name: regular files only, at
    most :data:`MAX_SOURCE_BYTES` each and :data:`MAX_SOURCE_FILES` in all."""

    def __init__(self) -> None:
        self.files: dict[str, list[str] | None] = {}

    def lines(self, path: str) -> list[str] | None:
        if path not in self.files:
            self.files[path] = self._read(path) if len(self.files) < MAX_SOURCE_FILES else None
        return self.files[path]

    @staticmethod
    def _read(path: str) -> list[str] | None:
        import os
        import stat

        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SOURCE_BYTES:
                return None
            with open(path, "rb") as f:
                return f.read(MAX_SOURCE_BYTES).decode("utf-8", errors="replace").splitlines()
        except (OSError, ValueError):
            return None

    def calls_pallas(self, frame: Frame) -> bool:
        """Whether the statement at ``frame`` (its line and the two after) calls
        ``pallas_call``."""
        lines = self.lines(frame.file)
        if not lines or not 0 < frame.line <= len(lines):
            return False
        return any("pallas_call" in line for line in lines[frame.line - 1 : frame.line + 2])


def _loop_scope(op_name: str) -> tuple[str, ...] | None:
    """The scope of a generic-interpreter kernel from one of its ops' name stacks: the
    frames before its grid loop (the innermost ``while``); ``None`` outside any loop."""
    here = _markers.frames(op_name)
    loops = [i for i, f in enumerate(here) if f == "while"]
    return here[: loops[-1]] if loops else None


def generic_sites(module: HloModule, sources: _Sources | None = None) -> list[Site]:
    """The kernels of the generic Pallas interpreter (``interpret=True``) in a program:
    a stack ``P`` with kernel-body ops one frame deeper (``P + (kernel function,)``) under
    the interpreter's ``while``, where ``P``'s line calls ``pallas_call``. Named after the
    kernel function."""
    sources = sources or _Sources()
    bodies: dict[tuple[Frame, ...], collections.Counter[str]] = collections.defaultdict(
        collections.Counter
    )
    scopes: dict[tuple[Frame, ...], tuple[str, ...]] = {}
    for ins in module.instructions.values():
        if len(ins.frames) < 2 or not ins.op_name or ins.target in CALLBACK_TARGETS:
            continue
        scope = _loop_scope(ins.op_name)
        if scope is None:
            continue
        stack = ins.frames[:-1]
        bodies[stack][ins.frames[-1].function] += 1
        if stack not in scopes or len(scope) < len(scopes[stack]):
            scopes[stack] = scope
    found: list[Site] = []
    # The shortest stacks first: a kernel body's own helpers are deeper than its call.
    for stack in sorted(bodies, key=len):
        if any(_starts(stack, s.frames) for s in found) or not sources.calls_pallas(stack[-1]):
            continue
        name = bodies[stack].most_common(1)[0][0].rsplit(".", 1)[-1]
        found.append(Site(name=name, scope=scopes[stack], frames=stack, once=_once(scopes[stack])))
    return found


def recover(modules: Mapping[int, HloModule]) -> Recovered:
    """The interpret-mode kernels of these programs (from :func:`read_programs`): TPU
    interpret mode's by their callbacks, the generic interpreter's by their stacks."""
    sources = _Sources()
    found = {pid: sites(m) or generic_sites(m, sources) for pid, m in modules.items()}
    claimed = {
        (pid, op): name for pid, m in modules.items() for op, name in claims(m, found[pid]).items()
    }
    skipped = [m.name for m in modules.values() if len(_callbacks(m)) > MAX_CALLBACK_KINDS]
    return Recovered(
        sites={pid: s for pid, s in found.items() if s}, claims=claimed, skipped=tuple(skipped)
    )
