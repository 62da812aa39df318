"""Shape buckets: shapes of one bucket share one entry, tuned once at the bucket's
representative shape whatever shape comes first; the key shows the bucket; a config the
actual shape's prune rejects is never used.

Covers docs/autotuned.md, "Shape buckets", and docs/teams.md, "Shapes a server has never
seen"."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import pytest

import jaxtune
from jaxtune._core import settings as _settings
from jaxtune._core.errors import ConfigSpaceError, JaxtuneWarning, SignatureError
from jaxtune._core.vocabulary import Entry, Measurement
from jaxtune._tuning import lookup as _lookup
from jaxtune._tuning.buckets import bucket
from jaxtune._tuning.store import cache as _cache

BLOCKS = [1, 2, 4, 8, 16, 32]


def _divides(config, x):
    return x.shape[0] % config["block"] == 0


def _kernel(name, **options):
    @jaxtune.autotuned(
        configs={"block": BLOCKS},
        prune=_divides,
        default={"block": 1},
        name=name,
        buckets={"x": {0: "pow2"}},
        **options,
    )
    def scaled(x, *, block):
        # The output tells which config ran.
        return (x.reshape(-1, block) * block).reshape(x.shape)

    return scaled


@pytest.mark.parametrize(
    ("n", "rule", "expected"),
    [
        (1, "pow2", (1, "1")),
        (2, "pow2", (2, "2")),
        (3, "pow2", (4, "3..4")),
        (100, "pow2", (128, "65..128")),
        (128, "pow2", (128, "65..128")),
        (129, "pow2", (256, "129..256")),
        (0, "pow2", (0, "0")),
        (5, (128, 512), (128, "1..128")),
        (128, (128, 512), (128, "1..128")),
        (129, (128, 512), (512, "129..512")),
        (513, (128, 512), (513, "513")),
    ],
)
def test_bucket_of_a_size(n, rule, expected):
    assert bucket(n, rule) == expected


@pytest.mark.parametrize(
    ("buckets", "match"),
    [
        ({"y": {0: "pow2"}}, r"buckets names 'y', which is not an argument"),
        ({"x": {0: "pow3"}}, r"buckets\['x'\]\[0\]: 'pow3' is no bucket rule"),
        ({"x": {0: (512, 128)}}, r"positive ints in ascending order"),
        ({"x": {"0": "pow2"}}, r"dimensions are ints"),
        ({"x": "pow2"}, r"buckets\['x'\]='pow2'"),
        ({"n": {0: "pow2"}}, r"'n', a static argument"),
        (["x"], r"buckets maps array arguments"),
    ],
)
def test_bad_buckets_are_refused_at_decoration(buckets, match):
    with pytest.raises(ConfigSpaceError, match=match):

        @jaxtune.autotuned(configs={"block": [1]}, buckets=buckets, static_argnames=("n",))
        def k(x, n=1, *, block):
            return x


def test_a_dimension_beyond_the_rank_is_named():
    k = _kernel("t.rank", static_argnames=())
    with pytest.raises(SignatureError, match=r"buckets\['x'\] buckets dimension 0"):
        k.config_for(jax.ShapeDtypeStruct((), jnp.float32))


def test_the_key_shows_the_bucket_and_shapes_of_a_bucket_share_its_entry():
    k = _kernel("t.share")
    assert k.config_for(jnp.ones(100)).key == "f32[65..128]"
    assert k.config_for(jnp.ones(128)).key == "f32[65..128]"
    assert k.config_for(jnp.ones(129)).key == "f32[129..256]"
    _cache.user_cache().write([_entry("t.share", "f32[65..128]", {"block": 4})])
    for n in (68, 100, 128):
        choice = k.config_for(jnp.ones(n))
        assert (choice.source, dict(choice.config)) == ("cache", {"block": 4})
        assert float(k(jnp.ones(n))[0]) == 4.0


def _entry(kernel, key, config, measured=()):
    return Entry(
        kernel=kernel,
        device_kind=_lookup.device_kind(),
        key=key,
        config=config,
        time_us=1.0,
        default_config={"block": 1},
        default_time_us=2.0,
        shapes=(("f32", (128,)),),
        measurements=tuple(
            Measurement(
                config={"block": b},
                median_us=t,
                min_us=t,
                spread=0.0,
                samples=3,
                compile_s=0.1,
            )
            for b, t in measured
        ),
    )


def test_a_config_prune_rejects_for_the_actual_shape_falls_back_to_the_best_it_accepts():
    k = _kernel("t.prune")
    measured = [(32, 1.0), (8, 1.5), (4, 2.0), (2, 3.0), (1, 4.0)]
    _cache.user_cache().write([_entry("t.prune", "f32[65..128]", {"block": 32}, measured)])
    # 100 = 4 * 25: prune rejects 32 and 8, accepts 4 (measured faster than 2 and 1).
    with pytest.warns(JaxtuneWarning, match=r"prune rejects for the shape f32\[100\].*block=4"):
        out = k(jnp.ones(100))
    assert float(out[0]) == 4.0
    assert dict(k.config_for(jnp.ones(100)).config) == {"block": 4}
    # 128 is the representative: the stored config itself.
    assert float(k(jnp.ones(128))[0]) == 32.0
    # Said once per bucket. 65 is odd: of the configs measured, prune accepts only 1.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert float(k(jnp.ones(65))[0]) == 1.0
        assert float(k(jnp.ones(84))[0]) == 4.0


def test_without_an_accepted_measurement_the_actual_shapes_default_runs():
    k = _kernel("t.default", static_argnames=())
    _cache.user_cache().write([_entry("t.default", "f32[65..128]", {"block": 32})])
    with pytest.warns(JaxtuneWarning, match=r"the default block=1"):
        assert float(k(jnp.ones(100))[0]) == 1.0


def test_a_default_is_the_actual_shapes_default():
    @jaxtune.autotuned(
        configs={"block": BLOCKS},
        prune=_divides,
        default=lambda x: {"block": 4 if x.shape[0] % 4 == 0 else 1},
        name="t.shape_default",
        buckets={"x": {0: "pow2"}},
    )
    def k(x, *, block):
        return (x.reshape(-1, block) * block).reshape(x.shape)

    assert dict(k.config_for(jnp.ones(128)).config) == {"block": 4}
    assert dict(k.config_for(jnp.ones(99)).config) == {"block": 1}
    assert float(k(jnp.ones(99))[0]) == 1.0


@pytest.mark.parametrize("order", [(100, 128, 80), (80, 128, 100)])
def test_the_sweep_runs_once_per_bucket_at_its_representative_shape_in_any_order(
    order, monkeypatch, fast_timing
):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "inline")
    seen: list[tuple[int, ...]] = []

    def inputs(x):
        seen.append(tuple(x.shape))
        return (jnp.ones(x.shape, x.dtype),)

    k = _kernel("t.order", inputs=inputs)
    with _settings.override(mode="tune"):
        for n in order:
            # prune for 100 or 80 alone would keep only blocks 1 to 4 (or 16): the sweep
            # sees the representative, 128, whichever comes first.
            assert k(jnp.ones(n)).shape == (n,)
    (entry,) = _cache.user_cache().entries_for("t.order", _lookup.device_kind())
    assert entry.key == "f32[65..128]"
    assert entry.shapes == (("f32", (128,)),)
    assert sorted(m.config["block"] for m in entry.measurements) == BLOCKS
    assert set(seen) == {(128,)}
    for n in order:
        assert n % k.config_for(jnp.ones(n)).config["block"] == 0


def test_space_is_the_actual_shapes():
    k = _kernel("t.space")
    assert [c["block"] for c in k.space(jnp.ones(100))] == [1, 2, 4]
