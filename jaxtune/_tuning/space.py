"""Configuration spaces: building, pruning, defaults, and checks against the kernel."""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .._codec import storable
from .._errors import ConfigSpaceError

__all__ = ["ConfigSpec", "config_id"]

Config = dict[str, Any]


def config_id(config: Mapping[str, Any]) -> str:
    """A readable, stable text form of a config: ``block_k=256,block_m=128``."""
    return ",".join(f"{k}={config[k]!r}" for k in sorted(config))


_STORABLE = (
    "None, bool, int, float, str, bytes, jax.lax.Precision, a dtype (np.dtype, jnp.float32, "
    "ml_dtypes.bfloat16), or tuples of them"
)


def _check_value(name: str, value: Any, where: str) -> None:
    try:
        hash(value)
    except TypeError as e:
        raise ConfigSpaceError(
            f"{where}: value {value!r} of {name!r} is unhashable; config values must be "
            f"hashable: {_STORABLE}."
        ) from e
    if not storable(value):
        raise ConfigSpaceError(
            f"{where}: value {value!r} of {name!r} ({type(value).__name__}) cannot be stored "
            f"in the cache; config values must be {_STORABLE}. Use a name (a str) and map it "
            "to the object inside the kernel."
        )


class ConfigSpec:
    """The ``configs``/``prune``/``default`` options of one kernel, validated once.

    ``configs`` is a dict of lists (cartesian product, in the order given), a list of dicts,
    or a callable of the abstract arguments returning an iterable of dicts.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        configs: Any,
        *,
        prune: Callable[..., bool] | None,
        default: Mapping[str, Any] | Callable[..., Mapping[str, Any]] | None,
    ) -> None:
        self.fn_name = getattr(fn, "__qualname__", repr(fn))
        self.prune = prune
        self.default = default
        self._accepts = _accepted_keywords(fn)
        if callable(configs) and not isinstance(configs, Mapping):
            self._static: list[Config] | None = None
            self._callable: Callable[..., Iterable[Mapping[str, Any]]] | None = configs
            self.names: frozenset[str] | None = None
        else:
            self._static = self._expand(configs)
            self._callable = None
            self.names = frozenset(self._static[0]) if self._static else frozenset()
            self._validate(self._static, "configs")
        if isinstance(default, Mapping):
            self._validate([dict(default)], "default")
            if self.names is not None and set(default) != self.names:
                raise ConfigSpaceError(
                    f"default {dict(default)} of {self.fn_name} has keys {sorted(default)}, "
                    f"but the space's keys are {sorted(self.names)}; give a value for exactly "
                    "those keys."
                )
        elif default is not None and not callable(default):
            raise ConfigSpaceError(
                f"default must be a dict or a callable, got {type(default).__name__}."
            )
        if prune is not None and not callable(prune):
            raise ConfigSpaceError(f"prune must be a callable, got {type(prune).__name__}.")

    def _expand(self, configs: Any) -> list[Config]:
        if isinstance(configs, Mapping):
            if not configs:
                raise ConfigSpaceError(f"configs of {self.fn_name} is an empty dict.")
            names = list(configs)
            values = []
            for name in names:
                options = configs[name]
                if isinstance(options, (str, bytes)) or not isinstance(options, Iterable):
                    raise ConfigSpaceError(
                        f"configs[{name!r}] of {self.fn_name} must be a list of values, got "
                        f"{options!r}. Write configs={{{name!r}: [{options!r}]}}."
                    )
                options = list(options)
                if not options:
                    raise ConfigSpaceError(f"configs[{name!r}] of {self.fn_name} is empty.")
                values.append(options)
            return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values)]
        if isinstance(configs, Iterable) and not isinstance(configs, (str, bytes)):
            out = []
            for c in configs:
                if not isinstance(c, Mapping):
                    raise ConfigSpaceError(f"configs of {self.fn_name} must hold dicts, got {c!r}.")
                out.append(dict(c))
            if not out:
                raise ConfigSpaceError(f"configs of {self.fn_name} is an empty list.")
            return out
        raise ConfigSpaceError(
            f"configs of {self.fn_name} must be a dict of lists, a list of dicts or a "
            f"callable, got {type(configs).__name__}."
        )

    def _validate(self, configs: Sequence[Config], where: str) -> None:
        keys = set(configs[0]) if configs else set()
        for c in configs:
            if set(c) != keys:
                raise ConfigSpaceError(
                    f"{where} of {self.fn_name}: every config needs the same keys; "
                    f"{c} has {sorted(c)}, expected {sorted(keys)}."
                )
            for name, value in c.items():
                _check_value(name, value, where)
        unknown = sorted(keys - self._accepts) if self._accepts is not None else []
        if unknown:
            raise ConfigSpaceError(
                f"{where} of {self.fn_name} sets {', '.join(map(repr, unknown))}, which "
                f"{self.fn_name} does not accept as a keyword argument. Add it to the "
                "function's parameters or remove it from the space."
            )

    def space(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Config]:
        """Every config for these (abstract) arguments that ``prune`` keeps, in order.

        Raises:
            ConfigSpaceError: the space is empty after pruning, or malformed.
        """
        if self._callable is not None:
            configs = self._expand(list(self._callable(*args, **kwargs)))
            self._validate(configs, "configs(...)")
        else:
            assert self._static is not None
            configs = self._static
        seen: set[str] = set()
        kept: list[Config] = []
        for c in configs:
            cid = config_id(c)
            if cid in seen:
                continue
            seen.add(cid)
            if self.prune is None or self.prune(c, *args, **kwargs):
                kept.append(dict(c))
        if not kept:
            raise ConfigSpaceError(
                f"no config of {self.fn_name} is left after pruning for these arguments "
                f"({len(configs)} before pruning). Relax prune=, or add configs that fit "
                "these shapes."
            )
        return kept

    def default_config(
        self, space: Sequence[Config], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> Config:
        """The default config: ``default`` (dict or callable), else the first of ``space``."""
        if self.default is None:
            return dict(space[0])
        if callable(self.default) and not isinstance(self.default, Mapping):
            value = dict(self.default(*args, **kwargs))
            self._validate([value], "default(...)")
        else:
            value = dict(self.default)
        names = set(space[0])
        if set(value) != names:
            raise ConfigSpaceError(
                f"default {value} of {self.fn_name} has keys {sorted(value)}, but the "
                f"space's keys are {sorted(names)}."
            )
        return value


def _accepted_keywords(fn: Callable[..., Any]) -> frozenset[str] | None:
    """Keyword names ``fn`` accepts, or ``None`` when it takes ``**kwargs``."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
