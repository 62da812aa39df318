"""Entries record a digest of the kernel's code; an entry tuned for other code is stale
(docs/cache.md, "Stale entries: the kernel's code changed"): a miss at lookup, marked in `cache
list`, dropped by `prune --stale`. Comments, blank lines, formatting and docstrings do not
change the digest."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import pytest

from jaxtune._core import settings as _settings
from jaxtune._core.errors import JaxtuneWarning, MissError
from jaxtune._core.vocabulary import Entry
from jaxtune._tuning import digest as _digest
from jaxtune._tuning import lookup as _lookup
from jaxtune._tuning.store import cache as _cache
from jaxtune._tuning.store import result_files as _results

ROOT = pathlib.Path(__file__).resolve().parent.parent

HELPERS = textwrap.dedent(
    """
    def twice(x):
        return x * 2
    """
)

KERNEL = textwrap.dedent(
    '''
    """A kernel module written to a temporary folder by the test."""
    import functools

    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    import jaxtune

    from . import helpers


    def _body(x_ref, o_ref, *, factor):
        o_ref[...] = x_ref[...] * factor


    def _prep(x):
        return helpers.twice(x) - x


    @jaxtune.autotuned(configs={"block": [8, 16]}, name="h33.scale")
    def scale(x, *, block):
        y = _prep(x)
        return pl.pallas_call(
            functools.partial(_body, factor=2.0),
            out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype),
            interpret=True,
        )(y)


    @jaxtune.autotuned(configs={"block": [8, 16]}, name="h33.versioned", version=3)
    def versioned(x, *, block):
        return _prep(x)
    '''
)

#: The same code, reformatted, with comments, blank lines and another docstring.
KERNEL_REFORMATTED = (
    KERNEL.replace(
        "    o_ref[...] = x_ref[...] * factor\n",
        "    # scale the block\n\n    o_ref[...] = (x_ref[...]  *  factor)   # comment\n",
    )
    .replace('"""A kernel module', '"""Another docstring for a kernel module')
    .replace("def _prep(x):\n", 'def _prep(x):\n    """Twice x, less x."""\n')
    .replace("        )(y)\n", "        )(\n            y,\n        )\n")
)


def _package(root: pathlib.Path, kernel: str = KERNEL, helpers: str = HELPERS) -> pathlib.Path:
    pkg = root / "h33pkg"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text(helpers)
    (pkg / "kern.py").write_text(kernel)
    return pkg


def _load(root: pathlib.Path):
    """Imports ``h33pkg.kern`` from ``root``, replacing an earlier import of the package
    (every variant has the same module names: the digest names modules)."""
    for mod in [m for m in sys.modules if m == "h33pkg" or m.startswith("h33pkg.")]:
        del sys.modules[mod]
    spec = importlib.util.spec_from_file_location(
        "h33pkg", root / "h33pkg" / "__init__.py", submodule_search_locations=[str(root / "h33pkg")]
    )
    assert spec is not None and spec.loader is not None
    pkg = importlib.util.module_from_spec(spec)
    sys.modules["h33pkg"] = pkg
    spec.loader.exec_module(pkg)
    from h33pkg import kern  # type: ignore[import-not-found]

    return kern


@pytest.fixture
def versions(tmp_path):
    """Loads a variant of the kernel package (each from its own folder) and unloads it."""
    count = [0]

    def load(kernel: str = KERNEL, helpers: str = HELPERS):
        count[0] += 1
        root = tmp_path / f"v{count[0]}"
        _package(root, kernel, helpers)
        return _load(root)

    yield load
    for mod in [m for m in sys.modules if m == "h33pkg" or m.startswith("h33pkg.")]:
        del sys.modules[mod]


def _parts(kern) -> set[tuple[str, str]]:
    return {(m, q) for m, q, _ in _digest.code_digest(kern.scale).parts}


def test_the_digest_covers_the_kernel_its_helpers_and_its_pallas_body_not_jax(versions):
    kern = versions()
    assert _parts(kern) == {
        ("h33pkg.kern", "scale"),
        ("h33pkg.kern", "_body"),
        ("h33pkg.kern", "_prep"),
        ("h33pkg.helpers", "twice"),
    }


def test_the_digest_is_pinned(versions):
    """The same code has the same digest on every supported Python (3.11 and 3.12 read it
    into trees that differ only in empty fields) and across jaxtune releases: a change of
    this value makes every user's entries stale, so it must be deliberate."""
    assert _digest.code_digest(versions().scale).digest == "c59c82376c4fc1a1"


