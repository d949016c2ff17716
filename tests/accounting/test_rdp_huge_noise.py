"""The Poisson-subsampled Gaussian RDP at huge noise multipliers: tiny and positive, never NaN or an error.

Before, z ≥ ~1e150 made a term's log-growth −inf, the log-sum-exp 0·inf = NaN, and the function raised
"noise_multiplier is too small" (with RuntimeWarnings) for a noise multiplier that is huge.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

from ampfl.accounting import rdp

ORDERS = [2, 3, 8, 64, 256]


@pytest.mark.parametrize("z", [1e10, 1e100, 1e150, 1e160, 1e200, 1e300, 1e308])
@pytest.mark.parametrize("q", [1e-3, 0.1, 0.9])
def test_huge_noise_gives_a_tiny_positive_bound_without_warnings(z: float, q: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = rdp.rdp_poisson_gaussian(orders=ORDERS, sampling_rate=q, noise_multiplier=z)
    # Subsampling only lowers the Gaussian's RDP α/(2z²); below the smallest double the bound is that double.
    gaussian = np.array([a / (2.0 * z) / z for a in ORDERS])
    assert np.all(got > 0.0)
    assert np.all(got <= np.maximum(gaussian, np.nextafter(0.0, 1.0)))


def test_the_bound_falls_as_the_noise_grows() -> None:
    zs = [1e2, 1e10, 1e100, 1e150, 1e200, 1e300]
    rows = [rdp.rdp_poisson_gaussian(orders=ORDERS, sampling_rate=0.1, noise_multiplier=z) for z in zs]
    for before, after in itertools.pairwise(rows):
        assert np.all(after <= before)
