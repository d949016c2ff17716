"""The four algorithms on tiny hand-checkable cases, their privacy events, and state round trips."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ampfl.accounting.accountants import NeighboringRelation, RDPAccountant, make_accountant
from ampfl.accounting.events import (
    GaussianEvent,
    MSPAFLRoundEvent,
    PoissonSampledEvent,
    RandomCheckInEvent,
    SampledWithoutReplacementEvent,
)
from ampfl.accounting.ms_pafl import ldp_sigma
from ampfl.accounting.random_checkin import calibrate_noise_multiplier
from ampfl.fl.algorithms import ALGORITHMS
from ampfl.fl.algorithms.base import ROLE_NOISE
from ampfl.fl.config import PrivacyConfig
from ampfl.fl.data import Dataset
from ampfl.fl.privacy.calibration import calibrate_algorithm
from ampfl.fl.task import Task


def _dataset(n_per_client: int = 8, clients: int = 2, features: int = 3, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    n = n_per_client * clients
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    return Dataset("tiny", x, y, x[:6].copy(), y[:6].copy(), 2)


def _task(n_per_client: int = 8, clients: int = 2, **kw: object) -> Task:
    ds = _dataset(n_per_client, clients)
    idx = [np.arange(i * n_per_client, (i + 1) * n_per_client) for i in range(clients)]
    return Task(ds, idx, model="logreg", model_options=dict(kw))


def _make(name: str, task: Task, seed: int = 0, privacy: PrivacyConfig | None = None, **params: object):  # type: ignore[no-untyped-def]
    cls = ALGORITHMS[name]
    if privacy is None:  # reproducible: these tests compare separately built algorithms bit for bit
        privacy = PrivacyConfig.model_validate({"reproducible": True})
    # The public constants a private run declares (issue 26), set here to the values the data would give,
    # so that the numbers below are those of the formulas; tests/fl/test_release_scale.py checks the rule.
    if name == "dp_dsgd_rp":
        params.setdefault("local_dataset_size", int(task.client_sizes().max()))
    if name == "dp_fedavg" and params.get("client_sampling") == "poisson":
        params.setdefault("expected_clients", float(params["sampling_rate"]) * task.num_clients)  # type: ignore[arg-type]
    algorithm = cls(cls.Params(**params), task, seed=seed, privacy=privacy)
    calibrate_algorithm(algorithm, privacy)  # a target ε is calibrated by the run, as ampfl run does
    return algorithm


def _epsilon(alg, rounds: int, delta: float = 1e-5) -> float:  # type: ignore[no-untyped-def]
    """ε of ``rounds`` rounds of ``alg``'s events by a fresh RDP accountant under its relation."""
    acc = RDPAccountant(neighboring_relation=alg.neighboring_relation)
    for r in range(rounds):
        for event, count in alg.round_events(r):
            acc.compose(event, count)
    return acc.get_epsilon(delta)


def _full_batch_grad(task: Task, w: torch.Tensor, idx: np.ndarray) -> torch.Tensor:
    """Gradient of the mean Eq. (21) loss at w over examples idx (closed form: -mean(σ(-y w.x) y x))."""
    x = torch.from_numpy(task.dataset.x_train[idx])
    y = 2.0 * torch.from_numpy(task.dataset.y_train[idx]).float() - 1.0
    return -(torch.sigmoid(-y * (x @ w))[:, None] * y[:, None] * x).mean(0)


def test_registry() -> None:
    assert {"fedavg", "local_only", "dp_fedavg", "ms_pafl", "dp_dsgd_rp"} <= set(ALGORITHMS)
    for cls in ALGORITHMS.values():
        with pytest.raises(ValueError):
            cls.Params(unknown_key=1)


def test_fedavg_one_step_full_batch_by_hand() -> None:
    task = _task()
    alg = _make("fedavg", task, cohort_size=2, num_local_steps=1, batch_size=8, learning_rate=0.5)
    m = alg.run_round(0)
    assert m["participants"] == 2.0
    # one step from w = 0 on each client's whole data (WOR with Qb = |D_i|), then the mean (Eq. 3)
    expected = torch.stack(
        [-0.5 * _full_batch_grad(task, torch.zeros(3), np.arange(i * 8, i * 8 + 8)) for i in range(2)]
    ).mean(0)
    assert torch.allclose(alg.global_params, expected, atol=1e-6)
    assert alg.round_events(0) == [] and alg.privacy_unit is None  # no guarantee: the run reports ε = ∞
    assert 0.0 <= alg.evaluate()["accuracy"] <= 1.0


