"""jaxtune: autotuning and profiling for JAX and Pallas kernels.

Only what works is exported here; every name has a page under ``docs/``.
"""

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

# JAX is imported by now: what XLA_FLAGS / LIBTPU_INIT_ARGS hold is what its backend will
# read, so `jaxtune doctor` (in this process) can report a later change.
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
