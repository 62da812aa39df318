"""Tune a pure-JAX kernel, use the result under jax.jit, and move it to another machine.

Run: python examples/tune_chunked.py
"""

from __future__ import annotations

import tempfile

import jax

import jaxtune
from jaxtune.examples.chunked import chunked_logsumexp


def main() -> None:
    x = jax.random.normal(jax.random.key(0), (8, 262144))
    print("before tuning:", chunked_logsumexp.config_for(x))

    result = chunked_logsumexp.tune(x)  # sweeps every chunk that divides 262144
    print(result.table())

    # Jitted code now picks the winner while tracing; nothing of jaxtune runs per call.
    step = jax.jit(lambda v: chunked_logsumexp(v).sum())
    print("loss:", float(step(x)), "with", dict(chunked_logsumexp.config_for(x).config))

    # Results are plain msgpack: save them, ship them, scope them.
    with tempfile.TemporaryDirectory() as tmp:
        path = result.save(f"{tmp}/tuned.msgpack")
        with jaxtune.TuningResult.load(path):
            print("inside the scope:", chunked_logsumexp.config_for(x).source)


if __name__ == "__main__":
    main()
