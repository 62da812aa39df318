"""Reading a JAX program: the markers autotuned calls leave in it, and where its Pallas
and jaxtune kernels are (``jaxtune.locate``). Used by both flows; imports only the core."""
