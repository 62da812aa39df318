"""Setup of docs/cache.md, "Packaged caches": tunes a small kernel named `mylib.scale` into
the user cache and saves the result as `mylib/tuned.msgpack`, the file the page's `mylib`
package ships and registers."""

import pathlib

import jax.numpy as jnp

import jaxtune


@jaxtune.autotuned(configs={"chunk": [128, 1024]}, effort="quick", name="mylib.scale")
def scale(x, *, chunk):
    return (x.reshape(-1, chunk) * 2).reshape(x.shape)


if __name__ == "__main__":
    result = scale.tune(jnp.ones(4096))
    pathlib.Path("mylib").mkdir(exist_ok=True)
    result.save("mylib/tuned.msgpack")
