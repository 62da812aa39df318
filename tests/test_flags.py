"""`jaxtune.flags`: parsing and merging XLA_FLAGS / LIBTPU_INIT_ARGS tokens (legacy names
rewritten), the profiling flags per platform, and a child's environment built without
touching this process's.

Covers docs/flags.md (the page's example and "Reference").
"""

from __future__ import annotations

import pytest

from jaxtune import FlagError, flags
from jaxtune._core import flags as _flags

ALL_TPU_FLAGS = (
    flags.LLO_DEBUG_INFO,
    flags.CUSTOM_CALL_TRACING,
    flags.PERIODIC_COUNTER_SAMPLING,
    flags.BUNDLE_INSTRUMENTATION,
)


def fake_binary(tmp_path, names, name="libtpu.so"):
    """A stand-in shared object: ELF magic, padding and the flag names as C strings."""
    body = b"\x7fELF" + b"\x00" * 64
    for n in names:
        body += n.encode() + b"\x00" + b"\x01" * 17
    path = tmp_path / name
    path.write_bytes(body)
    return path


def test_parse_tokens():
    parsed = flags.parse("--a=1 --b  --c='x y'")
    assert [(f.name, f.value) for f in parsed] == [("a", "1"), ("b", None), ("c", "x y")]
    assert parsed[1].effective_value == "true"


@pytest.mark.parametrize("bad", ["a=1", "--=3", "--1abc", "---x", "--a-b=1"])
def test_parse_rejects_malformed(bad):
    with pytest.raises(FlagError, match=f"malformed flag {bad!r}: expected '--name'"):
        flags.parse(bad)


def test_parse_rejects_unbalanced_quotes():
    with pytest.raises(FlagError, match="Check the quotes"):
        flags.parse("--a='x")


def test_merge_dedups_and_updates_in_place():
    merged = flags.merge("--a=1 --b=2 --a=3", ["--b=9", flags.Flag(name="c", value="x")])
    assert merged == "--a=3 --b=9 --c=x"


def test_merge_rewrites_legacy_name_in_existing_and_updates():
    merged = flags.merge(
        "--xla_enable_custom_call_region_trace=true --other=1",
        ["--xla_enable_custom_call_region_trace=false"],
    )
    assert merged == "--xla_xprof_enable_custom_call_tracing=false --other=1"
    assert "region_trace" not in merged


def test_merge_legacy_and_canonical_collapse_to_one():
    merged = flags.merge(
        "--xla_enable_custom_call_region_trace=true",
        [f"--{flags.CUSTOM_CALL_TRACING}=true"],
    )
    assert merged == f"--{flags.CUSTOM_CALL_TRACING}=true"


def test_profile_flags_tpu_default_is_llo_only():
    got = flags.profile_flags("tpu")
    assert [str(f) for f in got["LIBTPU_INIT_ARGS"]] == ["--xla_xprof_register_llo_debug_info=true"]


def test_profile_flags_custom_call_tracing_adds_frequencies():
    got = [
        str(f)
        for f in flags.profile_flags(
            "tpu", custom_call_tracing=True, best_effort_frequency=50, guaranteed_frequency=100
        )["LIBTPU_INIT_ARGS"]
    ]
    assert got == [
        "--xla_xprof_register_llo_debug_info=true",
        "--xla_xprof_enable_custom_call_tracing=true",
        "--xla_tpu_bundle_instrumentation_options="
        "trace_best_effort_frequency=50,trace_guaranteed_frequency=100",
    ]


@pytest.mark.parametrize("value", [0, -1, 2.5, True])
def test_profile_flags_rejects_bad_frequency(value):
    with pytest.raises(FlagError, match="trace_best_effort_frequency must be a positive integer"):
        flags.profile_flags("tpu", custom_call_tracing=True, best_effort_frequency=value)


@pytest.mark.parametrize("platform", ["cpu", "gpu"])
def test_profile_flags_other_platforms_need_nothing(platform):
    assert flags.profile_flags(platform) == {"XLA_FLAGS": []}


def test_profile_flags_unknown_platform():
    with pytest.raises(FlagError, match="unknown platform 'npu'"):
        flags.profile_flags("npu")


def test_child_env_merges_with_user_flags_without_touching_os_environ(monkeypatch):
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_enable_custom_call_region_trace=true --keep=1")
    env = flags.child_env("tpu", profiling=True, custom_call_tracing=True, check_binary=False)
    args = env["LIBTPU_INIT_ARGS"].split()
    assert args[0] == "--xla_xprof_enable_custom_call_tracing=true"
    assert "--keep=1" in args
    assert "--xla_xprof_register_llo_debug_info=true" in args
    assert len({a.split("=")[0] for a in args}) == len(args)
    assert env["JAX_PLATFORMS"] == "tpu"
    import os

    assert os.environ["LIBTPU_INIT_ARGS"].startswith("--xla_enable_custom_call_region_trace")


def test_child_env_gpu_turns_preallocation_off():
    env = flags.child_env("gpu", base={"XLA_PYTHON_CLIENT_PREALLOCATE": "true"})
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert env["JAX_PLATFORMS"] == "cuda"


def test_child_env_cpu_extra_xla_flags():
    env = flags.child_env(
        "cpu",
        base={"XLA_FLAGS": "--xla_dump_to=/a"},
        xla_flags=["--xla_dump_to=/b", "--xla_dump_hlo_as_text"],
    )
    assert env["XLA_FLAGS"] == "--xla_dump_to=/b --xla_dump_hlo_as_text"
    assert "LIBTPU_INIT_ARGS" not in env


