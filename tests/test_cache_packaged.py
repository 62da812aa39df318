"""Packaged caches a kernel library ships (docs/cache.md, "Packaged caches"; docs/teams.md,
"Shipping configs with a library"): ``register_cache`` never fails the library's import, reads a
file only when a lookup reaches it, and ``jaxtune cache list`` / ``show`` show what the library
ships, with the file it came from."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import msgpack
import pytest

import jaxtune
from jaxtune._core.vocabulary import Entry
from jaxtune._tuning import lookup as _lookup
from jaxtune._tuning.store import cache as _cache
from jaxtune._tuning.store.result_files import SCHEMA_VERSION

ROOT = pathlib.Path(__file__).resolve().parent.parent
X = jnp.ones((64,), jnp.float32)


@jaxtune.autotuned(configs={"factor": [1, 2, 3]}, check=False, name="tests.packaged.scale")
def scale(x, *, factor):
    return x * factor


def entry(key="f32[64]", factor=3, kernel="tests.packaged.scale", **kw):
    return Entry(
        kernel=kernel,
        device_kind=kw.pop("kind", None) or _lookup.device_kind(),
        key=key,
        config={"factor": factor},
        time_us=1.0,
        default_config={"factor": 1},
        default_time_us=3.0,
        **kw,
    )


def shipped(path: pathlib.Path, *entries: Entry) -> pathlib.Path:
    return jaxtune.TuningResult.of(*(entries or (entry(),))).save(path)


#: Bad shipped files: how each is made, and what the warning says of it.
BAD_FILES = {
    "damaged": (lambda p: p.write_bytes(b"\xc1\x00garbage"), "msgpack decode failed"),
    "empty": (lambda p: p.write_bytes(b""), "the file is empty"),
    "newer": (
        lambda p: p.write_bytes(
            msgpack.packb(
                {"schema": SCHEMA_VERSION + 1, "format": "jaxtune.TuningResult", "entries": []}
            )
        ),
        "newer than this jaxtune understands",
    ),
    "missing": (lambda p: None, "it does not exist"),
}

LIBRARY = textwrap.dedent(
    """
    import pathlib
    import jaxtune

    jaxtune.register_cache(pathlib.Path(__file__).parent / "tuned.msgpack")

    @jaxtune.autotuned(configs={{"factor": [1, 2, 3]}}, check=False, name="{name}")
    def scale(x, *, factor):
        return x * factor
    """
)


def library(root: pathlib.Path, name: str) -> pathlib.Path:
    """A package ``name`` under ``root`` that registers its ``tuned.msgpack``."""
    package = root / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(LIBRARY.format(name=f"{name}.scale"))
    return package / "tuned.msgpack"


@pytest.mark.child
def test_a_bad_shipped_file_never_fails_the_librarys_import(tmp_path):
    """The fault: a damaged, empty, newer-schema or missing shipped file made
    ``register_cache`` raise, so ``import mylib`` failed for every user."""
    for name, (make, _) in BAD_FILES.items():
        make(library(tmp_path, f"lib_{name}"))
    code = textwrap.dedent(
        """
        import warnings, jax.numpy as jnp
        warnings.simplefilter("always")
        for name in NAMES:
            module = __import__(f"lib_{name}")
            x = jnp.ones((8,), jnp.float32)
            choices = {module.scale.config_for(x).source for _ in range(2)}
            print(name, "imported", *sorted(choices), flush=True)
        """
    ).replace("NAMES", repr(list(BAD_FILES)))
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:-1] == [f"{name} imported default" for name in BAD_FILES]
    for name, (_, why) in BAD_FILES.items():
        path = tmp_path / f"lib_{name}" / "tuned.msgpack"
        said = [line for line in done.stderr.splitlines() if f"packaged cache {path}:" in line]
        assert len(said) == 1, done.stderr  # one warning, naming the file
        assert why in said[0] and "Its configs are not used" in said[0]


@pytest.mark.parametrize("name", ["damaged", "empty", "newer"])
def test_a_bad_shipped_file_is_one_warning_at_the_first_lookup_then_ignored(tmp_path, name):
    make, why = BAD_FILES[name]
    path = tmp_path / "tuned.msgpack"
    make(path)
    jaxtune.register_cache(path)  # reads nothing, says nothing
    with pytest.warns(jaxtune.JaxtuneWarning, match=f"ignores the packaged cache {path}: ") as w:
        assert scale.config_for(X).source == "default"
        assert scale.config_for(X).source == "default"
    assert len(w) == 1 and why in str(w[0].message)


def test_a_missing_shipped_path_is_one_warning_at_registration():
    with pytest.warns(jaxtune.JaxtuneWarning, match="nowhere.msgpack: it does not exist") as w:
        jaxtune.register_cache("/nonexistent/nowhere.msgpack")
    assert len(w) == 1 and _cache.layers() == []


def test_a_shipped_file_is_read_at_the_first_lookup_not_at_registration(tmp_path):
    """The fault: the file was decoded at registration (+1.7 s on `import` for 10,000
    entries). Evidence with real files: what a lookup finds is the file as it is then."""
    path = shipped(tmp_path / "tuned.msgpack", entry(factor=2))
    jaxtune.register_cache(path)
    (layer,) = _cache.layers()
    assert not layer.loaded
    shipped(path, entry(factor=3))  # the library's file changed after registration
    choice = scale.config_for(X)
    assert (choice.source, dict(choice.config)) == ("packaged", {"factor": 3})
    assert layer.loaded


def test_a_malformed_shipped_entry_is_skipped_the_others_used(tmp_path):
    good = entry(factor=3)
    bad = {**entry(key="f32[8]").to_dict(), "time_us": "fast"}
    path = tmp_path / "tuned.msgpack"
    path.write_bytes(
        msgpack.packb(
            {
                "schema": SCHEMA_VERSION,
                "format": "jaxtune.TuningResult",
                "entries": [bad, good.to_dict()],
            }
        )
    )
    jaxtune.register_cache(path)
    assert scale.config_for(X).source == "packaged"
    with pytest.warns(jaxtune.JaxtuneWarning, match=r"malformed and skipped .*'f32\[8\]'") as w:
        assert scale.config_for(jnp.ones((8,), jnp.float32)).source == "default"
        assert len(_cache.layers()[0].all_entries()) == 1
    assert len(w) == 1


def test_cache_list_shows_a_layer_registered_in_this_process(incli, tmp_path):
    """The fault: with only shipped configs, `cache list` said "(no tuned entries)"."""
    path = shipped(tmp_path / "tuned.msgpack")
    jaxtune.register_cache(path)
    out = incli("cache", "list").stdout
    user, packaged = out.split("\n\n")
    assert user.startswith("user cache ") and "(no tuned entries)" in user
    assert packaged.startswith(f"packaged cache {path}:") and "tests.packaged.scale" in packaged
    doc = json.loads(incli("cache", "list", "--json").stdout)
    (listed,) = doc["entries"]
    assert (listed["source"], listed["layer"], listed["config"]) == (
        "packaged",
        str(path),
        {"factor": 3},
    )
    assert [(la["source"], la["entries"]) for la in doc["layers"]] == [
        ("cache", 0),
        ("packaged", 1),
    ]


def test_cache_list_and_show_read_a_layer_named_on_the_command_line(incli, tmp_path):
    path = shipped(tmp_path / "tuned.msgpack")
    directory = tmp_path / "tuned-dir"
    _cache.CacheStore(directory).write([entry(key="f32[32]", factor=2)])
    out = incli("cache", "list", "--layer", str(path), "--layer", str(directory)).stdout
    assert f"packaged cache {path}:" in out and f"packaged cache {directory}:" in out
    assert "f32[64]" in out and "f32[32]" in out
    shown = incli("cache", "show", "tests.packaged.scale", "--layer", str(path))
    assert shown.returncode == 0
    # A long path wraps onto the next line: compare the words.
    assert f"from the packaged cache {path}" in " ".join(shown.stdout.split())
    missing = incli("cache", "list", "--layer", str(tmp_path / "nope.msgpack"))
    assert missing.returncode == 2 and "nope.msgpack does not exist" in missing.stderr
    (tmp_path / "bad.msgpack").write_bytes(b"\xc1")
    bad = incli("cache", "list", "--layer", str(tmp_path / "bad.msgpack"))
    assert bad.returncode == 2 and "bad.msgpack: not a jaxtune TuningResult" in bad.stderr


@pytest.mark.slow
def test_cache_list_package_shows_what_an_installed_library_ships(cli, tmp_path):
    """A real library in another process: `--package` imports it, and lists what its
    register_cache call registered, with the file."""
    path = library(tmp_path, "shipslib")
    shipped(path, entry(kernel="shipslib.scale", key="f32[16]", factor=2))
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = cli("cache", "list", "--package", "shipslib", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    (listed,) = json.loads(proc.stdout)["entries"]
    assert (listed["kernel"], listed["source"], listed["layer"]) == (
        "shipslib.scale",
        "packaged",
        str(path),
    )
    proc = cli("cache", "list", "--package", "no_such_lib_here", env=env)
    assert proc.returncode == 2 and "--package no_such_lib_here: cannot import it" in proc.stderr
