"""The D-component orthogonal-mixture PLD (model split D ≥ 3, random allocation / BIS; issue 11-a).

Independent references: D = 3 hockey-stick divergences by quadrature that integrates x₁ in closed form and
(x₂, x₃) by Gauss–Legendre split at the kink (no log-sum grid); D = 2 the exact rotation PLD; D = 1 the
Gaussian; the RDP bound of 002 Thm 3.1 from above; BIS with k > 1: the exact k-of-T pair by tensor
Gauss–Hermite quadrature.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, special

from ampfl.accounting.accountants import PLDAccountant, RDPAccountant, make_accountant
from ampfl.accounting.calibrate import calibrate
from ampfl.accounting.events import BalancedIterationSubsamplingEvent, GaussianEvent, ModelSplitEvent
from ampfl.accounting.partition.allocation_pld import (
    allocation_pld,
    loss_error_bound,
    model_split_pld_any,
    orthogonal_mixture_pld,
)
from ampfl.accounting.partition.pld import model_split_pld

H = 1e-4
#: Coarse grids for the property tests (any grid is sound; the bounds scale with it).
G, HC = 2e-3, 1e-3


def _coarse(d: int, z: float) -> object:
    return orthogonal_mixture_pld(num_components=d, shift=1 / z, value_discretization_interval=HC, log_grid=G)


def _nodes(lo: np.ndarray, hi: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Legendre nodes and weights on [lo, hi] (row-wise), shape (rows, n)."""
    t, w = np.polynomial.legendre.leggauss(n)
    half = (hi - lo)[:, None] / 2
    return half * t + ((hi + lo) / 2)[:, None], half * w