def test_comments_blank_lines_formatting_and_docstrings_leave_the_digest(versions):
    before = _digest.code_digest(versions().scale)
    after = _digest.code_digest(versions(KERNEL_REFORMATTED).scale)
    assert before.digest and after == before


@pytest.mark.parametrize(
    ("what", "kernel", "helpers"),
    [
        ("the kernel's body", KERNEL.replace("y = _prep(x)", "y = _prep(x) + 0"), HELPERS),
        ("the Pallas body", KERNEL.replace("* factor\n", "* factor * factor\n"), HELPERS),
        ("a helper in the module", KERNEL.replace("- x\n", "- x - x\n"), HELPERS),
        ("a helper in another module", KERNEL, HELPERS.replace("x * 2", "x * 3")),
    ],
)
def test_an_edit_of_code_the_kernel_reaches_changes_the_digest(versions, what, kernel, helpers):
    before = _digest.code_digest(versions().scale).digest
    after = _digest.code_digest(versions(kernel, helpers).scale).digest
    assert before != after, what


def test_the_space_in_the_decorator_is_not_the_code(versions):
    """A value added to the space is handled by the entry's space check, not the digest."""
    before = _digest.code_digest(versions().scale).digest
    wider = KERNEL.replace(
        'configs={"block": [8, 16]}, name="h33.scale"',
        'configs={"block": [8, 16, 32]}, name="h33.scale"',
    )
    assert _digest.code_digest(versions(wider).scale).digest == before


def test_a_kernel_with_version_has_no_digest(versions):
    kern = versions()
    assert kern.versioned.options.code.value == _digest.CodeDigest()
    assert kern.scale.options.code.digest


@pytest.mark.parametrize(
    ("recorded", "changed"),
    [("other", True), ("", False)],  # an entry without a digest is of unknown code
)
def test_a_kernel_and_a_recorded_call_judge_code_by_one_rule(versions, recorded, changed):
    """The lookup (``KernelCode.changed``) and ``tune --from-profile`` (a recorded call's
    digest against the entry's) ask the one rule, ``code_changed``."""
    kern = versions()
    code = kern.scale.options.code
    assert code.changed(recorded) is changed
    assert _digest.code_changed(code.digest, recorded) is changed
    assert code.changed(code.digest) is _digest.code_changed(code.digest, code.digest) is False
    # A kernel of unknown code (version= given) is never stale for code, by either road.
    versioned = kern.versioned.options.code
    assert not versioned.changed(recorded or "other")
    assert not _digest.code_changed(versioned.digest, recorded or "other")


def test_check_parts_reads_the_source_files_without_importing(tmp_path, versions):
    kern = versions()
    parts = _digest.code_digest(kern.scale).parts
    root = tmp_path / "disk"
    _package(root)
    assert _digest.check_parts(parts, search=[str(root)]) == "fresh"
    _package(root, KERNEL_REFORMATTED)
    assert _digest.check_parts(parts, search=[str(root)]) == "fresh"
    _package(root, KERNEL, HELPERS.replace("x * 2", "x * 3"))
    assert _digest.check_parts(parts, search=[str(root)]) == "changed"
    _package(root, KERNEL.replace("def _prep(x)", "def _prepared(x)"))
    assert _digest.check_parts(parts, search=[str(root)]) == "changed"
    assert _digest.check_parts(parts, search=[str(tmp_path / "nowhere")]) == "unknown"
    assert _digest.check_parts((), search=[str(root)]) == "unknown"


