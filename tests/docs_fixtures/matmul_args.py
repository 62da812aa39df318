# The arguments the first fragment of docs/autotuned.md leaves to the reader.
import jax.numpy as jnp

x, y = jnp.ones((512, 1024)), jnp.ones((1024, 512))
