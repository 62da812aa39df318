"""Configuration spaces: building, pruning, defaults, and checks against the kernel."""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .._core.codec import packb, storable, unpackb
from .._core.errors import ConfigSpaceError, SignatureError, describe
from .._core.vocabulary import Config, config_id

__all__ = ["ArgumentsError", "ConfigSpec"]


_STORABLE = (
    "None, bool, int, float, str, bytes, jax.lax.Precision, a dtype (np.dtype, jnp.float32, "
    "ml_dtypes.bfloat16), or tuples of them"
)


def _round_trips(value: Any) -> bool:
    """Whether the cache's msgpack stores ``value`` and reads it back equal (an int beyond
    64 bits, a str with lone surrogates or tuples nested too deeply do not)."""
    try:
        back = unpackb(packb([value]))
    except Exception:  # msgpack raises OverflowError, ValueError or TypeError
        return False
    return bool(back == [value])


def _has_nan(value: Any) -> bool:
    if isinstance(value, float):
        return value != value
    return isinstance(value, tuple) and any(_has_nan(v) for v in value)


def _check_value(name: str, value: Any, where: str, checked: set[Any]) -> None:
    try:
        hash(value)
    except TypeError as e:
        raise ConfigSpaceError(
            f"{where}: value {value!r} of {name!r} is unhashable; config values must be "
            f"hashable: {_STORABLE}."
        ) from e
    seen = (type(value), value)
    if seen in checked:  # a large space repeats few values
        return
    if _has_nan(value):
        raise ConfigSpaceError(
            f"{where}: value {value!r} of {name!r} is or holds NaN, which is never equal to "
            "itself: a stored config holding it could never be matched to the space again. "
            "Use a name (a str) and map it to the value inside the kernel."
        )
    if not (storable(value) and _round_trips(value)):
        plain = type(value).__module__ == "numpy" and hasattr(value, "item")
        fix = (
            f"Pass {value.item()!r} (a Python {type(value.item()).__name__}, `.item()`)."
            if plain
            else "Use a name (a str) and map it to the object inside the kernel."
        )
        raise ConfigSpaceError(
            f"{where}: value {value!r} of {name!r} ({type(value).__name__}) cannot be stored "
            f"in the cache; config values must be {_STORABLE} (ints within 64 bits). {fix}"
        )
    checked.add(seen)


class ArgumentsError(SignatureError, ValueError):
    """A kernel's own callback found the call's arguments wrong for the kernel (a rank it
    cannot take): raised by ``jaxtune.kernels``' callbacks, and passed on to the caller as
    it is, where any other exception of a callback is a :class:`ConfigSpaceError`. A
    ``ValueError`` too, as JAX's kernels raise for the same arguments; from a child it
    comes back as the :class:`SignatureError` it is."""


_MSG_CALLBACK = (
    "{what} of kernel {kernel!r} raised {error} {at}; it must {must}. Fix the callback, "
    "or make it return {fallback} where it cannot decide."
)


def _callback_error(
    what: str, kernel: str, at: str, must: str, fallback: str, e: Exception
) -> ConfigSpaceError:
    error = describe(e)
    text = _MSG_CALLBACK.format(
        what=what, kernel=kernel, error=error, at=at, must=must, fallback=fallback
    )
    return ConfigSpaceError(text)


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
        kernel: str | None = None,
    ) -> None:
        qualname = getattr(fn, "__qualname__", repr(fn))
        #: The kernel's cache id, which messages about its callbacks name.
        self.kernel = kernel or qualname
        #: The function as messages name it, with the kernel's ``name=`` when it has one.
        self.fn_name = (
            qualname
            if self.kernel in (qualname, f"{getattr(fn, '__module__', '')}.{qualname}")
            else f"{qualname} (kernel {self.kernel!r})"
        )
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
        checked: set[Any] = set()
        for c in configs:
            if set(c) != keys:
                raise ConfigSpaceError(
                    f"{where} of {self.fn_name}: every config needs the same keys; "
                    f"{c} has {sorted(c)}, expected {sorted(keys)}."
                )
            for name, value in c.items():
                _check_value(name, value, where, checked)
        unknown = sorted(keys - self._accepts) if self._accepts is not None else []
        if unknown:
            raise ConfigSpaceError(
                f"{where} of {self.fn_name} sets {', '.join(map(repr, unknown))}, which "
                f"{self.fn_name} does not accept as a keyword argument. Add it to the "
                "function's parameters or remove it from the space."
            )

    def space(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], *, call: str = ""
    ) -> list[Config]:
        """Every config for these (abstract) arguments that ``prune`` keeps, in order;
        ``call`` names the arguments in messages (the call's key).

        Raises:
            ConfigSpaceError: the space is empty after pruning, or malformed, or a callable
                space or ``prune`` raised (chained).
            ArgumentsError: a callback rejected the call's arguments (raised as it is).
        """
        at = f"for arguments {call or '(these)'}"
        if self._callable is not None:
            try:
                built = list(self._callable(*args, **kwargs))
            except ArgumentsError:  # the call's arguments, not the callback, are wrong
                raise
            except Exception as e:
                must = "return an iterable of config dicts for any arguments the kernel takes"
                raise _callback_error(
                    "configs(...)", self.kernel, at, must, "a smaller list", e
                ) from e
            configs = self._expand(built)
            self._validate(configs, f"configs(...) of kernel {self.kernel!r} {at}")
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
            if self._keeps(c, args, kwargs, call):
                kept.append(dict(c))
        if not kept:
            raise ConfigSpaceError(
                f"no config of {self.fn_name} is left after pruning for these arguments "
                f"({len(configs)} before pruning). Relax prune=, or add configs that fit "
                "these shapes."
            )
        return kept

    def _keeps(
        self, config: Config, args: Sequence[Any], kwargs: Mapping[str, Any], call: str
    ) -> bool:
        if self.prune is None:
            return True
        try:
            return bool(self.prune(config, *args, **kwargs))
        except ArgumentsError:
            raise
        except Exception as e:
            at = f"for config {config_id(config)} and arguments {call or '(these)'}"
            must = "return True or False for every config of the space"
            raise _callback_error("prune", self.kernel, at, must, "False", e) from e

    def default_config(
        self,
        space: Sequence[Config],
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        *,
        call: str = "",
    ) -> Config:
        """The default config: ``default`` (dict or callable), else the first of ``space``.

        Raises:
            ConfigSpaceError: the default is malformed, or a callable default raised.
            ArgumentsError: a callable default rejected the call's arguments.
        """
        if self.default is None:
            return dict(space[0])
        if callable(self.default) and not isinstance(self.default, Mapping):
            at = f"for arguments {call or '(these)'}"
            try:
                value = dict(self.default(*args, **kwargs))
            except ArgumentsError:  # the call's arguments, not the callback, are wrong
                raise
            except Exception as e:
                must = "return a config dict for any arguments the kernel takes"
                raise _callback_error(
                    "default(...)", self.kernel, at, must, "a config of the space", e
                ) from e
            self._validate([value], f"default(...) of kernel {self.kernel!r} {at}")
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
