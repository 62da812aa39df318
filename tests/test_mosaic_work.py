"""FLOPs and bytes counted from a Mosaic TPU kernel's body (issue 58), checked against the
kernels' own cost estimates, hand counts, and the v5e traces' kernels."""

from __future__ import annotations

import base64
import itertools
import json
import pathlib
import random
import re
import subprocess
import sys

import pytest

import jaxtune
from jaxtune._core.xspace import schema, xplane
from jaxtune._profiling import mosaic, mosaic_work
from jaxtune._profiling.hlo import text
from jaxtune._profiling.state import PROFILING_STATE

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "v5e"

# Reading these traces starts children: a trace's Mosaic bodies are counted in a child process.
pytestmark = pytest.mark.child
#: q, k and v of the flash attention lowered here: batch, heads, sequence, head dim.
FLASH_SHAPE = (1, 2, 512, 128)


def _configs(trace: str) -> list[bytes]:
    """The backend configs of every Mosaic TPU custom call in a v5e fixture."""
    space = xplane.load(FIXTURES / f"{trace}.xplane.pb")
    out = []
    for _, _, proto in space.hlo_programs():
        module = xplane.decode(schema.HloProto, bytes(proto), "HloProto").hlo_module
        for comp in module.computations:
            for ins in comp.instructions:
                if text(ins.custom_call_target) == mosaic.TARGET:
                    out.append(bytes(ins.backend_config))
    return out


def _counted(configs: list[bytes]) -> list[mosaic_work.MosaicWork | None]:
    """The work of each config's body, counted as a report counts a trace's: in a child."""
    bodies = [mosaic_work.body_of(c) for c in configs]
    assert all(bodies)
    return mosaic_work.works([b for b in bodies if b is not None])


def _own(config: str) -> mosaic_work.MosaicWork | None:
    """The work of a body this test lowered itself, counted in this process."""
    body = mosaic_work.body_of(config)
    return None if body is None else mosaic_work.count_body(body)


@pytest.mark.parametrize("trace", ["flash_fwd", "flash_grad", "nnx_step"])
def test_the_forward_kernels_count_agrees_with_its_own_estimate(trace):
    """JAX's flash forward declares a cost estimate: the matmuls counted from its body
    come within 1 % of it (the estimate adds the softmax's elementwise work)."""
    checked = 0
    configs = _configs(trace)
    for config, work in zip(configs, _counted(configs), strict=True):
        estimate = mosaic.cost_estimate(config)
        if estimate is None:
            continue
        assert work is not None and work.flops is not None
        assert work.flops == pytest.approx(estimate["flops"], rel=0.01)
        checked += 1
    assert checked


def test_the_matmul_counts_two_m_n_k():
    """The example matmul, bf16 [2048, 4096] @ [4096, 4096] in 128 blocks: 2*M*N*K FLOPs;
    x and y blocks move every grid step, the f32 output block once per (i, j)."""
    (work,) = _counted(_configs("matmul"))
    assert work is not None and work.grid == (16, 32, 32)
    m, k, n = 2048, 4096, 4096
    assert work.flops == 2 * m * n * k
    steps = 16 * 32 * 32
    assert work.bytes_accessed == 2 * steps * 128 * 128 * 2 + 16 * 32 * 128 * 128 * 4


def test_a_body_that_does_not_parse_gives_no_figure():
    assert mosaic_work.count_body(b"ML\xefR\x00garbage") is None
    assert mosaic_work.works([b"ML\xefR\x00garbage", b"\x00\x00\x00"]) == [None, None]
    assert _own(json.dumps({"custom_call_config": {"body": "AAAA"}})) is None
    assert mosaic_work.body_of(b"not json") is None


