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
from ._core.errors import AgreementError as AgreementError
from ._core.errors import CacheError as CacheError
from ._core.errors import ConfigSpaceError as ConfigSpaceError
from ._core.errors import FlagError as FlagError
from ._core.errors import JaxtuneError as JaxtuneError
from ._core.errors import JaxtuneWarning as JaxtuneWarning
from ._core.errors import MissError as MissError
from ._core.errors import PlotsUnavailableError as PlotsUnavailableError
from ._core.errors import ProfileError as ProfileError
from ._core.errors import SettingsError as SettingsError
from ._core.errors import SignatureError as SignatureError
from ._core.errors import SweepError as SweepError
from ._core.errors import SynthesisedValuesWarning as SynthesisedValuesWarning
from ._core.errors import TuningFailedError as TuningFailedError
from ._core.settings import remember_environment as _remember_environment

if TYPE_CHECKING:
    from ._core.vocabulary import Choice as Choice
    from ._core.vocabulary import Entry as Entry
    from ._core.vocabulary import Failure as Failure
    from ._core.vocabulary import Measurement as Measurement
    from ._profiling.attribution import KernelStat as KernelStat
    from ._profiling.profiled import Profiled as Profiled
    from ._profiling.profiled import profile as profile
    from ._profiling.profiled import profiled as profiled
    from ._profiling.report import Profile as Profile
    from ._program.locate import KernelSite as KernelSite
    from ._program.locate import locate as locate
    from ._tuning.autotuned import Autotuned as Autotuned
    from ._tuning.decorator import autotuned as autotuned
    from ._tuning.result import TuningResult as TuningResult
    from ._tuning.store.cache import register_cache as register_cache
    from ._tuning.sweep.search import Budget as Budget
    from ._tuning.sweep.search import SearchState as SearchState
    from ._tuning.sweep.search import Strategy as Strategy
    from ._tuning.tune import tune as tune

#: Each name imported on first use -> the module that defines it.
_LAZY = {
    "KernelStat": "._profiling.attribution",
    "Profile": "._profiling.report",
    "Profiled": "._profiling.profiled",
    "profile": "._profiling.profiled",
    "profiled": "._profiling.profiled",
    "Autotuned": "._tuning.autotuned",
    "register_cache": "._tuning.store.cache",
    "autotuned": "._tuning.decorator",
    "KernelSite": "._program.locate",
    "locate": "._program.locate",
    "Choice": "._core.vocabulary",
    "Entry": "._core.vocabulary",
    "Failure": "._core.vocabulary",
    "Measurement": "._core.vocabulary",
    "TuningResult": "._tuning.result",
    "Budget": "._tuning.sweep.search",
    "SearchState": "._tuning.sweep.search",
    "Strategy": "._tuning.sweep.search",
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
    "MissError",
    "PlotsUnavailableError",
    "Profile",
    "ProfileError",
    "Profiled",
    "SearchState",
    "SettingsError",
    "SignatureError",
    "Strategy",
    "SweepError",
    "SynthesisedValuesWarning",
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
