"""Paper 002 Theorem 3.1 kernels and the partition mechanisms: test vectors, reductions, properties."""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.accounting.mixture_rdp import (
    _forward_exact_enumerated,
    exact_forward_affordable,
    forward_rdp_efficient,
    forward_rdp_exact,
    reverse_rdp_bound,
    theorem_3_1_rdp,
)
from ampfl.accounting.partition import (
    calibrate_bis,
    calibrate_model_split,
    rdp_bis,
    rdp_dropout,
    rdp_model_split,
    rdp_partial_split,
    resolve_bound,
)
from ampfl.accounting.rdp import (
    epsilon_from_rdp,
    rdp_gaussian,
    rdp_poisson_gaussian,
    rdp_poisson_subsampled_general,
)

# RECOVERED_MATH.md §1.13 test vectors (c = 1; computed there by exact grid integration / direct formulas):
# (d, k, sigma, alpha, exact forward = Eq. (2) first term, Eq. (5), R_alpha with the (d - 1) prefactor)
VECTORS = [
    (2, 1, 1.0, 2, 0.620115, 0.620115, 0.584102),
    (2, 1, 1.0, 4, 1.382324, 1.433781, 1.120081),
    (3, 1, 1.0, 2, 0.452832, 0.452832, 0.41710),
    (3, 1, 1.0, 4, 1.055766, 1.140932, 0.794865),
    (3, 1, 2.0, 8, 0.377734, 0.452832, 0.353169),
    (4, 2, 1.0, 3, 1.80476, 1.87212, 1.66316),
    (8, 1, 1.0, 4, 0.456849, 0.587026, 0.335211),
    (8, 1, 2.0, 16, 0.304746, 0.587026, 0.270833),
]


def _tol(expected: float) -> float:
    # the table prints 5-6 significant decimals; allow half a unit in the last printed place
    decimals = len(repr(expected).split(".")[1])
    return 0.51 * 10.0 ** (-decimals)


@pytest.mark.parametrize(("d", "k", "sigma", "alpha", "fwd", "eq5", "rev"), VECTORS)
def test_recovered_math_test_vectors(d, k, sigma, alpha, fwd, eq5, rev):
    kw = {"orders": [alpha], "d": d, "k": k, "noise_multiplier": sigma}
    assert forward_rdp_exact(**kw)[0] == pytest.approx(fwd, abs=_tol(fwd))
    assert forward_rdp_efficient(**kw)[0] == pytest.approx(eq5, abs=_tol(eq5))
    assert reverse_rdp_bound(**kw)[0] == pytest.approx(rev, abs=_tol(rev))
    # the Theorem 3.1 bound is the max of forward and reverse (Remark 3.2: forward dominates here)
    assert theorem_3_1_rdp(**kw, bound="exact")[0] == pytest.approx(max(fwd, rev), abs=_tol(fwd))
    assert theorem_3_1_rdp(**kw, bound="efficient")[0] == pytest.approx(max(eq5, rev), abs=_tol(eq5))


def test_bis_against_poisson_vectors():
    # RECOVERED_MATH.md §1.13, "BIS against Poisson, one run, k = 1, gamma = 1/T"
    exact = rdp_bis(orders=[5], iterations=10, participations=1, noise_multiplier=1.0, bound="exact")[0]
    eff = rdp_bis(orders=[5], iterations=10, participations=1, noise_multiplier=1.0, bound="efficient")[0]
    poisson = rdp_poisson_gaussian(orders=[5], sampling_rate=0.1, noise_multiplier=1.0, steps=10)[0]
    base = rdp_gaussian(orders=range(2, 6), noise_multiplier=1.0)
    general = rdp_poisson_subsampled_general(orders=[5], sampling_rate=0.1, base_rdp=base, steps=10)[0]
    assert exact == pytest.approx(0.5328, abs=5e-5)
    assert eff == pytest.approx(0.7506, abs=5e-5)
    assert poisson == pytest.approx(1.2988, abs=5e-5)
    assert general == pytest.approx(2.5831, abs=5e-5)
    exact = rdp_bis(orders=[20], iterations=50, participations=1, noise_multiplier=2.0, bound="exact")[0]
    eff = rdp_bis(orders=[20], iterations=50, participations=1, noise_multiplier=2.0, bound="efficient")[0]
    poisson = rdp_poisson_gaussian(orders=[20], sampling_rate=1 / 50, noise_multiplier=2.0, steps=50)[0]
    assert exact == pytest.approx(0.0572, abs=5e-5)
    assert eff == pytest.approx(0.2018, abs=5e-5)
    assert poisson == pytest.approx(0.0642, abs=5e-5)
    assert eff > poisson > exact  # (3) can lose to Poisson; (2) does not (002 Sec. 3.3)


