"""ampfl's accountants inside Opacus: the real PrivacyEngine reports the ε that ``ampfl account`` reports for
the same events, agrees with Opacus's own accountants on Opacus's mechanism, and calibrates with
``make_private_with_epsilon``."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

pytest.importorskip("opacus")
import torch
from opacus.accountants import PRVAccountant, RDPAccountant, create_accountant

from ampfl.integrations.opacus import (
    AmpflPLDAccountant,
    BalancedIterationBatchSampler,
    CheckInBatchSampler,
    bis_accountant,
    random_checkin_accountant,
    with_check_in,
)
from opacus import PrivacyEngine

DELTA = 1e-5


def _data(n: int = 64) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 5, generator=g)
    return torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long())


def _train(engine: PrivacyEngine, loader: Any, noise_multiplier: float = 1.0, **kwargs: Any) -> int:
    """A few epochs of DP-SGD through Opacus; the number of optimizer steps."""
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=noise_multiplier,
        max_grad_norm=1.0, **kwargs,
    )  # fmt: skip
    steps = 0
    for _ in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y, reduction="sum").backward()  # type: ignore[no-untyped-call]  # also when empty
            optimizer.step()
            steps += 1
    return steps


def test_opacus_mechanism_matches_opacus_own_accountants() -> None:
    """Poisson-sampled Gaussian: ampfl's PLD is at most Opacus's RDP and within 3 % of its PRV."""
    history = [(1.1, 0.01, 2000)]
    ours = create_accountant("ampfl_pld")
    assert isinstance(ours, AmpflPLDAccountant)
    rdp, prv = RDPAccountant(), PRVAccountant()
    for accountant in (ours, rdp, prv):
        accountant.history = list(history)
    eps = ours.get_epsilon(DELTA)
    assert eps <= rdp.get_epsilon(DELTA)
    assert eps == pytest.approx(prv.get_epsilon(DELTA), rel=0.03)


def test_privacy_engine_reports_ampfl_account(cli_json: Any) -> None:
    engine = PrivacyEngine(accountant="ampfl_pld")
    loader = torch.utils.data.DataLoader(_data(), batch_size=8)
    steps = _train(engine, loader, noise_multiplier=1.3)
    assert len(engine.accountant) == steps == 16 and engine.accountant.history == [(1.3, 0.125, 16)]
    report = cli_json(["account", "poisson", "--noise-multiplier", "1.3", "--rate", "0.125", "--steps", "16",
                       "--delta", str(DELTA)])  # fmt: skip
    assert engine.get_epsilon(DELTA) == pytest.approx(report["epsilon"], rel=1e-9)


def test_make_private_with_epsilon_calibrates_on_ampfl() -> None:
    """The noise Opacus's search picks with ampfl's accountant reaches the target, and is less than what
    Opacus's RDP accountant needs (a tighter analysis, less noise)."""
    loader = torch.utils.data.DataLoader(_data(), batch_size=8)
    picked = {}
    for name in ("ampfl_pld", "rdp"):
        engine = PrivacyEngine(accountant=name)
        model = torch.nn.Linear(5, 2)
        _, optimizer, _ = engine.make_private_with_epsilon(
            module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), data_loader=loader,
            target_epsilon=2.0, target_delta=DELTA, epochs=3, max_grad_norm=1.0,
        )  # fmt: skip
        picked[name] = optimizer.noise_multiplier
    check = AmpflPLDAccountant()
    check.history = [(picked["ampfl_pld"], 0.125, 24)]
    assert 2.0 - 0.02 <= check.get_epsilon(DELTA) <= 2.0
    assert picked["ampfl_pld"] < picked["rdp"]


@pytest.mark.parametrize(("hidden", "key"), [(True, "hidden-participation"), (False, "wcs")])
def test_random_checkin_reports_ampfl_account(cli_json: Any, hidden: bool, key: str) -> None:
    cls = random_checkin_accountant(0.5, local_dataset_size=63, participation_hidden=hidden)
    assert create_accountant(cls.mechanism()).participation == 0.5
    engine = PrivacyEngine(accountant=cls.mechanism())
    data = _data()
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    steps = _train(engine, loader, noise_multiplier=1.0)
    assert len(engine.accountant) == steps
    flags = ["--p", "0.5", "--q", "0.125", "--d", "63", "--noise-multiplier", "1.0"]
    report = cli_json(
        ["account", "random-checkin", *flags, "--iterations", str(steps), "--delta", str(DELTA)]
    )
    expected = report["analyses"][key]["epsilon"] if key in report["analyses"] else report["epsilon"]
    assert engine.get_epsilon(DELTA) == pytest.approx(expected, rel=1e-9)
    plain = AmpflPLDAccountant()
    plain.history = list(engine.accountant.history)
    assert engine.get_epsilon(DELTA) < plain.get_epsilon(DELTA)  # the hidden coin amplifies


