"""Hostile input to the protobuf trace reader (docs/profiling.md, "Reading a trace:
Profile.from_trace"; docs/errors.md, "Hostile input"): deep nesting, huge declared lengths,
damage inside a line that is decoded only when walked, damaged HLO protos, and a 500 MB all-zero
file. ``Profile.from_trace`` raises only ProfileError, naming the path. And the other side: a
fault of jaxtune's own while analysing a trace that decoded is never reported as a damaged
trace."""

from __future__ import annotations

import pytest
from jax.profiler import ProfileData
from traces import TPU_TRACE

import jaxtune
from jaxtune._cli import main as cli_main
from jaxtune._core.vocabulary import CaptureInfo
from jaxtune._core.xspace import xplane
from jaxtune._profiling import hlo
from jaxtune._profiling import report as _report
from jaxtune._profiling import sidecar as _sidecar

TPU_BYTES = ProfileData.text_proto_to_serialized_xspace(TPU_TRACE)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _len(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _deep_groups(depth: int) -> bytes:
    """``depth`` nested start-group tags of an undeclared field (upb bounds the depth)."""
    return b"\x7b" * depth + b"\x7c" * depth  # field 15, wire types 3 (start) and 4 (end)


def _deep_messages(depth: int) -> bytes:
    """A length-delimited undeclared field nested ``depth`` times."""
    inner = b""
    for _ in range(depth):
        inner = _len(15, inner)
    return inner


def _plane_with_line(line: bytes) -> bytes:
    return _len(1, _len(2, b"/device:TPU:0") + _len(3, line))


CASES = {
    "deep groups at the top": _deep_groups(100_000),
    "deep groups in a plane": _len(1, _len(2, b"/device:TPU:0") + _deep_groups(5_000)),
    "deep groups in a line": _plane_with_line(_len(2, b"XLA Ops") + _deep_groups(5_000)),
    "deep messages": _deep_messages(3_000),
    "plane length 2^62": b"\x0a" + _varint(1 << 62) + b"\x00" * 16,
    "line length past its plane": _len(1, _len(2, b"/device:TPU:0") + b"\x1a" + _varint(1 << 40)),
    "event length past its line": _plane_with_line(
        _len(2, b"XLA Ops") + b"\x22" + _varint(1 << 30) + b"\x08\x01"
    ),
    "truncated event in a line": _plane_with_line(_len(2, b"XLA Ops") + b"\x22\x05\x08\x01\x10"),
    "wrong wire type everywhere": b"\x0d\x00\x00\x00\x00" * 50,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_protobuf_bytes_raise_only_profile_error(tmp_path, case):
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(CASES[case])
    try:
        jaxtune.Profile.from_trace(path)
    except jaxtune.ProfileError as e:
        assert str(tmp_path) in str(e)


def test_damage_inside_a_plane_is_found_when_the_plane_is_read(tmp_path):
    # The space splits into planes without decoding them; the damaged one fails when read.
    data = _plane_with_line(_len(2, b"XLA Ops") + b"\x22\x05\x08\x01\x10")
    space = xplane.parse(data)
    assert space.plane_names == ["/device:TPU:0"]
    with pytest.raises(xplane.DecodeError, match="malformed XLine"):
        space.plane("/device:TPU:0")
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(data)
    with pytest.raises(jaxtune.ProfileError, match="damaged XSpace trace"):
        jaxtune.Profile.from_trace(path)


def test_bad_utf8_in_names_is_replaced_not_an_error(tmp_path):
    text = TPU_TRACE.replace('name: "fusion.2"', 'name: "fusion\\377\\376.2"')
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(ProfileData.text_proto_to_serialized_xspace(text))
    p = jaxtune.Profile.from_trace(path)
    assert any("\ufffd" in o.hlo_op for o in p.ops if o.hlo_op), p.table()


@pytest.mark.parametrize("data", [_deep_groups(10_000), b"\x0a" + _varint(1 << 62)])
def test_hostile_hlo_protos_are_decode_errors(data):
    with pytest.raises(xplane.DecodeError):
        hlo.parse_hlo_proto(data)


def test_a_500_mb_all_zero_file_is_a_profile_error(tmp_path):
    path = tmp_path / "zeros.xplane.pb"
    with path.open("wb") as f:
        f.truncate(500 << 20)  # sparse: no disk used
    with pytest.raises(jaxtune.ProfileError, match="is a damaged XSpace trace"):
        jaxtune.Profile.from_trace(path)


def test_byte_flips_inside_a_good_trace_keep_the_reader_in_profile_error(tmp_path):
    """Every single-byte change of the TPU trace: a report or a ProfileError, never
    anything else (the lazily decoded lines included)."""
    path = tmp_path / "t.xplane.pb"
    ok = failed = 0
    for i in range(0, len(TPU_BYTES), 3):
        data = bytearray(TPU_BYTES)
        data[i] ^= 0xA5
        path.write_bytes(bytes(data))
        try:
            jaxtune.Profile.from_trace(path)
            ok += 1
        except jaxtune.ProfileError:
            failed += 1
    assert ok and failed


def _raises(exc):
    def fault(*args, **kwargs):
        raise exc

    return fault


#: Faults inside the analysis of a trace that decoded, at three stages of it: the walk,
#: the attribution and the timeline (an OverflowError is what int64 time arithmetic on
#: epoch-scale timestamps raised).
FAULTS = {
    "walk": ("walk", ZeroDivisionError, "division by zero"),
    "attribution": ("attribute", KeyError, "flops"),
    "timeline": ("timeline_of", OverflowError, "Python int too large to convert to C long"),
}


@pytest.mark.parametrize("sidecar", [False, True], ids=["plain", "with-sidecar"])
@pytest.mark.parametrize("stage", sorted(FAULTS))
def test_a_fault_inside_the_analysis_is_not_a_damaged_trace(
    tmp_path, monkeypatch, capsys, stage, sidecar
):
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(TPU_BYTES)
    if sidecar:  # a capture's sidecar: the report retries without it, then gives up
        _sidecar.remember(tmp_path, CaptureInfo(platform="tpu"), 2)
        assert (tmp_path / _sidecar.INFO_FILE).is_file()
    name, kind, message = FAULTS[stage]
    fault = kind(message)
    monkeypatch.setattr(_report, name, _raises(fault))
    with pytest.raises(type(fault)) as caught:
        jaxtune.Profile.from_trace(path)
    assert caught.value is fault and not isinstance(caught.value, jaxtune.ProfileError)
    assert caught.value.__notes__ == [
        f"jaxtune failed while analysing {path}, a trace that decoded: this is a bug in "
        "jaxtune, not a damaged trace; please report it with this traceback"
    ]
    # The command line: an unexpected error (status 1), never "damaged ... capture it again".
    assert cli_main(["report", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"jaxtune report: unexpected {type(fault).__name__}: ")
    assert "damaged" not in err and "capture it again" not in err
    assert cli_main(["report", "--debug", str(path)]) == 1
    assert "this is a bug in jaxtune, not a damaged trace" in capsys.readouterr().err


def test_a_damaged_line_with_a_sidecar_is_still_a_damaged_trace(tmp_path):
    # The sidecar's retry is for a sidecar of wrong types, not for damage in the trace: a
    # line whose head decodes and whose events do not (read, and let go, when walked) was
    # read again without the sidecar, as a line without events.
    data = _plane_with_line(_len(2, b"XLA Ops") + _len(4, b"\x08\x01\x10"))
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(data)
    _sidecar.remember(tmp_path, CaptureInfo(platform="tpu"), 2)
    with pytest.raises(jaxtune.ProfileError, match=r"damaged XSpace trace .*; capture it again\.$"):
        jaxtune.Profile.from_trace(path)


def test_values_of_the_wrong_kind_in_a_decoded_trace_are_read_as_absent(tmp_path):
    # A NaN flops, an infinite drop count, a peak past float's range and an op that ends
    # past int64 picoseconds: no figure, no warning, no peak; the report reads and prints.
    swaps = {
        "stats { metadata_id: 3 double_value: 2048 }": "stats { metadata_id: 3 double_value: nan }",
        "stats { metadata_id: 10 double_value: 197.0 }": (
            "stats { metadata_id: 10 double_value: 1e308 } "
            "stats { metadata_id: 12 double_value: inf }"
        ),
        "  stat_metadata { key: 10": (
            '  stat_metadata { key: 12 value { id: 12 name: "dropped_traces" } }\n'
            "  stat_metadata { key: 10"
        ),
        "offset_ps: 17000000 duration_ps: 1000000": (
            f"offset_ps: 17000000 duration_ps: {2**63 - 1}"
        ),
    }
    text = TPU_TRACE
    for old, new in swaps.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(ProfileData.text_proto_to_serialized_xspace(text))
    p = jaxtune.Profile.from_trace(path)
    fusion = {o.name: o for o in p.ops}["fusion.2"]
    assert (fusion.flops, fusion.bytes_accessed, fusion.flops_source) == (None, 8192.0, "xla")
    assert p.peak is None and p.warnings == ()
    assert {k.name for k in p.kernels} == {"tiled_matmul", "no_cost", "lib.norm"}
    table = p.table()
    assert "fusion.2" in table and "nan" not in table.lower()