def test_dp_fedavg_clipping_and_noise_free_update() -> None:
    task = _task()
    alg = _make(
        "dp_fedavg",
        task,
        cohort_size=2,
        num_local_steps=1,
        batch_size=8,
        learning_rate=0.5,
        clip=1e-3,
        noise_multiplier=0.0,
    )
    assert alg.privacy_unit is None and alg.round_events(0) == []  # zero noise: no guarantee
    alg.run_round(0)
    deltas = torch.stack(
        [-0.5 * _full_batch_grad(task, torch.zeros(3), np.arange(i * 8, i * 8 + 8)) for i in range(2)]
    )
    clipped = deltas * torch.clamp(1e-3 / deltas.norm(dim=1), max=1.0)[:, None]
    assert torch.allclose(alg.global_params, clipped.mean(0), atol=1e-7)
    assert float(alg.global_params.norm()) <= 1e-3 + 1e-9  # clipping bound C, averaged


@pytest.mark.parametrize("placement", ["central", "distributed"])
def test_dp_fedavg_noise_std(placement: str) -> None:
    # d = 200 coordinates; the update's noise part must have std z C / m (central and distributed alike)
    task = _task(features=1)
    task = Task(_dataset(8, 2, features=200), task.client_indices, model="logreg")
    z, c = 2.0, 0.5
    alg = _make(
        "dp_fedavg",
        task,
        cohort_size=2,
        num_local_steps=1,
        batch_size=8,
        learning_rate=0.5,
        clip=c,
        noise_multiplier=z,
        noise_placement=placement,
    )
    quiet = _make(
        "dp_fedavg",
        task,
        cohort_size=2,
        num_local_steps=1,
        batch_size=8,
        learning_rate=0.5,
        clip=c,
        noise_multiplier=0.0,
    )
    alg.run_round(0)
    quiet.run_round(0)
    noise = alg.global_params - quiet.global_params
    assert abs(float(noise.std()) / (z * c / 2) - 1.0) < 0.2  # 200 samples: std error ~5%


@pytest.mark.slow
def test_dp_fedavg_events_and_calibration() -> None:
    task = _task(clients=10)
    alg = _make("dp_fedavg", task, client_sampling="poisson", sampling_rate=0.3, noise_multiplier=1.5)
    # Poisson sampling: add/remove one client, Δ₂ = C
    event = PoissonSampledEvent(sampling_rate=0.3, event=GaussianEvent(noise_multiplier=1.5))
    assert alg.round_events(0) == [(event, 1)] and alg.round_events(7) == [(event, 1)]
    assert alg.privacy_unit == "client"
    assert alg.neighboring_relation == NeighboringRelation.ADD_OR_REMOVE_ONE
    # target_epsilon: the smallest z (to 0.5%) whose 20 rounds meet ε = 2 at the run's δ, same event
    cal = _make("dp_fedavg", task, cohort_size=3, target_epsilon=2.0, num_rounds=20)
    assert cal.neighboring_relation == NeighboringRelation.REPLACE_ONE  # fixed size: replace one, Δ₂ = 2C
    inner = GaussianEvent(noise_multiplier=cal.noise_multiplier / 2)
    assert cal.round_events(0) == [
        (SampledWithoutReplacementEvent(source_size=10, sample_size=3, event=inner), 1)
    ]
    assert _epsilon(cal, 20) <= 2.0
    lower = RDPAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)
    lower.compose(cal.event_at(cal.noise_multiplier / 1.005), 20)
    assert lower.get_epsilon(1e-5) > 2.0
    # the run's [privacy] δ and accountant drive the calibration
    loose = _make(
        "dp_fedavg",
        task,
        privacy=PrivacyConfig(accountant="rdp", delta=1e-3),
        client_sampling="poisson",
        sampling_rate=0.3,
        target_epsilon=2.0,
        num_rounds=20,
    )
    tight = _make(
        "dp_fedavg",
        task,
        privacy=PrivacyConfig(accountant="rdp"),  # the default "auto" would be the PLD here
        client_sampling="poisson",
        sampling_rate=0.3,
        target_epsilon=2.0,
        num_rounds=20,
    )
    assert loose.noise_multiplier < tight.noise_multiplier
    pld = _make(
        "dp_fedavg",
        task,
        privacy=PrivacyConfig(accountant="pld"),
        client_sampling="poisson",
        sampling_rate=0.3,
        target_epsilon=2.0,
        num_rounds=20,
    )
    acc = make_accountant("pld")
    acc.compose(pld.event_at(pld.noise_multiplier), 20)
    assert acc.get_epsilon(1e-5) <= 2.0 and pld.noise_multiplier < tight.noise_multiplier
    with pytest.raises(ValueError, match=r"^privacy\.accountant: .*pld"):  # replace-one: no PLD yet
        _make("dp_fedavg", task, privacy=PrivacyConfig(accountant="pld"), target_epsilon=2.0, num_rounds=20)
    # Poisson sampling: the noise is released even when nobody is sampled
    empty = _make("dp_fedavg", task, client_sampling="poisson", sampling_rate=1e-9, noise_multiplier=1.0)
    assert empty.run_round(0)["participants"] == 0.0
    assert float(empty.global_params.abs().max()) > 0.0
    with pytest.raises(ValueError, match="distributed"):
        ALGORITHMS["dp_fedavg"].Params(
            client_sampling="poisson",
            sampling_rate=0.1,
            noise_multiplier=1.0,
            noise_placement="distributed",
        )


