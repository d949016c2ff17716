"""Write a user dataset as ampfl reads it: ``hospitals.npz`` with a natural (cross-silo) client partition.

scikit-learn's 8×8 digits as 1×8×8 images, split 80/20; every training example belongs to one of 20 "sites"
(``client_train``), each site holding mostly two digits, as a cross-silo federation would.

    python examples/custom_model/make_data.py OUT.npz
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def make(out: Path, *, sites: int = 20, seed: int = 0) -> Path:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    cut = int(0.8 * len(y))
    train, test = order[:cut], order[cut:]
    # site s prefers digits s % 10 and (s + 1) % 10: a label-skewed natural partition
    prefers = np.stack([np.arange(sites) % 10, (np.arange(sites) + 1) % 10], axis=1)
    client = np.empty(len(train), dtype=np.int64)
    for i, label in enumerate(y[train]):
        owners = np.flatnonzero((prefers == label).any(axis=1))
        client[i] = rng.choice(owners) if owners.size and rng.random() < 0.9 else rng.integers(sites)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, x_train=x[train], y_train=y[train], x_test=x[test], y_test=y[test], client_train=client)
    return out


if __name__ == "__main__":
    print(make(Path(sys.argv[1] if len(sys.argv) > 1 else "hospitals.npz")))
