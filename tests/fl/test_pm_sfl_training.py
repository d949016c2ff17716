"""PM-SFL training (paper 003): mask aggregation, personal selection, attack scores, the split algorithms."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from ampfl.accounting.events import BernoulliMaskEvent
from ampfl.fl.config import parse_config
from ampfl.fl.run.experiment import build_algorithm, build_task
from ampfl.fl.split.attack import psnr, reconstruct, ssim
from ampfl.fl.split.masks import aggregate_masks, layer_indicator, select_personalized


def test_aggregation_matches_eq7_by_hand():
    uploads = torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 1.0]])
    personal = torch.tensor(
        [[False, False, True, True], [False, True, False, True], [False, False, False, True]]
    )
    previous = torch.tensor([0.3, 0.3, 0.3, 0.3])
    theta = aggregate_masks(uploads, personal, previous)
    # coordinate 0: all three (1+0+1)/3; 1: clients 0, 2 -> (0+1)/2; 2: clients 1, 2 -> (1+0)/2; 3: nobody
    assert torch.allclose(theta, torch.tensor([2 / 3, 0.5, 0.5, 0.3]))
    plain = aggregate_masks(uploads, torch.zeros_like(personal), previous)
    assert torch.allclose(plain, uploads.mean(0))  # Eq. 5


def test_knowledge_compensation_matches_eq8_by_hand():
    from ampfl.fl.split.hetero import compensate

    client = torch.tensor([0.8, 0.2, 0.0])
    server = torch.tensor([0.4, 0.6, 0.9])
    holders = torch.tensor([4, 1, 0])  # |K^l| of |K| = 4
    previous = torch.tensor([0.5, 0.5, 0.5])
    on = compensate(client, server, holders, 4, previous, on=True)
    assert torch.allclose(on, torch.tensor([0.8, 0.75 * 0.6 + 0.25 * 0.2, 0.9]))
    off = compensate(client, server, holders, 4, previous, on=False)
    assert torch.allclose(off, torch.tensor([0.8, 0.2, 0.5]))


def test_hetero_uploads_only_held_blocks():
    config = _config("pm_sfl_hetero", rounds=1, c=0.05, client_splits=[1, 3], compensation=False)
    alg = build_algorithm(config, build_task(config))
    sizes = [4 * 9, 8 * 4 * 9, 8 * 8 * 9]
    assert alg.mask_upload_events(0) == [(BernoulliMaskEvent(c=0.05, dim=sum(sizes)), 1)]
    assert alg.round_events(0) == [] and alg.privacy_unit is None  # smashed data uncovered: ε = ∞
    start = alg.theta.clone()
    alg.run_round(0)
    clients = alg.participants(0)
    deepest = bool((alg.splits[torch.from_numpy(clients)] == 3).any())
    # without compensation, block 2 and 3 only change if a participant holds them
    changed = ~torch.isclose(alg.theta, start)
    assert bool(changed[: sizes[0]].any())
    assert bool(changed[sizes[0] :].any()) == deepest


@pytest.mark.parametrize("mode", ["fine", "layer"])
def test_hetero_personalises_only_held_blocks(mode):
    config = _config("pm_sfl_hetero", rounds=2, c=0.05, client_splits=[1, 2], personalization=mode,
                     agreement_rounds=0, personal_step=0.5, personal_ratio=0.5)  # fmt: skip
    alg = build_algorithm(config, build_task(config))
    alg.run_round(0)
    alg.run_round(1)
    held = alg.block_of[None, :] < alg.splits[:, None]
    assert bool(alg.personal.any()) and not bool((alg.personal & ~held).any())
    if mode == "fine":  # at most half of each client's own bits
        assert bool((alg.personal.sum(1) <= (0.5 * held.sum(1)).long()).all())
    assert torch.isfinite(alg.theta).all() and bool(((alg.theta >= 0) & (alg.theta <= 1)).all())


def test_personal_selection_prefers_disagreement():
    before = torch.tensor([[0.6, 0.45, 0.95, 0.1, 0.5]])
    after = torch.tensor([[0.4, 0.55, 0.55, 0.4, 0.5]])  # 0, 1 cross 0.5 (small |Δ|); 2, 3 do not (large |Δ|)
    none = torch.zeros_like(before, dtype=torch.bool)
    chosen = select_personalized(before, after, none, add=2, limit=5)
    assert chosen.tolist() == [[True, True, False, False, False]]
    grown = select_personalized(before, after, chosen, add=2, limit=3)  # limit caps the growth at 3
    assert grown.tolist() == [[True, True, True, False, False]]
    allowed = torch.tensor([[False, True, True, True, True]])  # coordinate 0 may not be chosen
    only = select_personalized(before, after, none, add=2, limit=torch.tensor([4]), allowed=allowed)
    assert only.tolist() == [[False, True, True, False, False]]
    assert layer_indicator([(2, 1, 1, 1), (3, 1, 1, 1)], 1).tolist() == [True, True, False, False, False]


def test_psnr_and_ssim_known_values():
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(2, 1, 12, 12, generator=gen)
    assert torch.allclose(ssim(x, x), torch.ones(2, dtype=torch.float64))
    assert torch.allclose(psnr(x, x * 0 + x + 0.1), torch.full((2,), 20.0, dtype=torch.float64))
    # constant images a, b: variances vanish, SSIM = (2ab + C1)/(a² + b² + C1)
    a, b, c1 = 0.2, 0.7, (0.01) ** 2
    value = ssim(torch.full((1, 1, 11, 11), a), torch.full((1, 1, 11, 11), b))
    assert float(value) == pytest.approx((2 * a * b + c1) / (a * a + b * b + c1), rel=1e-6)
    noisy = (x + 0.3 * torch.randn(x.shape, generator=gen)).clamp(0, 1)
    s = ssim(x, noisy)
    assert bool((s < 0.9).all()) and torch.allclose(s, ssim(noisy, x))


def test_reconstruct_inverts_an_injective_map():
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(3, 1, 6, 6, generator=gen)
    recon = reconstruct(
        lambda z: 2.0 * z - 1.0, 2.0 * x - 1.0, (1, 6, 6), steps=200, learning_rate=0.05, generator=gen
    )
    assert float(psnr(x, recon).min()) > 35.0


def _config(name: str, rounds: int = 2, **algo: object):
    return parse_config(
        {
            "seed": 0,
            "rounds": rounds,
            "dataset": {"name": "digits"},
            "partition": {"scheme": "dirichlet", "num_clients": 6, "alpha": 0.3},
            "model": {"name": "split_cnn", "options": {"channels": [4, 8, 8], "groups": 2, "split_layer": 2}},
            "algorithm": {"name": name, "client_fraction": 0.5, "num_local_steps": 2, "batch_size": 8,
                          "eval_examples": 200, "eval_clients": 3, **algo},
            "privacy": {"accountant": "rdp", "reproducible": True},
        }
    )  # fmt: skip


@pytest.mark.parametrize("name", ["splitfed", "standalone", "pm_sfl", "splitfed_pm", "pm_sfl_hetero"])
def test_algorithms_run_and_resume_identically(name):
    extra = {"agreement_rounds": 1, "c": 0.05} if name == "pm_sfl" else {}
    config = _config(name, **extra)
    task = build_task(config)
    straight = build_algorithm(config, task)
    for r in range(3):
        metrics = straight.run_round(r)
    assert metrics["participants"] == 3.0 and math.isfinite(metrics["train_loss"])
    scores = straight.evaluate()
    assert 0.0 <= scores["accuracy"] <= 1.0 and straight.parameters_finite()
    resumed = build_algorithm(config, task)
    for r in range(2):
        resumed.run_round(r)
    state = resumed.state_dict()
    fresh = build_algorithm(config, task)
    fresh.load_state_dict(state)
    fresh.run_round(2)
    a, b = straight.state_dict(), fresh.state_dict()
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert torch.equal(a[key], b[key]), key
    assert all(torch.equal(a["top"][k], b["top"][k]) for k in a["top"])


def test_pm_sfl_masks_events_and_personalisation():
    config = _config("pm_sfl", rounds=3, agreement_rounds=1, c=0.05, personal_step=0.2, personal_ratio=0.5)
    alg = build_algorithm(config, build_task(config))
    d_b = alg.spec.bottom_dim()
    assert alg.mask_upload_events(0) == [(BernoulliMaskEvent(c=0.05, dim=d_b), 1)]
    assert alg.round_events(0) == [] and alg.privacy_unit is None
    alg.run_round(0)
    # binary uploads of K = 3 clients, nobody personal yet: θ is a multiple of 1/3
    assert torch.allclose(alg.theta * 3, (alg.theta * 3).round(), atol=1e-5)
    assert not bool(alg.personal.any())
    metrics = alg.run_round(1)
    per_client = alg.personal.sum(1)
    assert set(per_client.tolist()) <= {0, math.ceil(0.2 * d_b)} and metrics["personal_fraction"] > 0
    probs = build_algorithm(_config("splitfed_pm"), build_task(_config("splitfed_pm")))
    assert probs.round_events(0) == [] and probs.privacy_unit is None


def test_bad_model_is_rejected():
    config = parse_config(
        {"seed": 0, "rounds": 1, "dataset": {"name": "digits"}, "model": {"name": "cnn"},
         "algorithm": {"name": "splitfed"}}
    )  # fmt: skip
    with pytest.raises(ValueError, match="model must be 'split_cnn'"):
        build_algorithm(config, build_task(config))


@pytest.mark.realdata
def test_reproductions_run_tiny(tmp_path, monkeypatch):
    """pm-sfl-table1 and pm-sfl-attack end to end on a tiny Fashion-MNIST setting (files, result keys)."""
    from ampfl.fl.data import DataUnavailableError, load_dataset
    from ampfl.reproduce import pm_sfl_attack, pm_sfl_training, run_figure

    try:
        load_dataset("fmnist")
    except DataUnavailableError as exc:
        pytest.skip(f"Fashion-MNIST cannot be loaded offline: {exc}")
    tiny = {**pm_sfl_training.QUICK, "num_clients": 4, "client_fraction": 0.5, "rounds": 2, "local_steps": 1,
            "evaluations": 1, "learning_rates": (0.05,), "eval_examples": 100, "eval_clients": 2,
            "channels": [4, 8, 8]}  # fmt: skip
    monkeypatch.setattr(pm_sfl_training, "QUICK", tiny)
    monkeypatch.setattr(pm_sfl_training, "MODEL", {"groups": 2, "split_layer": 2})
    monkeypatch.setattr(pm_sfl_attack, "ATTACK_STEPS", 4)
    monkeypatch.setattr(pm_sfl_attack, "ATTACK_IMAGES", 2)
    monkeypatch.setattr(
        pm_sfl_training, "HETERO_METHODS", dict(list(pm_sfl_training.HETERO_METHODS.items())[:1])
    )
    table = run_figure("pm-sfl-table1", tmp_path / "t", quick=True)
    assert [r["method"] for r in table["results"]] == list(pm_sfl_training.METHODS)
    assert all(0.0 <= r["final_accuracy"] <= 1.0 for r in table["results"])
    eps = {r["method"]: r["epsilon"] for r in table["results"]}
    assert eps["SplitFed"] == math.inf and eps["PM-SFL"] == math.inf  # smashed data are released in the clear
    result = run_figure("pm-sfl-attack", tmp_path / "a", quick=True)
    assert {r["method"] for r in result["results"]} >= {"SplitFed", "PM-SFL"}
    assert all(-1.0 <= r["ssim"] <= 1.0 and r["psnr"] > 0.0 for r in result["results"])
    assert table["paired"] == pm_sfl_training.paired_claims(pm_sfl_training.PAIRED, pm_sfl_training.METHODS)
    hetero = run_figure("pm-sfl-hetero", tmp_path / "h", quick=True)
    assert [r["method"] for r in hetero["results"]] == list(pm_sfl_training.HETERO_METHODS)
    assert hetero["paired"] == []  # one hetero method kept: no claim has both its rows
    assert {r["published_source"] for r in hetero["results"]} == {pm_sfl_training.HETERO_PUBLISHED_SOURCE}
    assert all(Path(f).is_file() for f in table["files"] + result["files"] + hetero["files"])


def test_attack_cli_on_a_run_folder(tmp_path, capsys):
    import json

    from ampfl.cli import main
    from ampfl.fl.run.experiment import run_experiment

    run_experiment(_config("pm_sfl", rounds=1, c=0.05), tmp_path / "run", plots=False, progress=False)
    code = main(["attack", "dlg", str(tmp_path / "run"), "--steps", "3", "--images", "2", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and [r["case"] for r in result["results"]] == ["masked", "oracle"]
    assert all(Path(f).is_file() for f in result["files"])
    assert main(["attack", "dlg", str(tmp_path / "run"), "--client", "6"]) == 2
    assert "--client must be in [0, 5]" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["PAIRED", "HETERO_PAIRED"])
def test_paired_claims_name_existing_rows(name):
    """Every claim compared by seed names two rows of its table, and a table without one of them drops it."""
    from ampfl.reproduce import pm_sfl_training as p

    pairs = getattr(p, name)
    methods = p.METHODS if name == "PAIRED" else p.HETERO_METHODS
    claims = p.paired_claims(pairs, methods)
    assert len(claims) == len(pairs) >= 4
    assert all(c["minuend"] in methods and c["subtrahend"] in methods for c in claims)
    assert all(c["minuend"] != c["subtrahend"] for c in claims)
    first = claims[0]["minuend"]
    assert all(first not in (c["minuend"], c["subtrahend"]) for c in p.paired_claims(pairs, {
        k: v for k, v in methods.items() if k != first}))  # fmt: skip

