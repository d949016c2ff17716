"""GDPFed+ planner (ampfl.accounting.groups.planner): constraint, bounds, symmetry, beating the baselines."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.accounting import groups as G
from ampfl.accounting.calibrate import CALIBRATION_RTOL
from ampfl.accounting.groups import ErrorModel, PlanProblem, objective, plan_groups

DELTA = 1e-5
ROUNDS = 20  # few rounds keep the calibrations cheap


def _check_feasible(plan, rate, min_rate):
    n = plan.sizes.astype(float)
    assert float(plan.q @ n) == pytest.approx(rate * n.sum(), rel=1e-9)
    assert np.all(plan.q >= min_rate * (1 - 1e-12))
    assert np.all(plan.q <= 1.0)


@pytest.mark.parametrize("sparsify", ["none", "auto"])
@pytest.mark.parametrize("merge", ["auto", "equal", "none"])
def test_constraint_bounds_and_beats_uniform(sparsify, merge):
    # Prepare
    model = ErrorModel(dim=2000, signal_norm=1.0)
    # Execute
    plan = plan_groups(
        [1.0, 2.0, 4.0],
        [200, 300, 100],
        participation=0.1,
        rounds=ROUNDS,
        target_delta=DELTA,
        model=model,
        sparsify=sparsify,
        merge=merge,
    )
    # Assert
    _check_feasible(plan, 0.1, 0.01)
    assert plan.objective <= plan.uniform_objective * (1 + 1e-12)
    if merge == "auto":
        assert plan.objective <= plan.baseline.objective * (1 + 1e-12)
    assert np.all((plan.kappa >= model.kappa_min) & (plan.kappa <= 1.0))
    # every reported noise multiplier is certified by the RDP accountant at its own budget (sound analysis)
    assert np.all(plan.epsilon_rdp <= plan.aggregate_epsilon)
    assert np.all(plan.aggregate_epsilon <= plan.epsilons)
    assert plan.system_epsilon == plan.aggregate_epsilon.max()


def test_heterogeneous_budgets_beat_dp_fedavg_strictly():
    plan = plan_groups(
        [1.0, 4.0, 8.0],
        [100, 100, 100],
        participation=0.1,
        rounds=ROUNDS,
        target_delta=DELTA,
        model=ErrorModel(dim=5000),
    )
    assert plan.objective < 0.9 * plan.baseline.objective
    # the looser groups take part more often (paper 001, Sec. IV-C b and Fig. 1)
    assert plan.q[0] <= plan.q[1] <= plan.q[2]


@settings(max_examples=5, deadline=None)
@given(sizes=st.lists(st.integers(min_value=10, max_value=500), min_size=2, max_size=3))
def test_equal_budgets_give_equal_rates(sizes):
    plan = plan_groups(
        [2.0] * len(sizes),
        sizes,
        participation=0.1,
        rounds=ROUNDS,
        target_delta=DELTA,
        model=ErrorModel(dim=1000),
    )
    np.testing.assert_allclose(plan.q, plan.q[0], rtol=0, atol=0)
    np.testing.assert_allclose(plan.q, 0.1, rtol=1e-12)


def test_one_group_reduces_to_dp_fedavg():
    # One group, kappa = 1, q_1 = q: the model is DP-FedAvg's MSE, (1-q)u^2/(qN) + d z^2 C^2/(qN)^2.
    plan = plan_groups(
        [1.5],
        [400],
        participation=0.05,
        rounds=ROUNDS,
        target_delta=DELTA,
        model=ErrorModel(dim=300, clip_norm=2.0),
    )
    reference = G.sound_group_sigma(1.5, sampling_rate=0.05, rounds=ROUNDS, target_delta=DELTA)
    sigma = float(plan.noise_multiplier[0])
    m = 0.05 * 400
    expected = (1 - 0.05) * 4.0 / m + 300 * sigma**2 * 4.0 / m**2
    assert plan.objective == pytest.approx(expected, rel=1e-12)
    assert plan.baseline.objective == pytest.approx(expected, rel=1e-12)
    # the plan's calibration starts from the search's guess: the same smallest z to the calibration's rtol
    assert plan.q[0] == 0.05 and sigma == pytest.approx(reference, rel=CALIBRATION_RTOL)
    assert G.group_epsilon(sigma, sampling_rate=0.05, rounds=ROUNDS, target_delta=DELTA) <= 1.5


def test_paper_analysis_matches_lagrange_closed_form():
    # Noise-only model (update_norm = 0) with z_a = k_a q_a (inferred Thm 1): minimise sum k_a^2 q_a^2
    # subject to sum N_a q_a = M  =>  q_a = M (N_a / k_a^2) / sum_b (N_b^2 / k_b^2)  (Lagrange, by hand).
    eps, n, rate = np.array([1.0, 3.0]), np.array([300, 200]), 0.1
    plan = plan_groups(
        eps,
        n,
        participation=rate,
        rounds=ROUNDS,
        target_delta=DELTA,
        model=ErrorModel(dim=100, update_norm=0.0),
        analysis="paper",
        merge="none",
        min_rate=1e-3,
    )
    k = np.sqrt(7 * ROUNDS * (eps + 2 * math.log(1 / DELTA))) / eps
    m = rate * n.sum()
    expected = m * (n / k**2) / np.sum(n**2 / k**2)
    np.testing.assert_allclose(plan.q, expected, rtol=1e-5)
    assert plan.analysis == "paper"


def test_paper_analysis_warns_when_it_under_noises():
    plan = plan_groups(
        [1.0, 2.0, 4.0],
        [1000, 1000, 1000],
        participation=0.01,
        rounds=100,
        target_delta=DELTA,
        model=ErrorModel(dim=10_000),
        analysis="paper",
        merge="none",
    )
    assert any("under-noises" in w for w in plan.warnings)
    assert plan.epsilon_rdp[0] > plan.epsilons[0]  # the RDP accountant cannot certify the paper's noise


def test_given_kappa_scales_noise_and_blocks_merging_of_different_kappas():
    plan = plan_groups(
        [1.0, 1.0, 3.0],
        [100, 100, 100],
        participation=0.2,
        rounds=ROUNDS,
        target_delta=DELTA,
        model=ErrorModel(dim=1000),
        sparsify="given",
        kappa=[0.3, 0.3, 0.7],
    )
    assert plan.aggregate[0] == plan.aggregate[1] != plan.aggregate[2]
    np.testing.assert_allclose(plan.kappa, [0.3, 0.3, 0.7])
    # expected noise kappa d sigma^2 C^2, shared by size within an aggregate
    np.testing.assert_allclose(plan.expected_noise[2], 0.7 * 1000 * plan.noise_multiplier[2] ** 2, rtol=1e-12)
    np.testing.assert_allclose(
        plan.expected_noise[:2].sum(), 0.3 * 1000 * plan.noise_multiplier[0] ** 2, rtol=1e-12
    )


def test_auto_kappa_is_the_closed_form_minimiser():
    # argmin over kappa of (1-kappa)^2 s + kappa n is 1 - n/(2s), clipped (our design, docs/planner.md)
    model = ErrorModel(dim=50, signal_norm=1.0, kappa_min=0.01)
    prob = PlanProblem(
        sizes=np.array([100]),
        budgets=np.array([1.0]),
        kappa=None,
        sparsify="auto",
        total=100,
        rate=0.5,
        model=model,
    )
    val, kappa, _ = objective(np.array([0.5]), np.array([2.0]), prob)
    grid = np.linspace(0.01, 1.0, 100_001)
    noise, signal = 50 * 4.0 / 50**2, 1.0
    brute = (1 - grid) ** 2 * signal + grid * noise
    assert kappa[0] == pytest.approx(grid[np.argmin(brute)], abs=1e-4)
    assert (
        float(val)
        <= float(objective(np.array([0.5]), np.array([2.0]), dataclasses.replace(prob, sparsify="none"))[0])
        + 1e-12
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"participation": 0.0}, "participation must be in"),
        ({"min_rate": 0.5}, "min_rate must be in"),
        ({"analysis": "exact"}, "analysis must be one of"),
        ({"sparsify": "given"}, "kappa must list one value per group"),
        ({"kappa": [0.5, 0.5]}, "kappa is only allowed"),
        ({"merge": "all"}, "merge must be one of"),
    ],
)
def test_invalid_input_raises_value_error(kwargs, message):
    base = {"participation": 0.1, "rounds": ROUNDS, "target_delta": DELTA, "model": ErrorModel(dim=10)}
    with pytest.raises(ValueError, match=message):
        plan_groups([1.0, 2.0], [10, 10], **{**base, **kwargs})
    with pytest.raises(ValueError, match="same non-zero length"):
        plan_groups([1.0, 2.0], [10], **base)
    with pytest.raises(ValueError, match="2 log"):
        plan_groups([30.0], [10], **{**base, "analysis": "paper"})
    with pytest.raises(ValueError, match="update_norm"):
        ErrorModel(dim=10, update_norm=2.0)


def test_participation_below_one_expected_client_is_refused():
    # 20 clients at q = 0.01 give 0.2 expected participants per round: no update exists to plan for.
    with pytest.raises(ValueError, match=r"participation must be at least 1/\(total clients\) = 0.05"):
        plan_groups(
            [1.0, 2.0],
            [10, 10],
            participation=0.01,
            rounds=10,
            target_delta=1e-5,
            model=ErrorModel(dim=10),
        )


def test_expected_noise_is_the_one_noise_energy():
    # kappa d z^2 C^2, split by size within an aggregate (groups.noise_energy is the one formula)
    from ampfl.accounting.groups import noise_energy

    plan = plan_groups(
        [1.0, 3.0],
        [100, 300],
        participation=0.2,
        rounds=ROUNDS,
        target_delta=DELTA,
        model=ErrorModel(dim=500, clip_norm=0.5),
        merge="none",
        check_pld=False,
    )
    expected = noise_energy(plan.noise_multiplier, dim=500, clip_norm=0.5, kappa=plan.kappa)
    np.testing.assert_allclose(plan.expected_noise, expected, rtol=1e-12)
    assert plan.baseline.expected_noise == pytest.approx(
        float(noise_energy(plan.baseline.noise_multiplier, dim=500, clip_norm=0.5)), rel=1e-12
    )