#: The kernel's module reads module-level names: its own constant, a derived one and one
#: imported from another module of the package.
KERNEL_CONSTANTS = KERNEL.replace(
    "from . import helpers\n",
    "from . import helpers\nfrom .helpers import OFFSET\n\nA = 0.99\nB = A * 2  # derived\n",
).replace("* factor\n", "* factor * A + B + OFFSET\n")
# Its own name: the lookups below warn once per kernel and process.
KERNEL_CONSTANTS = KERNEL_CONSTANTS.replace('name="h33.scale"', 'name="h33.constants"')
HELPERS_CONSTANTS = HELPERS + "\nOFFSET = 1.0\n"


@pytest.mark.parametrize(
    ("what", "kernel", "helpers"),
    [
        ("the constant", KERNEL_CONSTANTS.replace("A = 0.99", "A = 0.5"), HELPERS_CONSTANTS),
        ("the derived one", KERNEL_CONSTANTS.replace("B = A * 2", "B = A * 3"), HELPERS_CONSTANTS),
        ("the imported one", KERNEL_CONSTANTS, HELPERS_CONSTANTS.replace("1.0", "2.0")),
    ],
)
def test_a_module_level_constant_the_kernel_reads_is_in_the_digest(versions, what, kernel, helpers):
    before = _digest.code_digest(versions(KERNEL_CONSTANTS, HELPERS_CONSTANTS).scale)
    assert ("h33pkg.kern", "global A") in {(m, q) for m, q, _ in before.parts}
    after = _digest.code_digest(versions(kernel, helpers).scale)
    assert before.digest != after.digest, what
    # Comments and layout around it still do not count.
    reformatted = KERNEL_CONSTANTS.replace("A = 0.99\n", "A = (\n    0.99  # tuned for v5e\n)\n")
    same = _digest.code_digest(versions(reformatted, HELPERS_CONSTANTS).scale)
    assert same == before


def test_a_changed_module_constant_makes_the_entry_stale(versions, tmp_path, monkeypatch, incli):
    """docs/cache.md: a changed constant makes entries stale, in the lookup and in
    `jaxtune cache list` (which reads the source files without importing them)."""
    kern = versions(KERNEL_CONSTANTS, HELPERS_CONSTANTS)
    code = kern.scale.options.code.value
    entry = dataclasses.replace(
        _entry("h33.constants", "f32[16]", {"block": 16}, digest=code.digest),
        code_parts=code.parts,
    )
    _cache.user_cache().write([entry])
    assert kern.scale.config_for(jnp.ones(16)).source == "cache"
    on_disk = tmp_path / "disk"
    _package(on_disk, KERNEL_CONSTANTS, HELPERS_CONSTANTS)
    monkeypatch.syspath_prepend(str(on_disk))

    def listed() -> dict:
        done = incli("cache", "list", "--json")
        assert done.returncode == 0, done.stderr
        (found,) = json.loads(done.stdout)["entries"]
        return found

    assert listed()["code"] == "fresh"
    edited = KERNEL_CONSTANTS.replace("A = 0.99", "A = 0.5")
    _package(on_disk, edited, HELPERS_CONSTANTS)
    assert (listed()["code"], listed()["stale_reasons"]) == ("changed", ["code changed"])
    with pytest.warns(JaxtuneWarning, match=r"stale: code changed"):
        assert versions(edited, HELPERS_CONSTANTS).scale.config_for(jnp.ones(16)).source == (
            "default"
        )


def _entry(kernel, key, config, *, digest=""):
    return Entry(
        kernel=kernel,
        device_kind=_lookup.device_kind(),
        key=key,
        config=config,
        time_us=1.0,
        default_config={"block": 8},
        default_time_us=2.0,
        code_digest=digest,
    )


