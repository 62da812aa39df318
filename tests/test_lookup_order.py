"""The lookup order (docs/autotuned.md, "Lookup order" and "Modes (`JAXTUNE_MODE`)"), held by one method,
``jaxtune._tuning.bound.BoundCall.choose``, tested with fakes: a call, the scopes, the user cache,
the shared store, the packaged caches and the sweep. Each layer is told apart by the
config it holds."""

from __future__ import annotations

import inspect
import types
import warnings

import pytest

import jaxtune
from jaxtune._core.errors import MissError, TuningFailedError
from jaxtune._core.vocabulary import Choice, Entry, StaleReason
from jaxtune._distributed import agree as _agree
from jaxtune._tuning import lookup as _lookup
from jaxtune._tuning import sweep_rules as _sweep_rules
from jaxtune._tuning.bound import BoundCall, KernelOptions
from jaxtune._tuning.digest import KernelCode
from jaxtune._tuning.space import ConfigSpec
from jaxtune._tuning.store import cache as _cache
from jaxtune._tuning.store import shared as _shared

KERNEL = "tests.lookup_order"
SIG = types.SimpleNamespace(key="f32[8]", shapes=(("float32", (8,)),), statics="", actual=None)
#: The config each layer holds.
CONFIG = {"scope": 1, "user": 2, "shared": 3, "packaged": 4, "nearest": 5, "swept": 9}
DEFAULT = 0
OLD_TOOLCHAIN = {"jax": "0.0.1", "jaxlib": "0.0.1", "libtpu": None}


def entry(c: int, *, key: str = SIG.key, shape: int = 8, **fields) -> Entry:
    return Entry(
        kernel=KERNEL,
        device_kind=_lookup.device_kind(),
        key=key,
        config={"c": c},
        time_us=1.0,
        default_config={"c": DEFAULT},
        default_time_us=2.0,
        shapes=(("float32", (shape,)),),
        **fields,
    )


def fake_call(*, nearest: bool = False, timing: str = "auto") -> BoundCall:
    """A call of a kernel with the options the lookup reads, over the configs 1 to 9."""

    def fn(x, *, c):
        return x

    space = [{"c": c} for c in range(1, 10)]
    options = KernelOptions(
        fn=fn,
        kernel_id=KERNEL,
        spec=ConfigSpec(fn, space, prune=None, default={"c": DEFAULT}, kernel=KERNEL),
        signature=inspect.signature(fn),
        code=KernelCode(fn, enabled=False),  # no code digest: never stale for code
        timing=timing,
        nearest=nearest,
    )
    return BoundCall(kernel=options, sig=SIG, space=tuple(space), default={"c": DEFAULT})


class FakeLayer:
    """A cache layer (user cache, packaged cache) or a scope, holding entries by key."""

    def __init__(self, *entries: Entry) -> None:
        self.entries = {e.key: e for e in entries}

    def lookup(self, kernel, kind, key, version=""):
        found = self.entries.get(key)
        return found if found is not None and found.kernel == kernel else None

    def entries_for(self, kernel, kind):
        return [e for e in self.entries.values() if e.kernel == kernel]

    def save(self, entries):
        self.entries.update({e.key: e for e in entries})


class Stores:
    """The fakes behind the lookup, and what the lookup did with them."""

    def __init__(self) -> None:
        self.scope = FakeLayer()
        self.user = FakeLayer()
        self.shared = FakeLayer()
        self.packaged = FakeLayer()
        self.sweeps: list[str] = []
        self.sweep_fails = False

    def read_through(self, kernel, kind):
        """The shared store read through into the user cache."""
        self.user.save(self.shared.entries_for(kernel, kind))
        return bool(self.shared.entries)

    def sweep(self, call, kind, *, run_sweep=None):
        timed = _sweep_rules.pass_now(call.kernel.timing)
        self.sweeps.append(timed)
        if self.sweep_fails:
            raise TuningFailedError("every config failed")
        new = entry(CONFIG["swept"], timing=timed)
        self.user.save([new])
        call.kernel.retunes.done(kind, call.sig.key, timed)
        return new


