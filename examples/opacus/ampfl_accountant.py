"""Opacus with ampfl's accountants: the same PrivacyEngine loop, ampfl's amplified ε.

    python examples/opacus/ampfl_accountant.py [EPOCHS]

Three runs of DP-SGD on scikit-learn's digits (logistic regression, clip 1, batch 64):
1. Poisson sampling (Opacus's own loader) accounted by ampfl's PLD accountant, next to Opacus's PRV and RDP;
2. ``make_private_with_epsilon`` calibrated by ampfl's accountant (less noise than with RDP for the same ε);
3. shuffled batches, each record in exactly one batch per epoch, accounted as Balanced Iteration
   Subsampling (002 Thm 3.8), which Opacus has no accountant for.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import torch
from opacus.accountants import PRVAccountant, RDPAccountant
from sklearn.datasets import load_digits

import ampfl.integrations.opacus as ampfl_opacus
from opacus import PrivacyEngine

DELTA = 1e-5


def _data() -> torch.utils.data.TensorDataset:
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    return torch.utils.data.TensorDataset(x, torch.tensor(digits.target))


def _fit(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: object, epochs: int) -> float:
    for _ in range(epochs):
        for x, y in loader:  # type: ignore[attr-defined]
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    x, y = loader.dataset.tensors  # type: ignore[attr-defined]
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def main(epochs: int = 3) -> dict[str, float]:
    warnings.filterwarnings("ignore", category=UserWarning)  # secure-RNG and backward-hook notices
    torch.manual_seed(0)
    data = _data()
    out: dict[str, float] = {}

    # 1. Poisson sampling, ampfl's PLD accountant
    engine = PrivacyEngine(accountant=ampfl_opacus.AmpflPLDAccountant.mechanism())
    model = torch.nn.Linear(64, 10)
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=2.0),
        data_loader=torch.utils.data.DataLoader(data, batch_size=64), noise_multiplier=1.0, max_grad_norm=1.0,
    )  # fmt: skip
    accuracy = _fit(model, optimizer, loader, epochs)
    history = engine.accountant.history
    prv, rdp = PRVAccountant(), RDPAccountant()
    prv.history, rdp.history = list(history), list(history)
    out["poisson_epsilon"] = engine.get_epsilon(DELTA)
    print(
        f"poisson  z=1.00  accuracy {accuracy:.3f}  epsilon ampfl {out['poisson_epsilon']:.3f}  "
        f"opacus prv {prv.get_epsilon(DELTA):.3f}  rdp {rdp.get_epsilon(DELTA):.3f}  (delta {DELTA}, record)"
    )

    # 2. calibrated to a target epsilon by ampfl's accountant
    for name in (ampfl_opacus.AmpflPLDAccountant.mechanism(), "rdp"):
        engine = PrivacyEngine(accountant=name)
        model = torch.nn.Linear(64, 10)
        model, optimizer, loader = engine.make_private_with_epsilon(
            module=model, optimizer=torch.optim.SGD(model.parameters(), lr=2.0),
            data_loader=torch.utils.data.DataLoader(data, batch_size=64), target_epsilon=2.0,
            target_delta=DELTA, epochs=epochs, max_grad_norm=1.0,
        )  # fmt: skip
        accuracy = _fit(model, optimizer, loader, epochs)
        out[f"calibrated_{name}"] = optimizer.noise_multiplier
        print(
            f"target epsilon 2 ({name}): z={optimizer.noise_multiplier:.3f}  accuracy {accuracy:.3f}  "
            f"epsilon {engine.get_epsilon(DELTA):.3f}"
        )

    # 3. shuffled batches: Balanced Iteration Subsampling with one participation per epoch
    batches = -(-len(data) // 64)
    sampler = ampfl_opacus.BalancedIterationBatchSampler(len(data), iterations=batches, participations=1)
    engine = PrivacyEngine(accountant=ampfl_opacus.bis_accountant(batches, 1).mechanism())
    model = torch.nn.Linear(64, 10)
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=2.0),
        data_loader=torch.utils.data.DataLoader(data, batch_sampler=sampler), noise_multiplier=1.0,
        max_grad_norm=1.0, poisson_sampling=False,
    )  # fmt: skip
    accuracy = _fit(model, optimizer, loader, epochs)
    out["bis_epsilon"] = engine.get_epsilon(DELTA)
    print(f"shuffled z=1.00  accuracy {accuracy:.3f}  epsilon ampfl BIS {out['bis_epsilon']:.3f}")
    return out


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
