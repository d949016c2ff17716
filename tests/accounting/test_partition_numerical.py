"""Numerical validation of 002 Theorem 3.1: exact grid integration (d = 2, 3) and Monte Carlo (d = 8).

The true divergences D_α(P‖Q) and D_α(Q‖P) for P = uniform mixture of N(v, σ²I) over one-hot v (k = 1; c = 1)
and Q = N(0, σ²I) are computed independently of the library and must never exceed the returned bound.
Also shows that the d-prefactor reverse variant (Feldman–Shenfeld's ``add``) is *not* an upper bound.
"""

import itertools
import math

import numpy as np
import pytest
from scipy import special

from ampfl.accounting.mixture_rdp import forward_rdp_exact, reverse_rdp_bound, theorem_3_1_rdp
from ampfl.accounting.partition import rdp_subsampled_split


def _centres(d: int, k: int) -> np.ndarray:
    rows = []
    for s in itertools.combinations(range(d), k):
        v = np.zeros(d)
        v[list(s)] = 1.0
        rows.append(v)
    return np.array(rows)


def _log_mixture_over_gauss(x: np.ndarray, centres: np.ndarray, sigma: float) -> np.ndarray:
    """log(P/Q)(x) = log mean_v exp((x·v − |v|²/2)/σ²)."""
    expo = (x @ centres.T - 0.5 * np.sum(centres**2, axis=1)[None, :]) / sigma**2
    return special.logsumexp(expo, axis=1) - math.log(centres.shape[0])


def grid_divergences(d: int, k: int, sigma: float, alpha: float, step: float = 0.25) -> tuple[float, float]:
    """(D_α(P‖Q), D_α(Q‖P)) by a Riemann sum on a uniform grid (spectrally accurate for these integrands).

    The forward integrand P^α Q^{1−α} concentrates around α·v, the reverse one Q^α P^{1−α} around −(α−1)·v,
    each with spread σ; the grid covers both with 7σ margins (neglected mass below 1e-10).
    """
    centres = _centres(d, k)
    h = step * sigma
    lo, hi = -(alpha - 1.0) - 7.0 * sigma, alpha + 7.0 * sigma
    axis = np.arange(lo, hi + h, h)
    mesh = np.stack(np.meshgrid(*([axis] * d), indexing="ij"), axis=-1).reshape(-1, d)
    log_q = -0.5 * np.sum(mesh**2, axis=1) / sigma**2 - 0.5 * d * math.log(2 * math.pi * sigma**2)
    log_ratio = _log_mixture_over_gauss(mesh, centres, sigma)  # log P − log Q
    log_cell = d * math.log(h)
    forward = special.logsumexp(log_q + alpha * log_ratio) + log_cell
    reverse = special.logsumexp(log_q + (1.0 - alpha) * log_ratio) + log_cell
    return float(forward / (alpha - 1.0)), float(reverse / (alpha - 1.0))


# RECOVERED_MATH.md §1.13: exact D_α(Q‖P) values from its own grid integration (to the printed decimals)
@pytest.mark.parametrize(
    ("d", "sigma", "alpha", "fwd", "rev"),
    [
        (2, 1.0, 2, 0.620115, 0.569043),
        (2, 1.0, 4, 1.382324, 1.106297),
        (3, 1.0, 2, 0.452832, 0.40641),
        (3, 1.0, 4, 1.055766, 0.783238),
        (3, 2.0, 8, 0.377734, 0.352502),
    ],
)
def test_grid_reproduces_recovered_values(d, sigma, alpha, fwd, rev):
    got_fwd, got_rev = grid_divergences(d, 1, sigma, alpha)
    assert got_fwd == pytest.approx(fwd, abs=2e-6)
    assert got_rev == pytest.approx(rev, abs=2e-5)
    # Lemma 3.12 (our occupancy DP) equals the integral
    assert forward_rdp_exact(orders=[alpha], d=d, k=1, noise_multiplier=sigma)[0] == pytest.approx(
        got_fwd, abs=1e-6
    )


