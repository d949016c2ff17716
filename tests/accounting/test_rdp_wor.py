"""Fixed-size cohorts' RDP without dp-accounting, and a support check that computes no curve (issue 32, 3a).

``rdp_wor.rdp_sample_wor_gaussian`` is the bound of dp-accounting's ``_compute_rdp_sample_wor_gaussian``
(Wang, Balle & Kasiviswanathan 2019, Thm 27) with its forward differences computed without cancellation: it
must equal an independent 400-digit mpmath evaluation of the theorem, and dp-accounting's numbers where its
floating-point differences do not cancel (small σ); where they do, dp-accounting was below the bound
(an ε too small) or far above it. ``RDPAccountant.supports`` is a predicate on the event's structure
(``accountants.rdp.unsupported``): it must refuse exactly what computing the curve refuses, without computing
one.
"""

from __future__ import annotations

import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.accounting.accountants import NeighboringRelation, RDPAccountant, UnsupportedEventError, rdp
from ampfl.accounting.accountants.rdp_wor import rdp_sample_wor_gaussian
from ampfl.accounting.events import (
    BalancedIterationSubsamplingEvent,
    BernoulliMaskEvent,
    ComposedEvent,
    DropoutEvent,
    GaussianEvent,
    LaplaceEvent,
    ModelSplitEvent,
    PoissonSampledEvent,
    PublicParticipationEvent,
    RandomCheckInEvent,
    SampledWithoutReplacementEvent,
    SelfComposedEvent,
)
from ampfl.accounting.orders import DEFAULT_ORDERS

ORDERS = [int(a) for a in DEFAULT_ORDERS if a <= 256]
G = GaussianEvent(noise_multiplier=1.0)


def wor(n: int, m: int, inner=G) -> SampledWithoutReplacementEvent:
    return SampledWithoutReplacementEvent(source_size=n, sample_size=m, event=inner)


