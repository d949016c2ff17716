"""The PLD grid primitives (ampfl.accounting.pld_grid, issue 29 item 2) and the one ε-from-δ search.

Rounding the privacy loss up must give δ(ε) and ε(δ) at least the exact ones, rounding down at most: checked
on the Gaussian, Laplace and Poisson-subsampled Gaussian mechanisms against their closed forms (computed here
independently: Balle–Wang's δ, the Laplace δ = 1 − e^{(ε − 1/b)/2}, the subsampled Gaussian's hockey-stick
integral at the loss threshold) and against dp-accounting's pessimistic and optimistic PLDs of the same
mechanisms. The mixture builder is checked against a direct weighted sum and dp-accounting's
``compute_mixture``; ``epsilon_from_delta_curve`` against closed-form inverses.
"""

import math

import numpy as np
import pytest
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, special

from ampfl.accounting._checks import NumericalError
from ampfl.accounting._numerics import UnreachableTarget, epsilon_from_delta_curve
from ampfl.accounting.calibrate import UnreachableTarget as CalibrateUnreachable
from ampfl.accounting.pld_grid import cell_masses, grid_index, mixture, round_down, round_up, tail_cut

SLACK = 1e-13  # floating-point slack of a PMF's δ (sums of ~1e4 masses)
GRIDS = st.sampled_from([1e-2, 3e-3, 1e-3])


def _bounds(levels_lo: int, levels_hi: int, h: float, cdf, sf):
    """(pessimistic, optimistic) PMFs of a loss with CDF / survival function given at the thresholds k·h."""
    levels = np.arange(levels_lo, levels_hi + 1) * h
    s = sf(levels)
    pess = pld_pmf.DensePLDPmf(h, levels_lo, cell_masses(s, survival=True), float(s[-1]), True)
    # rounded down: the mass below the lowest threshold is dropped (a sub-probability, lowers δ)
    opt = pld_pmf.DensePLDPmf(h, levels_lo, cell_masses(cdf(levels), up=False), 0.0, False)
    return pess, opt


# ------------------------------------------------------------------------------------------------- Gaussian
def _gaussian_exact(sigma: float, eps: float) -> float:
    """Balle & Wang 2018 Thm 8 (sensitivity 1): Φ(1/(2σ) − εσ) − e^ε Φ(−1/(2σ) − εσ)."""
    return float(
        special.ndtr(0.5 / sigma - eps * sigma) - math.exp(eps) * special.ndtr(-0.5 / sigma - eps * sigma)
    )


def _gaussian_bounds(sigma: float, h: float):
    mu = 1.0 / sigma  # L ~ N(μ²/2, μ²) under P = N(1, σ²) vs Q = N(0, σ²)
    lo, hi = math.floor((mu * mu / 2 - 12 * mu) / h), math.ceil((mu * mu / 2 + 12 * mu) / h)
    return _bounds(
        lo,
        hi,
        h,
        lambda x: special.ndtr((x - mu * mu / 2) / mu),
        lambda x: special.ndtr(-(x - mu * mu / 2) / mu),
    )


@settings(max_examples=25, deadline=None)
@given(sigma=st.floats(0.5, 5.0), eps=st.floats(0.0, 4.0), h=GRIDS)
def test_gaussian_rounded_up_is_above_exact_and_down_below(sigma, eps, h):
    # Prepare
    pess, opt = _gaussian_bounds(sigma, h)
    dp_pess, dp_opt = (
        pld_lib.from_gaussian_mechanism(
            sigma, pessimistic_estimate=p, value_discretization_interval=h, use_connect_dots=False
        )._pmf_remove
        for p in (True, False)
    )
    exact = _gaussian_exact(sigma, eps)
    # Execute
    up, down = pess.get_delta_for_epsilon(eps), opt.get_delta_for_epsilon(eps)
    # Assert: the sandwich, and each side within dp-accounting's own bounds of the same mechanism
    assert down - SLACK <= exact <= up + SLACK
    assert dp_opt.get_delta_for_epsilon(eps) <= up + SLACK
    assert down <= dp_pess.get_delta_for_epsilon(eps) + SLACK
    assert up == pytest.approx(dp_pess.get_delta_for_epsilon(eps), rel=1e-6, abs=1e-15)  # the same rounding


