"""The exact ε(δ) of a finite (binned) pair, used by the one-round explicit-dataset search (issue 11): checked
against a direct bisection on δ(ε), against optimistically rounded PLDs of the same cells, and against the
exact 1-D integral of an explicit dataset (it is a lower bound, and a close one)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.accounting.audit import true_delta
from ampfl.accounting.audit.random_checkin_pld import (
    binned_pair_epsilon,
    explicit_epsilon,
    explicit_pair_masses,
    explicit_pair_pld,
    optimistic_pld,
)


def _delta(pm: np.ndarray, qm: np.ndarray, eps: float) -> float:
    e = math.exp(eps)
    return float(max(np.maximum(pm - e * qm, 0.0).sum(), np.maximum(qm - e * pm, 0.0).sum()))


def _pair(seed: int, n: int, zeros: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    pm, qm = rng.exponential(size=n), rng.exponential(size=n)
    if zeros:  # cells only one side reaches (losses ±∞)
        pm[rng.integers(n)] = 0.0
        qm[rng.integers(n)] = 0.0
    return pm / pm.sum(), qm / qm.sum()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 40), zeros=st.booleans(), log_delta=st.floats(-8.0, -0.5))
def test_epsilon_is_where_the_pairs_delta_falls_to_the_target(seed, n, zeros, log_delta):
    pm, qm = _pair(seed, n, zeros)
    delta = 10.0**log_delta
    with np.errstate(divide="ignore"):
        eps = binned_pair_epsilon(np.log(pm), np.log(qm), delta)
    if math.isinf(eps):  # a +∞ loss carries more than δ in one direction
        assert max(pm[qm == 0].sum(), qm[pm == 0].sum()) > delta
        return
    assert _delta(pm, qm, eps) <= delta * (1 + 1e-9) + 1e-15
    if eps > 0.0:  # and it is the smallest such ε
        assert _delta(pm, qm, eps * (1 - 1e-7) - 1e-12) > delta * (1 - 1e-9)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 40), h=st.sampled_from([1e-1, 1e-2, 1e-3, 1e-4]))
def test_no_rounded_pld_of_the_same_cells_gives_more(seed, n, h):
    """Rounding every loss down to a grid (the optimistic PLD) lowers ε, by less than one grid step."""
    pm, qm = _pair(seed, n, zeros=False)
    lp, lq = np.log(pm), np.log(qm)
    pld = optimistic_pld(lp, lq, h)
    exact = binned_pair_epsilon(lp, lq, 1e-3)
    rounded = max(0.0, float(pld.get_epsilon_for_delta(1e-3)))
    assert rounded <= exact + 1e-12
    assert exact <= rounded + h + 1e-12


def test_edge_cases():
    same = np.log(np.full(4, 0.25))
    assert binned_pair_epsilon(same, same, 1e-5) == 0.0
    p_only = np.log(np.array([0.5, 0.5, 0.0]) + 1e-300)
    q_only = np.log(np.array([0.5, 0.0, 0.5]) + 1e-300)
    assert binned_pair_epsilon(p_only, q_only, 0.4) > 300.0  # 1e-300 cells: losses near ±690, not ∞
    with np.errstate(divide="ignore"):
        assert math.isinf(binned_pair_epsilon(np.log([0.5, 0.5, 0.0]), np.log([0.5, 0.0, 0.5]), 0.4))
        assert binned_pair_epsilon(np.log([0.5, 0.5, 0.0]), np.log([0.5, 0.0, 0.5]), 0.6) == 0.0


@pytest.mark.parametrize(("a", "d", "delta"), [(1.0, 10, 1e-5), (0.5, 4, 1e-6), (-0.6, 6, 1e-6)])
def test_explicit_dataset_epsilon_is_a_close_lower_bound_of_the_exact_integral(a, d, delta):
    """1-D datasets: bisection on the exact integral (``true_delta``) gives the dataset's ε; the binned pair's
    exact ε is at most that and within 0.5 % of it; the PLD rounded to a 1e-4 loss grid is 4–7 % lower."""
    kw = {"participation": 0.1, "sampling_rate": 0.01, "local_dataset_size": d, "noise_multiplier": 3.0}

    def exact_delta(eps: float) -> float:
        return max(true_delta(a=a, epsilon=eps, direction=x, **kw) for x in ("add", "remove"))

    lo, hi = 0.0, 0.1
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if exact_delta(mid) > delta else (lo, mid)
    binned = binned_pair_epsilon(*explicit_pair_masses(a=a, **kw), delta)
    assert binned <= hi * (1 + 1e-9)
    assert binned >= 0.995 * lo
    rounded = explicit_pair_pld(a=a, **kw, value_discretization_interval=1e-4).get_epsilon_for_delta(delta)
    assert rounded < binned
    found = explicit_epsilon(**kw, delta=delta, a_values=(a,), angles=(), refine=0)  # also θ = 0: a = 1
    assert found.epsilon >= binned