def test_ms_pafl_round_by_hand_with_nu_correction() -> None:
    task = _task(n_per_client=10, clients=2)
    alg = _make(
        "ms_pafl",
        task,
        participation=0.5,
        num_local_steps=1,
        batch_size=10,
        learning_rate=0.5,
        eps_local=0.5,
        delta_local=1e-3,
    )
    assert alg.noise_std == pytest.approx(ldp_sigma(eps_local=0.5, delta_local=1e-3, clip=1.0))  # s = 2C
    assert alg.noise_multiplier == pytest.approx(alg.noise_std / 1.0)  # z = σ/C (issue 28, item 5)
    r = next(r for r in range(50) if len(alg.sampler.sample(r, alg.rng(r, 4))) == 2)  # a round with both
    for rr in range(r):
        alg.run_round(rr)
    before_public = alg.public.clone()
    before_private = alg.store.get([0, 1])
    alg.run_round(r)
    # local step on each client's whole data from (w_α,i, w̄_p) (Eq. 14)
    start = torch.cat([before_private, before_public.expand(2, -1)], dim=1)  # first part private (d=3: 2 + 1)
    trained = torch.stack(
        [start[i] - 0.5 * _full_batch_grad(task, start[i], np.arange(i * 10, i * 10 + 10)) for i in range(2)]
    )
    assert torch.allclose(alg.store.get([0, 1]), trained[:, :2], atol=1e-6)  # private parts kept
    public = trained[:, 2:]
    clipped = public / torch.clamp(public.norm(dim=1), min=1.0)[:, None]  # Eq. (11), C = 1
    noise = torch.randn(clipped.shape, generator=alg.torch_generator(r, ROLE_NOISE)) * alg.noise_std
    nu = 1 - 0.5**2  # Eq. (13): ν = 1 - Π(1 - p_i)
    assert torch.allclose(alg.public, (clipped + noise).sum(0) / (nu * 2), atol=1e-5)
    ev = alg.evaluate()
    assert set(ev) == {
        "accuracy",
        "personal_accuracy_mean",
        "personal_accuracy_std",
        "local_accuracy_mean",
        "local_accuracy_std",
    }


def test_ms_pafl_heterogeneous_probabilities() -> None:
    task = _task(n_per_client=10, clients=3)
    alg = _make("ms_pafl", task, participation=[0.2, 0.5, 1.0], batch_size=2)
    assert alg.sampler.participation == 1.0  # the events bound every client by the largest p_i
    assert alg.round_events(0)[0][0].participation == 1.0
    assert alg.sampler.probability_someone_checks_in() == 1.0  # ν = 1 - 0.8 * 0.5 * 0
    counts = np.zeros(3)
    for r in range(40):
        counts[alg.sampler.sample(r, alg.rng(r, 4))] += 1
    assert counts[2] == 40 and counts[0] < counts[2]
    with pytest.raises(ValueError, match="one entry per client"):
        _make("ms_pafl", task, participation=[0.2, 0.5])