@pytest.fixture
def stores(monkeypatch):
    fake = Stores()
    monkeypatch.setenv("JAXTUNE_ISOLATION", "inline")
    for name in ("JAXTUNE_MODE", "JAXTUNE_NEAREST", "JAXTUNE_ON_MISS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(_lookup, "active_scopes", lambda: [fake.scope])
    monkeypatch.setattr(_cache, "user_cache", lambda: fake.user)
    monkeypatch.setattr(_cache, "layers", lambda: [fake.packaged])
    monkeypatch.setattr(_shared, "read_through", fake.read_through)
    monkeypatch.setattr(BoundCall, "sweep", lambda call, kind, **kw: fake.sweep(call, kind, **kw))
    return fake


def fill(stores: Stores, layers) -> None:
    """Puts an entry in each of ``layers`` (the nearest one: a tuned shape of 16)."""
    for layer in layers:
        if layer == "nearest":
            stores.packaged.save([entry(CONFIG["nearest"], key="f32[16]", shape=16)])
        else:
            getattr(stores, layer).save([entry(CONFIG[layer])])


def answer(choice: Choice) -> tuple[str, int]:
    return choice.source, choice.config["c"]


ORDER = ["scope", "user", "shared", "packaged", "nearest"]
SOURCE = {"scope": "scope", "user": "cache", "shared": "cache", "packaged": "packaged"}


@pytest.mark.parametrize("first", [*ORDER, "none"])
def test_each_layer_answers_before_every_later_one(stores, first):
    """With an entry in this layer and in every later one, this layer answers."""
    layers = ORDER[ORDER.index(first) :] if first != "none" else []
    fill(stores, layers)
    call = fake_call(nearest=True)
    for traced in (True, False):  # a traced call and config_for alike
        got = answer(call.choose(traced=traced))
        if first == "none":
            assert got == ("default", DEFAULT)
        else:
            assert got == (SOURCE.get(first, first), CONFIG[first])
    assert stores.sweeps == []  # cached mode never sweeps


def test_nearest_is_taken_only_when_the_kernel_or_the_setting_opts_in(stores, monkeypatch):
    fill(stores, ["nearest"])
    assert answer(fake_call().choose(traced=True)) == ("default", DEFAULT)
    monkeypatch.setenv("JAXTUNE_NEAREST", "1")
    assert answer(fake_call().choose(traced=True)) == ("nearest", CONFIG["nearest"])


def test_off_mode_keeps_the_scope_and_skips_every_cache(stores, monkeypatch):
    monkeypatch.setenv("JAXTUNE_MODE", "off")
    fill(stores, ["user", "shared", "packaged", "nearest"])
    call = fake_call(nearest=True)
    assert answer(call.choose(traced=True)) == ("default", DEFAULT)
    fill(stores, ["scope"])
    assert answer(call.choose(traced=True)) == ("scope", CONFIG["scope"])


def test_tune_mode_sweeps_a_miss_once_and_the_entry_answers_after(stores, monkeypatch):
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    call = fake_call()
    assert answer(call.choose(traced=True)) == ("cache", CONFIG["swept"])
    assert answer(call.choose(traced=True)) == ("cache", CONFIG["swept"])
    assert stores.sweeps == ["forward"]


def test_tune_mode_sweeps_before_nearest_and_default(stores, monkeypatch):
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    fill(stores, ["nearest"])
    got = answer(fake_call(nearest=True).choose(traced=True))
    assert got == ("cache", CONFIG["swept"])


def test_config_for_never_sweeps(stores, monkeypatch):
    for mode in ("tune", "retune"):
        monkeypatch.setenv("JAXTUNE_MODE", mode)
        assert answer(fake_call().choose(traced=False)) == ("default", DEFAULT)
    assert stores.sweeps == []


def test_a_stale_entry_is_used_in_cached_mode_and_swept_over_in_tune_mode(stores, monkeypatch):
    stores.user.save([entry(CONFIG["user"], versions=OLD_TOOLCHAIN)])
    call = fake_call()
    with pytest.warns(jaxtune.JaxtuneWarning, match="stale: tuned with another toolchain"):
        choice = call.choose(traced=True)
    assert answer(choice) == ("cache", CONFIG["user"])
    assert choice.stale is not None and choice.stale.reason is StaleReason.TOOLCHAIN
    assert choice.stale.text.startswith("tuned with another toolchain")
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    assert answer(call.choose(traced=True)) == ("cache", CONFIG["swept"])
    assert stores.sweeps == ["forward"]


def test_a_failed_sweep_falls_back_to_the_stale_entry_before_the_default(stores, monkeypatch):
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    stores.sweep_fails = True
    stores.packaged.save([entry(CONFIG["packaged"], versions=OLD_TOOLCHAIN)])
    with pytest.warns(jaxtune.JaxtuneWarning, match=f"could not tune {KERNEL}"):
        choice = fake_call().choose(traced=True)
    assert answer(choice) == ("packaged", CONFIG["packaged"])
    assert choice.stale is not None and choice.stale.reason is StaleReason.TOOLCHAIN
    assert choice.stale.text.startswith("tuned with another toolchain")


@pytest.mark.parametrize(
    ("stored", "source", "reason"),
    [
        (entry(CONFIG["user"]), "cache", None),
        (entry(CONFIG["user"], versions=OLD_TOOLCHAIN), "cache", StaleReason.TOOLCHAIN),
        (entry(42), "default", StaleReason.OUTSIDE),  # passed over: 42 is not in the space
    ],
    ids=["current", "toolchain", "passed-over"],
)
@pytest.mark.usefixtures("fresh_warnings")
def test_a_call_carries_why_its_entry_is_stale_as_the_reason(stores, stored, source, reason):
    stores.user.save([stored])
    call = fake_call()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", jaxtune.JaxtuneWarning)  # said once; asserted above
        choice = call.choose(traced=False)
        stale = call.staleness(choice)
    assert choice.source == source
    assert (stale and stale.reason) == reason


def test_a_failed_sweep_without_a_stale_entry_goes_on_to_nearest(stores, monkeypatch):
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    stores.sweep_fails = True
    fill(stores, ["nearest"])
    with pytest.warns(jaxtune.JaxtuneWarning, match=f"could not tune {KERNEL}"):
        choice = fake_call(nearest=True).choose(traced=True)
    assert answer(choice) == ("nearest", CONFIG["nearest"])


def test_retune_mode_sweeps_over_the_scope_and_the_cache_once_per_key(stores, monkeypatch):
    monkeypatch.setenv("JAXTUNE_MODE", "retune")
    fill(stores, ["scope", "user"])
    call = fake_call()
    assert answer(call.choose(traced=False)) == ("scope", CONFIG["scope"])
    assert answer(call.choose(traced=True)) == ("cache", CONFIG["swept"])
    assert stores.sweeps == ["forward"]
    # Swept once in this process: the order is the cached one again, scope first.
    assert answer(call.choose(traced=True)) == ("scope", CONFIG["scope"])
    assert stores.sweeps == ["forward"]


def test_a_forward_entry_answers_a_differentiated_call_except_where_tune_mode_sweeps(
    stores, monkeypatch
):
    stores.user.save([entry(CONFIG["user"], timing="forward")])
    call = fake_call()
    with _sweep_rules.differentiated_calls(True):
        assert answer(call.choose(traced=True)) == ("cache", CONFIG["user"])
        monkeypatch.setenv("JAXTUNE_MODE", "tune")
        assert answer(call.choose(traced=True)) == ("cache", CONFIG["swept"])
    assert stores.sweeps == ["vjp"]
    # A kernel that says which pass to time keeps a forward entry for every call.
    stores.user.save([entry(CONFIG["user"], timing="forward")])
    with _sweep_rules.differentiated_calls(True):
        got = fake_call(timing="forward").choose(traced=True)
    assert answer(got) == ("cache", CONFIG["user"])


def test_a_forward_entry_of_a_kernel_that_times_vjp_is_swept_again_in_tune_mode(
    stores, monkeypatch
):
    """One wrong-pass rule (jaxtune._tuning.staleness.wrong_pass), as ``jaxtune tune --``
    reads it: an entry of the forward pass alone does not serve a sweep of forward and
    backward, whether ``timing="auto"`` or ``timing="vjp"`` asked for it."""
    stores.user.save([entry(CONFIG["user"], timing="forward")])
    call = fake_call(timing="vjp")
    assert answer(call.choose(traced=True)) == ("cache", CONFIG["user"])  # cached mode
    assert call.current_entry() is None  # jaxtune.tune sweeps it
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    assert answer(call.choose(traced=True)) == ("cache", CONFIG["swept"])
    assert stores.sweeps == ["vjp"]


@pytest.mark.parametrize("mode", ["cached", "tune"])
def test_a_traced_miss_is_what_on_miss_says_and_config_for_stays_silent(stores, monkeypatch, mode):
    monkeypatch.setenv("JAXTUNE_MODE", mode)
    monkeypatch.setenv("JAXTUNE_ON_MISS", "error")
    stores.sweep_fails = True  # tune mode: the sweep fails, so the call misses
    call = fake_call()
    assert answer(call.choose(traced=False)) == ("default", DEFAULT)
    if mode == "tune":  # a sweep was allowed: its failure warns, the miss does not
        with pytest.warns(jaxtune.JaxtuneWarning, match="could not tune"):
            got = call.choose(traced=True)
        assert answer(got) == ("default", DEFAULT)
        return
    with pytest.raises(MissError, match=f"{KERNEL} with key f32\\[8\\]"):
        call.choose(traced=True)


def test_on_miss_warn_warns_once_per_key(stores, monkeypatch, recwarn):
    monkeypatch.setenv("JAXTUNE_ON_MISS", "warn")
    call = fake_call()
    for _ in range(3):
        assert answer(call.choose(traced=True)) == ("default", DEFAULT)
    misses = [w for w in recwarn if "no tuned config" in str(w.message)]
    assert len(misses) == 1


def test_the_agreed_config_answers_config_for_after_the_scope(stores, monkeypatch):
    agreed = Choice(config={"c": 7}, source="cache", key=SIG.key)
    monkeypatch.setattr(_agree, "decided", lambda kernel, version, key, kind: agreed)
    fill(stores, ["user", "packaged"])
    assert answer(fake_call().choose(traced=False)) == ("cache", 7)
    fill(stores, ["scope"])
    assert answer(fake_call().choose(traced=False)) == ("scope", CONFIG["scope"])


def test_a_stored_config_outside_the_space_is_skipped_for_the_next_layer(stores):
    stores.user.save([entry(42)])  # not a config of the space
    fill(stores, ["packaged"])
    with pytest.warns(jaxtune.JaxtuneWarning, match="not in its space"):
        got = fake_call().choose(traced=True)
    assert answer(got) == ("packaged", CONFIG["packaged"])