def test_check_in_sampler_skips_steps_on_a_secret_coin() -> None:
    """A skipped step is an empty batch; Opacus still steps (noise only) and the accountant counts it."""
    sampler = CheckInBatchSampler([[1, 2]] * 4000, 0.3, np.random.default_rng(1))
    empty = sum(1 for batch in sampler if not batch)
    assert abs(empty / 4000 - 0.7) < 0.03 and len(sampler) == 4000
    engine = PrivacyEngine(accountant=random_checkin_accountant(0.3).mechanism())
    model = torch.nn.Linear(5, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=optimizer, data_loader=torch.utils.data.DataLoader(_data(), batch_size=8),
        noise_multiplier=1.0, max_grad_norm=1.0,
    )  # fmt: skip
    loader = with_check_in(loader, 0.3, np.random.default_rng(2))
    before = [p.detach().clone() for p in model.parameters()]
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y, reduction="sum").backward()  # type: ignore[no-untyped-call]  # an empty batch too
        optimizer.step()
    assert len(engine.accountant) == 8
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_bis_through_opacus_reports_ampfl_account(cli_json: Any) -> None:
    data = _data(60)
    sampler = BalancedIterationBatchSampler(
        len(data), iterations=6, participations=2, generator=np.random.default_rng(0)
    )
    seen = Counter(i for batch in sampler for i in batch)
    assert set(seen.values()) == {2} and len(seen) == 60  # every record in exactly k of the T batches
    cls = bis_accountant(6, 2)
    engine = PrivacyEngine(accountant=cls.mechanism())
    loader = torch.utils.data.DataLoader(data, batch_sampler=sampler)
    steps = _train(engine, loader, noise_multiplier=1.5, poisson_sampling=False)
    assert steps == 12 and engine.accountant.history == [(1.5, 1 / 6, 12)]
    report = cli_json(["account", "bis", "--noise-multiplier", "1.5", "--iterations", "6", "--k", "2",
                       "--epochs", "2", "--delta", str(DELTA)])  # fmt: skip
    assert engine.get_epsilon(DELTA) == pytest.approx(report["epsilon"], rel=1e-9)


def test_bis_epochs_are_charged_when_they_start() -> None:
    accountant = bis_accountant(10, 1)()
    accountant.history = [(1.0, 0.1, 7)]
    one = accountant.get_epsilon(DELTA)
    accountant.history = [(1.0, 0.1, 10)]
    assert accountant.get_epsilon(DELTA) == one  # a partial epoch costs a full one
    accountant.history = [(1.0, 0.1, 7), (2.0, 0.1, 3)]
    assert accountant.events() == [(accountant.events_of(1.0, 0.1), 1)]  # the epoch at its smallest noise
    accountant.history = [(2.0, 0.1, 25), (1.0, 0.1, 1)]
    assert [(e.noise_multiplier, c) for e, c in accountant.events()] == [(2.0, 2), (1.0, 1)]
    with pytest.raises(ValueError, match="sample_rate must be 1/iterations"):
        accountant.step(noise_multiplier=1.0, sample_rate=0.3)


def test_state_dict_round_trip_and_refusals() -> None:
    accountant = AmpflPLDAccountant()
    for _ in range(3):
        accountant.step(noise_multiplier=1.0, sample_rate=0.1)
    state = accountant.state_dict()
    fresh = AmpflPLDAccountant()
    fresh.load_state_dict(state)
    assert fresh.get_epsilon(DELTA) == accountant.get_epsilon(DELTA) and len(fresh) == 3
    with pytest.raises(ValueError, match="cannot be loaded"):
        random_checkin_accountant(0.5)().load_state_dict(state)
    with pytest.raises(ValueError, match="sample_rate must be in"):
        accountant.step(noise_multiplier=1.0, sample_rate=1.5)
    with pytest.raises(ValueError, match="participation must be in"):
        random_checkin_accountant(0.0)
    assert AmpflPLDAccountant().get_epsilon(DELTA) == 0.0
