"""FLOPs and bytes counted from a Mosaic TPU kernel's body (issue 58), checked against the
kernels' own cost estimates, hand counts, and the v5e traces' kernels."""

from __future__ import annotations

import json
import pathlib

import pytest

import jaxtune
from jaxtune._core.xspace import schema, xplane
from jaxtune._profiling import mosaic, mosaic_work
from jaxtune._profiling.hlo import text

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "v5e"


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


@pytest.mark.parametrize("trace", ["flash_fwd", "flash_grad", "nnx_step"])
def test_the_forward_kernels_count_agrees_with_its_own_estimate(trace):
    """JAX's flash forward declares a cost estimate: the matmuls counted from its body
    come within 1 % of it (the estimate adds the softmax's elementwise work)."""
    checked = 0
    for config in _configs(trace):
        estimate = mosaic.cost_estimate(config)
        if estimate is None:
            continue
        work = mosaic_work.mosaic_work(config)
        assert work is not None and work.flops is not None
        assert work.flops == pytest.approx(estimate["flops"], rel=0.01)
        checked += 1
    assert checked


def test_the_matmul_counts_two_m_n_k():
    """The example matmul, bf16 [2048, 4096] @ [4096, 4096] in 128 blocks: 2*M*N*K FLOPs;
    x and y blocks move every grid step, the f32 output block once per (i, j)."""
    (config,) = _configs("matmul")
    work = mosaic_work.mosaic_work(config)
    assert work is not None and work.grid == (16, 32, 32)
    m, k, n = 2048, 4096, 4096
    assert work.flops == 2 * m * n * k
    steps = 16 * 32 * 32
    assert work.bytes_accessed == 2 * steps * 128 * 128 * 2 + 16 * 32 * 128 * 128 * 4


def test_a_body_that_does_not_parse_gives_no_figure():
    assert mosaic_work.work_of_body(b"ML\xefR\x00garbage") is None
    assert mosaic_work.mosaic_work(json.dumps({"custom_call_config": {"body": "AAAA"}})) is None
    assert mosaic_work.mosaic_work(b"not json") is None


def test_flash_backward_with_unrolled_inner_blocks_matches_hand_counts():
    """Lowered for TPU on CPU: block_k smaller than block_k_major makes the backward
    kernels loop over inner blocks in their body; the counts still match hand counts."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    b, h, s, d = 1, 2, 512, 128
    sizes = fa.BlockSizes(
        block_q=128, block_k_major=256, block_k=128, block_b=1,
        block_q_major_dkv=256, block_k_major_dkv=256, block_k_dkv=128, block_q_dkv=128,
        block_k_major_dq=256, block_k_dq=128, block_q_dq=128,
    )  # fmt: skip

    def loss(q, k, v):
        return fa.flash_attention(q, k, v, block_sizes=sizes).sum()

    x = jax.ShapeDtypeStruct((b, h, s, d), jnp.float32)
    sites = jaxtune.locate(jax.grad(loss, argnums=(0, 1, 2)), x, x, x, platform="tpu")
    assert sites
    exported = jax.export.export(jax.jit(jax.grad(loss, argnums=(0, 1, 2))), platforms=["tpu"])
    module = exported(x, x, x).mlir_module()
    found = {}
    for chunk in module.split("backend_config = ")[1:]:
        raw = chunk[1 : chunk.index('"', 1)].replace("\\22", '"')
        name = mosaic.kernel_name(raw)
        work = mosaic_work.mosaic_work(raw)
        if name and work and mosaic.cost_estimate(raw) is None:
            found[name] = work.flops
    assert found == {
        "_flash_attention_dkv_kernel": 8 * b * h * s * s * d,
        "_flash_attention_dq_kernel": 6 * b * h * s * s * d,
    }
