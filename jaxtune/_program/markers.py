"""Markers that @autotuned calls leave in the lowered program.

Each call runs its kernel under ``jax.named_scope("jaxtune[<kernel id>#<digest>]")``: the
kernel id names every op of the kernel in StableHLO locations and in compiled HLO's
``op_name`` (so profiles attribute time to it), while the key and config stay out of the
program, behind a 10-character digest that this process maps back to them.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import itertools
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal

from .._core.vocabulary import Source, config_id
from . import sources as _sources
from .state import PROGRAM_STATE

__all__ = [
    "Mark",
    "Marker",
    "Owner",
    "differentiated",
    "digest",
    "fused_names",
    "lookup",
    "lowering_only",
    "lowering_only_now",
    "mark",
    "owner_of",
    "parse",
    "scope_table",
]

_PATTERN = re.compile(r"jaxtune\[(?P<kernel>[^\]#]+)#(?P<digest>[0-9a-f]{10})\]")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Mark:
    """What a marker stands for: the kernel's id, the call's key, config and abstract
    arguments (enough to tune that call again), and the decorated function (its source
    lines locate the kernel's ops). The tuning flow keeps the call behind each mark itself
    (``jaxtune._tuning.bound.marked_call``)."""

    kernel: str
    key: str
    config: dict[str, Any]
    source: Source
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    fn: Callable[..., Any] | None = dataclasses.field(default=None, compare=False)
    #: The call was traced under ``jax.grad``/``jax.vjp`` (its backward pass runs too).
    differentiated: bool = False


_LOCK = threading.Lock()
_MARKS: dict[str, Mark] = PROGRAM_STATE.keep(
    "marks",
    dict,
    "the marks this process made, by digest (:func:`mark`, :func:`lookup`)",
    lock=_LOCK,
)


def digest(m: Mark) -> str:
    """The 10-character digest that stands for ``m`` in its marker."""
    # A differentiated call is a mark of its own: the same call in a plain step of the same
    # process is not differentiated.
    text = f"{m.kernel}|{m.key}|{config_id(m.config)}" + ("|vjp" if m.differentiated else "")
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def mark(m: Mark) -> str:
    """Registers ``m`` and returns the scope name to run the kernel under."""
    found = digest(m)
    with _LOCK:
        _MARKS[found] = m
    return f"jaxtune[{m.kernel}#{found}]"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Marker:
    """One marker in a name stack: the kernel id, the digest :func:`lookup` maps back to
    its :class:`Mark`, and the offset just past it (the name stack up to ``end`` is the
    kernel's scope)."""

    kernel: str
    digest: str
    end: int


def parse(name_stack: str) -> list[Marker]:
    """Every marker in a name stack, outermost first."""
    return [
        Marker(kernel=x["kernel"], digest=x["digest"], end=x.end())
        for x in _PATTERN.finditer(name_stack)
    ]


def differentiated(name_stack: str, kernel: str) -> bool:
    """Whether a name stack shows ``kernel``'s own scope under ``jvp`` (the kernel is
    differentiated, so its backward pass runs too): ``transpose(jvp(jaxtune[k#...``,
    ``transpose(jvp(jit(f)))/jaxtune[k#...`` (JAX 0.12), or ``jvp()/jaxtune[k#...`` as a
    jaxpr writes it. A kernel that merely runs inside another
    kernel's backward pass is not."""
    for match in _PATTERN.finditer(name_stack):
        before = name_stack[: match.start()]
        if match["kernel"] != kernel:
            continue
        # JAX 0.10 writes the transform around the marker; 0.12 around the kernel's jit
        # frame just before it: transpose(jvp(jit(f)))/jaxtune[k#...].
        frame = before.rstrip("/").rsplit("/", 1)[-1]
        if before.endswith(("jvp(", "jvp()/")) or frame.startswith(
            ("jvp(jit(", "transpose(jvp(jit(")
        ):
            return True
    return False


def lookup(digest: str) -> Mark | None:
    """The mark behind a digest, when this process made it."""
    with _LOCK:
        return _MARKS.get(digest)


# -- Pallas kernels: custom-call targets, name stacks, and the jaxpr's pallas_call ---------

#: Custom-call targets of Pallas kernels: Mosaic TPU, Triton, Mosaic GPU.
PALLAS_TARGETS = ("tpu_custom_call", "__gpu$xla.gpu.triton", "mosaic_gpu", "mosaic_gpu_v2")
PALLAS_CALL = "pallas_call"

#: Transform wrappers of a name-stack frame: ``jvp(jit(f))`` is frame ``jit(f)`` seen
#: through a transform. The jaxpr writes them as frames of their own (``jvp()/jit(f)``).
_WRAPPER = re.compile(r"^(?:jvp|transpose|vmap|batch|remat|checkpoint|pmap|xmap)\((?P<in>.*)\)$")


def frames(name_stack: str) -> tuple[str, ...]:
    """A name stack's scopes with transform wrappers removed, so a compiled op's
    ``transpose(jvp(jit(step)))/jit(f)`` and a jaxpr's ``transpose(jvp())/jit(step)/jit(f)``
    both read ``("jit(step)", "jit(f)")``."""
    out: list[str] = []
    for frame in _split(name_stack):
        while (m := _WRAPPER.match(frame)) is not None:
            frame = m["in"]
        if frame:
            out.append(frame)
    return tuple(out)


def _split(name_stack: str) -> list[str]:
    """Splits on ``/`` outside parentheses (``jit(a/b)`` stays one frame)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(name_stack):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "/" and depth == 0:
            parts.append(name_stack[start:i])
            start = i + 1
    parts.append(name_stack[start:])
    return parts


def pallas_name(name_stack: str) -> tuple[str, str] | None:
    """``(kernel name, prefix)`` when a name stack passes through ``pallas_call``: the
    scope around it names the kernel (``"pallas_call"`` when it is bare, as JAX 0.12 writes
    it inside a nested jit); ``prefix`` ends at ``pallas_call``."""
    parts = _split(name_stack)
    if PALLAS_CALL not in parts:
        return None
    at = parts.index(PALLAS_CALL)
    parent = parts[at - 1].split("(")[-1].rstrip(")") if at else ""
    return parent or PALLAS_CALL, "/".join(parts[: at + 1])


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PallasCall:
    """One ``pallas_call`` of a traced program, read from its jaxpr.

    ``name`` is the name Mosaic gives the kernel (``pallas_call(name=...)`` or the kernel
    function's name), so a kernel reads the same in locate, tuning and profile tables.
    ``scope`` is the name stack around the call (``frames`` form); ``per_step`` how many
    times one run of the program executes it (``None`` inside a loop of unknown length);
    ``io_bytes`` the bytes of its operands and results, the least one call moves.
    ``source`` is the ``pallas_call`` line and ``call_site`` the line of the program that
    called into the kernel's code (:mod:`.sources`).
    """

    name: str
    scope: tuple[str, ...]
    operands: tuple[tuple[str, tuple[int, ...]], ...]
    results: tuple[tuple[str, tuple[int, ...]], ...]
    interpret: bool
    cost_estimate: dict[str, float] | None
    source: str | None
    inside: str | None
    per_step: int | None
    io_bytes: int = 0
    call_site: str | None = None


def pallas_calls(jaxpr: Any) -> list[PallasCall]:
    """Every ``pallas_call`` in a (closed) jaxpr, through nested jit, custom_vjp/jvp,
    scan, cond, while, vmap and grad, in program order."""
    found: list[PallasCall] = []
    _walk_jaxpr(getattr(jaxpr, "jaxpr", jaxpr), "", 1, found, ())
    return found


def _walk_jaxpr(
    jaxpr: Any, prefix: str, times: int | None, found: list[PallasCall], around: tuple[Any, ...]
) -> None:
    """``around``: the equations whose sub-jaxprs hold this one, outermost first."""
    for eqn in jaxpr.eqns:
        here = "/".join(p for p in (prefix, str(eqn.source_info.name_stack)) if p)
        if eqn.primitive.name == PALLAS_CALL:
            found.append(_pallas_call(eqn, here, times, around))
            continue
        inner = here
        if eqn.primitive.name in ("pjit", "jit", "closed_call", "core_call"):
            inner = f"{here}/jit({eqn.params.get('name', '')})" if here else here
            if not here:
                inner = f"jit({eqn.params.get('name', '')})"
        repeat = times
        if eqn.primitive.name == "scan" and times is not None:
            repeat = times * int(eqn.params.get("length", 1))
        elif eqn.primitive.name == "while":
            repeat = None
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                body = getattr(sub, "jaxpr", sub)
                if hasattr(body, "eqns"):
                    _walk_jaxpr(body, inner, repeat, found, (*around, eqn))


def _aval(v: Any) -> tuple[str, tuple[int, ...]]:
    aval = getattr(v, "aval", v)
    from .._core.arrays import dtype_name

    return dtype_name(aval.dtype), tuple(int(d) for d in aval.shape)


def _pallas_call(eqn: Any, scope: str, times: int | None, around: tuple[Any, ...]) -> PallasCall:
    params = eqn.params
    debug = getattr(params.get("jaxpr"), "debug_info", None)
    name = params.get("name") or getattr(debug, "func_name", None) or PALLAS_CALL
    cost = params.get("cost_estimate")
    estimate = None
    if cost is not None:
        estimate = {
            k: float(getattr(cost, k, 0) or 0)
            for k in ("flops", "bytes_accessed", "transcendentals")
        }
    own = _sources.user_frames(eqn)
    site = _sources.pallas_site(eqn, own)
    outer = (f for e in reversed(around) for f in _sources.user_frames(e))
    marks = parse(scope)
    return PallasCall(
        name=str(name),
        scope=frames(scope),
        operands=tuple(_aval(v) for v in eqn.invars),
        results=tuple(_aval(v) for v in eqn.outvars),
        interpret=bool(params.get("interpret")),
        cost_estimate=estimate,
        source=site,
        inside=marks[-1].kernel if marks else None,
        per_step=times,
        io_bytes=sum(_nbytes(v) for v in (*eqn.invars, *eqn.outvars)),
        call_site=_sources.call_site(site, itertools.chain(own, outer)),
    )


def _nbytes(v: Any) -> int:
    """Bytes of one operand or result (what a kernel must at least read or write)."""
    aval = getattr(v, "aval", v)
    count = 1
    for d in aval.shape:
        count *= int(d)
    return count * aval.dtype.itemsize  # numpy's dtypes and JAX's typed keys alike


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Owner:
    """What an executed op's time goes to: a row of a profile.

    ``kind``: ``"pallas"`` (a Pallas kernel), ``"autotuned"`` (the ops of a jaxtune kernel
    outside any Pallas call) or ``"xla"`` (a plain XLA op). ``names``: the kernels, in the
    order they are shown: one, or several when their ops cannot be told apart (XLA fused
    them into one op, or they share one scope); a jaxtune kernel's id; a plain op's
    instruction. ``kernel_id``: the jaxtune kernel the op ran inside (its innermost
    marker). ``program``: what tells a plain op's program apart (its program id, else its
    module's name). Owners are dictionary keys: equal fields, one owner.

    >>> Owner(kind="pallas", names=("attn", "mm")).label
    'attn + mm'
    """

    kind: Literal["pallas", "autotuned", "xla"]
    names: tuple[str, ...]
    kernel_id: str | None = None
    program: str | None = None

    @property
    def label(self) -> str:
        """The names as tables, pages and reports show them: ``"a + b"``."""
        return " + ".join(self.names)

    @property
    def kernel(self) -> str | None:
        """The one kernel (or op) it names; ``None`` when it names several."""
        return self.names[0] if len(self.names) == 1 else None


def fused_names(parts: Iterable[tuple[str, ...]]) -> tuple[str, ...]:
    """The names of several owners' ``names`` tuples as one owner's: in the order of the
    parts' labels, each name once."""
    ordered = sorted(parts, key=" + ".join)
    return tuple(dict.fromkeys(n for names in ordered for n in names))


def scope_table(kernels: Any) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """``(scope, kernel names)`` of the interpret-mode ``kernels`` (each with a ``name``
    and a ``scope``: a capture's ``PallasKernel``, a recovered site) whose ops a scope tells
    apart, longest first. A scope no deeper than the program itself (a ``pallas_call``
    straight in the jitted function) would claim every op of the program, so it is left
    out; those kernels are found by the ``pallas_call`` frame of their ops' name stacks.
    Kernels that share one scope read as one owner naming all of them."""
    names: dict[tuple[str, ...], list[str]] = {}
    for k in kernels:
        scope = tuple(k.scope)
        if len(scope) > 1 and k.name not in names.setdefault(scope, []):
            names[scope].append(k.name)
    return sorted(((s, tuple(n)) for s, n in names.items()), key=lambda x: -len(x[0]))


def _encloses(scope: tuple[str, ...], here: tuple[str, ...]) -> bool:
    """Whether an op's frames run inside a kernel's scope: same outermost frame, and the
    scope's frames in order among the op's (compiled HLO adds frames the jaxpr lacks,
    such as ``eval_jaxpr`` around a custom_vjp's body)."""
    if not here or here[0] != scope[0]:
        return False
    at = 1
    for frame in scope[1:]:
        try:
            at = here.index(frame, at) + 1
        except ValueError:
            return False
    return True


def owner_of(
    name_stack: str,
    target: str | None,
    op: str,
    scopes: Any = (),
) -> Owner:
    """The :class:`Owner` an executed op belongs to: a Pallas custom call; else the
    innermost ``pallas_call`` frame of its name stack; else the interpret-mode kernel(s)
    whose scope (from :func:`scope_table`) encloses it, so the kernel's ``io_callback``s,
    loops and copies count as the kernel; else the innermost jaxtune marker; else the op
    itself (plain XLA, no program)."""
    marks = parse(name_stack)
    kernel_id = marks[-1].kernel if marks else None
    if target in PALLAS_TARGETS:
        found = pallas_name(name_stack)
        last = name_stack.rsplit("/", 1)[-1] if name_stack else op
        name = found[0] if found and found[0] != PALLAS_CALL else last or op
        return Owner(kind="pallas", names=(name,), kernel_id=kernel_id)
    found = pallas_name(name_stack)
    outside_marks = not marks or marks[-1].end <= len(found[1]) if found else False
    if found is not None and found[0] != PALLAS_CALL and outside_marks:
        return Owner(kind="pallas", names=(found[0],), kernel_id=kernel_id)
    if scopes:
        here = frames(name_stack)
        for scope, names in scopes:
            if _encloses(scope, here):
                return Owner(kind="pallas", names=names, kernel_id=kernel_id)
    if found is not None:
        return Owner(kind="pallas", names=(found[0],), kernel_id=kernel_id)
    if kernel_id is not None:
        return Owner(kind="autotuned", names=(kernel_id,), kernel_id=kernel_id)
    return Owner(kind="xla", names=(op,))


#: Traces that are only lowered, never run (``jaxtune.locate``, which may lower for another
#: platform through ``jax.export``): a kernel's call adds nothing that runs on the host.
_LOWERING_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "jaxtune_lowering_only", default=False
)


@contextlib.contextmanager
def lowering_only() -> Iterator[None]:
    """Within: the programs traced are lowered, not run (see :func:`lowering_only_now`)."""
    token = _LOWERING_ONLY.set(True)
    try:
        yield
    finally:
        _LOWERING_ONLY.reset(token)


def lowering_only_now() -> bool:
    """Whether the trace under way is only lowered (``jax.export`` cannot serialize a host
    callback, so none may be added to it)."""
    return _LOWERING_ONLY.get()
