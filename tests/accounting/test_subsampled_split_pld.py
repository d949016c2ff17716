"""PLD of Poisson-subsampled model splitting (d <= 2) and dropout (002), against independent computations."""

import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, optimize, special, stats

from ampfl.accounting.accountants import PLDAccountant, RDPAccountant
from ampfl.accounting.calibrate import calibrate
from ampfl.accounting.events import DropoutEvent, GaussianEvent, ModelSplitEvent, PoissonSampledEvent
from ampfl.accounting.partition.pld import model_split_pld
from ampfl.accounting.partition.subsampled_pld import poisson_subsample_pld, subsampled_split_pld

H = 1e-3  # a coarse grid keeps the tests fast; the error bound scales with it


def _exact(eps, q, c, aw):
    """(remove, add) hockey stick of (1-q)N(0,I2) + q N(c,1) x 1/2[N(aw,1) + N(-aw,1)] vs N(0,I2).

    Independent of the PLD code: for fixed w the likelihood ratio is monotone in s, so the s-integral is
    closed form (normal CDFs); the w-integral is adaptive quadrature.
    """
    phi, big = stats.norm.pdf, math.exp(eps)

    def k(w):
        return math.exp(-aw * aw / 2) * math.cosh(aw * w)

    def mix(w):
        return 0.5 * (phi(w - aw) + phi(w + aw))

    def remove(w):
        s = (math.log((big - 1 + q) / (q * k(w))) + c * c / 2) / c
        return (1 - q - big) * phi(w) * special.ndtr(-s) + q * mix(w) * special.ndtr(c - s)

    def add(w):
        y = 1 / big - 1 + q
        if y <= 0:
            return 0.0
        s = (math.log(y / (q * k(w))) + c * c / 2) / c
        return (1 - big * (1 - q)) * phi(w) * special.ndtr(s) - big * q * mix(w) * special.ndtr(s - c)

    lim = 14 + aw
    opts = {"limit": 400, "epsabs": 1e-17, "epsrel": 1e-11}
    return integrate.quad(remove, -lim, lim, **opts)[0], integrate.quad(add, -lim, lim, **opts)[0]


def _shifts(d, z, z_ns=None):
    """(c, a'): Eq. 2 of the module (what the reduction claims)."""
    a, b = 1 / z, (0.0 if z_ns is None else 1 / z_ns)
    return (math.sqrt(a * a + b * b), 0.0) if d == 1 else (math.sqrt(a * a / 2 + b * b), a / math.sqrt(2))


def test_the_reduction_matches_a_direct_grid_integration_in_the_original_coordinates():
    # split part on (x1, x2) with one block each, non-split part on x3; no rotation used here
    q, z, z_ns, eps = 0.3, 1.0, 1.5, 0.4
    x = np.linspace(-7.0, 8.0, 241)
    x1, x2, x3 = np.meshgrid(x, x, x, indexing="ij", sparse=True)
    phi = stats.norm.pdf
    null = phi(x1) * phi(x2) * phi(x3)
    one = 0.5 * (phi(x1 - 1 / z) * phi(x2) + phi(x1) * phi(x2 - 1 / z)) * phi(x3 - 1 / z_ns)
    p = (1 - q) * null + q * one
    dx = x[1] - x[0]
    grid_remove = float(np.maximum(p - math.exp(eps) * null, 0).sum() * dx**3)
    grid_add = float(np.maximum(null - math.exp(eps) * p, 0).sum() * dx**3)
    remove, add = _exact(eps, q, *_shifts(2, z, z_ns))
    assert remove == pytest.approx(grid_remove, rel=2e-3)
    assert add == pytest.approx(grid_add, rel=2e-3, abs=1e-9)


@pytest.mark.parametrize(("q", "z", "z_ns"), [(0.02, 1.0, None), (0.2, 2.0, 3.0), (0.6, 0.8, None)])
def test_two_blocks_are_never_below_the_exact_curve_and_within_one_percent(q, z, z_ns):
    pld = subsampled_split_pld(
        num_submodels=2,
        noise_multiplier=z,
        sampling_rate=q,
        nonsplit_noise_multiplier=z_ns,
        value_discretization_interval=H,
    )
    c, aw = _shifts(2, z, z_ns)
    for eps in (0.0, 0.05, 0.3, 1.0, 2.0):
        remove, add = _exact(eps, q, c, aw)
        exact = max(remove, add)
        if exact < 1e-14:
            continue
        assert pld._pmf_remove.get_delta_for_epsilon(eps) >= remove * (1 - 1e-9)
        assert pld._pmf_add.get_delta_for_epsilon(eps) >= add * (1 - 1e-9)
        assert pld.get_delta_for_epsilon(eps) <= exact * 1.01 + 1e-12