def test_ms_pafl_clipping_bound_and_events() -> None:
    task = _task(n_per_client=30, clients=4, init_std=5.0)
    alg = _make("ms_pafl", task, participation=1.0, num_local_steps=2, batch_size=3, nu_correction=False)
    alg.noise_std = 0.0  # switch the noise off to see the clipped average
    alg.run_round(0)
    assert float(alg.public.norm()) <= 1.0 + 1e-6  # mean of vectors of norm <= C
    # each round: participation public to the server, Gaussian with σ/(2C) (sensitivity 2C), persistent
    # private state; the algorithm's own noise multiplier is σ/C
    z = ldp_sigma(eps_local=1.0, delta_local=1e-4, clip=1.0) / 2.0
    assert alg.noise_multiplier == pytest.approx(2.0 * z)
    event = MSPAFLRoundEvent(participation=1.0, noise_multiplier=z, private_state="persistent")
    assert alg.round_events(3) == [(event, 1)] and alg.privacy_unit == "record"
    # p = 1: ten rounds are ten Gaussian mechanisms with multiplier z
    gauss = RDPAccountant().compose(GaussianEvent(noise_multiplier=z), 10)
    assert _epsilon(alg, 10) == pytest.approx(gauss.get_epsilon(1e-5), rel=1e-12)
    given = _make("ms_pafl", task, participation=0.5, noise_multiplier=6.0, clip=2.0, batch_size=3)
    assert given.noise_std == pytest.approx(12.0) and given.round_events(0)[0][0].noise_multiplier == 3.0


def test_dp_dsgd_rp_scaling_by_hand() -> None:
    # p = q = 1, no noise, large C: ĝ = Σ_i Σ_s ∇ℓ / (p N q d) is the full-data mean gradient (Eq. 4)
    task = _task(n_per_client=6, clients=3)
    alg = _make(
        "dp_dsgd_rp",
        task,
        participation=1.0,
        sampling_rate=1.0,
        noise_multiplier=0.0,
        clip=100.0,
        learning_rate=0.7,
    )
    assert alg.scale() == pytest.approx(1.0 / 18)
    alg.run_round(0)
    expected = -0.7 * _full_batch_grad(task, torch.zeros(3), np.arange(18))
    assert torch.allclose(alg.global_params, expected, atol=1e-6)


def test_dp_dsgd_rp_clipping_noise_and_events() -> None:
    task = _task(n_per_client=10, clients=4)
    alg = _make(
        "dp_dsgd_rp",
        task,
        participation=0.5,
        sampling_rate=0.5,
        noise_multiplier=0.0,
        clip=1e-3,
        learning_rate=1.0,
    )
    m = alg.run_round(0)
    # ‖ĝ‖ <= (#examples) C / (p N q d)
    assert float(alg.global_params.norm()) <= m.get("examples", 0.0) * 1e-3 / (0.5 * 4 * 0.5 * 10) + 1e-9
    assert alg.privacy_unit is None and alg.round_events(0) == []
    # wcs: z calibrated for the per-iteration target on exactly the event the run composes
    cal = _make(
        "dp_dsgd_rp",
        task,
        privacy=PrivacyConfig(accountant="rdp"),  # the RDP check below (the default "auto" is the PLD here)
        participation=0.5,
        sampling_rate=0.5,
        round_epsilon=0.5,
        round_delta=1e-5,
        clip=2.0,
    )
    event = RandomCheckInEvent(
        participation=0.5, sampling_rate=0.5, noise_multiplier=cal.noise_multiplier, local_dataset_size=10
    )
    assert cal.round_events(4) == [(event, 1)] and cal.privacy_unit == "record"
    assert cal.noise_std == pytest.approx(2.0 * cal.noise_multiplier)
    assert (
        _epsilon(cal, 1)
        <= 0.5
        < RDPAccountant().compose(cal.event_at(cal.noise_multiplier / 1.005)).get_epsilon(1e-5)
    )
    assert _epsilon(cal, 10) > _epsilon(cal, 5)
    # the other analyses choose z by their own formulas (004's figures); the events stay the same kind
    ols = _make("dp_dsgd_rp", task, participation=0.5, sampling_rate=0.5, round_epsilon=0.5, analysis="ols")
    expected = calibrate_noise_multiplier(
        analysis="ols", participation=0.5, sampling_rate=0.5, local_dataset_size=10, epsilon=0.5, delta=1e-6
    )
    assert ols.noise_multiplier == pytest.approx(expected)
    assert isinstance(ols.round_events(0)[0][0], RandomCheckInEvent)
    # the noise is released even when nobody participates: std σ / (p N q d) per coordinate
    quiet = _make("dp_dsgd_rp", task, participation=0.01, sampling_rate=0.5, noise_multiplier=1.0)
    quiet.run_round(0)
    assert float(quiet.global_params.abs().max()) > 0.0