def test_an_entry_for_other_code_is_a_miss_with_one_warning_in_cached_mode(versions):
    kern = versions()
    x = jnp.ones(16)
    _cache.user_cache().write([_entry("h33.scale", "f32[16]", {"block": 16}, digest="0" * 16)])
    with pytest.warns(JaxtuneWarning, match=r"stale: code changed.*JAXTUNE_MODE=tune") as got:
        choice = kern.scale.config_for(x)
    assert (choice.source, dict(choice.config)) == ("default", {"block": 8})
    assert got[0].filename == __file__  # the user's line, not jaxtune's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kern.scale.config_for(x).source == "default"  # warned once


def test_a_miss_on_a_code_stale_entry_says_it_is_stale(versions, monkeypatch):
    """JAXTUNE_ON_MISS=error: the MissError says why there is no config (the entry is
    stale for code), not only that there is none."""
    kern = versions(KERNEL.replace('name="h33.scale"', 'name="h33.missed"'))
    _cache.user_cache().write([_entry("h33.missed", "f32[16]", {"block": 16}, digest="0" * 16)])
    monkeypatch.setenv("JAXTUNE_ON_MISS", "error")
    with (
        pytest.warns(JaxtuneWarning, match="stale: code changed"),
        pytest.raises(
            MissError,
            match=r"^jaxtune has only a stale tuned config for h33.missed with key f32\[16\] "
            r"on .* \(its user cache entry is stale: it was tuned for other code of the kernel",
        ),
    ):
        jax.jit(kern.scale)(jnp.ones(16))
    # A key with no entry at all is still "no tuned config".
    with pytest.raises(MissError, match=r"^jaxtune has no tuned config for h33\.missed"):
        jax.jit(kern.scale)(jnp.ones(32))