@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.0])
def test_d_equals_one_is_the_gaussian_mechanism(sigma):
    orders = [2, 3, 7, 64]
    gauss = rdp_gaussian(orders=orders, noise_multiplier=sigma)
    for bound in ("exact", "efficient"):
        got = rdp_model_split(orders=orders, num_submodels=1, noise_multiplier=sigma, bound=bound)
        np.testing.assert_allclose(got, gauss, rtol=1e-12)


def test_k_equals_d_is_a_gaussian_with_sensitivity_sqrt_d():
    orders = [2, 5, 9]
    for bound in ("exact", "efficient"):
        got = theorem_3_1_rdp(orders=orders, d=4, k=4, noise_multiplier=2.0, bound=bound)
        np.testing.assert_allclose(got, rdp_gaussian(orders=orders, noise_multiplier=2.0 / 2.0), rtol=1e-12)


def test_efficient_equals_exact_at_order_two_and_dominates_above():
    for d in (2, 3, 10, 1000):
        orders = list(range(2, 40))
        exact = forward_rdp_exact(orders=orders, d=d, k=1, noise_multiplier=0.8)
        eff = forward_rdp_efficient(orders=orders, d=d, k=1, noise_multiplier=0.8)
        assert exact[0] == pytest.approx(eff[0], rel=1e-8)  # both rounded up by their round-off bound
        assert np.all(exact <= eff * (1 + 1e-8))
        # k = 1 closed form of Eq. (5): log(1 + (e^{alpha lambda / 2} - 1) / d)
        a = np.asarray(orders, dtype=float)
        np.testing.assert_allclose(eff, np.log1p(np.expm1(a / (2 * 0.8**2)) / d), rtol=1e-12)


@pytest.mark.parametrize(("d", "sigma"), [(2, 1.0), (3, 0.7), (5, 2.0)])
def test_occupancy_dp_equals_direct_enumeration(d, sigma):
    # Lemma 3.12 for k = 1: the occupancy-count DP equals the generic enumeration over alpha-tuples
    orders = np.arange(2, 9)
    fast = forward_rdp_exact(orders=orders, d=d, k=1, noise_multiplier=sigma)
    slow = _forward_exact_enumerated(orders, d, 1, 1.0 / sigma**2)
    np.testing.assert_allclose(fast, slow, rtol=1e-11)


def test_enumeration_against_brute_force_tuples():
    # Lemma 3.12 literally: average over all alpha-tuples of k-subsets of exp(lambda * sum_{i<j} |v_i & v_j|)
    from itertools import combinations, product

    d, k, sigma, alpha = 4, 2, 1.3, 3
    subsets = [set(s) for s in combinations(range(d), k)]
    lam = 1 / sigma**2
    total = 0.0
    for tup in product(subsets, repeat=alpha):
        pairs = sum(len(tup[i] & tup[j]) for i in range(alpha) for j in range(i + 1, alpha))
        total += math.exp(lam * pairs)
    expected = math.log(total / len(subsets) ** alpha) / (alpha - 1)
    got = forward_rdp_exact(orders=[alpha], d=d, k=k, noise_multiplier=sigma)[0]
    assert got == pytest.approx(expected, rel=1e-12)


def test_exact_k_above_one_refuses_when_unaffordable():
    assert not exact_forward_affordable(d=100, k=5, max_order=32)
    with pytest.raises(ValueError, match="not affordable"):
        forward_rdp_exact(orders=[2, 3], d=100, k=5, noise_multiplier=1.0)
    assert resolve_bound("auto", d=100, k=5, max_order=32) == "efficient"
    assert resolve_bound("auto", d=10_000, k=1, max_order=256) == "exact"
    with pytest.raises(ValueError, match="at most 2048"):
        forward_rdp_exact(orders=[4096], d=3, k=1, noise_multiplier=1.0)


def test_large_orders_and_dimensions_do_not_overflow():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        orders = [2, 64, 512, 1024]
        for sigma in (0.05, 50.0):
            for bound in ("exact", "efficient"):
                v = theorem_3_1_rdp(orders=orders, d=100_000, k=1, noise_multiplier=sigma, bound=bound)
                assert np.all(np.isfinite(v)) and np.all(v >= 0) and np.all(np.diff(v) >= 0)
        v = forward_rdp_efficient(orders=[2, 1024], d=100_000, k=5_000, noise_multiplier=0.1)
        assert np.all(np.isfinite(v))


def test_mechanism_compositions():
    orders = [2, 4, 16]
    one = rdp_model_split(orders=orders, num_submodels=3, noise_multiplier=1.5)
    np.testing.assert_allclose(
        rdp_model_split(orders=orders, num_submodels=3, noise_multiplier=1.5, steps=7), 7 * one
    )
    np.testing.assert_allclose(
        rdp_dropout(orders=orders, noise_multiplier=1.5, steps=2),
        2 * rdp_model_split(orders=orders, num_submodels=2, noise_multiplier=1.5),
    )
    partial = rdp_partial_split(
        orders=orders, num_submodels=3, split_noise_multiplier=1.5, nonsplit_noise_multiplier=4.0, steps=5
    )
    np.testing.assert_allclose(partial, 5 * one + rdp_gaussian(orders=orders, noise_multiplier=4.0, steps=5))
    run = rdp_bis(orders=orders, iterations=20, participations=1, noise_multiplier=1.0)
    np.testing.assert_allclose(
        rdp_bis(orders=orders, iterations=20, participations=1, noise_multiplier=1.0, epochs=5), 5 * run
    )


