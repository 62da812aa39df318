"""Optional test dependencies: what a test needs that the `test` dependency group does not
install (a kernel library of the `conformance` group, xprof, headless Chromium).

Where one is missing a test skips, saying what is missing and how to install it. Where
``REQUIRE_TEST_EXTRAS=1`` (``.ci/run`` sets it, having installed them all) a missing one is
an error instead: CI must not pass by skipping the tests that need them.
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType

import pytest

#: Whether a missing optional dependency fails the run instead of skipping its tests.
REQUIRED = os.environ.get("REQUIRE_TEST_EXTRAS") == "1"


def require(module: str, *, reason: str) -> ModuleType:
    """``module`` imported; where it is missing, the calling test (or module) skips with
    ``reason``, or with ``REQUIRE_TEST_EXTRAS=1`` the import error goes up."""
    if REQUIRED:
        try:
            # As pytest.importorskip does: a library's own import-time warnings (Tokamax
            # 0.0.17 touches `pl.GridSpec`, which JAX 0.12.1 deprecates) are not this
            # suite's to fix, and must not fail CI where they pass a plain run.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return importlib.import_module(module)
        except ImportError as e:
            raise ImportError(f"REQUIRE_TEST_EXTRAS=1, and {reason}: {e}") from e
    return pytest.importorskip(module, reason=reason)


def skip_unless(present: bool, *, reason: str) -> pytest.MarkDecorator:
    """A ``skipif`` mark for tests that need what ``present`` says is here; with
    ``REQUIRE_TEST_EXTRAS=1`` its absence is an error when the module is collected."""
    if REQUIRED and not present:
        raise RuntimeError(f"REQUIRE_TEST_EXTRAS=1, and {reason}")
    return pytest.mark.skipif(not present, reason=reason)
