"""Tokamax's flash attention (Pallas Mosaic TPU, in TPU interpret mode on CPU): configs
that differ only in what interpret mode ignores are one program (docs/autotuned.md,
"Sweeps"), so a sweep times them once.

Tokamax writes each op's config into the module (its ``xla_metadata_payload`` attribute),
and interpret mode runs the kernel through Python callbacks: with either in the way, its
``experimental_scheduler`` twins (a Mosaic scheduling flag the interpreter does not use)
were raced against each other until the rounds' time ran out, deciding nothing (1.00x,
95 % interval 0.71-1.53, in bench/bench_sweep_time.py's runs)."""

from __future__ import annotations

import functools

import jax

from .support import require_tokamax_on_cpu

require_tokamax_on_cpu()

from . import tokamax_kernels as tk  # noqa: E402  (after the library check)


def test_configs_that_differ_only_in_the_scheduler_are_one_program():
    from jax.experimental.pallas import tpu as pltpu

    from jaxtune._core.vocabulary import config_id
    from jaxtune._tuning.sweep.same_program import program_digest

    args = tk.flash_args()
    digests = {}
    for config in tk.flash_attention.space(*args):
        call = functools.partial(tk.flash_attention.__wrapped__, **config)
        call.__name__ = "jaxtune_7"  # type: ignore[attr-defined]
        with pltpu.force_tpu_interpret_mode():
            lowered = jax.jit(call).lower(*args)
        digests[config_id(config)] = program_digest(lowered, "jit_jaxtune_7")
    assert None not in digests.values(), digests
    blocks = {}
    for config in tk.flash_attention.space(*args):
        key = (config["block_q"], config["block_kv"], config["block_kv_compute"])
        blocks.setdefault(key, set()).add(digests[config_id(config)])
    assert all(len(programs) == 1 for programs in blocks.values()), blocks
    assert len({p for programs in blocks.values() for p in programs}) == len(blocks) > 1