def test_remark_3_10_one_long_run_beats_epochs():
    # 002 Remark 3.10: E runs of T/E iterations cost more than one run of T iterations with k = E
    orders = [2, 3, 4]
    epochs = rdp_bis(
        orders=orders, iterations=4, participations=1, noise_multiplier=1.0, epochs=3, bound="exact"
    )
    long = rdp_bis(orders=orders, iterations=12, participations=3, noise_multiplier=1.0, bound="exact")
    assert np.all(long <= epochs)


def test_splitting_amplifies():
    orders = [2, 8, 32]
    plain = rdp_gaussian(orders=orders, noise_multiplier=2.0)
    three = rdp_model_split(orders=orders, num_submodels=3, noise_multiplier=2.0)
    eight = rdp_model_split(orders=orders, num_submodels=8, noise_multiplier=2.0)
    assert np.all(eight < three) and np.all(three < plain)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"d": 3, "k": 4}, r"k must be an integer in \[1, 3\]"),
        ({"d": 0, "k": 1}, r"d must be an integer in \[1, inf\]"),
        ({"d": 3, "k": 1, "noise_multiplier": -1.0}, "noise_multiplier must be in"),
        ({"d": 3, "k": 1, "orders": [1, 2]}, r"orders must be an integer in \[2, inf\]"),
    ],
)
def test_validation_messages(kwargs, match):
    full = {"orders": [2], "noise_multiplier": 1.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        theorem_3_1_rdp(**full)


def test_bound_choice_is_validated():
    with pytest.raises(ValueError, match="bound must be one of"):
        rdp_model_split(orders=[2], num_submodels=3, noise_multiplier=1.0, bound="loose")


@settings(max_examples=25, deadline=None)
@given(
    d=st.integers(1, 10_000),
    sigma=st.floats(0.2, 20.0),
    factor=st.floats(1.01, 3.0),
    bound=st.sampled_from(["exact", "efficient"]),
)
def test_property_monotone_in_sigma_and_order(d, sigma, factor, bound):
    orders = [2, 3, 5, 8, 13, 21, 34, 55, 89]
    low = theorem_3_1_rdp(orders=orders, d=d, k=1, noise_multiplier=sigma, bound=bound)
    high = theorem_3_1_rdp(orders=orders, d=d, k=1, noise_multiplier=sigma * factor, bound=bound)
    assert np.all(high <= low * (1 + 1e-12))
    assert np.all(np.diff(low) >= -1e-12 * low[1:])
    assert np.all(low >= 0) and np.all(np.isfinite(low))


@settings(max_examples=20, deadline=None)
@given(t=st.integers(2, 60), k=st.integers(1, 60), sigma=st.floats(0.3, 10.0))
def test_property_bis_efficient_dominates_exact_and_is_monotone(t, k, sigma):
    k = min(k, t)
    orders = [2, 3, 4]
    eff = rdp_bis(orders=orders, iterations=t, participations=k, noise_multiplier=sigma, bound="efficient")
    assert np.all(np.diff(eff) >= -1e-12 * eff[1:])
    if exact_forward_affordable(d=t, k=k, max_order=4):
        exact = rdp_bis(orders=orders, iterations=t, participations=k, noise_multiplier=sigma, bound="exact")
        assert np.all(exact <= eff * (1 + 1e-8) + 1e-13)  # equal at alpha = 2 up to the round-up


def test_calibration_meets_target_and_is_tight():
    z = calibrate_model_split(epsilon=4.0, delta=1e-5, num_submodels=3, steps=50, orders=range(2, 65))
    eps = epsilon_from_rdp(
        orders=range(2, 65),
        rdp=rdp_model_split(orders=range(2, 65), num_submodels=3, noise_multiplier=z, steps=50),
        delta=1e-5,
    ).epsilon
    assert eps <= 4.0
    eps_less = epsilon_from_rdp(
        orders=range(2, 65),
        rdp=rdp_model_split(orders=range(2, 65), num_submodels=3, noise_multiplier=z * 0.999, steps=50),
        delta=1e-5,
    ).epsilon
    assert eps_less > 4.0
    zb = calibrate_bis(
        epsilon=4.0, delta=1e-5, iterations=50, participations=1, epochs=10, orders=range(2, 65)
    )
    assert 0.1 < zb < z


def test_calibrate_dropout_is_two_way_split():
    from ampfl.accounting.partition import calibrate_dropout

    kw = {"epsilon": 3.0, "delta": 1e-6, "steps": 30, "orders": range(2, 40)}
    assert calibrate_dropout(**kw) == calibrate_model_split(num_submodels=2, **kw)