def _exported_configs(fn, *args) -> dict[str, str]:
    """The Mosaic backend configs of ``fn`` lowered for TPU (here, on CPU), by kernel."""
    import jax

    module = jax.export.export(jax.jit(fn), platforms=["tpu"])(*args).mlir_module()
    found = {}
    for chunk in module.split("backend_config = ")[1:]:
        # MLIR escapes quotes and backslashes in a string as hex (\22, \5C): undo that.
        raw = re.sub(
            r"\\([0-9A-Fa-f]{2})",
            lambda m: chr(int(m.group(1), 16)),
            chunk[1 : chunk.index('"', 1)],
        )
        name = mosaic.kernel_name(raw)
        if name:
            found[name] = raw
    return found


def _flash_grad_configs(*, major: int, causal: bool, dtype: str) -> dict[str, str]:
    """The configs of JAX's flash attention under ``jax.grad`` (q, k, v ``[1, 2, 512,
    128]``), lowered for TPU: 128 blocks, looped over in the body where ``major`` is
    larger."""
    import jax
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    m = major
    sizes = fa.BlockSizes(
        block_q=128, block_k_major=m, block_k=128, block_b=1,
        block_q_major_dkv=m, block_k_major_dkv=m, block_k_dkv=128, block_q_dkv=128,
        block_k_major_dq=m, block_k_dq=128, block_q_dq=128,
    )  # fmt: skip

    def loss(q, k, v):
        return fa.flash_attention(q, k, v, causal=causal, block_sizes=sizes).sum()

    x = jax.ShapeDtypeStruct(FLASH_SHAPE, dtype)
    assert jaxtune.locate(jax.grad(loss, argnums=(0, 1, 2)), x, x, x, platform="tpu")
    return _exported_configs(jax.grad(loss, argnums=(0, 1, 2)), x, x, x)


def test_flash_backward_with_unrolled_inner_blocks_matches_hand_counts():
    """Lowered for TPU on CPU: block_k smaller than block_k_major makes the backward
    kernels loop over inner blocks in their body; the counts still match hand counts."""
    b, h, s, d = FLASH_SHAPE
    found = {}
    for name, raw in _flash_grad_configs(major=256, causal=False, dtype="float32").items():
        work = _own(raw)
        if work and mosaic.cost_estimate(raw) is None:
            found[name] = work.flops
    assert found == {
        "_flash_attention_dkv_kernel": 8 * b * h * s * s * d,
        "_flash_attention_dq_kernel": 6 * b * h * s * s * d,
    }


# JAX's flash attention index maps (jax/experimental/pallas/ops/tpu/flash_attention.py),
# written again here from its source, as the hand count's oracle: each returns an
# operand's block index at a grid step. The causal maps clamp the blocks a step skips to
# block 0, which the pipeline then need not copy again.
def _below_or_on_diag(r, r_block, c, c_block):
    return (r + 1) * r_block - 1 > c * c_block


def _flash_maps(kernel: str, *, block: int, causal: bool) -> list[tuple[object, str]]:
    """``(index map, what the operand is)`` of each blocked operand of one kernel, in the
    order the kernel takes them; what is ``"x"`` (the inputs' dtype) or ``"f32"``."""

    def clamp(index, i, j):  # i: the step's q block, j: its kv block
        return index if _below_or_on_diag(i, block, j, block) else 0

    if kernel == "_flash_attention_dkv_kernel":  # grid (b, h, kv block, q block)
        qo = (lambda b, h, j, i: (b, h, clamp(i, i, j) if causal else i)), "x"
        di = (qo[0], "f32")
        kv = (lambda b, h, j, i: (b, h, j)), "x"
        lm = (lambda b, h, j, i: (b, h, i)), "f32"
        return [qo, kv, kv, lm, lm, qo, di, kv, kv]
    qo = (lambda b, h, i, j: (b, h, i)), "x"  # forward and dq: grid (b, h, q block, kv block)
    lm = (qo[0], "f32")
    kv = (lambda b, h, i, j: (b, h, clamp(j, i, j) if causal else j)), "x"
    if kernel == "_flash_attention_dq_kernel":
        return [qo, kv, kv, lm, lm, qo, lm, qo]
    return [qo, kv, kv, qo, lm, lm]  # the forward, with its residuals l and m