@pytest.mark.parametrize("present", [set(), {flags.LLO_DEBUG_INFO}, set(ALL_TPU_FLAGS)])
def test_binary_scan_against_fake_shared_objects(tmp_path, present):
    path = fake_binary(tmp_path, sorted(present))
    assert flags.binary_defines(ALL_TPU_FLAGS, path) == {n: n in present for n in ALL_TPU_FLAGS}


def test_binary_scan_needs_whole_words(tmp_path):
    path = fake_binary(tmp_path, [flags.LLO_DEBUG_INFO + "_v2", "x" + flags.CUSTOM_CALL_TRACING])
    assert flags.binary_defines([flags.LLO_DEBUG_INFO, flags.CUSTOM_CALL_TRACING], path) == {
        flags.LLO_DEBUG_INFO: False,
        flags.CUSTOM_CALL_TRACING: False,
    }


def test_binary_scan_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.so"
    empty.write_bytes(b"")
    assert flags.binary_defines([flags.LLO_DEBUG_INFO], empty) == {flags.LLO_DEBUG_INFO: False}
    with pytest.raises(FlagError, match="cannot read"):
        flags.binary_defines([flags.LLO_DEBUG_INFO], tmp_path / "nope.so")


def test_find_libtpu_honours_tpu_library_path(tmp_path, monkeypatch):
    path = fake_binary(tmp_path, [])
    monkeypatch.setenv("TPU_LIBRARY_PATH", str(path))
    assert flags.find_libtpu() == path
    monkeypatch.setenv("TPU_LIBRARY_PATH", str(tmp_path / "missing.so"))
    assert flags.find_libtpu() is None


def test_child_env_checks_libtpu_defines_flags(tmp_path, monkeypatch):
    old = fake_binary(tmp_path, [flags.LLO_DEBUG_INFO])
    monkeypatch.setenv("TPU_LIBRARY_PATH", str(old))
    env = flags.child_env("tpu", profiling=True)
    assert env["LIBTPU_INIT_ARGS"] == "--xla_xprof_register_llo_debug_info=true"
    with pytest.raises(FlagError, match="does not define xla_xprof_enable_custom_call_tracing"):
        flags.child_env("tpu", profiling=True, custom_call_tracing=True)


def test_child_env_without_libtpu_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("TPU_LIBRARY_PATH", str(tmp_path / "absent.so"))
    with pytest.raises(FlagError, match="libtpu is not installed"):
        flags.child_env("tpu", profiling=True)


def test_inspect_reports_every_problem():
    report = flags.inspect("--a=1 --a=2 --b --b bogus --xla_enable_custom_call_region_trace")
    assert report.malformed == ("bogus",)
    assert set(report.duplicates) == {"a", "b"}
    assert report.contradictions == ("a",)
    assert report.legacy == ("xla_enable_custom_call_region_trace",)


def test_real_jaxlib_binary_defines_known_xla_flags():
    binary = flags.find_jaxlib_binary()
    assert binary is not None
    got = flags.binary_defines(["xla_dump_to", "xla_surely_not_a_flag_123"], binary)
    assert got == {"xla_dump_to": True, "xla_surely_not_a_flag_123": False}


@pytest.mark.child
@pytest.mark.parametrize(("extra", "expected"), [((), True), (("--no-llo",), False)])
def test_tpu_profile_command_registers_llo_debug_info_by_default(
    tmp_path, monkeypatch, extra, expected
):
    import sys

    from jaxtune import _cli

    libtpu = tmp_path / "libtpu.so"
    libtpu.write_bytes(b"\x7fELF\x00" + flags.LLO_DEBUG_INFO.encode() + b"\x00")
    monkeypatch.setenv("TPU_LIBRARY_PATH", str(libtpu))
    seen = tmp_path / "seen.txt"
    show = (
        f"import os; open({str(seen)!r}, 'w').write(os.environ.get('LIBTPU_INIT_ARGS', '')"
        " + ' LLO=' + os.environ['JAXTUNE_PROFILE_LLO'])"
    )
    argv = ["profile", "--platform", "tpu", *extra, "--", sys.executable, "-c", show]
    # The program profiles nothing: 3 says so (docs/errors.md); the flags reached it.
    assert _cli.main(argv) == 3
    assert ("--xla_xprof_register_llo_debug_info=true" in seen.read_text()) is expected
    assert seen.read_text().endswith(" LLO=1" if expected else " LLO=0")


def test_profile_apis_default_to_llo():
    import inspect

    import jaxtune

    assert inspect.signature(flags.profile_flags).parameters["llo"].default is True
    assert inspect.signature(jaxtune.profile).parameters["llo"].default is True
    assert inspect.signature(jaxtune.profiled).parameters["llo"].default is True


@pytest.mark.parametrize(
    ("name", "platform"),
    [
        ("cuda", "gpu"),
        ("ROCm", "gpu"),
        ("tpu", "tpu"),
        ("cpu", "cpu"),
        ("METAL", "metal"),
        ("", None),
        (None, None),
        ("TPU v5 lite", "tpu"),
        ("TPU7x", "tpu"),
        ("NVIDIA H100 80GB HBM3", "gpu"),
        ("AMD Instinct MI300X", "gpu"),
        ("/device:TPU:0", "tpu"),
        ("/device:GPU:3", "gpu"),
        ("/host:CPU", "cpu"),
    ],
)
def test_one_function_tells_the_platform_of_a_name_a_device_kind_or_a_plane(name, platform):
    assert _flags.normalise_platform(name) == platform