@settings(max_examples=15, deadline=None)
@given(sigma=st.floats(0.5, 5.0), log_delta=st.floats(-12.0, -2.0), h=GRIDS)
def test_gaussian_epsilon_sandwich(sigma, log_delta, h):
    from ampfl.accounting.gaussian import gaussian_epsilon

    pess, opt = _gaussian_bounds(sigma, h)
    delta = 10.0**log_delta
    exact = gaussian_epsilon(sigma=sigma, delta=delta)  # the upper end of a 1e-12 bracket
    assert max(0.0, opt.get_epsilon_for_delta(delta)) <= exact + 1e-9
    assert pess.get_epsilon_for_delta(delta) >= exact * (1.0 - 1e-11) - 1e-12


# -------------------------------------------------------------------------------------------------- Laplace
def _laplace_bounds(b: float, h: float):
    """L = (|x| − |x − 1|)/b under P = Lap(1, b) vs Q = Lap(0, b): atoms ½e^{−1/b} at −1/b and ½ at 1/b."""
    top = 1.0 / b

    def cdf(x: np.ndarray) -> np.ndarray:
        inside = 0.5 * np.exp((np.clip(x, -top, top) - top) / 2.0)
        return np.where(x < -top, 0.0, np.where(x >= top, 1.0, inside))

    lo, hi = math.floor(-top / h) - 1, math.ceil(top / h) + 1
    return _bounds(lo, hi, h, cdf, lambda x: 1.0 - cdf(x))


@settings(max_examples=25, deadline=None)
@given(b=st.floats(0.3, 3.0), eps=st.floats(0.0, 3.0), h=GRIDS, log_delta=st.floats(-8.0, -1.0))
def test_laplace_rounded_up_is_above_exact_and_down_below(b, eps, h, log_delta):
    pess, opt = _laplace_bounds(b, h)
    exact = max(0.0, -math.expm1((eps - 1.0 / b) / 2.0))  # δ(ε) of the Laplace mechanism, sensitivity 1
    up, down = pess.get_delta_for_epsilon(eps), opt.get_delta_for_epsilon(eps)
    assert down - SLACK <= exact <= up + SLACK
    dp_pess, dp_opt = (
        pld_lib.from_laplace_mechanism(b, pessimistic_estimate=p, value_discretization_interval=h)._pmf_remove
        for p in (True, False)
    )
    assert dp_opt.get_delta_for_epsilon(eps) <= up + SLACK
    assert down <= dp_pess.get_delta_for_epsilon(eps) + SLACK
    delta = 10.0**log_delta
    exact_eps = max(0.0, 1.0 / b + 2.0 * math.log1p(-delta))  # the inverse of δ(ε) above
    assert max(0.0, opt.get_epsilon_for_delta(delta)) <= exact_eps + 1e-9
    assert pess.get_epsilon_for_delta(delta) >= exact_eps - 1e-9


# ------------------------------------------------------------------------------ Poisson-subsampled Gaussian
def _subsampled_threshold(eps: np.ndarray, sigma: float, q: float) -> np.ndarray:
    """x where log(1 − q + q e^{(x − ½)/σ²}) = ε (−∞ below the loss's lower bound log(1 − q))."""
    inner = np.exp(eps) - (1.0 - q)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(
            inner > 0.0, sigma * sigma * (np.log(np.maximum(inner, 1e-300)) - math.log(q)) + 0.5, -np.inf
        )


