from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxtune._tuning import timing as _timing
from jaxtune.examples.chunked import chunked_logsumexp, reference_logsumexp
from jaxtune.examples.pallas_matmul import matmul


def test_chunked_logsumexp_matches_reference_for_every_chunk():
    x = jax.random.normal(jax.random.key(0), (4, 8192))
    ref = reference_logsumexp(x)
    for config in chunked_logsumexp.space(x):
        np.testing.assert_allclose(chunked_logsumexp(x, **config), ref, rtol=1e-5)


def test_pallas_matmul_interpret_mode_is_correct_and_tunes(fast_timing):
    a = jax.random.normal(jax.random.key(1), (64, 64))
    b = jax.random.normal(jax.random.key(2), (64, 64))
    np.testing.assert_allclose(matmul(a, b), a @ b, rtol=1e-4, atol=1e-4)
    assert len(matmul.space(a, b)) == 8  # 32 and 64 fit every dimension
    (entry,) = matmul.tune(a, b).values()
    assert all(m.ok for m in entry.measurements)
    np.testing.assert_allclose(jax.jit(matmul)(a, b), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_chunked_tunable_beats_its_default_on_cpu(monkeypatch):
    monkeypatch.setattr(_timing, "DEFAULT", _timing.TimingOptions(min_time_s=0.1))
    x = jax.random.normal(jax.random.key(0), (8, 262144))
    (entry,) = chunked_logsumexp.tune(x).values()
    # Loop overhead of 1024 scan steps (the default chunk of 256) against 64 or fewer: the
    # measured gap is about 2.5x here; 1.3x leaves room for a noisy machine.
    assert entry.speedup is not None and entry.speedup > 1.3, entry
    assert entry.config["chunk"] != 256
