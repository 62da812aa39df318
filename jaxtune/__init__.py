"""jaxtune: autotuning and profiling for JAX and Pallas kernels.

Only what works is exported here; every name has a page under ``docs/``.

The names that need JAX (the decorators, ``tune``, ``locate``, ``Profile`` and the
values they return) are imported when first used, so ``import jaxtune`` stays cheap and the
command line's ``jaxtune report`` reads a trace without starting JAX; ``from jaxtune import
autotuned`` and ``jaxtune.autotuned`` work as always.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import flags as flags
from ._config import remember_environment as _remember_environment
from ._errors import AgreementError as AgreementError
from ._errors import CacheError as CacheError
from ._errors import ConfigSpaceError as ConfigSpaceError
from ._errors import FlagError as FlagError
from ._errors import JaxtuneError as JaxtuneError
from ._errors import JaxtuneWarning as JaxtuneWarning
from ._errors import PlotsUnavailableError as PlotsUnavailableError
from ._errors import ProfileError as ProfileError
from ._errors import SettingsError as SettingsError
from ._errors import SignatureError as SignatureError
from ._errors import SweepError as SweepError
from ._errors import TuningFailedError as TuningFailedError

if TYPE_CHECKING:
    from ._profiling.attribution import KernelStat as KernelStat
    from ._profiling.profiled import Profile as Profile
    from ._profiling.profiled import Profiled as Profiled
    from ._profiling.profiled import profile as profile
    from ._profiling.profiled import profiled as profiled
    from ._tuning.autotuned import Autotuned as Autotuned
    from ._tuning.cache import register_cache as register_cache
    from ._tuning.decorator import autotuned as autotuned
    from ._tuning.locate import KernelSite as KernelSite
    from ._tuning.locate import locate as locate
    from ._tuning.lookup import Choice as Choice
    from ._tuning.result import Entry as Entry
    from ._tuning.result import Failure as Failure
    from ._tuning.result import Measurement as Measurement
    from ._tuning.result import TuningResult as TuningResult
    from ._tuning.search import Budget as Budget
    from ._tuning.search import SearchState as SearchState
    from ._tuning.search import Strategy as Strategy
    from ._tuning.tune import tune as tune

#: Each name imported on first use -> the module that defines it.
_LAZY = {
    "KernelStat": "._profiling.attribution",
    "Profile": "._profiling.profiled",
    "Profiled": "._profiling.profiled",
    "profile": "._profiling.profiled",
    "profiled": "._profiling.profiled",
    "Autotuned": "._tuning.autotuned",
    "register_cache": "._tuning.cache",
    "autotuned": "._tuning.decorator",
    "KernelSite": "._tuning.locate",
    "locate": "._tuning.locate",
    "Choice": "._tuning.lookup",
    "Entry": "._tuning.result",
    "Failure": "._tuning.result",
    "Measurement": "._tuning.result",
    "TuningResult": "._tuning.result",
    "Budget": "._tuning.search",
    "SearchState": "._tuning.search",
    "Strategy": "._tuning.search",
    "tune": "._tuning.tune",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        # A subpackage (``jaxtune._tuning``) as an attribute, as after an eager import.
        if name.isidentifier() and not name.startswith("__"):
            try:
                return importlib.import_module(f"{__name__}.{name}")
            except ModuleNotFoundError as e:
                if e.name != f"{__name__}.{name}":
                    raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    _remember_environment()  # the import may have been JAX's first
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


# What XLA_FLAGS / LIBTPU_INIT_ARGS hold right after JAX's import is what its backend will
# read, so `jaxtune doctor` (in this process) can report a later change: remembered now if
# JAX is imported, else when a name above first imports it.
_remember_environment()

__version__ = "0.1.0"

__all__ = [
    "AgreementError",
    "Autotuned",
    "Budget",
    "CacheError",
    "Choice",
    "ConfigSpaceError",
    "Entry",
    "Failure",
    "FlagError",
    "JaxtuneError",
    "JaxtuneWarning",
    "KernelSite",
    "KernelStat",
    "Measurement",
    "PlotsUnavailableError",
    "Profile",
    "ProfileError",
    "Profiled",
    "SearchState",
    "SettingsError",
    "SignatureError",
    "Strategy",
    "SweepError",
    "TuningFailedError",
    "TuningResult",
    "__version__",
    "autotuned",
    "flags",
    "locate",
    "profile",
    "profiled",
    "register_cache",
    "tune",
]
