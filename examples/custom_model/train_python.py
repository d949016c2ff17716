"""The same training through the Python API: your nn.Module factory and your arrays, no files needed.

    python examples/custom_model/train_python.py [ROUNDS] [OUT_DIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from torch import nn

from ampfl.fl.config import parse_config
from ampfl.fl.run import run_experiment


def my_net(*, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Any functional torch module: here a small MLP on the flattened 8×8 image."""
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(input_shape)), 32), nn.ReLU(),
                         nn.Linear(32, num_classes))  # fmt: skip


def my_arrays(sites: int = 10, seed: int = 0) -> dict[str, np.ndarray]:
    """Digits as [n, 1, 8, 8] images, 80/20 split, each training example at one of ``sites`` sites."""
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(x))
    train, test = order[: int(0.8 * len(x))], order[int(0.8 * len(x)) :]
    return {
        "x_train": x[train], "y_train": digits.target[train], "x_test": x[test], "y_test": digits.target[test],
        "client_train": rng.integers(sites, size=len(train)),
    }  # fmt: skip


def main(rounds: int = 20, out: Path | None = None) -> dict[str, object]:
    config = parse_config(
        {
            "seed": 0,
            "rounds": rounds,
            "eval_every": max(1, rounds // 4),
            "algorithm": {
                "name": "dp_fedavg",
                "client_sampling": "poisson",
                "sampling_rate": 0.5,
                "expected_clients": 5,  # public: q·N, never counted from the data
                "learning_rate": 0.1,
                "clip": 1.0,
                "noise_multiplier": 0.5,
            },
            "privacy": {"delta": 1e-5},
        }
    )
    folder = out if out is not None else Path(tempfile.mkdtemp()) / "run"
    summary = run_experiment(config, folder, model=my_net, dataset=my_arrays(), progress=False, plots=False)
    print(f"accuracy {summary['final_accuracy']:.3f}  epsilon {summary['epsilon']:.2f} "
          f"(delta {summary['delta']}, unit: {summary['privacy_unit']})")  # fmt: skip
    return summary


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20, Path(sys.argv[2]) if len(sys.argv) > 2 else None)
