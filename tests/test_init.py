"""The doorway: ``import jaxtune`` leaves JAX unimported, every public name still resolves
(to the object its module defines), and ``jaxtune report`` reads a trace without JAX."""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import subprocess
import sys

import pytest
from jax.profiler import ProfileData

import jaxtune

ROOT = pathlib.Path(__file__).resolve().parent.parent

TRACE = """
planes {
  id: 1 name: "/device:TPU:0"
  lines { id: 1 name: "XLA Ops" timestamp_ns: 1764547200000001000
    events { metadata_id: 1 offset_ps: 0 duration_ps: 4000000 }
    events { metadata_id: 2 offset_ps: 5000000 duration_ps: 1000000 }
    events { metadata_id: 1 offset_ps: 7000000 duration_ps: 2000000 }
  }
  event_metadata { key: 1 value { id: 1 name: "custom-call.1"
    stats { metadata_id: 1 str_value: "jit(step)/tiled_matmul/pallas_call" }
    stats { metadata_id: 2 str_value: "custom-call" } } }
  event_metadata { key: 2 value { id: 2 name: "fusion.2"
    stats { metadata_id: 1 str_value: "jit(step)/tanh" } } }
  stat_metadata { key: 1 value { id: 1 name: "tf_op" } }
  stat_metadata { key: 2 value { id: 2 name: "hlo_category" } }
}
"""


def _python(code: str, **env: str) -> str:
    """Runs ``code`` in a fresh interpreter with this checkout first on the path."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", **env}
    done = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.child
def test_import_jaxtune_does_not_import_jax():
    assert _python("import sys, jaxtune; print('jax' in sys.modules)") == "False"


@pytest.mark.child
@pytest.mark.parametrize(
    "first", ["import jaxtune\njaxtune.autotuned", "import jax\nimport jaxtune"]
)
def test_the_flags_jax_saw_are_remembered_without_hooking_imports(first):
    # JAX imported by a jaxtune name, or before jaxtune: no import hook is installed.
    code = (
        "import os, sys\n"
        "hooks = list(sys.meta_path)\n"
        f"{first}\n"
        "import jax\n"
        "assert sys.meta_path == hooks\n"
        "assert 'jaxtune' not in type(jax.__spec__.loader).__module__\n"
        "os.environ['XLA_FLAGS'] = '--xla_dump_to=/tmp/later'\n"
        "from jaxtune._core.settings import changed_since_jax_import\n"
        "print(changed_since_jax_import())"
    )
    out = _python(code, XLA_FLAGS="--xla_dump_to=/tmp/first")
    assert "/tmp/first" in out and "/tmp/later" in out


@pytest.mark.child
def test_import_and_eager_calls_add_no_audit_hook():
    # sys.addaudithook raises the "sys.addaudithook" event in the hooks already there, so a
    # hook added first sees every later one: jaxtune used to add one at import. Only hooks
    # added from jaxtune's files count: filelock >= 4.3 adds one when JAX 0.12.1 imports it.
    code = (
        "import os, sys\n"
        "added = []\n"
        "def hook(e, a):\n"
        "    if e == 'sys.addaudithook':\n"
        "        where = sys._getframe(1).f_code.co_filename\n"
        "        added.extend([where] if os.sep + 'jaxtune' + os.sep in where else [])\n"
        "sys.addaudithook(hook)\n"
        "import jaxtune\n"
        "import jax.numpy as jnp\n"
        "from jaxtune._core import settings as _settings\n"
        "@jaxtune.autotuned(configs={'f': [1, 2]}, check=False, name='t.k')\n"
        "def k(x, *, f):\n"
        "    return x * f\n"
        "x = jnp.ones(4)\n"
        "k(x)\n"
        "os.environ['JAXTUNE_MODE'] = 'off'\n"
        "k(x)\n"
        "with _settings.override(mode='cached'):\n"
        "    k(x)\n"
        "umask = os.umask(0o022)\n"
        "print(len(added), oct(umask))"
    )
    assert _python(code) == "0 0o22"
    assert _python("import os; os.umask(0o077); import jaxtune; print(oct(os.umask(0)))") == (
        "0o77"
    )


@pytest.mark.parametrize("name", jaxtune.__all__)
def test_every_public_name_is_the_object_its_module_defines(name):
    value = getattr(jaxtune, name)
    if name == "__version__":
        assert isinstance(value, str)
    elif name == "flags":
        assert value is importlib.import_module("jaxtune.flags")
    else:
        assert getattr(importlib.import_module(value.__module__), value.__name__) is value
    assert name in dir(jaxtune)


def test_star_import_and_subpackages_work_as_before():
    namespace: dict = {}
    exec("from jaxtune import *", namespace)
    assert set(jaxtune.__all__) <= set(namespace)
    assert jaxtune._profiling.__name__ == "jaxtune._profiling"
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        jaxtune.no_such_name  # noqa: B018


@pytest.mark.child
def test_report_command_reads_a_trace_without_importing_jax(tmp_path):
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(ProfileData.text_proto_to_serialized_xspace(TRACE))
    code = (
        "import contextlib, io, json, sys\n"
        "from jaxtune._cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    status = main(['report', '--json', {str(path)!r}])\n"
        "doc = json.loads(out.getvalue())\n"
        "print(json.dumps([status, 'jax' in sys.modules, [k['name'] for k in doc['kernels']],"
        " [k['calls'] for k in doc['kernels']]]))"
    )
    status, jax_imported, names, calls = json.loads(_python(code))
    assert (status, jax_imported) == (0, False)
    assert names == ["tiled_matmul"] and calls == [2]


@pytest.mark.child
def test_profiled_loads_no_module_of_the_tuning_flow():
    """The profiling flow reads the tuning flow's facts (``_tuning/bound.marked_call``) only
    where a capture saw an autotuned call, which the tuning flow, loaded, marked."""
    code = "import sys, jaxtune; jaxtune.profiled; print(any('_tuning' in m for m in sys.modules))"
    assert _python(code) == "False"