def _copies(grid: tuple[int, ...], index_map) -> int:
    """The pipeline's copies of one block: the first step, then each step whose block
    index differs from the previous step's (last grid index fastest)."""
    count, last = 0, None
    for step in itertools.product(*(range(n) for n in grid)):
        now = index_map(*step)
        count += now != last
        last = now
    return count


def _hand_bytes(kernel, *, b, h, s, block, itemsize, causal, residuals=True) -> int:
    """Bytes one call of JAX's flash kernel ``kernel`` moves, by hand: its blocks (block
    rows x 128 lanes: the head dimension, or l, m and di broadcast to 128) x copies."""
    grid = (b, h, s // block, s // block)
    maps = _flash_maps(kernel, block=block, causal=causal)
    if not residuals:
        maps = maps[:4]
    sizes = {"x": itemsize, "f32": 4}
    return sum(_copies(grid, m) * block * 128 * sizes[what] for m, what in maps)


def test_causal_blocks_a_step_skips_are_not_copied_again():
    """The oracle itself, on a causal dkv q block by closed form: for kv block j > 0 the
    clamped index reads 0 once, then j..n-1; kv block 0 reads every q block."""
    n = 16
    qo, _ = _flash_maps("_flash_attention_dkv_kernel", block=128, causal=True)[0]
    assert _copies((1, 1, n, n), qo) == n + sum(1 + n - j for j in range(1, n))
    qo_full, _ = _flash_maps("_flash_attention_dkv_kernel", block=128, causal=False)[0]
    assert _copies((1, 1, n, n), qo_full) == n * n


@pytest.mark.parametrize("trace", ["flash_fwd", "flash_grad", "nnx_step"])
def test_flash_kernels_bytes_match_hand_counts_on_the_fixtures(trace):
    """Causal flash attention on the chip (bf16 q, k, v; 128 blocks): the bytes counted
    from each kernel's body are the copies its clamped index maps make, by hand."""
    shapes = {"flash_fwd": (2, 8, 2048), "flash_grad": (2, 8, 2048), "nnx_step": (2, 4, 1024)}
    b, h, s = shapes[trace]
    seen = set()
    configs = _configs(trace)
    for config, work in zip(configs, _counted(configs), strict=True):
        name = mosaic.kernel_name(config)
        assert work is not None and name is not None
        assert work.grid == (b, h, s // 128, s // 128)
        hand = _hand_bytes(
            name, b=b, h=h, s=s, block=128, itemsize=2, causal=True,
            residuals=trace != "flash_fwd",
        )  # fmt: skip
        assert work.bytes_accessed == hand, name
        seen.add(name)
    kernels = {"_flash_attention_kernel", "_flash_attention_dkv_kernel"}
    assert seen >= ({"_flash_attention_kernel"} if trace == "flash_fwd" else kernels)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_forward_and_backward_bytes_match_hand_counts(causal):
    """Lowered for TPU on CPU, causal or not: forward, dkv and dq move what a hand count
    of their blocks' copies says (without causality every block moves at each step of the
    grid indices its map reads)."""
    b, h, s, _ = FLASH_SHAPE
    configs = _flash_grad_configs(major=128, causal=causal, dtype="bfloat16")
    assert set(configs) == {
        "_flash_attention_kernel", "_flash_attention_dkv_kernel", "_flash_attention_dq_kernel"
    }  # fmt: skip
    for name, config in configs.items():
        work = _own(config)
        assert work is not None
        hand = _hand_bytes(name, b=b, h=h, s=s, block=128, itemsize=2, causal=causal)
        assert work.bytes_accessed == hand, name


def _prefetch_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


@pytest.mark.parametrize("prefetch", [False, True])
def test_an_index_map_reading_scalar_prefetch_gives_no_bytes(prefetch):
    """A block index read from a scalar-prefetch operand is known only at run time: the
    kernel gets no bytes figure, never a guess; the same kernel without it gets one."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    n = 8
    x = jax.ShapeDtypeStruct((n * 128, 128), jnp.float32)
    order = jax.ShapeDtypeStruct((n,), jnp.int32)
    if prefetch:
        spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(n,),
            in_specs=[pl.BlockSpec((128, 128), lambda i, o: (o[i], 0))],
            out_specs=pl.BlockSpec((128, 128), lambda i, o: (i, 0)),
        )  # fmt: skip

        def call(order, x):
            return pl.pallas_call(
                lambda o, x_ref, o_ref: _prefetch_kernel(x_ref, o_ref),
                grid_spec=spec, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            )(order, x)  # fmt: skip

        configs = _exported_configs(call, order, x)
    else:

        def call(x):
            return pl.pallas_call(
                _prefetch_kernel, grid=(n,),
                in_specs=[pl.BlockSpec((128, 128), lambda i: (n - 1 - i, 0))],
                out_specs=pl.BlockSpec((128, 128), lambda i: (i, 0)),
                out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            )(x)  # fmt: skip

        configs = _exported_configs(call, x)
    (config,) = configs.values()
    work = _own(config)
    assert work is not None and work.grid == (n,)
    if prefetch:
        assert work.bytes_accessed is None
    else:
        assert work.bytes_accessed == 2 * n * 128 * 128 * 4


# Parses each body as jaxlib's reader would in a reporting process, in one child that says
# which body it is at before it parses it; the parent restarts it after each death.
_RAW_PARSE = """
import base64, json, sys
from jax._src.lib import tpu
from jaxlib.mlir import ir
for i, text in enumerate(json.load(sys.stdin)):
    if i < int(sys.argv[1]):
        continue
    print(i, flush=True)
    ctx = ir.Context()
    tpu.register_dialect(ctx)
    ctx.allow_unregistered_dialects = True
    try:
        with ctx:
            str(ir.Module.parse(base64.b64decode(text)))
    except Exception:
        pass
"""


def _crashing(bodies: list[bytes]) -> list[int]:
    """The bodies whose parse by jaxlib kills the process (a signal, or an abort)."""
    payload = json.dumps([base64.b64encode(b).decode() for b in bodies])
    crashed, start = [], 0
    while start < len(bodies):
        done = subprocess.run(
            [sys.executable, "-c", _RAW_PARSE, str(start)],
            input=payload, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        if done.returncode == 0:
            break
        at = int(done.stdout.split()[-1])
        crashed.append(at)
        start = at + 1
    return crashed


def _mutants(body: bytes, count: int, seed: int) -> list[bytes]:
    """Seeded mutations of ``body``: truncations, and 1 to 16 random byte flips."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        mutant = bytearray(body)
        if i % 3 == 0:
            mutant = mutant[: rng.randrange(len(mutant))]
        else:
            for _ in range(rng.choice((1, 2, 4, 16))):
                mutant[rng.randrange(len(mutant))] = rng.randrange(256)
        out.append(bytes(mutant))
    return out


def test_a_mutated_body_never_crashes_the_reading_process():
    """Traces are shared files; jaxlib's bytecode reader is not hardened (on jaxlib 0.10.2 and
    0.12 two of these 300 mutants of a real kernel's body abort the process that parses them:
    nanobind's ``str_from_cstr_and_size(): conversion error!``). The report's reader parses
    them in a child: every mutant gives a figure or none, this process lives on, and a
    body after one the child died on is still counted."""
    config = next(c for c in _configs("flash_grad") if mosaic.cost_estimate(c) is None)
    body = mosaic_work.body_of(config)
    assert body is not None
    mutants = _mutants(body, 300, seed=0)
    crashed = _crashing(mutants)
    counted = mosaic_work.works(mutants)
    assert len(counted) == len(mutants)
    assert all(counted[i] is None for i in crashed)
    (original,) = mosaic_work.works([body])
    assert original is not None and original.flops
    for i in crashed[:1]:  # a fresh child reads the bodies after the one that killed one
        PROFILING_STATE.reset("mosaic bodies")
        assert mosaic_work.works([mutants[i], body]) == [None, original]
