"""Shape buckets (``@autotuned(buckets=...)``): shapes in one bucket share one entry.

``buckets`` maps an array argument to the dimensions it buckets and how::

    buckets={"q": {1: "pow2"}, "k": {1: "pow2"}}      # powers of two of dim 1
    buckets={"x": {0: (128, 512, 2048)}}               # explicit upper bounds

With ``"pow2"`` a size ``n`` falls in the bucket ``(2**(k-1), 2**k]`` that holds it, its
representative the power of two ``2**k``; with boundaries ``(b1, b2, ...)`` in the first
bucket ``(b_{i-1}, b_i]`` that holds it (``b_0 = 0``), its representative ``b_i``; a size
above the last boundary, and a size of 0, is its own bucket. The key shows each bucketed
dimension as its range (``f32[8,513..1024,64]``), and the sweep runs once per bucket, at
the representative shape, with inputs built for that shape: the config stored does not
depend on which shape of the bucket came first. A config the actual shape's ``prune``
rejects is never used (:meth:`jaxtune._tuning.bound.BoundCall.within_bucket`).
"""

from __future__ import annotations

import bisect
import dataclasses
import inspect
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from .._core.errors import ConfigSpaceError, SignatureError

__all__ = ["Buckets", "Rule", "bucket"]

#: ``"pow2"``, or ascending upper bounds.
Rule = str | tuple[int, ...]

_FORM = (
    'buckets maps array arguments to {dimension: rule}, the rule "pow2" or ascending upper '
    'bounds, e.g. buckets={"q": {1: "pow2"}} or buckets={"x": {0: (128, 512, 2048)}}'
)


def bucket(n: int, rule: Rule) -> tuple[int, str]:
    """The representative size of the bucket ``n`` falls in, and the bucket as text.

    Examples:
        >>> bucket(1000, "pow2")
        (1024, '513..1024')
        >>> bucket(200, (128, 512))
        (512, '129..512')
        >>> bucket(600, (128, 512))
        (600, '600')
    """
    if n <= 0:
        return n, str(n)
    if rule == "pow2":
        top = 1 << (n - 1).bit_length()
        low = top // 2 + 1
    else:
        bounds: tuple[int, ...] = tuple(int(b) for b in rule)
        i = bisect.bisect_left(bounds, n)
        if i == len(bounds):
            return n, str(n)
        top, low = bounds[i], (bounds[i - 1] + 1 if i else 1)
    return top, (f"{low}..{top}" if low < top else str(top))


def _rule(where: str, rule: Any) -> Rule:
    if rule == "pow2":
        return "pow2"
    if isinstance(rule, (str, bytes)) or not isinstance(rule, Sequence) or not rule:
        raise ConfigSpaceError(f"{where}: {rule!r} is no bucket rule. {_FORM}.")
    bounds = tuple(rule)
    if not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in bounds) or any(
        a >= b for a, b in itertools.pairwise(bounds)
    ):
        raise ConfigSpaceError(
            f"{where}: the bounds {list(bounds)!r} must be positive ints in ascending order. "
            f"{_FORM}."
        )
    return bounds


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Buckets:
    """The bucketed dimensions of a kernel's array arguments: argument -> dim -> rule."""

    rules: Mapping[str, Mapping[int, Rule]]

    @classmethod
    def of(
        cls, spec: Any, fn_signature: inspect.Signature, static_argnames: frozenset[str]
    ) -> Buckets | None:
        """``buckets=`` checked against the kernel's signature (``None``: no buckets).

        Raises:
            ConfigSpaceError: not of the documented form, or naming an argument the kernel
                does not have, or one of its static arguments.
        """
        if spec is None:
            return None
        if not isinstance(spec, Mapping) or not spec:
            raise ConfigSpaceError(f"buckets={spec!r}: {_FORM}.")
        params = fn_signature.parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
        rules: dict[str, dict[int, Rule]] = {}
        for name, dims in spec.items():
            if not isinstance(name, str) or (name not in params and not takes_any):
                raise ConfigSpaceError(
                    f"buckets names {name!r}, which is not an argument of the kernel "
                    f"(its arguments: {', '.join(params)}). {_FORM}."
                )
            if name in static_argnames:
                raise ConfigSpaceError(
                    f"buckets names {name!r}, a static argument; only array arguments have "
                    "shapes to bucket."
                )
            if not isinstance(dims, Mapping) or not dims:
                raise ConfigSpaceError(f"buckets[{name!r}]={dims!r}: {_FORM}.")
            rules[name] = {}
            for dim, rule in dims.items():
                if not isinstance(dim, int) or isinstance(dim, bool):
                    raise ConfigSpaceError(
                        f"buckets[{name!r}] has the key {dim!r}: dimensions are ints "
                        f"(negative ones count from the end). {_FORM}."
                    )
                rules[name][dim] = _rule(f"buckets[{name!r}][{dim}]", rule)
        return cls(rules=rules)

    def shape(self, name: str, shape: tuple[int, ...]) -> tuple[tuple[int, ...], list[str]]:
        """The representative shape of one leaf of argument ``name``, and each dimension as
        the key shows it (a bucketed one as its range).

        Raises:
            SignatureError: a bucketed dimension is beyond the leaf's rank.
        """
        dims = self.rules.get(name, {})
        rep = list(shape)
        text = [str(d) for d in shape]
        for dim, rule in dims.items():
            at = dim + len(shape) if dim < 0 else dim
            if not 0 <= at < len(shape):
                raise SignatureError(
                    f"buckets[{name!r}] buckets dimension {dim}, but {name!r} has shape "
                    f"{list(shape)} (rank {len(shape)})."
                )
            rep[at], text[at] = bucket(shape[at], rule)
        return tuple(rep), text
