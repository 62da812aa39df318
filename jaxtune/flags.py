"""Flags for XLA and libtpu, built for a child process.

``jaxtune.flags`` builds ``XLA_FLAGS`` / ``LIBTPU_INIT_ARGS`` for profiling, merges them with
what the user already set, rewrites legacy names, and checks an installed libtpu for a flag
before relying on it. See ``docs/flags.md``.

Examples:
    >>> from jaxtune import flags
    >>> flags.merge("--xla_enable_custom_call_region_trace=true", ["--xla_dump_to=/tmp/d"])
    '--xla_xprof_enable_custom_call_tracing=true --xla_dump_to=/tmp/d'
"""

from ._core.flags import BUNDLE_INSTRUMENTATION as BUNDLE_INSTRUMENTATION
from ._core.flags import CUSTOM_CALL_TRACING as CUSTOM_CALL_TRACING
from ._core.flags import LEGACY_NAMES as LEGACY_NAMES
from ._core.flags import LLO_DEBUG_INFO as LLO_DEBUG_INFO
from ._core.flags import PERIODIC_COUNTER_SAMPLING as PERIODIC_COUNTER_SAMPLING
from ._core.flags import Flag as Flag
from ._core.flags import FlagReport as FlagReport
from ._core.flags import binary_defines as binary_defines
from ._core.flags import child_env as child_env
from ._core.flags import find_jaxlib_binary as find_jaxlib_binary
from ._core.flags import find_libtpu as find_libtpu
from ._core.flags import inspect as inspect
from ._core.flags import merge as merge
from ._core.flags import parse as parse
from ._core.flags import profile_flags as profile_flags

__all__ = [
    "BUNDLE_INSTRUMENTATION",
    "CUSTOM_CALL_TRACING",
    "LEGACY_NAMES",
    "LLO_DEBUG_INFO",
    "PERIODIC_COUNTER_SAMPLING",
    "Flag",
    "FlagReport",
    "binary_defines",
    "child_env",
    "find_jaxlib_binary",
    "find_libtpu",
    "inspect",
    "merge",
    "parse",
    "profile_flags",
]
