"""The MS-PAFL auditor (issue 10 part 7c): a persistent private submodel breaks subsampling amplification.

Expected values: the mixture weights by hand (module docstring of ampfl.accounting.audit.ms_pafl), the
hockey-stick divergence against a brute-force 2-D trapezoid rule and against the closed form of the
subsampled Gaussian, and the issue's numbers (claims 0.0817 at 4.03e-5; exact 8.10e-4 and 0.151).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ampfl.accounting import ms_pafl
from ampfl.accounting.audit.ms_pafl import (
    COUNTEREXAMPLE_D,
    COUNTEREXAMPLE_D_PRIME,
    UploadMixture,
    audit_ms_pafl_counterexample,
    exact_delta,
    exact_epsilon,
    hockey_stick,
    upload_mixture,
)
from ampfl.accounting.subsampling import subsampled_gaussian_log_delta

Z = ms_pafl.ldp_noise_multiplier(eps_local=1.0, delta_local=1e-4)
STD = 2.0 * Z  # C = 1


def _brute(p: UploadMixture, q: UploadMixture, s: float, eps: float, step: float = 0.1) -> float:
    """∫∫ (P − e^ε Q)₊ by the trapezoid rule on a square grid (independent of the auditor's numerics)."""
    lo, hi = -14 * s - 2, 14 * s + 2
    y = np.arange(lo, hi + step, step)
    y1, y2 = y[:, None], y[None, :]

    def density(mix: UploadMixture) -> np.ndarray:
        out = np.zeros((y.size, y.size))
        for w, (m1, m2) in zip(mix.weights, mix.means, strict=True):
            out += w * np.exp(-0.5 * (((y1 - m1) / s) ** 2 + ((y2 - m2) / s) ** 2)) / (2 * math.pi * s * s)
        return out

    f = np.maximum(density(p) - math.exp(eps) * density(q), 0.0)
    return float(np.trapezoid(np.trapezoid(f, y, axis=1), y))


def test_upload_mixture_by_hand() -> None:
    # D: round 1 draws the target w.p. 1/13 (upload +C, a jumps to -8, round 2 is +C whatever is drawn);
    # else -C, then round 2 draws the target (+C) w.p. 1/13 or a copy (-C). D': always (-C, -C).
    d = upload_mixture(COUNTEREXAMPLE_D)
    assert d.means.tolist() == [[-1.0, -1.0], [-1.0, 1.0], [1.0, 1.0]]
    assert d.weights == pytest.approx([144 / 169, 12 / 169, 1 / 13], abs=1e-15)
    d_prime = upload_mixture(COUNTEREXAMPLE_D_PRIME)
    assert d_prime.means.tolist() == [[-1.0, -1.0]] and d_prime.weights.tolist() == pytest.approx([1.0])
    # round 2's marginal is sampled at 25/169 = 1 - (1 - q)^2, not at q = 1/13
    assert d.weights[d.means[:, 1] > 0].sum() == pytest.approx(25 / 169)
    # unclipped (C = 100): the means are the SGD outputs b = y - a z
    big = upload_mixture(COUNTEREXAMPLE_D, clip=100.0)
    assert sorted(set(big.means[:, 0].tolist())) == [-2.0, 16.0]
    assert sorted(set(big.means[:, 1].tolist())) == [-1.5, 2.0, 12.0, 15.5]


@pytest.mark.parametrize("eps", [0.0, 0.0817, 0.3])
def test_hockey_stick_matches_brute_force(eps: float) -> None:
    d, d_prime = upload_mixture(COUNTEREXAMPLE_D), upload_mixture(COUNTEREXAMPLE_D_PRIME)
    for p, q in ((d, d_prime), (d_prime, d)):
        assert hockey_stick(p, q, noise_std=STD, epsilon=eps) == pytest.approx(
            _brute(p, q, STD, eps), rel=2e-4, abs=1e-9
        )


def test_hockey_stick_with_many_means_matches_brute_force() -> None:
    # Unclipped uploads: four distinct second-round means, so the inner integrand has several sign changes
    # (the scan-and-bracket path of the auditor, not the two-mean closed form).
    d = upload_mixture(COUNTEREXAMPLE_D, clip=100.0)
    d_prime = upload_mixture(COUNTEREXAMPLE_D_PRIME, clip=100.0)
    s = 3.0
    for p, q in ((d, d_prime), (d_prime, d)):
        for eps in (0.5, 2.0):
            got = hockey_stick(p, q, noise_std=s, epsilon=eps)
            assert got == pytest.approx(_brute(p, q, s, eps, step=0.05), rel=1e-3, abs=1e-9)


def test_hockey_stick_one_coordinate_is_the_subsampled_gaussian() -> None:
    # P = (1 - q) N((-1, -1)) + q N((+1, -1)) against Q = N((-1, -1)): the remove direction of the
    # q-subsampled Gaussian with sensitivity 2 (advanced joint convexity holds with equality).
    q = 0.2
    p_mix = UploadMixture(np.asarray([1 - q, q]), np.asarray([[-1.0, -1.0], [1.0, -1.0]]))
    q_mix = UploadMixture(np.asarray([1.0]), np.asarray([[-1.0, -1.0]]))
    for eps in (0.05, 0.4, 1.5):
        exact = math.exp(
            subsampled_gaussian_log_delta(sampling_rate=q, noise_multiplier=STD / 2, epsilon=eps)
        )
        assert hockey_stick(p_mix, q_mix, noise_std=STD, epsilon=eps) == pytest.approx(exact, rel=1e-7)


def test_counterexample_of_issue_10_part_7c() -> None:
    audit = audit_ms_pafl_counterexample()
    assert audit.noise_multiplier == pytest.approx(4.344, abs=1e-3)
    assert audit.sampling_rate == pytest.approx(1 / 13) and audit.rounds == 2
    # the amplified ("tight") analysis claims eps = 0.0817 at delta = 4.03e-5 ...
    assert audit.claimed_delta == 4.03e-5
    assert audit.claimed_epsilon == pytest.approx(0.0817, abs=2e-4)
    # ... but the exact delta at that eps is 8.10e-4 (20x) and the exact eps at that delta is 0.151
    assert audit.exact_delta == pytest.approx(8.10e-4, rel=2e-3)
    assert audit.exact_delta > 19 * audit.claimed_delta
    assert audit.exact_epsilon == pytest.approx(0.151, abs=1e-3)
    assert audit.amplified_violated
    # the sound analyses survive
    assert not audit.recommended_violated and not audit.first_use_violated
    assert audit.exact_delta <= audit.first_use_delta <= audit.recommended_delta
    assert audit.exact_epsilon <= audit.first_use_epsilon <= audit.recommended_epsilon


@pytest.mark.parametrize(
    ("n", "target", "clip"),
    [
        (13, (-0.5, 16.0), 1.0),  # the issue's counterexample
        (2, (-0.5, 16.0), 1.0),
        (4, (-0.5, 16.0), 1.0),
        (5, (2.0, -5.0), 1.0),
        (3, (-1.0, 0.5), 2.0),  # unclipped intermediate means
        (6, (0.5, 3.0), 3.0),
    ],
)
def test_sound_analyses_are_never_violated(n: int, target: tuple[float, float], clip: float) -> None:
    records = ((0.5, -2.0),) * (n - 1) + (target,)
    d, d_prime = upload_mixture(records, clip=clip), upload_mixture(((0.5, -2.0),) * n, clip=clip)
    kw = dict(noise_multiplier=Z, participation=1.0, rounds=2)
    for eps in (0.0, 0.05, 0.2, 0.5, 1.0, 2.0):
        exact = exact_delta(d, d_prime, noise_std=2 * clip * Z, epsilon=eps)
        fu = ms_pafl.first_use_delta(sampling_rate=1 / n, epsilon=eps, **kw)
        rec = ms_pafl.public_participation_delta(epsilon=eps, **kw)
        assert exact <= fu * (1 + 1e-9) + 1e-12 and fu <= rec * (1 + 1e-6)


def test_exact_epsilon_inverts_exact_delta() -> None:
    d, d_prime = upload_mixture(COUNTEREXAMPLE_D), upload_mixture(COUNTEREXAMPLE_D_PRIME)
    eps = exact_epsilon(d, d_prime, noise_std=STD, delta=1e-3)
    assert exact_delta(d, d_prime, noise_std=STD, epsilon=eps) == pytest.approx(1e-3, rel=1e-6)
    assert exact_epsilon(d, d_prime, noise_std=STD, delta=0.5) == 0.0


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="neighbour_records"):
        audit_ms_pafl_counterexample(neighbour_records=COUNTEREXAMPLE_D_PRIME[:5])
    with pytest.raises(ValueError, match="records"):
        upload_mixture([])
    with pytest.raises(ValueError, match="noise_std"):
        hockey_stick(
            upload_mixture(COUNTEREXAMPLE_D), upload_mixture(COUNTEREXAMPLE_D), noise_std=0.0, epsilon=1.0
        )
