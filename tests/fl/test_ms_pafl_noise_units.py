"""MS-PAFL's ``noise_multiplier`` is σ/C like every algorithm's (issue 28, item 5), and nothing else moved.

Before issue 28, MS-PAFL's ``[algorithm] noise_multiplier`` z_old was σ/(2C) (σ = 2C·z_old) and each round
composed ``MSPAFLRoundEvent(noise_multiplier=z_old)``. Now z = σ/C (σ = C·z) and ``event_at(z)`` composes the
event at z/2, its unit being the upload's replace-one sensitivity 2C (Eq. C.3). Soundness: for the same σ the
accounted event, hence ε, must be the one composed before; and the noise actually added must be the σ that
the event accounts.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from ampfl.accounting.accountants import make_accountant
from ampfl.accounting.events import MSPAFLRoundEvent
from ampfl.fl.config import PrivacyConfig, parse_config
from ampfl.fl.privacy.run_accountant import calibrate_noise
from ampfl.fl.run.experiment import build_algorithm, build_task, run_experiment

CLIP, P, ROUNDS, DELTA = 2.0, 0.3, 3, 1e-5


def _config(**algorithm: Any) -> Any:
    return parse_config(
        {
            "seed": 3,
            "rounds": ROUNDS,
            "eval_every": ROUNDS,
            "checkpoint_every": 0,
            "dataset": {"name": "synthetic"},
            "partition": {"scheme": "iid", "num_clients": 12},
            "algorithm": {"name": "ms_pafl", "participation": P, "clip": CLIP, **algorithm},
            "privacy": {"accountant": "rdp", "delta": DELTA, "reproducible": True},
        }
    )


def _lemma1_sigma(eps_local: float, delta_local: float, clip: float) -> float:
    """Lemma 1 (Eq. 6) with s = 2C, written out here: σ = 2C √(2 ln(1.25/δ_ℓ)) / ε_ℓ."""
    return 2.0 * clip * math.sqrt(2.0 * math.log(1.25 / delta_local)) / eps_local


def _old_epsilon(z_old: float, rounds: int = ROUNDS) -> float:
    """ε the pre-issue-28 run composed: ``rounds`` × MSPAFLRoundEvent(p, σ/(2C)), fresh RDP accountant."""
    acc = make_accountant("rdp")
    acc.compose(MSPAFLRoundEvent(participation=P, noise_multiplier=z_old, private_state="persistent"), rounds)
    return float(acc.get_epsilon(DELTA))


def test_eps_local_config_keeps_sigma_and_epsilon(tmp_path: Path) -> None:
    # Prepare: the same (eps_local, delta_local) config as before issue 28.
    sigma = _lemma1_sigma(0.7, 1e-3, CLIP)
    config = _config(eps_local=0.7, delta_local=1e-3)
    # Execute
    algorithm: Any = build_algorithm(config, build_task(config))
    summary = run_experiment(config, tmp_path / "run", progress=False, plots=False)
    # Assert: the same σ; z is σ/C; the event is still σ/(2C); the run's ε is the old composition's.
    assert algorithm.noise_std == pytest.approx(sigma, rel=1e-12)
    assert algorithm.noise_multiplier == pytest.approx(sigma / CLIP, rel=1e-12)
    assert algorithm.round_events(0)[0][0].noise_multiplier == pytest.approx(sigma / (2 * CLIP), rel=1e-12)
    assert summary["noise"]["noise_multiplier"] == pytest.approx(sigma / CLIP, rel=1e-12)
    assert summary["noise"]["noise_std"] == pytest.approx(sigma, rel=1e-12)
    assert summary["epsilon"] == pytest.approx(_old_epsilon(sigma / (2 * CLIP)), rel=1e-12)


def test_doubled_noise_multiplier_reproduces_the_old_run(tmp_path: Path) -> None:
    # Prepare: an old config z_old = 1.5 (σ = 2C·1.5) and its migration z = 2·z_old; and Lemma 1's z for
    # (1, 1e-4), so that the explicit run must equal the eps_local run bit for bit.
    z_old = 1.5
    lemma = _lemma1_sigma(1.0, 1e-4, 1.0)  # σ/C, independent of C
    # Execute
    migrated = run_experiment(
        _config(noise_multiplier=2 * z_old), tmp_path / "a", progress=False, plots=False
    )
    kept = run_experiment(_config(noise_multiplier=z_old), tmp_path / "b", progress=False, plots=False)
    explicit = run_experiment(_config(noise_multiplier=lemma), tmp_path / "c", progress=False, plots=False)
    from_eps = run_experiment(_config(eps_local=1.0), tmp_path / "d", progress=False, plots=False)
    # Assert: the migrated config has the old σ and ε; the unmigrated one now has half the σ, more ε.
    assert migrated["noise"]["noise_std"] == pytest.approx(2 * CLIP * z_old, rel=1e-12)
    assert migrated["epsilon"] == pytest.approx(_old_epsilon(z_old), rel=1e-12)
    assert kept["noise"]["noise_std"] == pytest.approx(CLIP * z_old, rel=1e-12)
    assert kept["epsilon"] == pytest.approx(_old_epsilon(z_old / 2), rel=1e-12)
    assert kept["epsilon"] > migrated["epsilon"]
    assert explicit["epsilon"] == from_eps["epsilon"] and explicit["noise"] == from_eps["noise"]
    assert explicit["final_accuracy"] == from_eps["final_accuracy"]  # the same noise draws


def test_calibrated_noise_multiplier_is_what_is_added_and_accounted() -> None:
    # Prepare: calibrate z to ε = 3 at δ with the run's accountant and the algorithm's own event.
    config = _config(noise_multiplier=1.0)
    task = build_task(config)
    probe: Any = build_algorithm(config, task)
    privacy = PrivacyConfig.model_validate({"accountant": "rdp", "delta": DELTA, "reproducible": True})
    rounds, target = 20, 3.0
    # Execute
    z = calibrate_noise(probe.event_at, target_epsilon=target, rounds=rounds, privacy=privacy)
    direct = calibrate_noise(
        lambda zz: MSPAFLRoundEvent(participation=P, noise_multiplier=zz, private_state="persistent"),
        target_epsilon=target,
        rounds=rounds,
        privacy=privacy,
    )
    algorithm: Any = build_algorithm(_config(noise_multiplier=z), task)
    zeros = torch.zeros(4, algorithm.partition.size("public"))
    noisy, _, _ = algorithm.privatize_public(zeros, torch.Generator().manual_seed(7))
    draws = torch.randn(zeros.shape, generator=torch.Generator().manual_seed(7))
    # Assert: z is σ/C (twice the event's σ/(2C) calibrated directly, to the calibration's tolerance); the
    # noise added is clip × z; the event composed is noise_std / (2·clip) and meets the target.
    assert z == pytest.approx(2 * direct, rel=0.011)
    assert algorithm.noise_multiplier == z and algorithm.noise_std == pytest.approx(CLIP * z, rel=1e-12)
    assert torch.equal(noisy, algorithm.noise_std * draws)
    event = algorithm.round_events(0)[0][0]
    assert event.noise_multiplier == pytest.approx(algorithm.noise_std / (2 * CLIP), rel=1e-12)
    acc = make_accountant("rdp")
    acc.compose(event, rounds)
    assert acc.get_epsilon(DELTA) <= target