def test_stated_error_bound_on_epsilon_one_step():
    # every loss is at most e_in + h above the exact one (e_in <= 2 h here): eps(delta) within 3h
    q, z = 0.1, 1.0
    c, aw = _shifts(2, z)
    pld = subsampled_split_pld(
        num_submodels=2, noise_multiplier=z, sampling_rate=q, value_discretization_interval=H
    )
    got = pld.get_epsilon_for_delta(1e-6)
    exact = optimize.brentq(lambda e: max(_exact(e, q, c, aw)) - 1e-6, got - 0.05, got + 1e-6, xtol=1e-8)
    assert exact - 1e-7 <= got <= exact + 3 * H


def test_one_block_reduces_to_dp_accountings_subsampled_gaussian():
    q, z, z_ns = 0.05, 1.2, 2.0
    c = _shifts(1, z, z_ns)[0]
    ref = pld_lib.from_gaussian_mechanism(
        1.0, sensitivity=c, sampling_prob=q, pessimistic_estimate=True, value_discretization_interval=H
    )
    one = subsampled_split_pld(
        num_submodels=1,
        noise_multiplier=z,
        sampling_rate=q,
        nonsplit_noise_multiplier=z_ns,
        value_discretization_interval=H,
    )
    # the generic subsampling of the unsubsampled Gaussian PLD (the d = 2 code path) agrees too
    inner = pld_lib.from_gaussian_mechanism(1.0, sensitivity=c, value_discretization_interval=H)
    generic = poisson_subsample_pld(inner, q, H)
    for eps in (0.0, 0.1, 0.5, 2.0):
        assert one.get_delta_for_epsilon(eps) == ref.get_delta_for_epsilon(eps)
        exact = max(_exact(eps, q, c, 0.0))
        assert exact * (1 - 1e-9) <= generic.get_delta_for_epsilon(eps) <= exact * 1.01 + 1e-13


def test_full_sampling_is_the_unsubsampled_split():
    full = subsampled_split_pld(
        num_submodels=2, noise_multiplier=1.3, sampling_rate=1.0, value_discretization_interval=H
    )
    ref = model_split_pld(num_submodels=2, noise_multiplier=1.3, value_discretization_interval=H)
    again = poisson_subsample_pld(ref, 1.0, H)  # the transform at q = 1 is the identity on a grid PLD
    for eps in (0.0, 0.5, 2.0):
        want = ref.get_delta_for_epsilon(eps)
        assert full.get_delta_for_epsilon(eps) == pytest.approx(want, rel=1e-9)
        assert again.get_delta_for_epsilon(eps) == pytest.approx(want, rel=1e-6)


@settings(max_examples=4, deadline=None)
@given(q=st.floats(0.01, 0.5), z=st.floats(0.8, 4.0), steps=st.integers(1, 40), dropout=st.booleans())
def test_pld_is_never_looser_than_zhu_wang_rdp(q, z, steps, dropout):
    inner = (
        DropoutEvent(noise_multiplier=z) if dropout else ModelSplitEvent(num_submodels=2, noise_multiplier=z)
    )
    event = PoissonSampledEvent(sampling_rate=q, event=inner)
    pld = PLDAccountant(value_discretization_interval=H).compose(event, steps).get_epsilon(1e-6)
    rdp = RDPAccountant().compose(event, steps).get_epsilon(1e-6)
    plain = PoissonSampledEvent(sampling_rate=q, event=GaussianEvent(noise_multiplier=z))
    no_split = PLDAccountant(value_discretization_interval=H).compose(plain, steps).get_epsilon(1e-6)
    assert pld <= rdp * (1 + 1e-9)
    assert pld <= no_split * (1 + 1e-6)  # the split credit never costs


@settings(max_examples=3, deadline=None)
@given(q=st.floats(0.02, 0.6), z=st.floats(0.8, 3.0), factor=st.floats(1.1, 2.0))
def test_monotone_in_the_rate_and_the_noise(q, z, factor):
    def delta(rate, noise):
        pld = subsampled_split_pld(
            num_submodels=2, noise_multiplier=noise, sampling_rate=rate, value_discretization_interval=H
        )
        return np.array([pld.get_delta_for_epsilon(e) for e in (0.0, 0.2, 1.0)])

    base = delta(q, z)
    assert np.all(delta(min(1.0, q * factor), z) >= base * (1 - 1e-9))
    assert np.all(delta(q, z * factor) <= base * (1 + 1e-9))


