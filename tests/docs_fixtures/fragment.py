# The names a fragment of docs/ leaves to the reader, from model.py in the page's directory.
import pathlib  # noqa: F401

import jax  # noqa: F401
from model import batch, matmul, model, old, params, train_step, x, y  # noqa: F401

import jaxtune  # noqa: F401