def _split(lo: float, hi: float, cut: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes on [lo, cut] ∪ [cut, hi] per row (cut clipped into [lo, hi])."""
    cut = np.clip(cut, lo, hi)
    a, wa = _nodes(np.full_like(cut, lo), cut, n)
    b, wb = _nodes(cut, np.full_like(cut, hi), n)
    return np.concatenate((a, b), axis=1), np.concatenate((wa, wb), axis=1)


def _phi(x: np.ndarray) -> np.ndarray:
    return np.exp(-x * x / 2) / math.sqrt(2 * math.pi)


def reference_deltas(a: float, eps: float, n: int = 48) -> tuple[float, float]:
    """D = 3: (δ_remove, δ_add)(ε) = (E_Q[(e^L − e^ε)₊], E_Q[(1 − e^{ε+L})₊]), L = log mean e^{a xᵢ} − a²/2.

    Given (x₂, x₃), e^L ≥ e^{±ε} ⟺ e^{a x₁} ≥ c = 3e^{±ε + a²/2} − e^{a x₂} − e^{a x₃}, and the
    x₁-expectations are lognormal call/put prices; (x₂, x₃) by Gauss–Legendre on [−14, 14 + a], split
    where c changes sign.
    """
    lo, hi = -14.0, 14.0 + a
    out = []
    for sign in (1.0, -1.0):
        k = 3 * math.exp(sign * eps + a * a / 2)
        x2, w2 = _split(lo, hi, np.array([math.log(k) / a]), n)
        x2, w2 = x2[0], w2[0] * _phi(x2[0])
        room = k - np.exp(a * x2)
        x3, w3 = _split(lo, hi, np.log(np.where(room > 0, room, 1.0)) / a - 1e3 * (room <= 0), n)
        rest = np.exp(a * x2)[:, None] + np.exp(a * x3)
        c = k - rest
        t = np.log(np.where(c > 0, c, 1.0)) / a
        if sign > 0:
            call = np.where(
                c > 0,
                math.exp(a * a / 2) * special.ndtr(a - t) - c * special.ndtr(-t),
                math.exp(a * a / 2) - c,
            )
            f = call * math.exp(-a * a / 2) / 3
        else:
            put = special.ndtr(t - a) + math.exp(-a * a / 2) * rest * special.ndtr(t)
            f = np.where(c > 0, special.ndtr(t) - math.exp(eps) / 3 * put, 0.0)
        out.append(float(np.sum(w2[:, None] * w3 * _phi(x3) * f)))
    return out[0], out[1]


def reference_epsilon(a: float, delta: float) -> float:
    return float(optimize.brentq(lambda e: max(reference_deltas(a, e)) - delta, 0.0, 40.0, xtol=1e-10))


def test_reference_quadrature_converges_and_matches_monte_carlo() -> None:
    coarse, fine = reference_deltas(1.0, 1.0, 48), reference_deltas(1.0, 1.0, 96)
    assert coarse == pytest.approx(fine, rel=1e-5)
    x = np.random.default_rng(0).standard_normal((400_000, 3))
    loss = np.log(np.exp(x).mean(axis=1)) - 0.5
    mc = np.maximum(np.exp(loss) - math.e, 0.0)
    assert abs(mc.mean() - fine[0]) < 5 * mc.std() / math.sqrt(len(mc))


@pytest.mark.parametrize(("z", "delta"), [(1.0, 1e-5), (0.7, 1e-3), (3.0, 1e-6)])
def test_d3_never_below_the_quadrature_and_within_the_stated_bound(z: float, delta: float) -> None:
    a = 1.0 / z
    pld = orthogonal_mixture_pld(num_components=3, shift=a, value_discretization_interval=H)
    eps, ref = float(pld.get_epsilon_for_delta(delta)), reference_epsilon(a, delta)
    assert ref - 1e-7 <= eps <= ref + loss_error_bound(3, a, H)
    for e in (0.0, 0.5 * ref, ref):  # δ(ε) pointwise, both directions
        assert float(pld.get_delta_for_epsilon(e)) >= max(reference_deltas(a, e)) * (1 - 1e-7)


@pytest.mark.parametrize("z", [0.8, 2.0])
def test_d2_agrees_with_the_exact_rotation_pld(z: float) -> None:
    exact = model_split_pld(num_submodels=2, noise_multiplier=z, value_discretization_interval=H)
    mixture = orthogonal_mixture_pld(num_components=2, shift=1 / z, value_discretization_interval=H)
    for delta in (1e-3, 1e-7):
        e_exact, e_mix = exact.get_epsilon_for_delta(delta), mixture.get_epsilon_for_delta(delta)
        assert e_exact - 3 * H <= e_mix <= e_exact + loss_error_bound(2, 1 / z, H)


def test_d1_is_the_gaussian_and_d2_delegates_to_the_exact_form() -> None:
    one = model_split_pld_any(num_submodels=1, noise_multiplier=1.3)
    gauss = PLDAccountant().compose(GaussianEvent(noise_multiplier=1.3)).get_epsilon(1e-6)
    # 1e-9: the accountant reads ε with ampfl's vectorised walk (exact grid losses k·h; dp-accounting's loop
    # accumulates them by repeated subtraction), the same algorithm up to rounding
    assert one.get_epsilon_for_delta(1e-6) == pytest.approx(gauss, rel=1e-9)
    mix = orthogonal_mixture_pld(num_components=1, shift=1 / 1.3)
    assert mix.get_epsilon_for_delta(1e-6) == pytest.approx(gauss, rel=1e-9)
    two = model_split_pld_any(num_submodels=2, noise_multiplier=1.3, nonsplit_noise_multiplier=2.0)
    ref = model_split_pld(num_submodels=2, noise_multiplier=1.3, nonsplit_noise_multiplier=2.0)
    assert two.get_epsilon_for_delta(1e-6) == ref.get_epsilon_for_delta(1e-6)


@settings(max_examples=6, deadline=None)
@given(d=st.integers(3, 6), z=st.floats(0.7, 4.0), steps=st.integers(1, 20), log_delta=st.floats(-10, -3))
def test_never_above_the_theorem_3_1_rdp_bound(d: int, z: float, steps: int, log_delta: float) -> None:
    delta = 10.0**log_delta
    pld = _coarse(d, z).self_compose(steps).get_epsilon_for_delta(delta)
    event = ModelSplitEvent(num_submodels=d, noise_multiplier=z)
    assert pld <= RDPAccountant().compose(event, steps).get_epsilon(delta)


@settings(max_examples=4, deadline=None)
@given(d=st.integers(1, 5), z=st.floats(0.6, 3.0), dz=st.floats(0.05, 1.0))
def test_monotone_in_components_and_noise(d: int, z: float, dz: float) -> None:
    def eps(dd: int, zz: float) -> float:
        return float(_coarse(dd, zz).get_epsilon_for_delta(1e-5))

    base = eps(d, z)
    assert eps(d + 1, z) <= base + loss_error_bound(d + 1, 1 / z, HC, G)  # more components: more hiding
    assert eps(d, z + dz) <= base + loss_error_bound(d, 1 / (z + dz), HC, G)  # more noise: less loss


def test_bis_event_is_random_allocation() -> None:
    event = BalancedIterationSubsamplingEvent(iterations=5, participations=1, noise_multiplier=2.0)
    direct = allocation_pld(
        iterations=5, noise_multiplier=2.0, value_discretization_interval=HC
    ).self_compose(2)
    acc = PLDAccountant(value_discretization_interval=HC)
    assert acc.compose(event, 2).get_epsilon(1e-6) == pytest.approx(
        direct.get_epsilon_for_delta(1e-6), rel=1e-9
    )
    split = PLDAccountant(value_discretization_interval=HC).compose(
        ModelSplitEvent(num_submodels=5, noise_multiplier=2.0), 2
    )
    assert split.get_epsilon(1e-6) == pytest.approx(direct.get_epsilon_for_delta(1e-6), rel=1e-9)
    nonsplit = PLDAccountant().compose(
        ModelSplitEvent(num_submodels=3, noise_multiplier=math.inf, nonsplit_noise_multiplier=2.0)
    )
    gauss = PLDAccountant().compose(GaussianEvent(noise_multiplier=2.0))
    assert nonsplit.get_epsilon(1e-6) == pytest.approx(gauss.get_epsilon(1e-6), rel=1e-9)


def test_calibration_round_trip_beats_rdp() -> None:
    def bis(z: float) -> BalancedIterationSubsamplingEvent:
        return BalancedIterationSubsamplingEvent(iterations=4, participations=1, noise_multiplier=z)

    kw = {"target_epsilon": 1.0, "target_delta": 1e-5, "count": 2, "initial": 3.0, "step": 1.3}
    coarse = {"value_discretization_interval": HC}
    z = calibrate(bis, accountant="pld", accountant_kwargs=coarse, **kw)
    assert 0.98 <= PLDAccountant(**coarse).compose(bis(z), 2).get_epsilon(1e-5) <= 1.0
    assert z < calibrate(bis, accountant="rdp", **kw)


@pytest.mark.parametrize("bad", [0, -1])
def test_bad_input_names_the_parameter(bad: int) -> None:
    with pytest.raises(ValueError, match="num_components"):
        orthogonal_mixture_pld(num_components=bad, shift=1.0)
    with pytest.raises(ValueError, match="iterations"):
        allocation_pld(iterations=bad, noise_multiplier=1.0)


def _exact_allocation_delta(t: int, k: int, z: float, eps: float, nodes: int = 24) -> float:
    """δ(ε) of P_k = E_S N(a 1_S, I_T) (S a uniform k-subset) vs N(0, I_T), both directions, by tensor
    Gauss–Hermite quadrature (an independent computation of the pair allocation_pld bounds)."""
    a = 1.0 / z
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / w.sum()
    grid = np.meshgrid(*([x] * t), indexing="ij")
    weight = functools.reduce(np.multiply, np.meshgrid(*([w] * t), indexing="ij"))
    subsets = list(itertools.combinations(range(t), k))

    def loss(pts: list[np.ndarray]) -> np.ndarray:
        terms = np.stack([a * sum(pts[i] for i in s) for s in subsets])
        return special.logsumexp(terms, axis=0) - math.log(len(subsets)) - k * a * a / 2

    shifted = [g + (a if i < k else 0.0) for i, g in enumerate(grid)]  # P: by symmetry S = {0..k-1}
    remove = float((weight * np.clip(1 - np.exp(eps - loss(shifted)), 0, None)).sum())
    add = float((weight * np.clip(1 - np.exp(eps + loss(grid)), 0, None)).sum())
    return max(remove, add)


@pytest.mark.parametrize(("t", "k", "z", "eps"), [(4, 2, 1.0, 0.5), (4, 2, 2.0, 0.2), (3, 2, 0.8, 1.0)])
def test_k_of_t_blocks_bound_the_exact_allocation_pair(t: int, k: int, z: float, eps: float) -> None:
    exact = _exact_allocation_delta(t, k, z, eps)
    bound = allocation_pld(
        iterations=t, participations=k, noise_multiplier=z, value_discretization_interval=HC
    ).get_delta_for_epsilon(eps)
    assert exact * (1 - 1e-3) <= bound <= 1.12 * exact  # sound, and the block reduction loses little


def test_k_equal_t_is_plain_composition_and_k_above_one_beats_rdp() -> None:
    every = allocation_pld(
        iterations=3, participations=3, noise_multiplier=1.5, value_discretization_interval=HC
    )
    gauss = PLDAccountant(value_discretization_interval=HC).compose(GaussianEvent(noise_multiplier=1.5), 3)
    assert every.get_epsilon_for_delta(1e-6) == pytest.approx(gauss.get_epsilon(1e-6), rel=1e-9)
    event = BalancedIterationSubsamplingEvent(iterations=20, participations=4, noise_multiplier=1.0)
    pld = PLDAccountant(value_discretization_interval=HC).compose(event, 3).get_epsilon(1e-5)
    rdp = make_accountant("rdp").compose(event, 3).get_epsilon(1e-5)
    assert pld < rdp