def test_dp_dsgd_rp_unequal_clients_use_all_records_and_d_bounds_them() -> None:
    ds = _dataset(10, 2)
    task = Task(ds, [np.arange(0, 4), np.arange(4, 20)], model="logreg")
    alg = _make("dp_dsgd_rp", task, noise_multiplier=1.0, local_dataset_size=16)
    assert alg.d == 16 and [len(ix) for ix in alg.local_data] == [4, 16]
    assert alg.round_events(0)[0][0].local_dataset_size == 16
    public = _make("dp_dsgd_rp", task, noise_multiplier=1.0, local_dataset_size=20)
    assert public.d == 20 and public.scale() == pytest.approx(alg.scale() * 16 / 20)
    with pytest.raises(
        ValueError, match=r"algorithm.local_dataset_size: must be >= the largest local dataset \(16\)"
    ):
        _make("dp_dsgd_rp", task, noise_multiplier=1.0, local_dataset_size=10)
    # d from the data only without a guarantee or with the dataset sizes declared public (replace-one)
    cls = ALGORITHMS["dp_dsgd_rp"]
    with pytest.raises(ValueError, match=r"^algorithm.local_dataset_size: required"):
        cls(cls.Params(noise_multiplier=1.0), task, seed=0)
    assert cls(cls.Params(noise_multiplier=0.0), task, seed=0).d == 16
    replace = PrivacyConfig.model_validate({"neighbouring": "replace-one"})
    assert cls(cls.Params(noise_multiplier=1.0), task, seed=0, privacy=replace).d == 16


@pytest.mark.parametrize(
    "name,params",
    [
        ("fedavg", {"cohort_size": 2, "batch_size": 3}),
        (
            "dp_fedavg",
            {
                "client_sampling": "poisson",
                "sampling_rate": 0.5,
                "noise_multiplier": 1.0,
                "batch_size": 3,
            },
        ),
        ("ms_pafl", {"participation": 0.6, "num_local_steps": 2, "batch_size": 3}),
        ("dp_dsgd_rp", {"noise_multiplier": 0.5, "momentum": 0.9, "participation": 0.7}),
    ],
)
def test_state_dict_round_trip_continues_identically(name: str, params: dict) -> None:
    task = _task(n_per_client=12, clients=4)
    a = _make(name, task, seed=7, **params)
    for r in range(3):
        a.run_round(r)
    state = a.state_dict()
    b = _make(name, task, seed=7, **params)
    b.load_state_dict(torch.load(_roundtrip(state), weights_only=False))
    for r in range(3, 6):
        ma, mb = a.run_round(r), b.run_round(r)
        assert ma == mb
    assert torch.equal(a.global_params, b.global_params)
    assert a.evaluate() == b.evaluate()
    with pytest.raises(ValueError, match="algorithm"):
        other = "fedavg" if name != "fedavg" else "ms_pafl"
        b.load_state_dict({**state, "algorithm": other})


def _roundtrip(state: dict) -> object:
    import io

    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return buf


def test_local_only_clients_train_alone_and_release_nothing() -> None:
    # Prepare: two clients; local-only keeps one model per client and never averages.
    task = _task()
    alg = _make("local_only", task, num_local_steps=1, batch_size=8, learning_rate=0.5)
    # Execute
    alg.run_round(0)
    # Assert: each client's model is one full-batch step from w = 0 on its own data only.
    for i in range(2):
        expected = -0.5 * _full_batch_grad(task, torch.zeros(3), np.arange(i * 8, i * 8 + 8))
        torch.testing.assert_close(alg.store.get(np.array([i]))[0], expected)
    assert alg.round_events(0) == [] and alg.privacy_unit is None
    metrics = alg.evaluate()
    assert 0.0 <= metrics["local_accuracy_mean"] <= 1.0


def test_local_accuracy_weights_each_label_by_the_clients_share() -> None:
    # Prepare: client 0 holds labels 0/1 as 6:2, client 1 as 2:6 (independent computation below).
    ds = _dataset(n_per_client=8, clients=2)
    y = np.array([0] * 6 + [1] * 2 + [0] * 2 + [1] * 6, dtype=np.int64)
    ds = Dataset("tiny", ds.x_train, y, ds.x_test, ds.y_test, 2)
    task = Task(ds, [np.arange(8), np.arange(8, 16)], model="logreg")
    alg = _make("fedavg", task, cohort_size=2)
    w = torch.tensor([1.0, -0.5, 0.25])
    # Execute
    local = alg.model_metrics(w)["local"]
    # Assert: per-label accuracy of w on the test set, mixed 0.75/0.25 and 0.25/0.75.
    pred = alg.model.module.predict(alg.model.outputs(w, alg.x_test))
    acc = [float((pred[alg.y_test == c] == c).float().mean()) for c in (0, 1)]
    expected = [0.75 * acc[0] + 0.25 * acc[1], 0.25 * acc[0] + 0.75 * acc[1]]
    np.testing.assert_allclose(local, expected, rtol=1e-12)
