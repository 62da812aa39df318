"""docs/profiling.md, "Attribution" (where a kernel is called): a kernel's source is its own
``pallas_call`` line, and its call site the line of the program that called into the kernel's
code, also under autodiff, where JAX traces a ``custom_vjp``'s rules under the traceback of the
``custom_vjp`` function's call (for JAX's flash attention, one ``return`` line of its wrapper
for all three kernels)."""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import flash_attention as fa
from profile_models import ATTN_SEQ, double_it

from jaxtune._program import markers, sources

HERE = pathlib.Path(__file__).resolve()


def _text(site):
    file, _, line = site.rpartition(":")
    return file, pathlib.Path(file).read_text().splitlines()[int(line) - 1]


def _loss(q):
    return fa.flash_attention(q, q, q, causal=True).sum()  # THE CALL


def test_each_flash_attention_kernel_names_its_own_pallas_call_under_grad():
    q = jax.ShapeDtypeStruct((1, 2, ATTN_SEQ, 128), jnp.float32)
    calls = markers.pallas_calls(jax.make_jaxpr(jax.grad(_loss))(q))
    assert {c.name for c in calls} == {
        "_flash_attention_kernel",
        "_flash_attention_dkv_kernel",
        "_flash_attention_dq_kernel",
    }
    assert len({c.source for c in calls}) == 3, [c.source for c in calls]
    for call in calls:
        file, text = _text(call.source)
        assert file == fa.__file__ and "pallas_call(" in text, (call.name, text)
        file, text = _text(call.call_site)
        assert file == str(HERE) and text.endswith("# THE CALL"), call


def test_a_kernel_outside_autodiff_is_found_on_its_own_traceback():
    x = jax.ShapeDtypeStruct((64, 128), jnp.float32)
    (call,) = markers.pallas_calls(jax.make_jaxpr(lambda v: double_it(v) * 2)(x))
    file, text = _text(call.source)
    assert file.endswith("profile_models.py") and "pallas_call(" in text
    # This file called into profile_models' code (the lambda above).
    assert call.call_site is not None and call.call_site.startswith(str(HERE))


def test_a_call_site_skips_the_kernels_file_and_jaxtunes_own():
    own = str(pathlib.Path(sources.__file__))
    frames = [("/lib/kern.py", 40), (own, 12), ("/app/train.py", 9), ("/app/main.py", 3)]
    assert sources.call_site("/lib/kern.py:7", frames) == "/app/train.py:9"
    assert sources.call_site(None, frames) == "/lib/kern.py:40"
    assert sources.call_site("/lib/kern.py:7", frames[:2]) is None
