"""Setup of docs/reports.md, "Sweeps": tunes the kernel of model.py's `train_step`, so that
the user cache holds `jaxtune.examples.pallas_matmul`."""

from model import batch, params, train_step

import jaxtune

if __name__ == "__main__":
    jaxtune.tune(train_step, params, batch)
