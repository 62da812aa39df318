"""A capture never consumes, aliases or changes the caller's arrays, also of a step that
donates them (``jax.jit(step, donate_argnums=0)``): the program's results and training
curve are the same with and without profiling, and the profile is still written."""

from __future__ import annotations

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtune
from jaxtune._isolation import process as _process
from jaxtune._profiling import profiled as _profiled


def _loss(params, x):
    return jnp.mean((jnp.tanh(x @ params["w"]) + params["b"]) ** 2)


def _sgd(params, x):
    """One plain SGD update of a dict of parameters; returns them and the loss."""
    loss, grads = jax.value_and_grad(_loss)(params, x)
    return jax.tree.map(lambda p, g: p - 0.5 * g, params, grads), loss


#: A training step that donates its parameters, as real training loops do.
donating_step = jax.jit(_sgd, donate_argnums=0)
profiled_step = jaxtune.profiled(iters=2, warmup=1, llo=False)(jax.jit(_sgd, donate_argnums=0))


@jaxtune.profiled(iters=2, warmup=1, llo=False)
def outer_step(params, x):
    """A profiled function that calls the donating step."""
    return donating_step(params, x)


def _params():
    w = jnp.asarray(np.random.default_rng(0).standard_normal((16, 16), np.float32))
    return {"w": w, "b": jnp.zeros(16, jnp.float32)}


_X = np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32)


def _train(step, steps=4):
    params, losses = _params(), []
    for _ in range(steps):
        params, loss = step(params, jnp.asarray(_X))
        losses.append(np.asarray(loss))
    return losses, jax.tree.map(np.asarray, params)


def _same(a, b):
    pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return all(np.array_equal(x, y) for x, y in pairs)


@pytest.fixture
def process(monkeypatch):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "process")
    yield
    _process.shutdown_children()


def test_the_step_really_donates():
    """The premise: a call of the step deletes the arrays it was given."""
    params = _params()
    donating_step(params, jnp.asarray(_X))
    assert all(leaf.is_deleted() for leaf in jax.tree.leaves(params))


@pytest.mark.parametrize("step", [profiled_step, outer_step], ids=["jit-donating", "calls-it"])
def test_auto_profile_of_a_donating_step_keeps_the_training_curve(
    step, monkeypatch, tmp_path, capsys
):
    plain_losses, plain_params = _train(step)  # JAXTUNE_PROFILE unset: no capture
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv("JAXTUNE_PROFILE", "1")
    monkeypatch.setenv("JAXTUNE_PROFILE_DIR", str(tmp_path))
    # The first call is profiled, then runs on the caller's own arrays; the next calls
    # (same signature) run on what it returned. No warning (warnings fail these tests).
    losses, params = _train(step)
    assert [x.tobytes() for x in losses] == [x.tobytes() for x in plain_losses]
    assert _same(params, plain_params)
    (report,) = tmp_path.glob("*/report.json")
    doc = json.loads(report.read_text())
    assert doc["iterations"] == 2 and doc["ops"]
    assert "jaxtune: profiled" in capsys.readouterr().out


def _profile_keeps_arrays(profile):
    # No NumPy view of the arrays is taken before the capture: a buffer that one holds
    # is copied, not donated, and the fault would not show.
    params = _params()
    p = profile(params, jnp.asarray(_X))
    assert p.iterations == 2 and p.ops
    assert not any(leaf.is_deleted() for leaf in jax.tree.leaves(params))
    assert _same(params, _params())
    # The caller's next step runs on its own arrays and gives what an unprofiled one gives.
    new, loss = donating_step(params, jnp.asarray(_X))
    want, want_loss = donating_step(_params(), jnp.asarray(_X))
    assert np.array_equal(loss, want_loss) and _same(new, want)


def test_profile_of_a_donating_step_inline(monkeypatch):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "inline")
    _profile_keeps_arrays(profiled_step.profile)
    _profile_keeps_arrays(functools.partial(jaxtune.profile, donating_step, iters=2, llo=False))


@pytest.mark.child
def test_profile_of_a_donating_step_in_the_child(process):
    # The child decodes its own arrays; on an accelerator the capture there gave them to the
    # step three times, and the second call found them deleted (on CPU they alias the
    # decoded bytes, which are copied rather than donated).
    _profile_keeps_arrays(profiled_step.profile)
    _profile_keeps_arrays(functools.partial(jaxtune.profile, donating_step, iters=2, llo=False))


def test_a_donated_keyword_argument_is_copied_and_the_others_are_not(monkeypatch):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "inline")
    step = jax.jit(lambda x, *, params: _sgd(params, x), donate_argnames="params")
    params, x = _params(), jnp.asarray(_X)
    given = []
    real = _profiled._arguments_per_call

    def spy(lowered, args, kwargs):
        arguments = real(lowered, args, kwargs)

        def call():
            given.append(arguments())
            return given[-1]

        return call

    monkeypatch.setattr(_profiled, "_arguments_per_call", spy)
    p = jaxtune.profile(step, x, params=params, iters=2, llo=False)
    assert p.iterations == 2
    assert not any(leaf.is_deleted() for leaf in jax.tree.leaves(params))
    assert _same(params, _params())
    assert len(given) == 2 + 2  # warm-up and traced calls, each with its own copies
    for args, kwargs in given:
        assert args[0] is x  # not donated: the caller's own array, not copied
        assert all(kwargs["params"][k] is not params[k] for k in params)
    copies = [id(kwargs["params"]["w"]) for _, kwargs in given]
    assert len(set(copies)) == len(copies)


def test_a_sweep_leaves_the_arrays_of_an_eager_call(monkeypatch):
    """An inline sweep times the kernel on the caller's arrays inside a jit of its own, where
    the donation of a kernel jitted with ``donate_argnums`` does not apply."""
    monkeypatch.setenv("JAXTUNE_ISOLATION", "inline")
    monkeypatch.setenv("JAXTUNE_MODE", "tune")

    @jaxtune.autotuned(configs={"k": [1, 2]}, name="tests.donation.kernel")
    @functools.partial(jax.jit, donate_argnums=0, static_argnames="k")
    def kernel(x, *, k):
        return x * 2 + k

    x = jnp.ones((8, 128))
    result = kernel.tune(x)
    assert len(result) == 1 and not x.is_deleted()
    assert np.array_equal(np.asarray(x), np.ones((8, 128)))