def _exact_rdp(q: float, sigma: float, alpha: int) -> float:
    """Thm 27's bound for the subsampled Gaussian (as dp-accounting states it), evaluated in mpmath."""
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workdps(400):
        s2 = mpmath.mpf(sigma) ** 2
        points = [mpmath.mpf(1)] + [mpmath.exp(mpmath.mpf(x * (x + 1)) / (2 * s2)) for x in range(alpha + 2)]

        def diff(k: int) -> object:  # |Δ^k| at 0
            return abs(sum((-1) ** (k - j) * mpmath.binomial(k, j) * points[j] for j in range(k + 1)))

        f2 = 1 / s2
        total = 1 + q**2 * mpmath.binomial(alpha, 2) * min(4 * (mpmath.exp(f2) - 1), 2 * mpmath.exp(f2))
        for i in range(3, alpha + 1):
            lo, hi = diff(2 * (i // 2)), diff(2 * ((i + 1) // 2))
            term = min(4 * mpmath.sqrt(lo * hi), 2 * mpmath.exp((i - 1) * i / (2 * s2)))
            total += mpmath.mpf(q) ** i * mpmath.binomial(alpha, i) * term
        return float(mpmath.log(total) / (alpha - 1))


@pytest.mark.parametrize(
    ("q", "z", "alpha"),
    [(0.9, 12.0, 32), (0.9, 20.0, 200), (0.3, 5.0, 256), (0.1, 0.5, 64), (0.5, 1.0, 128), (0.01, 40.0, 96)],
)
def test_curve_is_the_theorem_evaluated_exactly(q, z, alpha):
    ours = float(rdp_sample_wor_gaussian(q, z, [alpha])[0])
    assert ours == pytest.approx(_exact_rdp(q, z, alpha), rel=1e-9)


def test_dp_accountings_float_differences_were_below_the_bound():
    # the soundness bug this module fixes: an RDP (hence an ε) too small
    ref = dp_rdp._compute_rdp_sample_wor_gaussian(0.9, 12.0, [32.0])[0]
    assert ref < _exact_rdp(0.9, 12.0, 32) * (1 - 1e-6) <= rdp_sample_wor_gaussian(0.9, 12.0, [32])[0]


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(2, 10_000),
    frac=st.floats(0.0001, 1.0),
    z=st.floats(0.3, 3.0),
    orders=st.lists(st.sampled_from(ORDERS), min_size=1, max_size=6),
)
def test_curve_is_dp_accountings_where_its_differences_do_not_cancel(n, frac, z, orders):
    m = max(1, min(n, round(frac * n)))
    ours = rdp_sample_wor_gaussian(m / n, z, orders)
    ref = dp_rdp._compute_rdp_sample_wor_gaussian(m / n, z, [float(a) for a in orders])
    np.testing.assert_allclose(ours, ref, rtol=1e-9)


def test_accountant_matches_dp_accountings_rdp_accountant():
    event = wor(100, 10, GaussianEvent(noise_multiplier=0.6))
    ours = RDPAccountant(orders=ORDERS, neighboring_relation=NeighboringRelation.REPLACE_ONE).compose(
        event, 50
    )
    ref = dp_rdp.RdpAccountant(
        orders=[float(a) for a in ORDERS], neighboring_relation=dp_rdp.NeighborRel.REPLACE_ONE
    ).compose(event.to_dp_accounting(), 50)
    np.testing.assert_allclose(ours.rdp, ref._rdp, rtol=1e-9)
    assert ours.get_epsilon(1e-5) >= ref.get_epsilon(1e-5) * (1 - 1e-9)  # ampfl rounds the conversion up


def test_orders_out_of_range_are_refused():
    with pytest.raises(ValueError, match="orders"):
        rdp_sample_wor_gaussian(0.1, 1.0, [257])


EVENTS = [
    G,
    LaplaceEvent(noise_multiplier=2.0),
    wor(10, 2),
    wor(10, 2, ComposedEvent(events=(G, G))),
    wor(10, 2, LaplaceEvent(noise_multiplier=1.0)),
    PoissonSampledEvent(sampling_rate=0.1, event=G),
    PoissonSampledEvent(sampling_rate=0.1, event=LaplaceEvent(noise_multiplier=1.0)),
    PoissonSampledEvent(sampling_rate=0.1, event=wor(10, 2)),
    SelfComposedEvent(event=ComposedEvent(events=(G, wor(10, 2))), count=3),
    SelfComposedEvent(event=wor(10, 2), count=0),
    PublicParticipationEvent(participation=0.5, event=wor(10, 2)),
    PublicParticipationEvent(participation=0.0, event=wor(10, 2)),
    ModelSplitEvent(num_submodels=3, noise_multiplier=2.0),
    DropoutEvent(noise_multiplier=2.0),
    BalancedIterationSubsamplingEvent(iterations=10, participations=2, noise_multiplier=2.0),
    BernoulliMaskEvent(c=0.3, dim=10),
    RandomCheckInEvent(participation=0.5, sampling_rate=0.5, noise_multiplier=2.0),
]


@pytest.mark.parametrize("relation", list(NeighboringRelation), ids=lambda r: r.name)
@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_support_predicate_agrees_with_computing_the_curve(event, relation):
    try:
        rdp.event_rdp(event, [2, 8, 64], relation)
        refused = None
    except UnsupportedEventError as exc:
        refused = str(exc)
    reason = rdp.unsupported(event, relation)
    assert (reason is None) == (refused is None), (reason, refused)
    if relation == NeighboringRelation.REPLACE_SPECIAL:
        return  # the accountant itself refuses REPLACE_SPECIAL at construction
    acc = RDPAccountant(neighboring_relation=relation)
    assert acc.supports(event) == (refused is None)
    if refused is not None:
        with pytest.raises(UnsupportedEventError):
            acc.compose(event)
        assert acc.get_epsilon(1e-5) == 0.0


def test_support_check_computes_no_curve(monkeypatch):
    calls = []
    monkeypatch.setattr(rdp, "event_rdp", lambda *a: calls.append(a) or pytest.fail("a curve was computed"))
    acc = RDPAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)
    assert acc.supports(wor(100, 10))
    assert not acc.supports(PoissonSampledEvent(sampling_rate=0.1, event=G))
    assert calls == []