def _subsampled_exact(sigma: float, q: float, eps: float) -> float:
    """H_{e^ε}(P‖Q) = P(x > x_ε) − e^ε Q(x > x_ε), P = (1 − q)N(0, σ²) + qN(1, σ²), Q = N(0, σ²)."""
    x = float(_subsampled_threshold(np.array(eps), sigma, q))
    tail_p = (1.0 - q) * special.ndtr(-x / sigma) + q * special.ndtr((1.0 - x) / sigma)
    return float(max(0.0, tail_p - math.exp(eps) * special.ndtr(-x / sigma)))


def _subsampled_bounds(sigma: float, q: float, h: float):
    def cdf(levels: np.ndarray) -> np.ndarray:
        x = _subsampled_threshold(levels, sigma, q)
        return (1.0 - q) * special.ndtr(x / sigma) + q * special.ndtr((x - 1.0) / sigma)

    def sf(levels: np.ndarray) -> np.ndarray:
        x = _subsampled_threshold(levels, sigma, q)
        return (1.0 - q) * special.ndtr(-x / sigma) + q * special.ndtr((1.0 - x) / sigma)

    top = math.log1p(q * math.expm1((0.5 + 12.0 * sigma) / (sigma * sigma)))
    return _bounds(math.floor(math.log1p(-q) / h) - 1, math.ceil(top / h) + 1, h, cdf, sf)


@settings(max_examples=20, deadline=None)
@given(sigma=st.floats(0.6, 4.0), q=st.floats(0.01, 0.9), eps=st.floats(0.0, 3.0), h=GRIDS)
def test_subsampled_gaussian_rounded_up_is_above_exact_and_down_below(sigma, q, eps, h):
    pess, opt = _subsampled_bounds(sigma, q, h)
    exact = _subsampled_exact(sigma, q, eps)
    up, down = pess.get_delta_for_epsilon(eps), opt.get_delta_for_epsilon(eps)
    assert down - SLACK <= exact <= up + SLACK
    dp_pess, dp_opt = (
        pld_lib.from_gaussian_mechanism(
            sigma,
            sampling_prob=q,
            pessimistic_estimate=p,
            value_discretization_interval=h,
            use_connect_dots=False,
        )._pmf_remove
        for p in (True, False)
    )
    assert dp_opt.get_delta_for_epsilon(eps) <= up + SLACK
    assert down <= dp_pess.get_delta_for_epsilon(eps) + SLACK


@settings(max_examples=10, deadline=None)
@given(sigma=st.floats(0.6, 4.0), q=st.floats(0.01, 0.9), log_delta=st.floats(-10.0, -3.0))
def test_subsampled_gaussian_epsilon_sandwich(sigma, q, log_delta):
    h, delta = 1e-3, 10.0**log_delta
    pess, opt = _subsampled_bounds(sigma, q, h)
    if _subsampled_exact(sigma, q, 0.0) <= delta:
        exact = 0.0
    else:  # an independent root finder on the closed form
        exact = optimize.brentq(lambda e: _subsampled_exact(sigma, q, e) - delta, 0.0, 60.0, xtol=1e-13)
    assert max(0.0, opt.get_epsilon_for_delta(delta)) <= exact + 1e-9
    assert pess.get_epsilon_for_delta(delta) >= exact - 1e-9


# ------------------------------------------------------------------------------------------ point masses
@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    n=st.integers(1, 60),
    h=st.sampled_from([0.3, 1e-1, 1e-2, 1e-3]),
    eps=st.floats(0.0, 2.0),
)
def test_point_masses_rounded_up_and_down_bracket_the_finite_pair(seed, n, h, eps):
    # Prepare: a random finite pair (P, Q); its exact δ(ε) = Σ (P_i − e^ε Q_i)₊
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(n)), rng.dirichlet(np.ones(n))
    exact = float(np.maximum(p - math.exp(eps) * q, 0.0).sum())
    loss = np.log(p) - np.log(q)
    # Execute
    up, down = round_up(loss, p, h), round_down(loss, p, h)
    # Assert
    assert down.get_delta_for_epsilon(eps) <= exact + SLACK
    assert up.get_delta_for_epsilon(eps) >= exact - SLACK
    assert math.fsum(up._probs) == pytest.approx(1.0, abs=1e-12)


