"""A process of the shared-store tests (tests/test_shared_store.py), with its own settings
from the environment (JAXTUNE_REMOTE_CACHE, JAXTUNE_CACHE_DIR, JAXTUNE_MODE, AWS_*).

    python tests/shared_store_worker.py tune OUT.json
        calls the `spin` kernel under jax.jit and writes which config it used, where from,
        its entry's creation time and the output (which reveals the config).
    python tests/shared_store_worker.py publish WRITER COUNT
        publishes COUNT entries (at most 300 s) to the shared store, one per publish, printing
        `ack <key>` once each publish has returned (`fail <key> <why>` when it raised).
"""

from __future__ import annotations

import json
import sys
import time

if sys.argv[1:2] != ["publish"]:  # publishers need no JAX: they start faster without it
    import jax
    import jax.numpy as jnp

    import jaxtune

    @jaxtune.autotuned(
        configs={"work": [1, 400]},
        default={"work": 400},
        check=False,
        name="tests.shared.spin",
    )
    def spin(x, *, work):
        """Takes time in proportion to `work` (so 1 wins any sweep), and returns x + work."""
        y = jax.lax.fori_loop(0, work * 20, lambda i, y: jnp.sin(y), x)
        return y * 0.0 + x + work


def tune(out: str) -> None:
    x = jnp.zeros((64,), jnp.float32)
    value = float(jax.jit(spin)(x)[0])
    choice = spin.config_for(x)
    report = {
        "config": dict(choice.config),
        "source": choice.source,
        "created": choice.entry.created if choice.entry is not None else None,
        "output": value,
    }
    with open(out, "w") as f:
        json.dump(report, f)


def publish(writer: str, count: int) -> None:
    from jaxtune._core import settings as _settings
    from jaxtune._core.vocabulary import Entry
    from jaxtune._tuning.store.remote import SharedStore, SharedStoreError

    settings = _settings.settings()
    store = SharedStore(settings.remote_cache, settings.remote_timeout)
    stop = time.monotonic() + 300  # bounded in count and in time: it ends by itself
    for i in range(count):
        if time.monotonic() > stop:
            break
        key = f"f32[{writer}-{i}]"
        entry = Entry(
            kernel="tests.shared.many",
            device_kind="cpu",
            key=key,
            config={"work": i},
            time_us=1.0,
            default_config={"work": 0},
            default_time_us=2.0,
            created=float(i),
        )
        try:
            store.publish([entry])
        except SharedStoreError as e:  # not acknowledged: the test does not count it
            print(f"fail {key} {e}", flush=True)
            continue
        print(f"ack {key}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "tune":
        tune(sys.argv[2])
    else:
        publish(sys.argv[2], int(sys.argv[3]))