GRID_CASES = [
    (d, sigma, alpha)
    for d in (2, 3)
    for sigma in (0.3, 0.5, 0.8, 1.0, 2.0, 5.0)
    for alpha in (2, 3, 4, 8, 16)
    if d == 2 or (2 * alpha + 14 * sigma) / (0.4 * sigma) <= 110  # keep the 3-D grid under ~1.3M points
]


@pytest.mark.parametrize(("d", "sigma", "alpha"), GRID_CASES)
def test_bound_never_below_grid_divergence(d, sigma, alpha):
    fwd, rev = grid_divergences(d, 1, sigma, alpha, step=0.4 if d == 3 else 0.25)
    tol = 1e-7 * max(1.0, fwd)
    for bound in ("exact", "efficient"):
        b = theorem_3_1_rdp(orders=[alpha], d=d, k=1, noise_multiplier=sigma, bound=bound)[0]
        assert max(fwd, rev) <= b + tol
    assert rev <= reverse_rdp_bound(orders=[alpha], d=d, k=1, noise_multiplier=sigma)[0] + tol
    assert forward_rdp_exact(orders=[alpha], d=d, k=1, noise_multiplier=sigma)[0] == pytest.approx(
        fwd, rel=1e-6
    )


def _d_prefactor_variant(d: int, k: int, sigma: float, alpha: float) -> float:
    """Feldman–Shenfeld's ``add`` term: prefactor d and x = k(d−k)/(d²σ²) — NOT an upper bound (§1.13)."""
    x = k * (d - k) / (d * d * sigma**2)
    return alpha * k * k / (2 * d * sigma**2) + d / (2 * (alpha - 1)) * (
        alpha * x - math.log1p(alpha * math.expm1(x))
    )


def test_d_prefactor_variant_is_not_an_upper_bound():
    # RECOVERED_MATH §1.13: d = 2, k = 1, σ = 1, α = 2: exact 0.569043 against the variant's 0.550167
    _, rev = grid_divergences(2, 1, 1.0, 2)
    variant = _d_prefactor_variant(2, 1, 1.0, 2)
    assert variant == pytest.approx(0.550167, abs=1e-6)
    assert variant < rev - 0.01
    assert reverse_rdp_bound(orders=[2], d=2, k=1, noise_multiplier=1.0)[0] >= rev


def test_grid_d4_k2_forward_matches_lemma_3_12():
    # k > 1: 4-D grid for the forward divergence at α = 3 against the exact enumeration (§1.13: 1.80476)
    fwd, rev = grid_divergences(4, 2, 1.0, 3, step=0.8)
    assert fwd == pytest.approx(1.80476, abs=2e-5)
    assert rev == pytest.approx(1.64308, abs=2e-5)
    assert forward_rdp_exact(orders=[3], d=4, k=2, noise_multiplier=1.0)[0] == pytest.approx(fwd, abs=2e-5)
    assert theorem_3_1_rdp(orders=[3], d=4, k=2, noise_multiplier=1.0)[0] >= max(fwd, rev)


def _mc_log_moment(log_weights: np.ndarray, z: float = 5.0) -> tuple[float, float, float]:
    """(log mean, log lower limit, log upper limit) of exp(log_weights); limits are mean ± z std errors."""
    top = float(np.max(log_weights))
    w = np.exp(log_weights - top)
    mean = float(np.mean(w))
    se = float(np.std(w, ddof=1) / math.sqrt(w.size))
    lower = math.log(mean - z * se) + top if mean > z * se else -math.inf
    return math.log(mean) + top, lower, math.log(mean + z * se) + top