def test_round_up_sends_infinite_losses_to_infinity_and_drops_empty_mass():
    pmf = round_up(np.array([0.25, math.inf, -math.inf, 0.5]), np.array([0.5, 0.2, 0.1, 0.0]), 0.1)
    assert pmf._infinity_mass == pytest.approx(0.2)
    assert (pmf._lower_loss, list(pmf._probs)) == (3, [0.5])  # 0.25 → 0.3; the −∞ and zero masses dropped
    assert round_down(np.array([0.25, math.inf]), np.array([0.5, 0.5]), 0.1)._infinity_mass == 0.0
    assert round_up(np.array([]), np.array([]), 0.1, infinity=0.3)._infinity_mass == 0.3


@settings(max_examples=50, deadline=None)
@given(x=st.floats(-50.0, 50.0), h=st.floats(1e-4, 1.0))
def test_grid_index_rounds_each_way_by_less_than_a_step(x, h):
    up = int(grid_index(np.array([x]), h, up=True)[0])
    down = int(grid_index(np.array([x]), h, up=False)[0])
    assert down <= x / h <= up
    assert up - down <= 1


@settings(max_examples=50, deadline=None)
@given(
    probs=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=40),
    left=st.floats(0.0, 2.0),
    right=st.floats(0.0, 2.0),
)
def test_tail_cut_keeps_a_maximal_window(probs, left, right):
    arr = np.array(probs)
    start, stop = tail_cut(arr, left, right)
    assert 0 <= start < stop <= len(arr)
    if stop - start > 1:  # both cuts maximal: one more point would exceed its budget
        assert arr[:start].sum() <= left * (1 + 1e-12) and arr[stop:].sum() <= right * (1 + 1e-12)
        assert arr[: start + 1].sum() > left * (1 - 1e-12) or start + 1 == stop
        assert arr[stop - 1 :].sum() > right * (1 - 1e-12) or stop - 1 == start
    assert tail_cut(arr, None, None) == (0, len(arr))


# ------------------------------------------------------------------------------------------------- mixture
@settings(max_examples=15, deadline=None)
@given(
    sigmas=st.lists(st.floats(0.7, 3.0), min_size=2, max_size=4),
    rates=st.lists(st.floats(0.05, 1.0), min_size=4, max_size=4),
    raw=st.lists(st.floats(0.05, 1.0), min_size=4, max_size=4),
    eps=st.floats(0.0, 2.0),
)
def test_mixture_is_the_weighted_sum_of_its_parts(sigmas, rates, raw, eps):
    # Prepare
    h = 1e-3
    plds = [
        pld_lib.from_gaussian_mechanism(s, sampling_prob=r, value_discretization_interval=h)
        for s, r in zip(sigmas, rates, strict=False)
    ]
    w = np.array(raw[: len(plds)]) / sum(raw[: len(plds)])
    # Execute
    mixed = mixture(list(zip(w, plds, strict=True)))
    # Assert: a direct weighted sum of the aligned dense PMFs, per direction
    for direction in ("_pmf_remove", "_pmf_add"):
        dense = [getattr(p, direction).to_dense_pmf() for p in plds]
        lo = min(d._lower_loss for d in dense)
        direct = np.zeros(max(d._lower_loss + d.size for d in dense) - lo)
        for wi, d in zip(w, dense, strict=True):
            direct[d._lower_loss - lo : d._lower_loss - lo + d.size] += wi * d._probs
        got = getattr(mixed, direction)
        assert got._lower_loss == lo
        np.testing.assert_allclose(got._probs, direct, rtol=1e-13, atol=1e-300)
        assert got._infinity_mass == pytest.approx(
            sum(wi * d._infinity_mass for wi, d in zip(w, dense, strict=True))
        )
        deltas = [getattr(p, direction).get_delta_for_epsilon(eps) for p in plds]
        assert got.get_delta_for_epsilon(eps) == pytest.approx(float(np.dot(w, deltas)), rel=1e-9, abs=1e-15)


