"""A kernel's config space on its own (``ConfigSpec``): built, pruned and defaulted for the
abstract arguments of a call, with no sweep and no JAX program.

Covers docs/autotuned.md, "@jaxtune.autotuned" (the ``configs``, ``prune`` and ``default``
options: a dict of lists is a cartesian product in the order written, a list of dicts or a
callable of the abstract arguments; ``prune`` keeps valid configs; the default is given,
computed, or the first config of the pruned space; a callback that raises is a
``ConfigSpaceError`` naming the kernel and the arguments, its exception chained).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtune import ConfigSpaceError
from jaxtune._tuning.space import ConfigSpec

X = jax.ShapeDtypeStruct((256, 64), jnp.float32)


def kernel(x, *, block, split=1):
    return x


def spec(configs, *, prune=None, default=None):
    return ConfigSpec(kernel, configs, prune=prune, default=default, kernel="lib.kernel")


def test_a_dict_of_lists_is_the_product_in_the_order_written():
    got = spec({"block": [64, 128], "split": [1, 2]}).space([X], {})
    assert got == [
        {"block": 64, "split": 1},
        {"block": 64, "split": 2},
        {"block": 128, "split": 1},
        {"block": 128, "split": 2},
    ]


def test_prune_keeps_the_configs_that_fit_the_arguments_and_duplicates_go():
    s = spec(
        [{"block": 64}, {"block": 96}, {"block": 64}, {"block": 128}],
        prune=lambda c, x: x.shape[0] % c["block"] == 0,
    )
    assert s.space([X], {}) == [{"block": 64}, {"block": 128}]


def test_a_callable_space_depends_on_the_shapes():
    s = spec(lambda x: ({"block": b} for b in (32, 64, 128, 512) if b <= x.shape[1]))
    assert s.space([X], {}) == [{"block": 32}, {"block": 64}]
    small = jax.ShapeDtypeStruct((8, 32), jnp.float32)
    assert s.space([small], {}) == [{"block": 32}]


def test_the_default_is_given_computed_or_the_first_of_the_pruned_space():
    space = [{"block": 64}, {"block": 128}]
    assert spec(space).default_config(space[1:], [X], {}) == {"block": 128}
    assert spec(space, default={"block": 64}).default_config(space, [X], {}) == {"block": 64}
    computed = spec(space, default=lambda x: {"block": x.shape[0] // 2})
    assert computed.default_config(space, [X], {}) == {"block": 128}


def test_nothing_left_after_pruning_says_how_many_there_were():
    s = spec({"block": [3, 5]}, prune=lambda c, x: x.shape[0] % c["block"] == 0)
    with pytest.raises(ConfigSpaceError, match=r"no config .* left after pruning .*\(2 before"):
        s.space([X], {})


@pytest.mark.parametrize(
    ("configs", "default", "match"),
    [
        ({}, None, "empty dict"),
        ({"block": 64}, None, r"must be a list of values.*configs=\{'block': \[64\]\}"),
        ({"block": []}, None, r"configs\['block'\] .* is empty"),
        ([{"block": 1}, {"split": 2}], None, "every config needs the same keys"),
        ({"tile": [1]}, None, "'tile', which .* does not accept as a keyword argument"),
        ({"block": [object()]}, None, "'block' .* cannot be stored in the cache"),
        ({"block": [np.int32(8)]}, None, r"Pass 8 \(a Python int"),
        ({"block": [64]}, {"split": 2}, r"default .* has keys \['split'\]"),
        ({"block": [64]}, 64, "default must be a dict or a callable, got int"),
    ],
)
def test_an_unusable_space_or_default_is_refused_saying_what_to_do(configs, default, match):
    with pytest.raises(ConfigSpaceError, match=match):
        spec(configs, default=default)


def test_a_refused_space_names_the_function_and_the_kernels_name():
    with pytest.raises(ConfigSpaceError, match=r"^configs of kernel \(kernel 'lib.kernel'\) is an"):
        spec([])
    with pytest.raises(ConfigSpaceError, match=r"^configs of kernel is an empty list"):
        ConfigSpec(kernel, [], prune=None, default=None, kernel=f"{__name__}.kernel")


@pytest.mark.parametrize(
    ("make", "where"),
    [
        (lambda boom: spec({"block": [64]}, prune=boom), "prune"),
        (lambda boom: spec(boom), r"configs\(\.\.\.\)"),
        (lambda boom: spec({"block": [64]}, default=boom), r"default\(\.\.\.\)"),
    ],
)
def test_a_callback_that_raises_names_the_kernel_and_chains_the_cause(make, where):
    def boom(*args, **kwargs):
        raise ZeroDivisionError("tile of zero")

    s = make(boom)
    with pytest.raises(ConfigSpaceError, match=where) as caught:
        s.default_config(s.space([X], {}, call="f32[256,64]"), [X], {}, call="f32[256,64]")
    assert "lib.kernel" in str(caught.value) and "f32[256,64]" in str(caught.value)
    assert isinstance(caught.value.__cause__, ZeroDivisionError)


def test_values_of_every_storable_kind_are_accepted():
    s = spec({"block": [64, 8], "split": [True, 0.5, "x", None, (1, 2), jnp.bfloat16]})
    assert len(s.space([X], {})) == 12
