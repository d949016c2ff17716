"""Model-split DP-SGD / dropout / BIS on the engine (002 Algs. 1-2, Thm 3.8; issue 14).

Small: sklearn digits, an MLP, one example per client (record-level DP-SGD) or a single client, few rounds.
The spent ε is checked against the accounting CLI (``ampfl account model-split|bis``) for the same schedule.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from ampfl.fl.algorithms import ALGORITHMS
from ampfl.fl.algorithms.dp_sgd_partition import DPSGDPartition, clip_parts
from ampfl.fl.config import PrivacyConfig
from ampfl.fl.data import load_dataset
from ampfl.fl.privacy.calibration import calibrate_algorithm
from ampfl.fl.privacy.run_accountant import RunAccountant
from ampfl.fl.task import Task

DIGITS = load_dataset("digits")
SGD = {"num_local_steps": 1, "batch_size": 1, "learning_rate": 1.0}


def _task(num_clients: int, per_client: int = 1) -> Task:
    return Task(
        DIGITS,
        [np.arange(i * per_client, (i + 1) * per_client, dtype=np.int64) for i in range(num_clients)],
        model="mlp",
        model_options={"hidden": [16]},
    )


def _algo(task: Task, accountant: str = "rdp", **kw: Any) -> DPSGDPartition:
    params = {**SGD, "sampling": "full", **kw}
    # The RDP numbers below need the RDP accountant ("auto": tests/fl/test_privacy_auto.py).
    privacy = PrivacyConfig.model_validate({"accountant": accountant, "reproducible": True})
    if "expected_clients" not in params:  # the declared public m̄ (issue 26), here what the data would give
        n = task.num_clients
        rate = {"poisson": params.get("sampling_rate"), "full": 1.0}.get(params["sampling"])
        if rate is None:
            rate = params["bis_participations"] / params["bis_iterations"]
        params["expected_clients"] = float(rate) * n
    algorithm = DPSGDPartition(DPSGDPartition.Params(**params), task, seed=3, privacy=privacy)
    calibrate_algorithm(algorithm, privacy)  # a target ε: calibrated by the run's accountant
    return algorithm


def _run(algo: DPSGDPartition, rounds: int, accountant: str = "rdp") -> float:
    ledger = RunAccountant(PrivacyConfig.model_validate({"accountant": accountant}), algo)
    for r in range(rounds):
        ledger.compose(algo.round_events(r))
        algo.run_round(r)
    return ledger.epsilon()


def test_registered() -> None:
    assert ALGORITHMS["dp_sgd_split"] is DPSGDPartition


@pytest.mark.parametrize("granularity", ["coordinate", "unit"])
def test_each_step_trains_exactly_one_block_per_unit(granularity: str) -> None:
    d = 3
    # one client with a few examples, several local steps: its update lives in one block (+ the shared part)
    algo = _algo(
        _task(1, per_client=20),
        num_submodels=d,
        granularity=granularity,
        shared=["net.2"],
        noise_multiplier=0.0,
        num_local_steps=3,
        batch_size=5,
        learning_rate=0.5,
        clip=1e6,
        nonsplit_clip=1e6,
    )
    blocks = algo.block_of_group[algo.group_of.clamp(min=0)]
    split = algo.split_coords
    assert 0 < int(split.sum()) < split.numel()
    seen = set()
    for r in range(8):
        before = algo.global_params.clone()
        algo.run_round(r)
        changed = algo.global_params != before
        touched = set(blocks[changed & split].tolist())
        assert len(touched) == 1  # exactly one block of the split part moved
        seen |= touched
        assert bool(changed[~split].any())  # the shared part always trains
    assert seen == set(range(d))  # the block is drawn at random each round
    # the masks of a cohort: one block per unit, everything shared kept
    masks = algo.masks(0, np.arange(50))
    assert bool(masks[:, ~split].all())
    for row in masks:
        assert len(set(blocks[row & split].tolist())) == 1
        assert int((row & split).sum()) in {int((blocks[split] == b).sum()) for b in range(d)}


def test_blocks_are_balanced_and_disjoint() -> None:
    algo = _algo(_task(4), num_submodels=4, granularity="coordinate", noise_multiplier=1.0)
    sizes = np.bincount(algo.block_of_group.numpy(), minlength=4)
    assert sizes.max() - sizes.min() <= 1 and sizes.sum() == algo.model.dim


def test_dropout_keeps_each_group_with_probability_half() -> None:
    algo = _algo(_task(4), partition="dropout", noise_multiplier=1.0)
    masks = algo.masks(0, np.arange(400))
    keep = masks[:, algo.split_coords].double().mean()
    assert abs(float(keep) - 0.5) < 0.02
    # a group's coordinates share one coin (unit granularity: a weight row and its bias)
    g = algo.group_of
    first = int(g[g >= 0].min())
    cols = masks[:, g == first]
    assert bool((cols == cols[:, :1]).all())


def test_separate_clipping_norms() -> None:
    gen = torch.Generator().manual_seed(0)
    delta = torch.randn((6, 10), generator=gen) * 5.0
    delta[0] *= 1e-3  # one small update: unchanged by clipping
    split = torch.tensor([True] * 7 + [False] * 3)
    total, _ = clip_parts(delta, split, 2.0, 0.5)
    s, ns = split.double(), (~split).double()
    expect = torch.zeros(10, dtype=delta.dtype)
    for row in delta:
        a, b = row * s.float(), row * ns.float()
        expect += a * min(1.0, 2.0 / float(a.norm())) + b * min(1.0, 0.5 / float(b.norm()))
    torch.testing.assert_close(total, expect)
    # through a round: a single unit, no noise, η_s = 1: the change is the clipped update itself
    algo = _algo(_task(1), num_submodels=2, shared=["net.2"], noise_multiplier=0.0, learning_rate=50.0)
    algo.p.clip, algo.p.nonsplit_clip = 0.3, 0.05
    before = algo.global_params.clone()
    algo.run_round(0)
    change = algo.global_params - before
    split = algo.split_coords
    assert float(change[split].norm()) == pytest.approx(0.3, rel=1e-4)
    assert float(change[~split].norm()) == pytest.approx(0.05, rel=1e-4)


def test_bis_schedule_each_unit_exactly_k_times() -> None:
    t, k, n = 6, 2, 40
    algo = _algo(_task(n), sampling="bis", bis_iterations=t, bis_participations=k, noise_multiplier=1.0)
    schedules = []
    for epoch in range(2):
        counts = np.zeros(n, dtype=int)
        rounds = []
        for r in range(epoch * t, (epoch + 1) * t):
            ids = algo.participants_of(r)
            counts[ids] += 1
            rounds.append(tuple(ids))
        assert (counts == k).all()
        schedules.append(rounds)
    assert schedules[0] != schedules[1]  # a fresh random schedule per epoch
    assert algo.expected == pytest.approx(n * k / t)
    # events: one BIS event per epoch, in its first round
    assert [len(algo.round_events(r)) for r in range(2 * t)] == [1] + [0] * (t - 1) + [1] + [0] * (t - 1)


def test_spent_epsilon_matches_account_model_split(cli_json: Any) -> None:
    z, d, rounds, q = 0.9, 3, 12, 0.2
    algo = _algo(_task(30), num_submodels=d, noise_multiplier=z, sampling="poisson", sampling_rate=q)
    assert algo.credit == "split"  # no num_rounds: the split event is reported
    eps = _run(algo, rounds)
    argv = f"account model-split --submodels {d} --noise-multiplier {z} --steps {rounds} --rate {q}"
    out = cli_json([*argv.split(), "--delta", "1e-5", "--accountant", "rdp"])  # the run's accountant
    zhu_wang = (
        out["epsilon"]
        if out["analysis"] == "subsampled-split-zhu-wang"
        else out["analyses"]["subsampled-split-zhu-wang"]["epsilon"]
    )
    assert eps == pytest.approx(zhu_wang, rel=1e-9)
    # auto (num_rounds given): the run reports the better sound analysis, as the CLI's recommendation
    auto = _algo(
        _task(30), num_submodels=d, noise_multiplier=z, sampling="poisson", sampling_rate=q, num_rounds=rounds
    )
    assert _run(auto, rounds) == pytest.approx(out["epsilon"], rel=1e-9)
    # full participation: Thm 3.4 per step
    full = _algo(_task(30), num_submodels=d, noise_multiplier=z)
    out = cli_json(
        f"account model-split --submodels {d} --noise-multiplier {z} --steps 5 --delta 1e-5 "
        "--accountant rdp".split()
    )
    assert _run(full, 5) == pytest.approx(out["epsilon"], rel=1e-9)


def test_spent_epsilon_matches_account_dropout(cli_json: Any) -> None:
    z = 1.5
    argv = f"account dropout --noise-multiplier {z} --nonsplit-noise-multiplier {z} --steps 4 --delta 1e-5"
    for accountant in ("rdp", "pld"):  # the CLI's default for dropout is the exact PLD (issue 11)
        algo = _algo(_task(10), partition="dropout", shared=["net.2"], noise_multiplier=z)
        eps = _run(algo, 4, accountant)
        out = cli_json([*argv.split(), "--accountant", accountant])
        assert eps == pytest.approx(out["epsilon"], rel=1e-9)


def test_spent_epsilon_matches_account_bis(cli_json: Any) -> None:
    t, k, z = 5, 1, 0.8
    algo = _algo(_task(20), sampling="bis", bis_iterations=t, bis_participations=k, noise_multiplier=z)
    eps = _run(algo, 2 * t)
    argv = f"account bis --iterations {t} --k {k} --epochs 2 --noise-multiplier {z} --delta 1e-5"
    argv += " --accountant rdp"  # the run's accountant (the CLI's default for k = 1 is the PLD, issue 11)
    assert eps == pytest.approx(cli_json(argv.split())["epsilon"], rel=1e-9)


def test_split_needs_less_noise_than_standard_at_equal_epsilon() -> None:
    task = _task(50)
    common = {"target_epsilon": 2.0, "num_rounds": 100, "sampling": "poisson", "sampling_rate": 0.02}
    standard = _algo(task, **common)
    split = _algo(task, num_submodels=8, **common)
    assert split.credit == "split" and standard.credit == "none"
    assert split.noise_multiplier < standard.noise_multiplier
    assert _run(split, 100) <= 2.0 and _run(standard, 100) <= 2.0
    # BIS at equal ε needs less noise than its Poisson twin (q = k/T)
    bis = _algo(
        task, target_epsilon=2.0, num_rounds=100, sampling="bis", bis_iterations=50, bis_participations=1
    )
    assert bis.noise_multiplier < standard.noise_multiplier


def test_record_unit_and_baseline_is_dp_sgd() -> None:
    # d = 1, one example per client, Q = b = 1, local rate 1: w <- w + η_s (ξ - Σ clip(g_i)) / N
    task = _task(5)
    algo = _algo(task, noise_multiplier=0.5, server_learning_rate=0.1, clip=0.7)
    assert algo.privacy_unit == "record"
    start = algo.global_params.clone()
    algo.run_round(0)
    grads = []
    for i in range(5):
        g = torch.func.grad(
            lambda w, i=i: algo.model.example_losses(
                w, algo.x_train[i : i + 1], algo.y_train[i : i + 1]
            ).sum()
        )(start)
        grads.append(g * min(1.0, 0.7 / float(g.norm())))
    noise = torch.randn(start.shape, generator=algo.torch_generator(0, 3)) * 0.5 * 0.7
    expect = start + 0.1 * (noise - torch.stack(grads).sum(0)) / 5
    torch.testing.assert_close(algo.global_params, expect, rtol=1e-4, atol=1e-5)
    assert _algo(_task(3, per_client=2), noise_multiplier=1.0).privacy_unit == "client"


def test_bad_input_names_the_parameter() -> None:
    with pytest.raises(ValueError, match="shared"):
        _algo(_task(3), shared=["nope"], noise_multiplier=1.0)
    with pytest.raises(ValueError, match="sampling_rate"):
        DPSGDPartition.Params(noise_multiplier=1.0, sampling="poisson")
    with pytest.raises(ValueError, match="bis_iterations"):
        DPSGDPartition.Params(noise_multiplier=1.0, sampling="bis", bis_iterations=3, bis_participations=4)
    assert math.isinf(_run(_algo(_task(3), noise_multiplier=0.0), 1))
    everything = _algo(_task(3), shared=["net"], noise_multiplier=1.0)  # no split part: plain DP-SGD
    assert everything.credit == "none" and everything.run_round(0)["participants"] == 3.0
    assert everything.round_events(0)[0][0].noise_multiplier == 1.0


def test_cnn_gn_model_vmaps_over_stacked_parameters() -> None:
    from ampfl.fl.engine.vectorised import FunctionalModel
    from ampfl.fl.models import build_model

    module = build_model("cnn_gn", input_shape=(1, 28, 28), num_classes=10)
    model = FunctionalModel(module, (1, 28, 28))
    x = torch.randn(2, 3, 1, 28, 28)
    y = torch.randint(0, 10, (2, 3))
    flat = torch.stack([model.initial(), model.initial() * 0.5])
    batched = torch.func.vmap(model.example_losses)(flat, x, y)
    for i in range(2):
        torch.testing.assert_close(batched[i], model.example_losses(flat[i], x[i], y[i]))
    with pytest.raises(ValueError, match="input_shape"):
        build_model("cnn_gn", input_shape=(1, 8, 8), num_classes=10)
    with pytest.raises(ValueError, match="width"):
        build_model("cnn_gn", input_shape=(1, 28, 28), num_classes=10, width=6)


def test_resume_is_bit_identical_across_bis_epochs() -> None:
    kw = {"sampling": "bis", "bis_iterations": 3, "bis_participations": 1, "num_submodels": 2}
    full = _algo(_task(12), noise_multiplier=0.7, **kw)
    for r in range(7):
        full.run_round(r)
        if r == 3:
            state = full.state_dict()
    resumed = _algo(_task(12), noise_multiplier=0.7, **kw)
    resumed.load_state_dict(state)
    for r in range(4, 7):
        resumed.run_round(r)
    assert torch.equal(resumed.global_params, full.global_params)