def test_calibration_round_trip_and_the_noise_saved():
    def event(x):
        return PoissonSampledEvent(
            sampling_rate=0.05, event=ModelSplitEvent(num_submodels=2, noise_multiplier=x)
        )

    kw = {"value_discretization_interval": H}
    z = calibrate(
        event, target_epsilon=1.0, target_delta=1e-5, count=30, accountant="pld", accountant_kwargs=kw
    )
    eps = PLDAccountant(**kw).compose(event(z), 30).get_epsilon(1e-5)
    assert 0.97 <= eps <= 1.0
    assert RDPAccountant().compose(event(z), 30).get_epsilon(1e-5) > 1.0  # RDP would need more noise
    assert PLDAccountant(**kw).compose(event(z * 0.99), 30).get_epsilon(1e-5) > 1.0


def test_cli_rate_with_the_pld_accountant(cli_json):
    import argparse

    from ampfl.commands.partition import wants_pld

    argv = "account dropout --noise-multiplier 1.5 --steps 20 --rate 0.1 --delta 1e-6 --accountant pld"
    out = cli_json(argv.split())
    assert out["accountant"] == "pld" and out["analysis"] == "subsampled-split-pld"
    assert out["sampling_rate"] == 0.1
    event = PoissonSampledEvent(sampling_rate=0.1, event=DropoutEvent(noise_multiplier=1.5))
    assert out["epsilon"] == pytest.approx(PLDAccountant().compose(event, 20).get_epsilon(1e-6), rel=1e-12)
    rdp = RDPAccountant().compose(event, 20).get_epsilon(1e-6)
    assert out["analyses"]["rdp"]["epsilon"] == pytest.approx(rdp, rel=1e-12)
    assert out["epsilon"] < rdp and out["epsilon"] < out["analyses"]["no-split"]["epsilon"]
    # pld is the default for every d, with or without --rate; --orders (an RDP setting) opts out
    assert wants_pld(argparse.Namespace(accountant=None, rate=0.1, orders=None))
    assert not wants_pld(argparse.Namespace(accountant=None, rate=0.1, orders="2,3"))


def test_dp_sgd_split_runs_with_poisson_sampling_on_the_pld_accountant():
    # the algorithm asks the privacy spine (fl.privacy.planned_epsilon) for split_credit = "auto"
    from ampfl.fl.algorithms.dp_sgd_partition import DPSGDPartition
    from ampfl.fl.config import PrivacyConfig
    from ampfl.fl.data import load_dataset
    from ampfl.fl.privacy.run_accountant import RunAccountant
    from ampfl.fl.task import Task

    digits = load_dataset("digits")
    task = Task(digits, [np.arange(i, i + 1) for i in range(20)], model="mlp", model_options={"hidden": [8]})
    privacy = PrivacyConfig.model_validate({"accountant": "pld"})
    params = DPSGDPartition.Params(
        num_local_steps=1,
        batch_size=1,
        learning_rate=1.0,
        sampling="poisson",
        sampling_rate=0.2,
        num_submodels=2,
        noise_multiplier=1.2,
        num_rounds=3,
        expected_clients=0.2 * task.num_clients,  # the declared public m̄ (issue 26)
    )
    algo = DPSGDPartition(params, task, seed=3, privacy=privacy)
    assert algo.credit == "split"
    ledger = RunAccountant(privacy, algo)
    for r in range(3):
        ledger.compose(algo.round_events(r))
    spent = ledger.epsilon()
    assert 0.0 < spent < RDPAccountant().compose(_event_of(algo), 3).get_epsilon(1e-5)


def _event_of(algo):
    [(event, count)] = algo.round_events(0)
    assert count == 1 and isinstance(event, PoissonSampledEvent) and isinstance(event.event, ModelSplitEvent)
    return event


def test_three_blocks_subsample_the_log_sum_pld():
    # d >= 3: the subsampling transform applies to the pessimistic log-sum PLD of allocation_pld
    split = ModelSplitEvent(num_submodels=3, noise_multiplier=0.9)
    sampled = PoissonSampledEvent(sampling_rate=0.2, event=split)
    eps = PLDAccountant().compose(sampled, 12).get_epsilon(1e-5)
    assert eps < RDPAccountant().compose(sampled, 12).get_epsilon(1e-5)
    assert eps < PLDAccountant().compose(split, 12).get_epsilon(1e-5)
    whole = PoissonSampledEvent(sampling_rate=1.0, event=split)
    assert PLDAccountant().compose(whole, 3).get_epsilon(1e-5) == pytest.approx(
        PLDAccountant().compose(split, 3).get_epsilon(1e-5), rel=1e-3
    )
