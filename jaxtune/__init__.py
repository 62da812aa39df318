"""jaxtune: autotuning and profiling for JAX and Pallas kernels.

Only what works is exported here; every name has a page under ``docs/``.
"""

from . import flags as flags
from ._errors import CacheError as CacheError
from ._errors import ConfigSpaceError as ConfigSpaceError
from ._errors import FlagError as FlagError
from ._errors import JaxtuneError as JaxtuneError
from ._errors import SettingsError as SettingsError
from ._errors import SignatureError as SignatureError
from ._errors import SweepError as SweepError
from ._errors import TuningFailedError as TuningFailedError

__version__ = "0.1.0"

__all__ = [
    "CacheError",
    "ConfigSpaceError",
    "FlagError",
    "JaxtuneError",
    "SettingsError",
    "SignatureError",
    "SweepError",
    "TuningFailedError",
    "__version__",
    "flags",
]
