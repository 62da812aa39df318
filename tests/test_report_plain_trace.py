"""``jaxtune report`` on a trace written by plain ``jax.profiler.trace``, without jaxtune's
sidecar: interpret-mode Pallas kernels recovered from the HLO protos the trace carries.

The fast tests build CPU-shaped traces by hand (an HloProto encoded here, inside a text
proto); the slow ones trace JAX's bundled kernels in a fresh process and read the result
with ``python -m jaxtune report``, as a user would.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import profile_models
import pytest
from hostile.traces import EPOCH_NS
from jax.experimental.pallas import tpu as pltpu
from jax.profiler import ProfileData
from profile_models import direct_step

import jaxtune
from jaxtune._isolation import process as _process
from jaxtune._profiling import hlo, recover
from jaxtune._profiling import report as _report
from jaxtune._profiling import sidecar as _sidecar

# -- a minimal protobuf encoder, for HloProtos built by hand --------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _msg(*fields: tuple[int, object]) -> bytes:
    out = bytearray()
    for number, value in fields:
        if isinstance(value, int):
            out += _varint(number << 3) + _varint(value)
        else:
            data = value.encode() if isinstance(value, str) else bytes(value)  # type: ignore[arg-type]
            out += _varint(number << 3 | 2) + _varint(len(data)) + data
    return bytes(out)


CALLBACK = "xla_ffi_python_cpu_callback"

#: (file, function, line) of each location; frames are (location, parent frame), 1-based.
LOCATIONS = [
    ("/app/train.py", "<module>", 20),  # 1
    ("/app/train.py", "step", 9),  # 2: the call of attn
    ("/app/kern.py", "attn", 40),  # 3: the pallas_call line
    ("/app/kern.py", "attn_kernel", 12),  # 4: the kernel body
    ("/app/train.py", "step", 10),  # 5: an op of the step itself
]
FRAMES = [(1, 0), (2, 1), (3, 2), (3, 3), (4, 4), (5, 1)]
SITE, BODY, STEP = 4, 5, 6  # frame ids


def _instruction(name, opcode, op_name="", frame=0, target="", calls=()):
    fields: list[tuple[int, object]] = [(1, name), (2, opcode)]
    if op_name:
        fields.append((7, _msg((2, op_name), (15, frame))))
    if target:
        fields.append((28, target))
    if calls:
        fields.append((38, b"".join(_varint(c) for c in calls)))  # packed, as proto3 writes
    return _msg(*fields)


def hlo_proto(scope: str = "jit(step)/jit(attn)") -> bytes:
    """An HloProto of ``jit_step``: an interpret-mode kernel ``attn_kernel`` called at
    kern.py:40 under ``scope`` (grid loop, callbacks, a fusion of its body), a multiply of
    the step itself, and copies XLA added without metadata (one in the kernel's loop body,
    one beside the step's own ops)."""
    files = ["/app/train.py", "/app/kern.py"]
    functions = ["<module>", "step", "attn", "attn_kernel"]
    index = _msg(
        *[(1, f) for f in files],
        *[(2, f) for f in functions],
        *[
            (3, _msg((1, files.index(f) + 1), (2, functions.index(fn) + 1), (3, line)))
            for f, fn, line in LOCATIONS
        ],
        *[(4, _msg((1, loc), (2, parent))) for loc, parent in FRAMES],
    )
    entry = _msg(
        (1, "main"),
        (2, _instruction("io_callback.1", "custom-call", f"{scope}/io_callback", SITE, CALLBACK)),
        (2, _instruction("while.2", "while", f"{scope}/while", SITE)),
        (
            2,
            _instruction(
                "io_callback.3", "custom-call", f"{scope}/while/body/io_callback", BODY, CALLBACK
            ),
        ),
        (2, _instruction("fusion.4", "fusion", "", 0, calls=(2,))),
        (2, _instruction("multiply.6", "multiply", "jit(step)/mul", STEP)),
        (2, _instruction("copy.7", "copy")),
        (5, 1),
    )
    fused = _msg(
        (1, "fused_computation"),
        (2, _instruction("add.5", "add", f"{scope}/while/body/add", BODY)),
        (5, 2),
    )
    body = _msg(
        (1, "body"),
        (2, _instruction("add.8", "add", f"{scope}/while/body/add", BODY)),
        (2, _instruction("copy.9", "copy")),
        (5, 3),
    )
    module = _msg((1, "jit_step"), (3, fused), (3, body), (3, entry), (17, index))
    return _msg((1, module), (3, b""))


def _octal(data: bytes) -> str:
    return "".join(f"\\{b:03o}" for b in data)


def _event(op, start_us, length_us, run, program=8, module="jit_step"):
    return (
        f"events {{ metadata_id: 1 offset_ps: {start_us * 10**6} duration_ps: "
        f"{length_us * 10**6} stats {{ metadata_id: 1 str_value: {op!r} }} "
        f'stats {{ metadata_id: 2 str_value: "{module}" }} '
        f"stats {{ metadata_id: 3 int64_value: {program} }} "
        f"stats {{ metadata_id: 4 int64_value: {run} }} }}"
    ).replace("'", '"')


def cpu_trace(proto: bytes | None, runs: int = 2) -> str:
    """A CPU trace of ``runs`` runs of ``jit_step``; inside the kernel's callback runs a
    program of its own (``jit_unstack``), as interpret mode's callbacks do."""
    events = []
    for r in range(runs):
        t = 100 * r
        events += [
            _event("while.2", t, 10, 1000 + r),
            _event("io_callback.3", t + 1, 3, 1000 + r),
            _event("slice.1", t + 2, 1, 5000 + r, program=9, module="jit_unstack"),
            _event("fusion.4", t + 5, 2, 1000 + r),
            _event("io_callback.1", t + 11, 1, 1000 + r),
            _event("multiply.6", t + 13, 1, 1000 + r),
            _event("copy.7", t + 15, 1, 1000 + r),
        ]
    metadata = ""
    if proto is not None:
        metadata = f"""
planes {{
  id: 2 name: "/host:metadata"
  event_metadata {{ key: 1 value {{ id: 1 name: "jit_step(8)"
    stats {{ metadata_id: 1 bytes_value: "{_octal(proto)}" }}
    stats {{ metadata_id: 2 int64_value: 8 }} }} }}
  stat_metadata {{ key: 1 value {{ id: 1 name: "Hlo Proto" }} }}
  stat_metadata {{ key: 2 value {{ id: 2 name: "program_id" }} }}
}}"""
    return f"""
planes {{
  id: 1 name: "/host:CPU"
  lines {{ id: 1 name: "tf_XLAEigen/1" timestamp_ns: {EPOCH_NS}
    {" ".join(events)}
  }}
  event_metadata {{ key: 1 value {{ id: 1 name: "thunk" }} }}
  stat_metadata {{ key: 1 value {{ id: 1 name: "hlo_op" }} }}
  stat_metadata {{ key: 2 value {{ id: 2 name: "hlo_module" }} }}
  stat_metadata {{ key: 3 value {{ id: 3 name: "program_id" }} }}
  stat_metadata {{ key: 4 value {{ id: 4 name: "run_id" }} }}
}}{metadata}
"""


def write(tmp_path, text):
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(ProfileData.text_proto_to_serialized_xspace(text))
    return path


# -- the HLO proto reader -------------------------------------------------------------------


def test_hlo_proto_gives_op_names_stacks_outermost_first_and_fusions():
    module = hlo.parse_hlo_proto(hlo_proto())
    assert module.name == "jit_step"
    body = module.instructions["io_callback.3"]
    assert (body.op_name, body.target) == ("jit(step)/jit(attn)/while/body/io_callback", CALLBACK)
    assert [(f.function, f.line) for f in body.frames] == [
        ("<module>", 20),
        ("step", 9),
        ("attn", 40),
        ("attn", 40),
        ("attn_kernel", 12),
    ]
    assert str(body.frames[-1]) == "/app/kern.py:12"
    assert module.fused == {"fusion.4": ("add.5",)}
    assert module.instructions["copy.7"].frames == ()
    assert module.ops()["multiply.6"] == ("jit(step)/mul", None)


def test_hlo_proto_survives_a_frame_that_is_its_own_parent():
    index = _msg(
        (1, "/a.py"), (2, "f"), (3, _msg((1, 1), (2, 1), (3, 3))), (4, _msg((1, 1), (2, 1)))
    )
    ins = _instruction("add.1", "add", "jit(f)/add", 1, calls=())
    module = _msg((1, "m"), (3, _msg((1, "main"), (2, ins), (5, 1))), (17, index))
    parsed = hlo.parse_hlo_proto(_msg((1, module)))
    assert [str(f) for f in parsed.instructions["add.1"].frames] == ["/a.py:3"]


@pytest.mark.parametrize("data", [b"", b"\x0a\x08jit_step", hlo_proto()[:-40], b"\xff" * 9])
def test_a_damaged_hlo_proto_is_a_decode_error(data):
    with pytest.raises(ValueError):
        hlo.parse_hlo_proto(data)


def test_sites_name_the_kernel_after_the_function_below_the_pallas_call_line():
    module = hlo.parse_hlo_proto(hlo_proto())
    (site,) = recover.sites(module)
    assert (site.name, site.scope, site.source, site.once) == (
        "attn_kernel",
        ("jit(step)", "jit(attn)"),
        "/app/kern.py:40",
        True,
    )
    claims = recover.claims(module, [site])
    # The body's copy has no metadata but only kernel ops beside it; the entry's has the
    # step's multiply beside it, so it stays an XLA op.
    kernel_ops = ("io_callback.1", "while.2", "io_callback.3", "fusion.4", "add.5", "add.8")
    assert claims == dict.fromkeys((*kernel_ops, "copy.9"), ("attn_kernel",))


# -- report on hand-built CPU traces --------------------------------------------------------


def test_report_recovers_an_interpret_kernel_from_a_plain_cpu_trace(tmp_path):
    p = _report.report_from_trace(write(tmp_path, cpu_trace(hlo_proto(), runs=2)))
    (kernel,) = p.kernels
    assert (kernel.name, kernel.kind, kernel.source) == ("attn_kernel", "pallas", "/app/kern.py:40")
    assert (kernel.calls, kernel.calls_exact) == (2, True)  # one site x two runs of jit_step
    # The grid loop, the callbacks, the fused body and the program a callback ran.
    assert kernel.total_us == pytest.approx(2 * 11)
    assert {o.name for o in p.ops} == {"multiply.6", "copy.7"}
    assert sum(s.share for s in (*p.kernels, *p.ops)) == pytest.approx(1.0)
    assert any("kernels recovered from its HLO metadata" in n for n in p.notes)
    assert _report.ROUGH_CALLS not in p.notes


def test_a_kernel_inside_a_loop_has_its_calls_flagged(tmp_path):
    proto = hlo_proto(scope="jit(step)/while/body/jit(attn)")
    p = _report.report_from_trace(write(tmp_path, cpu_trace(proto)))
    (kernel,) = p.kernels
    assert kernel.name == "attn_kernel" and not kernel.calls_exact
    assert _report.ROUGH_CALLS in p.notes
    assert f"~{kernel.calls}" in p.table()


def test_a_damaged_hlo_proto_costs_only_its_programs_names(tmp_path):
    p = _report.report_from_trace(write(tmp_path, cpu_trace(hlo_proto()[:-40])))
    assert p.kernels == ()
    assert any("could not be decoded or searched (jit_step(8))" in n for n in p.notes)
    assert {o.name for o in p.ops} >= {"while.2", "multiply.6"}


def test_a_program_with_too_many_kinds_of_callback_is_not_searched(tmp_path, monkeypatch):
    monkeypatch.setattr(recover, "MAX_CALLBACK_KINDS", 1)
    p = _report.report_from_trace(write(tmp_path, cpu_trace(hlo_proto())))
    assert p.kernels == ()
    assert any("could not be decoded or searched (jit_step)" in n for n in p.notes)


def test_host_threads_at_epoch_scale_make_one_timeline(tmp_path):
    # Each host thread's line starts at its own epoch-scale timestamp (~1.7e21 ps: past
    # int64); the timeline orders their ops by when they ran, to the picosecond.
    second = _event("copy.7", 1, 1, 1000).replace("offset_ps: 1000000", "offset_ps: 1000001")
    text = cpu_trace(None, runs=1).replace(
        "  event_metadata {",
        f'  lines {{ id: 2 name: "python" timestamp_ns: {EPOCH_NS - 500}\n    {second}\n  }}\n'
        "  event_metadata {",
        1,
    )
    p = _report.report_from_trace(write(tmp_path, text))
    assert p.timeline[0].start_us == 0.0
    # copy.7 ran 0.5 us + 1 ps after the first op, on the other thread.
    starts = [(s.name, round(s.start_us, 6)) for s in p.timeline]
    assert starts[:3] == [("while.2", 0.0), ("copy.7", 0.500001), ("io_callback.1", 11.0)]
    assert {o.name: o.calls for o in p.ops}["copy.7"] == 2  # one on each thread


def test_a_cpu_trace_without_metadata_says_so(tmp_path, incli):
    path = write(tmp_path, cpu_trace(None))
    p = _report.report_from_trace(path)
    assert p.kernels == () and p.ops
    assert any("holds no HLO metadata" in n for n in p.notes)
    proc = incli("report", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "note: this trace holds no HLO metadata" in proc.stdout


# -- JAX's bundled kernels, traced by plain jax.profiler.trace in a fresh process ------------

ITERS = 3

PROGRAM = textwrap.dedent(
    """
    import sys

    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    from jax.experimental.pallas.ops.tpu import flash_attention as fa
    from jax.experimental.pallas.ops.tpu import matmul as mm


    @jax.jit
    def step(q, x):
        attention = fa.flash_attention(q, q, q, causal=True) * 2
        product = mm.matmul(x, x, block_shape=(128, 128), block_k=128) + 1
        return attention, product


    def add_one(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1


    @jax.jit
    def looped(v):
        def body(_, v):
            return pl.pallas_call(add_one, out_shape=jax.ShapeDtypeStruct(v.shape, v.dtype))(v)

        return jax.lax.fori_loop(0, 2, body, v)


    q = jax.random.normal(jax.random.key(0), (1, 2, 256, 128))
    x = jax.random.normal(jax.random.key(1), (256, 256))
    v = jnp.zeros((8, 128))
    with pltpu.force_tpu_interpret_mode():
        for _ in range(2):  # an interpret-mode call may compile again on its second call
            jax.block_until_ready((step(q, x), looped(v)))
        with jax.profiler.trace(sys.argv[1]):
            for _ in range(int(sys.argv[2])):
                jax.block_until_ready((step(q, x), looped(v)))
    """
)


@pytest.fixture(scope="module")
def plain_trace(tmp_path_factory):
    return _traced(PROGRAM, tmp_path_factory.mktemp("plain"))


@pytest.fixture(scope="module")
def plain_profile(plain_trace):
    return jaxtune.Profile.from_trace(plain_trace)


def _traced(program: str, folder: pathlib.Path) -> pathlib.Path:
    """Runs ``program`` (it traces ITERS steps into ``argv[1]``) in a fresh process with
    no jaxtune settings; the trace directory."""
    script = folder / "program.py"
    script.write_text(program)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXTUNE_")}
    proc = subprocess.run(
        [sys.executable, str(script), str(folder / "trace"), str(ITERS)],
        env={**env, "JAX_PLATFORMS": "cpu"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return folder / "trace"


@pytest.mark.slow
def test_report_of_a_plain_trace_has_a_row_per_bundled_kernel(plain_trace, cli):
    assert not list(plain_trace.glob(f"**/{_sidecar.INFO_FILE}"))
    proc = cli("report", str(plain_trace), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    rows = {k["name"]: k for k in doc["kernels"]}
    assert set(rows) == {"_flash_attention_kernel", "matmul_kernel", "add_one"}, rows
    for name, file in (
        ("_flash_attention_kernel", "flash_attention.py"),
        ("matmul_kernel", "matmul.py"),
    ):
        row = rows[name]
        assert row["kind"] == "pallas" and row["share"] > 0
        assert (row["calls"], row["calls_exact"]) == (ITERS, True)
        assert row["source"].rsplit(":", 1)[0].endswith(file)
    # Inside a fori_loop: how often it ran is not the program's to say.
    assert rows["add_one"]["calls_exact"] is False
    # Interpret mode's callbacks, loops and copies roll up into the kernels' rows.
    assert not [o for o in doc["ops"] if "io_callback" in o["name"]]
    assert rows["_flash_attention_kernel"]["share"] > max(o["share"] for o in doc["ops"])
    assert sum(k["share"] for k in (*doc["kernels"], *doc["ops"])) <= 1 + 1e-9

    table = cli("report", str(plain_trace), "--top", "5")
    assert table.returncode == 0, table.stderr
    assert "_flash_attention_kernel  pallas  3 " in table.stdout
    assert "kernels recovered from its HLO metadata" in table.stdout
    assert "~N calls: read off the trace" in table.stdout


@pytest.mark.slow
@pytest.mark.child  # the trace comes from a program run in a fresh process
def test_a_truncated_plain_trace_is_a_one_line_error(plain_trace, incli, tmp_path):
    (trace,) = plain_trace.glob("**/*.xplane.pb")
    data = trace.read_bytes()
    for cut in (len(data) // 2, len(data) - 7):
        bad = tmp_path / f"cut{cut}.xplane.pb"
        bad.write_bytes(data[:cut])
        proc = incli("report", str(bad))
        assert proc.returncode == 2, proc.stdout
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
        assert proc.stderr.startswith(f"jaxtune report: {bad} is a damaged XSpace trace")


@pytest.mark.child
@pytest.mark.slow
def test_a_kernel_called_straight_from_the_step_with_and_without_the_sidecar(tmp_path):
    """The whole program is its scope, so only the trace's stack frames tell its ops; the
    capture and the plain reading agree."""
    source = pathlib.Path(profile_models.__file__).read_text().splitlines()
    line = source.index("    added = pl.pallas_call(") + 1
    try:
        with pltpu.force_tpu_interpret_mode():
            captured = jaxtune.profile(
                direct_step, jnp.ones((256, 128)), iters=2, logdir=str(tmp_path)
            )
    finally:
        _process.shutdown_children()
    (sidecar,) = tmp_path.glob(f"**/{_sidecar.INFO_FILE}")
    sidecar.unlink()
    plain = jaxtune.Profile.from_trace(tmp_path)
    for p in (captured, plain):
        (kernel,) = p.kernels
        assert (kernel.name, kernel.calls, kernel.calls_exact) == ("_add_twice", 2, True)
        assert kernel.source == f"{profile_models.__file__}:{line}"
        assert {"wrapped_sine", "wrapped_cosine"} <= {o.name for o in p.ops}
    assert plain.kernels[0].total_us == pytest.approx(captured.kernels[0].total_us)


GENERIC = textwrap.dedent(
    """
    import sys

    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl


    def add_one_kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0


    def double_kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0


    def add_one(x):
        spec = pl.BlockSpec((64, 128), lambda i: (i, 0))
        return pl.pallas_call(add_one_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,), in_specs=[spec], out_specs=spec, interpret=True)(x)


    def double(x):
        return pl.pallas_call(double_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x)


    def scaled(x):  # a fori_loop with a body function: not a kernel
        return jax.lax.fori_loop(0, 3, lambda i, y: y * 1.5, x)


    @jax.jit
    def step(x):
        return scaled(double(add_one(x))).sum()


    x = jnp.ones((128, 128))
    step(x).block_until_ready()
    with jax.profiler.trace(sys.argv[1]):
        for _ in range(int(sys.argv[2])):
            step(x).block_until_ready()
    """
)


@pytest.mark.slow
@pytest.mark.child  # the trace comes from a program run in a fresh process
def test_generic_interpreter_kernels_are_named_and_counted_in_a_plain_trace(tmp_path, incli):
    """``pl.pallas_call(..., interpret=True)`` leaves no callback; two such
    kernels in one jitted step each get a row, named after the kernel function, with
    their calls; the fori_loop beside them stays XLA ops."""
    report = incli("report", str(_traced(GENERIC, tmp_path)), "--json")
    assert report.returncode == 0, report.stderr
    doc = json.loads(report.stdout)
    rows = {k["name"]: k for k in doc["kernels"]}
    assert set(rows) == {"add_one_kernel", "double_kernel"}, rows
    for row in rows.values():
        assert row["kind"] == "pallas" and row["share"] > 0
        assert (row["calls"], row["calls_exact"]) == (ITERS, True), row
        assert row["source"].endswith(".py:19") or row["source"].endswith(".py:23"), row


@pytest.mark.slow
@pytest.mark.parametrize(
    "sidecar",
    [{"kernels": 5, "calls": "x"}, {"timings": 3, "hints": [1]}, {"kernels": [{"name": 7}]}],
)
def test_a_sidecar_of_wrong_types_is_ignored_with_a_note(
    plain_trace, plain_profile, tmp_path, sidecar, incli
):
    import shutil

    from jaxtune._core.codec import packb

    trace = tmp_path / "trace"
    shutil.copytree(plain_trace, trace)
    (trace / _sidecar.INFO_FILE).write_bytes(packb(sidecar))
    plain = plain_profile
    damaged = jaxtune.Profile.from_trace(trace)
    assert any("malformed" in n for n in damaged.notes), damaged.notes
    assert [k.name for k in damaged.kernels] == [k.name for k in plain.kernels]
    proc = incli("report", str(trace))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
