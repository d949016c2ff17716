"""The accountant contract, run against every accountant (issue 10 part 9), plus known values.

Known values come from independent computations: the analytic Gaussian mechanism (Balle & Wang 2018,
``gaussian.gaussian_log_delta``), dp-accounting's own RDP accountant, and the exact binomial sum
δ(ε) = Σ_k Bin(k; T, p) δ_Gauss(ε; √k / z) for public participation.
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ampfl.accounting.accountants import (
    NeighboringRelation,
    PLDAccountant,
    RDPAccountant,
    UnsupportedEventError,
    make_accountant,
)
from ampfl.accounting.calibrate import CALIBRATION_RTOL, UnreachableTarget, calibrate
from ampfl.accounting.events import (
    BalancedIterationSubsamplingEvent,
    ComposedEvent,
    GaussianEvent,
    ModelSplitEvent,
    MSPAFLRoundEvent,
    PoissonSampledEvent,
    PublicParticipationEvent,
    RandomCheckInEvent,
    SampledWithoutReplacementEvent,
    SelfComposedEvent,
)
from ampfl.accounting.gaussian import gaussian_log_delta
from ampfl.accounting.orders import DEFAULT_ORDERS


def poisson(q: float, z: float) -> PoissonSampledEvent:
    return PoissonSampledEvent(sampling_rate=q, event=GaussianEvent(noise_multiplier=z))


class AccountantContract:
    """Every accountant passes these; subclasses set ``kind`` and ``rel`` (tolerance of exact identities)."""

    kind = ""
    rel = 0.0

    def fresh(self):
        return make_accountant(self.kind)

    def test_empty_is_zero(self):
        acc = self.fresh()
        assert acc.get_epsilon(1e-5) == 0.0
        assert acc.get_delta(0.5) == 0.0

    def test_unsupported_nested_event_names_it(self):
        bad = SampledWithoutReplacementEvent(
            source_size=10, sample_size=2, event=GaussianEvent(noise_multiplier=1.0)
        )
        nested = SelfComposedEvent(
            event=ComposedEvent(events=(GaussianEvent(noise_multiplier=1.0), bad)), count=3
        )
        acc = self.fresh()
        assert not acc.supports(nested)
        with pytest.raises(UnsupportedEventError, match=r"SampledWithoutReplacement|replace"):
            acc.compose(nested)
        assert acc.get_epsilon(1e-5) == 0.0  # a failed compose changes nothing

    def test_composition_forms_agree(self):
        e = poisson(0.05, 1.2)
        a = self.fresh().compose(e, 6)
        b = self.fresh().compose(SelfComposedEvent(event=e, count=6))
        c = self.fresh()
        for _ in range(6):
            c.compose(e)
        d = self.fresh().compose(ComposedEvent(events=(e,) * 6))
        eps = [x.get_epsilon(1e-6) for x in (a, b, c, d)]
        np.testing.assert_allclose(eps, eps[0], rtol=self.rel + 1e-12)

    def test_monotone_in_noise_count_and_rate(self):
        def eps(q, z, n):
            return self.fresh().compose(poisson(q, z), n).get_epsilon(1e-5)

        assert eps(0.1, 1.0, 10) > eps(0.1, 1.5, 10) > eps(0.1, 3.0, 10)
        assert eps(0.1, 1.0, 10) < eps(0.1, 1.0, 20) < eps(0.1, 1.0, 40)
        assert eps(0.02, 1.0, 10) < eps(0.1, 1.0, 10) < eps(0.5, 1.0, 10)

    def test_state_round_trip_is_exact_and_json_safe(self):
        acc = (
            self.fresh()
            .compose(poisson(0.1, 1.1), 5)
            .compose(MSPAFLRoundEvent(participation=0.3, noise_multiplier=3.0), 2)
        )
        state = json.loads(json.dumps(acc.state_dict()))
        back = self.fresh().load_state_dict(state)
        assert back.get_epsilon(1e-5) == acc.get_epsilon(1e-5)
        assert back.get_delta(1.0) == acc.get_delta(1.0)
        assert [n for _, n in back.events()] == [5, 2]
        with pytest.raises(ValueError, match="snapshot"):
            make_accountant("pld" if self.kind == "rdp" else "rdp").load_state_dict(state)

    def test_would_exceed_agrees_with_compose(self):
        acc = self.fresh().compose(poisson(0.1, 1.0), 10)
        before = acc.get_epsilon(1e-5)
        e = poisson(0.1, 1.0)
        after = copy.deepcopy(acc).compose(e, 5).get_epsilon(1e-5)
        assert acc.would_exceed(e, after * 0.999, 1e-5, count=5)
        assert not acc.would_exceed(e, after * 1.001, 1e-5, count=5)
        assert acc.get_epsilon(1e-5) == before  # dry run

    def test_delta_epsilon_inverse(self):
        acc = self.fresh().compose(poisson(0.05, 1.0), 50)
        for delta in (1e-3, 1e-6, 1e-9):
            eps = acc.get_epsilon(delta)
            back = acc.get_delta(eps)
            assert back <= delta * (1 + 1e-6)
            assert back >= delta * 0.5  # the pair is tight, not merely valid

    @pytest.mark.parametrize(("q", "steps", "target"), [(0.01, 100, 1.0), (0.001, 1000, 0.1), (1.0, 10, 2.0)])
    def test_calibration_sound_and_within_half_a_percent(self, q, steps, target):
        z = calibrate(
            lambda s: poisson(q, s),
            target_epsilon=target,
            target_delta=1e-6,
            count=steps,
            accountant=self.kind,
        )
        eps = self.fresh().compose(poisson(q, z), steps).get_epsilon(1e-6)
        assert eps <= target
        smaller = self.fresh().compose(poisson(q, z / (1 + 0.005)), steps).get_epsilon(1e-6)
        assert smaller > target

    def test_unreachable_target_is_an_error_naming_the_floor(self):
        with pytest.raises(UnreachableTarget, match="unreachable") as info:
            calibrate(
                lambda s: MSPAFLRoundEvent(participation=1.0, noise_multiplier=s),
                target_epsilon=1e-6,
                target_delta=1e-12,
                count=10_000,
                accountant=self.kind,
                upper=100.0,
            )
        assert info.value.smallest_epsilon > 1e-6


class TestRDPAccountant(AccountantContract):
    kind = "rdp"
    rel = 0.0

    def test_poisson_matches_dp_accounting(self):
        # Independent: dp-accounting's RdpAccountant on the same integer orders.
        orders = [o for o in DEFAULT_ORDERS if o <= 512]
        ours = RDPAccountant(orders=orders).compose(poisson(0.001, 2.7), 100)
        ref = dp_rdp.RdpAccountant(orders=[float(o) for o in orders])
        ref.compose(
            dp_event.SelfComposedDpEvent(
                dp_event.PoissonSampledDpEvent(0.001, dp_event.GaussianDpEvent(2.7)), 100
            )
        )
        np.testing.assert_allclose(ours.rdp, ref.rdp, rtol=1e-9)
        assert ours.get_epsilon(1e-5) == pytest.approx(ref.get_epsilon(1e-5), rel=1e-9)

    def test_rdp_jump_between_orders_96_and_112_is_the_true_curve(self):
        # Issue 10 reports RDP 1e-3 at α = 96 and 71.2 at α = 112 for q = 0.001, z = 2.7, T = 100 as an
        # instability; dp-accounting's independent implementation gives the same jump (a phase transition of
        # the subsampled Gaussian's RDP: the ℓ = α term γ^α e^{α(α−1)/(2z²)} takes over).
        vals = 100 * dp_rdp._compute_rdp_poisson_subsampled_gaussian(0.001, 2.7, [96.0, 112.0])
        ours = RDPAccountant(orders=[96, 112]).compose(poisson(0.001, 2.7), 100).rdp
        np.testing.assert_allclose(ours, vals, rtol=1e-9)
        assert ours[0] < 1e-3 < 70 < ours[1]

    def test_grid_reaches_the_orders_small_epsilon_needs(self):
        # ε ≥ log(1/δ)/(α − 1): ε = 0.01 at δ = 1e-6 needs α ≥ 1383.
        assert max(DEFAULT_ORDERS) >= 10_000
        z = calibrate(lambda s: poisson(0.001, s), target_epsilon=0.01, target_delta=1e-5, count=100)
        acc = RDPAccountant().compose(poisson(0.001, z), 100)
        assert acc.get_epsilon(1e-5) <= 0.01

    def test_replace_one_supports_sampling_without_replacement(self):
        acc = RDPAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)
        e = SampledWithoutReplacementEvent(
            source_size=100, sample_size=10, event=GaussianEvent(noise_multiplier=0.5)
        )
        assert acc.compose(e, 10).get_epsilon(1e-5) > 0
        assert not acc.supports(poisson(0.1, 1.0))

    def test_model_split_uses_partition_bound(self):
        acc = RDPAccountant().compose(ModelSplitEvent(num_submodels=3, noise_multiplier=2.0), 10)
        plain = RDPAccountant().compose(GaussianEvent(noise_multiplier=2.0), 10)
        assert 0 < acc.get_epsilon(1e-5) < plain.get_epsilon(1e-5)


class TestPLDAccountant(AccountantContract):
    kind = "pld"
    rel = 2e-3  # self_compose vs repeated compose: different (pessimistic) tail truncation

    @pytest.mark.parametrize(("z", "eps"), [(1.0, 0.5), (2.0, 0.2), (0.7, 2.0)])
    def test_gaussian_matches_analytic(self, z, eps):
        exact = math.exp(gaussian_log_delta(sigma=z, epsilon=eps))
        got = PLDAccountant().compose(GaussianEvent(noise_multiplier=z)).get_delta(eps)
        assert exact <= got <= exact * 1.01 + 1e-12

    @pytest.mark.parametrize(("p", "z", "rounds"), [(0.5, 4.8155, 40), (0.1, 1.0, 20), (0.9, 2.0, 5)])
    def test_public_participation_equals_binomial_sum(self, p, z, rounds):
        # δ(ε) = Σ_k Bin(k; T, p) δ_Gauss(ε; √k/z): participation is public and data-independent.
        acc = PLDAccountant().compose(
            PublicParticipationEvent(participation=p, event=GaussianEvent(noise_multiplier=z)), rounds
        )
        for eps in (0.5, 1.0, 3.0):
            ks = np.arange(1, rounds + 1)
            terms = [
                stats.binom.pmf(k, rounds, p)
                * math.exp(gaussian_log_delta(sigma=z / math.sqrt(k), epsilon=eps))
                for k in ks
            ]
            exact = float(sum(terms))
            got = acc.get_delta(eps)
            assert exact * (1 - 1e-9) <= got <= exact * 1.02 + 1e-12

    def test_ms_pafl_value_of_issue_10(self):
        # T = 40, p = 0.5, ε_l = 0.902, δ_l = 1e-4: z = sqrt(2 ln(1.25/δ_l))/ε_l (000 Lemma 1, σ/(2C)).
        # Issue 10 part 7c: ε ≈ 4.24.
        z = math.sqrt(2 * math.log(1.25 / 1e-4)) / 0.902
        acc = PLDAccountant().compose(MSPAFLRoundEvent(participation=0.5, noise_multiplier=z), 40)
        assert acc.get_epsilon(1e-5) == pytest.approx(4.24, abs=0.01)

    def test_random_checkin_is_its_dominating_pair(self):
        # participation revealed: Thm 5.2's pair; hidden (the default): a tighter pair (issue 11-f)
        kw = {"participation": 0.1, "sampling_rate": 0.01, "noise_multiplier": 1.0, "local_dataset_size": 100}
        e = RandomCheckInEvent(**kw, participation_hidden=False)
        a = PLDAccountant().compose(e, 30).get_epsilon(1e-6)
        b = PLDAccountant().compose(e.dominating(), 30).get_epsilon(1e-6)
        assert a == b
        assert PLDAccountant().compose(RandomCheckInEvent(**kw), 30).get_epsilon(1e-6) < a

    def test_bis_with_k_above_one_is_supported(self):
        bis = BalancedIterationSubsamplingEvent(iterations=4, participations=2, noise_multiplier=1.0)
        assert PLDAccountant().supports(bis)  # k > 1 through k = 1 blocks (allocation_pld)


@settings(max_examples=25, deadline=None)
@given(
    p=st.floats(0.01, 1.0),
    z=st.floats(0.5, 10.0),
    rounds=st.integers(1, 50),
)
def test_public_participation_rdp_between_zero_and_inner(p, z, rounds):
    # Property: 0 ≤ RDP_p(α) ≤ RDP_inner(α), equality at p = 1; and it increases with p.
    g = GaussianEvent(noise_multiplier=z)
    inner = RDPAccountant().compose(g, rounds).rdp
    mixed = RDPAccountant().compose(PublicParticipationEvent(participation=p, event=g), rounds).rdp
    assert np.all(mixed >= 0) and np.all(mixed <= inner * (1 + 1e-12) + 1e-15)
    more = (
        RDPAccountant()
        .compose(PublicParticipationEvent(participation=min(1.0, p * 1.5), event=g), rounds)
        .rdp
    )
    assert np.all(more >= mixed * (1 - 1e-12))


def test_make_accountant_names_the_parameter():
    with pytest.raises(ValueError, match="accountant must be one of rdp, pld"):
        make_accountant("moments")


def test_calibration_rtol_keeps_half_a_percent():
    assert CALIBRATION_RTOL < 0.005


def test_pld_calibration_coarse_to_fine_is_the_fine_answer():
    # The coarse PLD only seeds the search: the result meets the target under the default (fine) PLD and
    # is within 0.5% of its smallest noise multiplier.
    make = lambda s: poisson(0.02, s)  # noqa: E731
    z = calibrate(make, target_epsilon=1.0, target_delta=1e-6, count=200, accountant="pld")
    assert PLDAccountant().compose(make(z), 200).get_epsilon(1e-6) <= 1.0
    assert PLDAccountant().compose(make(z / 1.005), 200).get_epsilon(1e-6) > 1.0