def test_import_says_an_entry_is_stale_for_the_code_here_and_source_names_the_code(
    versions, tmp_path, monkeypatch, incli
):
    """An export of entries tuned for old code, imported where the kernel was edited: the
    import says they are stale. `--source DIR` finds the code wherever the command runs."""
    code = versions().scale.options.code.value
    old = dataclasses.replace(
        _entry("h33.scale", "f32[16]", {"block": 16}, digest=code.digest), code_parts=code.parts
    )
    exported = tmp_path / "tuned.msgpack"
    _results.save(exported, [old])
    checkout = tmp_path / "checkout"
    _package(checkout, KERNEL.replace("* factor\n", "* factor * 1.5\n"))  # edited since
    monkeypatch.chdir(checkout)  # run from the checkout: its modules are found
    done = incli("cache", "import", str(exported))
    assert done.returncode == 0, done.stderr
    assert "1 new, 0 unchanged, 0 replaced, 0 kept, 1 stale" in done.stdout
    kind = _lookup.device_kind()
    assert f"  stale    h33.scale on {kind}, key f32[16]: code changed (tuned for other" in (
        done.stdout
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # from elsewhere: unknown, unless --source says where
    again = json.loads(incli("cache", "import", str(exported), "--json").stdout)
    assert again["stale"] == []
    again = json.loads(
        incli("cache", "import", str(exported), "--json", "--source", str(checkout)).stdout
    )
    assert again["stale"] == [
        {
            "kernel": "h33.scale",
            "device_kind": kind,
            "key": "f32[16]",
            "kernel_version": "",
            "stale_reasons": ["code changed"],
        }
    ]
    (listed,) = json.loads(incli("cache", "list", "--json").stdout)["entries"]
    assert listed["code"] == "unknown"
    listed = json.loads(incli("cache", "list", "--json", "--source", str(checkout)).stdout)
    assert listed["entries"][0]["code"] == "changed"
    assert json.loads(incli("cache", "prune", "--stale", "--json").stdout) == {"dropped": 0}
    pruned = incli("cache", "prune", "--stale", "--json", "--source", str(checkout))
    assert json.loads(pruned.stdout) == {"dropped": 1}
    missing = incli("cache", "list", "--source", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "--source" in missing.stderr


def test_an_entry_without_a_digest_is_used(versions):
    """Entries written before digests existed are of unknown code, not stale."""
    kern = versions()
    _cache.user_cache().write([_entry("h33.scale", "f32[16]", {"block": 16})])
    choice = kern.scale.config_for(jnp.ones(16))
    assert (choice.source, dict(choice.config)) == ("cache", {"block": 16})


def test_an_entry_for_this_code_is_used_and_version_overrides_the_digest(versions):
    kern = versions()
    current = _entry("h33.scale", "f32[16]", {"block": 16}, digest=kern.scale.options.code.digest)
    # A kernel with version= is compared by its version: another digest does not count.
    other_code = dataclasses.replace(
        _entry("h33.versioned", "f32[16]", {"block": 16}, digest="0" * 16), kernel_version="3"
    )
    _cache.user_cache().write([current, other_code])
    assert kern.scale.config_for(jnp.ones(16)).source == "cache"
    assert kern.versioned.config_for(jnp.ones(16)).source == "cache"


def test_tune_mode_tunes_a_stale_entry_again(versions, monkeypatch, fast_timing):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "inline")
    kern = versions()
    _cache.user_cache().write([_entry("h33.scale", "f32[16]", {"block": 16}, digest="0" * 16)])
    with _settings.override(mode="tune"), warnings.catch_warnings():
        warnings.simplefilter("error")  # no stale warning: the sweep replaces the entry
        kern.scale(jnp.ones(16))
    entry = _cache.user_cache().lookup("h33.scale", _lookup.device_kind(), "f32[16]", version="")
    assert entry is not None and entry.code_digest == kern.scale.options.code.digest
    assert entry.code_parts == _digest.code_digest(kern.scale).parts


# -- fresh processes: tune, edit, run again ------------------------------------------------


RUN = textwrap.dedent(
    """
    import json, warnings
    import jax.numpy as jnp
    from h33pkg.kern import scale
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = scale(jnp.ones(16))
        choice = scale.config_for(jnp.ones(16))
    print(json.dumps({"source": choice.source, "out": float(out[0]),
                      "warnings": [str(w.message) for w in caught]}))
    """
)


def _python(cwd: pathlib.Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in a fresh process, in ``cwd``, with ``env``."""
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=300, cwd=cwd
    )


@pytest.mark.child
def test_editing_a_kernel_body_makes_its_entries_stale_in_a_fresh_process(tmp_path):
    work = tmp_path / "work"
    pkg = _package(work)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(work)]),
        "JAXTUNE_ISOLATION": "inline",
    }

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return _python(work, {**env, **extra}, *args)

    def program(**extra: str) -> dict:
        done = run("-c", RUN, **extra)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.splitlines()[-1])

    def listed() -> dict:
        done = run("-m", "jaxtune", "cache", "list", "--json")
        assert done.returncode == 0, done.stderr[-3000:]
        (entry,) = json.loads(done.stdout)["entries"]
        return entry

    tuned = program(JAXTUNE_MODE="tune")
    assert tuned["source"] == "cache"
    assert listed()["code"] == "fresh"

    # Comments and formatting only: the entry is still current, in the lookup and the list.
    (pkg / "kern.py").write_text(KERNEL_REFORMATTED)
    again = program()
    assert again["source"] == "cache" and again["warnings"] == []
    entry = listed()
    assert entry["code"] == "fresh" and not entry["stale"]

    # The Pallas body edited: a miss (the default, one warning), marked in `cache list`.
    (pkg / "kern.py").write_text(KERNEL.replace("* factor\n", "* factor * 1.5\n"))
    edited = program()
    assert edited["source"] == "default"
    assert edited["out"] == 3.0  # the edited code ran
    assert len(edited["warnings"]) == 1 and "stale: code changed" in edited["warnings"][0]
    entry = listed()
    assert entry["code"] == "changed" and entry["stale_reasons"] == ["code changed"]
    table = run("-m", "jaxtune", "cache", "list")
    assert "h33.scale (stale: code changed)" in table.stdout

    # `cache prune --stale` drops it; tune mode tunes the new code.
    pruned = run("-m", "jaxtune", "cache", "prune", "--stale", "--json")
    assert json.loads(pruned.stdout) == {"dropped": 1}
    assert program(JAXTUNE_MODE="tune")["source"] == "cache"
    assert listed()["code"] == "fresh"


#: A script that defines a kernel, and when run, calls it.
SCRIPT = textwrap.dedent(
    """
    import json, warnings
    import jax.numpy as jnp
    import jaxtune

    def _twice(x):
        return x * 2

    @jaxtune.autotuned(configs={"block": [8, 16]}, name="h33.script_scale")
    def scale(x, *, block):
        return _twice(x) + block

    def report():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            choice = scale.config_for(jnp.ones(16))
        print(json.dumps({"source": choice.source, "config": dict(choice.config),
                          "warnings": [str(w.message) for w in caught]}))

    if __name__ == "__main__":
        scale(jnp.ones(16))
        report()
    """
)


@pytest.mark.child
def test_a_kernel_tuned_by_running_its_script_is_fresh_where_the_script_is_imported(tmp_path):
    """The script's module is ``__main__`` when run and ``h33script`` when imported (or
    ``h33script`` again under ``python -m``): the same code has the same digest."""
    (tmp_path / "h33script.py").write_text(SCRIPT)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]),
        "JAXTUNE_ISOLATION": "inline",
        "JAXTUNE_CACHE_DIR": str(tmp_path / "cache"),
    }

    def run(*args: str, **extra: str) -> dict:
        done = _python(tmp_path, {**env, **extra}, *args)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.splitlines()[-1])

    tuned = run("h33script.py", JAXTUNE_MODE="tune")
    assert tuned["source"] == "cache"
    imported = run("-c", "import h33script; h33script.report()")
    assert imported == {**tuned, "warnings": []}
    assert run("-m", "h33script") == imported
    # Profiled: sys.modules["__main__"] is cProfile's, the script's own globals still say.
    assert run("-m", "cProfile", "-o", os.devnull, "h33script.py") == imported
    # Still a digest of the code: an edit of the helper the kernel calls makes it stale.
    (tmp_path / "h33script.py").write_text(SCRIPT.replace("return x * 2", "return x * 3"))
    edited = run("-c", "import h33script; h33script.report()")
    assert edited["source"] == "default"
    assert len(edited["warnings"]) == 1 and "stale: code changed" in edited["warnings"][0]


@pytest.mark.parametrize(
    ("globals_", "name"),
    [
        ({"__spec__": None, "__file__": "/w/train.py"}, "train"),  # python train.py
        ({"__spec__": importlib.util.spec_from_loader("pkg.train", None)}, "pkg.train"),
        ({"__spec__": importlib.util.spec_from_loader("__main__", None), "__file__": "t.py"}, "t"),
        ({"__file__": "/w/my-train.py"}, None),  # no module could have that name
        ({"__spec__": None}, None),  # python -c, a REPL, a notebook
    ],
)
def test_a_running_scripts_module_is_named_as_it_would_be_imported(globals_, name):
    assert _digest._script_name(globals_) == name


def test_a_kernel_without_source_has_no_digest_and_uses_its_entries():
    namespace: dict = {}
    exec(  # no file behind it: its code cannot be read
        "def made(x, *, block):\n    return x * block\n", {"__name__": "h33made"}, namespace
    )
    import jaxtune

    k = jaxtune.autotuned(configs={"block": [8, 16]}, name="h33.made")(namespace["made"])
    assert k.options.code.value == _digest.CodeDigest()
    _cache.user_cache().write([_entry("h33.made", "f32[16]", {"block": 16}, digest="0" * 16)])
    assert k.config_for(jnp.ones(16)).source == "cache"


class _Hostile:
    """A global whose attributes raise, as some proxies' do."""

    def __getattr__(self, name):
        raise RuntimeError(f"no {name} here")


def test_odd_globals_do_not_break_the_digest(versions):
    kern = versions(KERNEL.replace("def _prep(x):\n", "def _prep(x):\n    HOSTILE\n"))
    kern.HOSTILE = _Hostile()
    assert _digest.code_digest(kern.scale).digest