@pytest.mark.parametrize(("sigma", "alpha"), [(1.0, 2), (1.0, 4), (2.0, 4), (2.0, 8)])
def test_monte_carlo_d8_never_exceeds_bound(sigma, alpha):
    d, n = 8, 200_000
    rng = np.random.default_rng(20250304 + alpha)
    centres = np.eye(d)
    # forward D_α(P‖Q) = 1/(α−1) log E_P[(P/Q)^{α−1}], sampling from P
    xp = centres[rng.integers(0, d, n)] + sigma * rng.standard_normal((n, d))
    _, lower, upper = _mc_log_moment((alpha - 1) * _log_mixture_over_gauss(xp, centres, sigma))
    exact_fwd = forward_rdp_exact(orders=[alpha], d=d, k=1, noise_multiplier=sigma)[0]
    # the Monte Carlo confidence interval covers Lemma 3.12 (so the estimator is trustworthy) ...
    assert lower / (alpha - 1) <= exact_fwd <= upper / (alpha - 1)
    bound = theorem_3_1_rdp(orders=[alpha], d=d, k=1, noise_multiplier=sigma)[0]
    assert lower / (alpha - 1) <= bound
    # reverse D_α(Q‖P) = 1/(α−1) log E_Q[(Q/P)^{α−1}], sampling from Q
    xq = sigma * rng.standard_normal((n, d))
    est_r, lower_r, _ = _mc_log_moment(-(alpha - 1) * _log_mixture_over_gauss(xq, centres, sigma))
    # ... and even the lower confidence limit of the reverse divergence stays below R_α
    assert lower_r / (alpha - 1) <= reverse_rdp_bound(orders=[alpha], d=d, k=1, noise_multiplier=sigma)[0]
    assert lower_r / (alpha - 1) <= bound
    assert est_r / (alpha - 1) <= bound


@pytest.mark.parametrize(("sigma", "q"), [(1.0, 0.25), (2.0, 0.25), (0.5, 0.05)])
def test_subsampled_split_remove_expansion_and_add_direction(sigma, q):
    # docs/partition.md, Table 1 (partition.rdp_subsampled_split, "remove-only"): for P' = (1 − q)Q + qP the
    # binomial expansion with ε(ℓ) = D_ℓ(P‖Q) equals
    # the remove divergence D_α(P'‖Q); the add divergence D_α(Q‖P') is only checked numerically to be smaller
    d, h = 2, 0.2 * sigma
    centres = np.eye(d)
    for alpha in (2, 4, 8):
        axis = np.arange(-(alpha - 1.0) - 7 * sigma, alpha + 7 * sigma + h, h)
        mesh = np.stack(np.meshgrid(axis, axis, indexing="ij"), axis=-1).reshape(-1, d)
        log_q = -0.5 * np.sum(mesh**2, axis=1) / sigma**2 - math.log(2 * math.pi * sigma**2)
        log_mix = np.logaddexp(math.log1p(-q), math.log(q) + _log_mixture_over_gauss(mesh, centres, sigma))
        remove = (special.logsumexp(log_q + alpha * log_mix) + 2 * math.log(h)) / (alpha - 1)
        add = (special.logsumexp(log_q + (1 - alpha) * log_mix) + 2 * math.log(h)) / (alpha - 1)
        ell = np.arange(alpha + 1)
        fwd = np.concatenate(
            [[0.0, 0.0], forward_rdp_exact(orders=range(2, alpha + 1), d=d, k=1, noise_multiplier=sigma)]
        )
        log_comb = special.gammaln(alpha + 1) - special.gammaln(ell + 1) - special.gammaln(alpha - ell + 1)
        expansion = special.logsumexp(
            log_comb + (alpha - ell) * math.log1p(-q) + ell * math.log(q) + (ell - 1) * fwd
        )
        assert expansion / (alpha - 1) == pytest.approx(remove, rel=1e-6)
        assert add <= remove
        # the library's "remove-only" expansion (Theorem 3.1 base >= D_l(P||Q)) bounds the remove direction
        library = rdp_subsampled_split(
            orders=[alpha], num_submodels=d, noise_multiplier=sigma, sampling_rate=q, expansion="remove-only"
        )[0]
        assert library >= remove * (1 - 1e-9)
