"""``jaxtune.locate``: every Pallas kernel and jaxtune kernel in a function's StableHLO.

The module is walked with JAX's bundled MLIR Python bindings: custom calls are read through
their attributes, locations through the structured ``NameLoc`` / ``CallSiteLoc`` /
``FileLineColLoc`` API. A Pallas kernel is a ``stablehlo.custom_call`` to one of the
Pallas targets; in interpret mode (CPU) there is no custom call, and the kernel is the set
of ops whose name stack passes through ``<kernel name>/pallas_call``. A jaxtune kernel is
the set of ops under its ``jaxtune[<id>#<digest>]`` marker.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import jax

from .._core import jaxstate as _jaxstate
from .._core.errors import SignatureError
from .._core.flags import normalise_platform
from . import markers as _markers

__all__ = ["PALLAS_TARGETS", "KernelSite", "locate", "sites_in_module"]

PALLAS_TARGETS = _markers.PALLAS_TARGETS


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class KernelSite:
    """One kernel call site in a lowered program.

    ``kind`` is ``"pallas"`` (a Pallas custom call, or an interpret-mode Pallas kernel,
    whose ``target`` is ``None``) or ``"autotuned"`` (a ``@jaxtune.autotuned`` call, with
    ``kernel_id``, ``key`` and ``config``). ``operands``/``results`` are ``(dtype, shape)``
    pairs (empty for interpret-mode kernels, which have no single op); ``source`` is
    ``file:line`` of the innermost frame; ``cost_estimate`` comes from the kernel's
    ``backend_config``, ``metadata`` from ``pallas_call(metadata=...)``.
    """

    name: str
    kind: Literal["pallas", "autotuned"]
    target: str | None
    platform: str
    operands: tuple[tuple[str, tuple[int, ...]], ...] = ()
    results: tuple[tuple[str, tuple[int, ...]], ...] = ()
    source: str | None = None
    name_stack: str = ""
    cost_estimate: dict[str, float] | None = None
    metadata: dict[str, Any] | None = None
    kernel_id: str | None = None
    key: str | None = None
    config: dict[str, Any] | None = None
    inside: str | None = None


def _walk(op: Any) -> Iterator[Any]:
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child
                yield from _walk(child.operation)


def _name_and_source(loc: Any) -> tuple[str, str | None]:
    """The name stack (outermost NameLoc) and the innermost ``file:line`` of a location."""
    from jax._src.lib.mlir import ir

    name = ""
    source = None
    todo = [loc]
    while todo:
        current = todo.pop(0)  # the bindings hand back the concrete location class
        if isinstance(current, ir.NameLoc):
            if not name:
                name = current.name_str
            todo.insert(0, current.child_loc)
        elif isinstance(current, ir.CallSiteLoc):
            todo.insert(0, current.callee)
        elif isinstance(current, ir.FileLineColLoc):
            if source is None:
                source = f"{current.filename}:{current.start_line}"
        elif isinstance(current, ir.FusedLoc):
            todo[:0] = list(current.locations)
        if name and source:
            break
    return name, source


def _tensor(t: Any) -> tuple[str, tuple[int, ...]]:
    from jax._src.lib.mlir import ir

    try:
        ranked = ir.RankedTensorType(t)
    except (ValueError, TypeError):
        return (str(t), ())
    element = str(ranked.element_type)
    names = {"i1": "pred"}
    if element.startswith("i") and element[1:].isdigit() and element != "i1":
        element = "s" + element[1:]
    elif element.startswith("ui"):
        element = "u" + element[2:]
    element = names.get(element, element)
    element = {"f8E4M3FN": "f8e4m3fn", "f8E5M2": "f8e5m2"}.get(element, element)
    return element, tuple(int(d) for d in ranked.shape)


def _string(attrs: Any, name: str) -> str | None:
    if name not in attrs:
        return None
    value = attrs[name]
    return getattr(value, "value", str(value))


def _cost_estimate(backend_config: str | None) -> dict[str, float] | None:
    if not backend_config:
        return None
    try:
        config = json.loads(backend_config)
    except ValueError:
        return None
    found = config.get("custom_call_config", config).get("cost_estimate")
    if not isinstance(found, dict):
        return None
    return {k: float(v) for k, v in found.items() if isinstance(v, (int, float))}


def _frontend_metadata(attrs: Any) -> dict[str, Any] | None:
    if "mhlo.frontend_attributes" not in attrs:
        return None
    frontend = attrs["mhlo.frontend_attributes"]
    try:
        raw = frontend["kernel_metadata"]
    except (KeyError, IndexError, ValueError):
        return None
    text = getattr(raw, "value", str(raw))
    try:
        parsed = json.loads(text)
    except ValueError:
        return {"raw": text}
    return parsed if isinstance(parsed, dict) else {"value": parsed}


def _innermost_marker(name_stack: str) -> tuple[str, str, str] | None:
    marks = _markers.parse(name_stack)
    if not marks:
        return None
    last = marks[-1]
    return last.kernel, last.digest, name_stack[: last.end]


def _inside_kernel(decorated: Callable[..., Any], source: str | None) -> str | None:
    """``source`` when it lies in the autotuned kernel's own code, else the kernel body's
    first line. (JAX 0.10 gives the operations of an inlined jit, which an eager-capable
    kernel is, its caller's location; later versions keep their own.)"""
    fn = inspect.unwrap(decorated)
    code = getattr(fn, "__code__", None)
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return source
    if code is None:
        return source
    if source is not None:
        file, _, line = source.rpartition(":")
        if file == code.co_filename and line.isdigit() and start <= int(line) < start + len(lines):
            return source
    heads = [i for i, text in enumerate(lines) if text.lstrip().startswith(("def ", "async def "))]
    def_line = start + (heads[0] if heads else 0)
    body = [ln for _, _, ln in code.co_lines() if ln is not None and ln > def_line]
    return f"{code.co_filename}:{min(body)}" if body else source


def _autotuned_site(
    kernel: str, digest: str, prefix: str, platform: str, source: Any
) -> KernelSite:
    found = _markers.lookup(digest)
    if found is not None and found.fn is not None:
        source = _inside_kernel(found.fn, source)
    return KernelSite(
        name=kernel,
        kind="autotuned",
        target=None,
        platform=platform,
        source=source,
        name_stack=prefix,
        kernel_id=kernel,
        key=found.key if found else None,
        config=dict(found.config) if found else None,
    )


def _custom_call_site(
    operation: Any, name_stack: str, source: Any, platform: str, inside: str | None
) -> KernelSite | None:
    attrs = operation.attributes
    target = _string(attrs, "call_target_name")
    if operation.name != "stablehlo.custom_call" or target not in PALLAS_TARGETS:
        return None
    stack_name = _markers.pallas_name(name_stack)
    return KernelSite(
        name=_string(attrs, "kernel_name") or (stack_name[0] if stack_name else str(target)),
        kind="pallas",
        target=target,
        platform=platform,
        operands=tuple(_tensor(v.type) for v in operation.operands),
        results=tuple(_tensor(r.type) for r in operation.results),
        source=source,
        name_stack=name_stack,
        cost_estimate=_cost_estimate(_string(attrs, "backend_config")),
        metadata=_frontend_metadata(attrs),
        inside=inside,
    )


def _interpret_site(call: _markers.PallasCall, platform: str) -> KernelSite:
    return KernelSite(
        name=call.name,
        kind="pallas",
        target=None,
        platform=platform,
        operands=call.operands,
        results=call.results,
        source=call.source,
        name_stack="/".join(call.scope),
        cost_estimate=call.cost_estimate,
        inside=call.inside,
    )


def _with_scope(site: KernelSite, calls: Sequence[_markers.PallasCall]) -> KernelSite:
    """A custom call inside a nested function carries only the function's own name stack;
    the jaxpr's ``pallas_call`` of the same name knows the whole scope (and the jaxtune
    kernel around it), when that name is unambiguous."""
    same = {("/".join(c.scope), c.inside) for c in calls if c.name == site.name}
    if len(same) != 1 or site.inside is not None:
        return site
    ((scope, inside),) = same
    return dataclasses.replace(site, name_stack=f"{scope}/{_markers.PALLAS_CALL}", inside=inside)


def sites_in_module(
    module: Any, platform: str, calls: Sequence[_markers.PallasCall] | None = None
) -> list[KernelSite]:
    """Every kernel site of an MLIR module (``ir.Module``), in program order.

    Interpret-mode Pallas kernels have no custom call: ``calls`` (the program's
    ``pallas_call``s, from :func:`jaxtune._program.markers.pallas_calls`) names them with their
    shapes; without it they are found by their ``pallas_call`` name stacks.
    """
    sites: list[KernelSite] = []
    seen: set[tuple[str, str]] = set()
    for op in _walk(module.operation):
        operation = op.operation
        name_stack, source = _name_and_source(operation.location)
        marker = _innermost_marker(name_stack)
        if marker is not None and ("jaxtune", marker[2]) not in seen:
            seen.add(("jaxtune", marker[2]))
            sites.append(_autotuned_site(*marker, platform, source))
        inside = marker[0] if marker else None
        site = _custom_call_site(operation, name_stack, source, platform, inside)
        if site is not None:
            sites.append(_with_scope(site, calls or ()))
            continue
        stack_name = _markers.pallas_name(name_stack) if calls is None else None
        if stack_name is not None and ("pallas", stack_name[1]) not in seen:
            seen.add(("pallas", stack_name[1]))
            sites.append(
                KernelSite(
                    name=stack_name[0],
                    kind="pallas",
                    target=None,
                    platform=platform,
                    source=source,
                    name_stack=stack_name[1],
                    inside=inside,
                )
            )
    sites.extend(_interpret_site(c, platform) for c in calls or () if c.interpret)
    return sites


def locate(
    fn: Callable[..., Any] | jax.stages.Lowered | jax.stages.Traced,
    *args: Any,
    platform: str | None = None,
    **kwargs: Any,
) -> list[KernelSite]:
    """Every Pallas custom call and jaxtune kernel in ``fn``'s StableHLO.

    ``fn`` is lowered with ``args``/``kwargs`` (arrays or ``jax.ShapeDtypeStruct``) for the
    local backend, or for ``platform`` ("tpu", "cuda", "cpu") through ``jax.export`` on a
    machine without that hardware. Nested jit, ``lax.scan``, ``jax.grad``, ``jax.vmap`` and
    ``shard_map`` are all searched.

    ``fn`` may also be what ``jax.jit(f).trace(*args)`` (a ``jax.stages.Traced``) or
    ``jax.jit(f).lower(*args)`` (a ``jax.stages.Lowered``) returns: the shapes come from
    that program, so no arguments are taken. A Traced is lowered for ``platform`` as it
    was traced; a Lowered is already lowered for its own platforms, and a ``platform``
    that is not one of them is refused. A Lowered carries no jaxpr: its interpret-mode
    Pallas kernels are found from their name stacks alone, without shapes (a Traced gives
    them as a function does).

    Raises:
        SignatureError: arguments given with a Traced or Lowered (or a
            ``jax.stages.Compiled``, which holds no StableHLO), or a ``platform`` the
            Lowered was not lowered for.

    Examples:
        >>> import jax, jaxtune
        >>> from jaxtune.examples.chunked import chunked_logsumexp
        >>> x = jax.ShapeDtypeStruct((4, 1024), "float32")
        >>> [s.kernel_id for s in jaxtune.locate(chunked_logsumexp, x)]
        ['jaxtune.examples.chunked_logsumexp']
        >>> lowered = jax.jit(chunked_logsumexp).lower(x)
        >>> [s.kernel_id for s in jaxtune.locate(lowered)]
        ['jaxtune.examples.chunked_logsumexp']
    """
    check_staged_call(fn, args, kwargs, "jaxtune.locate")
    with _markers.lowering_only():
        return _located(fn, args, kwargs, platform)


def _located(
    fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], platform: str | None
) -> list[KernelSite]:
    """:func:`locate`'s work, its traces marked as lowered only."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    local = jax.default_backend()
    if isinstance(fn, jax.stages.Lowered):
        return _lowered_sites(fn, platform, local)
    if isinstance(fn, jax.stages.Traced):
        return _traced_sites(fn, platform, local)
    jitted: Any = fn if hasattr(fn, "lower") else jax.jit(fn)
    if platform is None or _same_platform(platform, local):
        calls = _markers.pallas_calls(jax.make_jaxpr(jitted)(*args, **kwargs))
        module = jitted.lower(*args, **kwargs).compiler_ir("stablehlo")
        return sites_in_module(module, local, calls)
    # Lowered for real hardware, a Pallas kernel is a custom call, whatever interpret mode
    # the caller runs in here.
    with _jaxstate.without_interpret_mode():
        exported = jax.export.export(jitted, platforms=[platform])(*args, **kwargs)
        calls = _markers.pallas_calls(jax.make_jaxpr(jitted)(*args, **kwargs))
    context = mlir.make_ir_context()
    module = ir.Module.parse(exported.mlir_module(), context=context)
    return sites_in_module(module, platform, calls)


def check_staged_call(fn: Any, args: Sequence[Any], kwargs: dict[str, Any], caller: str) -> None:
    """Refuses arguments given with a ``Traced``/``Lowered`` (its shapes are fixed
    already), and a ``Compiled``, which holds no StableHLO to search."""
    if isinstance(fn, jax.stages.Compiled):
        raise SignatureError(
            f"{caller} got a jax.stages.Compiled, which holds no StableHLO to search: pass "
            f"what jax.jit(f).lower(...) returns instead (or f and its arguments)."
        )
    kinds = (jax.stages.Lowered, jax.stages.Traced)
    staged = next((k.__name__ for k in kinds if isinstance(fn, k)), None)
    if staged is not None and (args or kwargs):
        given = ", ".join([*(type(a).__name__ for a in args), *(f"{k}=" for k in kwargs)])
        raise SignatureError(
            f"{caller} got a jax.stages.{staged} and arguments ({given}): a {staged} holds "
            f"its arguments' shapes already. Call {caller}(the_{staged.lower()}) alone, or "
            f"pass the function itself with its arguments."
        )


def _traced_sites(traced: Any, platform: str | None, local: str) -> list[KernelSite]:
    """A Traced: its jaxpr names the interpret-mode kernels (under the same ``jit(f)``
    scope as a function's), and it lowers for ``platform`` as traced."""
    calls = [
        dataclasses.replace(c, scope=(f"jit({traced.fun_name})", *c.scope))
        for c in _markers.pallas_calls(traced.jaxpr)
    ]
    if platform is None or _same_platform(platform, local):
        return sites_in_module(traced.lower().compiler_ir("stablehlo"), local, calls)
    lowered = traced.lower(lowering_platforms=(platform,))
    return sites_in_module(lowered.compiler_ir("stablehlo"), platform, calls)


def _lowered_sites(lowered: Any, platform: str | None, local: str) -> list[KernelSite]:
    """A Lowered: its module as it is, its sites labelled with the platform(s) it was
    lowered for (the local backend's name when that is the one)."""
    platforms = tuple(getattr(getattr(lowered, "_lowering", None), "_platforms", None) or ())
    platforms = platforms or (local,)
    if platform is not None and not any(_same_platform(platform, p) for p in platforms):
        raise SignatureError(
            f"jaxtune.locate(..., platform={platform!r}) got a jax.stages.Lowered already "
            f"lowered for {', '.join(platforms)}: lower it for {platform!r} "
            f"(jax.jit(f).trace(...).lower(lowering_platforms=({platform!r},))), or pass "
            f"the Traced or the function with platform={platform!r}."
        )
    if len(platforms) == 1 and _same_platform(platforms[0], local):
        label = local
    else:
        label = ",".join(platforms)
    return sites_in_module(lowered.compiler_ir("stablehlo"), label, None)


def _same_platform(a: str, b: str) -> bool:
    return normalise_platform(a) == normalise_platform(b)