def test_mixture_of_two_is_dp_accountings_bit_for_bit():
    a = pld_lib.from_gaussian_mechanism(1.3, sampling_prob=0.2, value_discretization_interval=1e-3)
    b = pld_lib.from_gaussian_mechanism(0.9, sampling_prob=0.05, value_discretization_interval=1e-3)
    ours, theirs = mixture([(0.3, a), (1.0 - 0.3, b)]), a.compute_mixture(b, 0.3)
    for direction in ("_pmf_remove", "_pmf_add"):
        x, y = getattr(ours, direction), getattr(theirs, direction)
        assert x._lower_loss == y._lower_loss and x._infinity_mass == y._infinity_mass
        assert np.array_equal(x._probs, y._probs)


def test_mixture_complete_sends_the_deficit_to_infinity_and_keeps_symmetry():
    pmf = pld_pmf.DensePLDPmf(0.1, 0, np.array([0.5, 0.3]), 0.05, True)  # 0.15 missing
    sym = pld_lib.PrivacyLossDistribution(pmf)
    out = mixture([(1.0, sym)], complete=True)
    assert out._symmetric
    assert out._pmf_remove._infinity_mass == pytest.approx(0.2)
    assert mixture([(1.0, sym)])._pmf_remove._infinity_mass == pytest.approx(0.05)
    with pytest.raises(ValueError, match="sum to 1"):
        mixture([(0.5, sym), (0.4, sym)])  # a sub-probability would understate δ
    with pytest.raises(ValueError, match="sum to 1"):
        mixture([(1.5, sym), (-0.5, sym)])
    with pytest.raises(ValueError, match="grid"):
        other = pld_lib.PrivacyLossDistribution(pld_pmf.DensePLDPmf(0.2, 0, np.ones(1), 0.0, True))
        mixture([(0.5, sym), (0.5, other)])


# --------------------------------------------------------------------------------- epsilon_from_delta_curve
@settings(max_examples=40, deadline=None)
@given(eps0=st.floats(1e-3, 50.0), log_delta=st.floats(-12.0, -0.01))
def test_epsilon_from_delta_curve_inverts_the_laplace_curve(eps0, log_delta):
    delta = 10.0**log_delta
    curve = lambda e: -math.expm1((e - eps0) / 2.0)  # noqa: E731  (Laplace δ(ε), ε₀ = 1/b)
    exact = max(0.0, eps0 + 2.0 * math.log1p(-delta))
    got = epsilon_from_delta_curve(curve, delta, rtol=1e-12)
    assert curve(got) <= delta  # the upper end: never under-reports
    assert exact <= got * (1.0 + 1e-15) + 1e-300
    assert got <= exact * (1.0 + 1e-11) + 1e-300


def test_epsilon_from_delta_curve_in_log_space_and_its_limits():
    # log δ(ε) = −ε: the exact ε of log-target t is −t
    assert epsilon_from_delta_curve(lambda e: -e, math.log(1e-300), rtol=1e-13) == pytest.approx(
        -math.log(1e-300), rel=1e-12
    )
    assert epsilon_from_delta_curve(lambda e: 0.5 * math.exp(-e), 0.6) == 0.0  # met at ε = 0
    with pytest.raises(NumericalError, match="not bracketed"):
        epsilon_from_delta_curve(lambda e: 0.5, 0.1, max_epsilon=10.0)
    with pytest.raises(NumericalError):
        epsilon_from_delta_curve(lambda e: math.exp(-e), 1e-9, start=2.0, expand=False)
    assert CalibrateUnreachable is UnreachableTarget  # calibrate re-exports the one exception
