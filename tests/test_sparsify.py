"""Top-κ sparsifier (Algorithm 2 of paper 001) and the ω(κ) models of its Lemma 3."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ampfl.sparsify import kept_count, sparsification_error_bound, top_kappa


def _loop_reference(x, kappa):
    # Plain per-row reference: sort indices by decreasing |x| (stable), keep the first ceil(kappa d).
    x = np.atleast_2d(x)
    out = np.zeros_like(x)
    for r, row in enumerate(x):
        k = kept_count(kappa, row.size)
        idx = sorted(range(row.size), key=lambda j: -abs(row[j]))[:k]
        out[r, idx] = row[idx]
    return out


def test_known_vector():
    x = np.array([0.1, -3.0, 2.0, 0.5, -0.2])
    np.testing.assert_array_equal(top_kappa(x, 0.4), [0.0, -3.0, 2.0, 0.0, 0.0])
    np.testing.assert_array_equal(top_kappa(x, 0.0), np.zeros(5))
    np.testing.assert_array_equal(top_kappa(x, 1.0), x)
    assert top_kappa(x, 1.0) is not x


@pytest.mark.parametrize(
    ("kappa", "dim", "expected"), [(0.3, 10, 3), (0.31, 10, 4), (0.0, 7, 0), (1.0, 7, 7), (1e-9, 5, 1)]
)
def test_kept_count_is_ceiling(kappa, dim, expected):
    assert kept_count(kappa, dim) == expected


@settings(max_examples=40, deadline=None)
@given(
    x=hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=12),
        elements=st.floats(-1e3, 1e3),
    ),
    kappa=st.floats(0.0, 1.0),
)
def test_rows_match_loop_reference_and_lemma_3_worst_case(x, kappa):
    out = top_kappa(x, kappa)
    np.testing.assert_array_equal(out, _loop_reference(x, kappa))
    # Lemma 3 with the worst-case omega = 1 - kappa holds for every row (top-k keeps >= k/d of the energy).
    err = np.sum((out - x) ** 2, axis=1)
    bound = (1.0 - kept_count(kappa, x.shape[1]) / x.shape[1]) * np.sum(x**2, axis=1)
    assert np.all(err <= bound * (1 + 1e-12) + 1e-12)
    assert np.all(np.count_nonzero(out, axis=1) <= kept_count(kappa, x.shape[1]))


def test_squared_omega_is_not_a_worst_case_bound():
    # Equal magnitudes: the error is exactly (1 - kappa)|x|^2 > (1 - kappa)^2 |x|^2 (docs/planner.md).
    x = np.ones(10)
    err = np.sum((top_kappa(x, 0.5) - x) ** 2)
    assert err == pytest.approx(sparsification_error_bound(0.5) * 10)
    assert err > sparsification_error_bound(0.5, model="squared") * 10


def test_post_processing_order_keeps_shape_and_dtype():
    rng = np.random.default_rng(0)
    noisy = rng.normal(size=(4, 100)).astype(np.float32)
    out = top_kappa(noisy, 0.1)
    assert out.shape == (4, 100) and out.dtype == np.float32
    assert np.all(np.count_nonzero(out, axis=1) == 10)


@pytest.mark.parametrize(
    ("x", "kappa", "message"),
    [
        (np.ones(3), 1.5, "kappa must be in"),
        (np.ones(3), True, "kappa must be a real number"),
        (np.ones((2, 2, 2)), 0.5, "x must have shape"),
        (np.array([1.0, np.nan]), 0.5, "x must be finite"),
        (np.array(["a", "b"]), 0.5, "real-valued"),
    ],
)
def test_invalid_input(x, kappa, message):
    with pytest.raises(ValueError, match=message):
        top_kappa(x, kappa)
    with pytest.raises(ValueError, match="model must be one of"):
        sparsification_error_bound(0.5, model="exact")
