"""The group algorithms of paper 001 as a round protocol (issue 28): one sum per privacy group.

In process, no Flower: the protocol's ``client_update`` and per-sum ``aggregate_sums`` reproduce the
simulator's round (``run_round``) bit for bit when given the simulator's noise shares; the trusted-server
form (the server sums and adds each group's noise) does the same math (checked with zero noise) and draws
N(0, z_g² C²) per group; what the server-side code receives under SecAgg+ is one noised sum per group and
nothing else; a group whose noise shares dropped out is accounted at its own realised multiplier; the
per-client ledger gives each client its group's ε.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

import ampfl.fl.algorithms.gdpfed_groups as groups_module
from ampfl.accounting.events import GroupRoundEvent
from ampfl.fl.algorithms.base import ROLE_NOISE
from ampfl.fl.algorithms.round_protocol import ClientInstructions, GroupedSums, RoundSum, grouped
from ampfl.fl.config import parse_config
from ampfl.fl.privacy.run_accountant import RunAccountant
from ampfl.fl.privacy.secure_sum import GroupSums, noise_shares, secure_group_sums
from ampfl.fl.run.experiment import build_algorithm, build_task

NUM_CLIENTS = 12
#: name -> extra [algorithm] keys (gdpfed_plus with the planner's κ: after the noise, and on a public mask)
NAMES: dict[str, dict[str, Any]] = {
    "gdpfed": {},
    "gdpfed_plus": {"kappa": [0.3, 0.6]},
    "gdpfed_plus_public": {"kappa": [0.3, 0.6], "mask": "public"},
    "pfa": {"pfa_rank": 2},
    "idp_fedavg": {},
    "p_fedavg": {},
}


def _config(name: str, **extra: Any) -> Any:
    algorithm = {
        "name": name.removesuffix("_public"),
        "participation": 0.5,
        "learning_rate": 0.3,
        "num_local_steps": 2,
        "batch_size": 8,
        "server_learning_rate": 1.0,
    }
    if name != "p_fedavg":
        algorithm.update(
            group_budgets=[1.0, 4.0], group_sizes=[5, 7], expected_group_sizes=[5, 7], num_rounds=4
        )
    algorithm.update(NAMES.get(name, {}), **extra)
    return parse_config(
        {
            "seed": 4,
            "rounds": 4,
            "dataset": {"name": "digits"},
            "partition": {"scheme": "iid", "num_clients": NUM_CLIENTS},
            "model": {"name": "logreg"},
            "algorithm": algorithm,
            "privacy": {"accountant": "rdp", "delta": 1e-5, "reproducible": True},
        }
    )


@pytest.fixture(scope="module")
def task() -> Any:
    return build_task(_config("gdpfed"))


def _pair(task: Any, name: str, **extra: Any) -> tuple[Any, Any]:
    """(the simulator's algorithm, the protocol's), same config and privacy key."""
    config = _config(name, **extra)
    return build_algorithm(config, task), build_algorithm(config, task)


def _client_vectors(protocol: Any, round_index: int, cohort: list[int]) -> dict[int, torch.Tensor]:
    """Each asked client's message (the protocol's client half, the simulator's mini-batches)."""
    broadcast = protocol.broadcast().clone()
    out = {}
    for c in cohort:
        instructions = ClientInstructions(round_index, np.asarray(cohort, dtype=np.int64), c)
        message, state = protocol.client_update(broadcast, instructions, None, np.random.default_rng(0))
        assert state is None and message.vector.shape == broadcast.shape
        out[c] = message.vector
    return out


def _simulator_shares(alg: Any, round_index: int, cohort: list[int]) -> list[torch.Tensor]:
    """The simulator's noise share rows of round ``round_index`` per active sum (``_add_noise``'s layout)."""
    active = alg._aggregates()
    counts = [sum(1 for c in cohort if alg.sum_of(c) == a) for a, _ in active]
    masks = alg.masks_at(alg.global_params)
    rows = noise_shares(
        alg.torch_generator(round_index, ROLE_NOISE),
        counts,
        [float(alg.noise_multipliers[lead]) * float(alg.p.clip) for _, lead in active],
        alg.global_params.numel(),
        masks=[masks[lead] for _, lead in active],
    )
    out, start = [], 0
    for m in counts:
        out.append(rows[start : start + max(m, 1)])
        start += max(m, 1)
    return out


@pytest.mark.parametrize("name", sorted(NAMES))
def test_noise_share_form_reproduces_the_simulator_bit_for_bit(task: Any, name: str) -> None:
    """client_update + each client's simulator noise share, summed per group, then aggregate_sums without
    server noise: the simulator's model after every round, bit for bit (3 rounds: PFA's history too)."""
    sim, proto = _pair(task, name)
    parts = grouped(proto)
    assert isinstance(proto, GroupedSums) and parts is proto
    for r in range(3):
        cohort = proto.plan_round(r, range(NUM_CLIENTS), noise_shares=False)
        vectors = _client_vectors(proto, r, cohort)
        rows, labels = [], []
        shares = _simulator_shares(proto, r, cohort) if proto.private else None
        for i, (a, _) in enumerate(proto._aggregates()):
            members = [c for c in cohort if proto.sum_of(c) == a]
            block = torch.stack([vectors[c] for c in members]) if members else None
            if shares is not None:
                block = shares[i] if block is None else block + shares[i]
            if block is not None:
                rows.append(block)
                labels += [a] * block.shape[0]
        num = int(proto.sum_index.max()) + 1
        d = proto.global_params.numel()
        summed = secure_group_sums(torch.cat(rows) if rows else torch.zeros((0, d)), labels, num_groups=num)
        sums = [
            RoundSum(summed.sums[a] if a in labels else None, None, len(m))
            for a, m in enumerate(parts.sum_groups(cohort))
        ]
        if not proto.private:  # no noise: the server's sum of the messages, even for an empty group
            sums = [RoundSum(summed.sums[a], None, 0) for a in range(num)]
        parts.aggregate_sums(sums, generator=None)
        sim.run_round(r)
        assert torch.equal(proto.global_params, sim.global_params), (name, r)


@pytest.mark.parametrize("name", ["gdpfed", "gdpfed_plus_public", "idp_fedavg"])
def test_trusted_server_form_same_math_and_its_noise(task: Any, name: str) -> None:
    """Trusted server: the sums of the clipped messages plus the server's own noise. With z = 0 the
    simulator's step, bit for bit; with z, group g's noise is N(0, z_g² C²) on its mask (and nothing else)."""
    sim, proto = _pair(task, name)
    for alg in (sim, proto):
        alg.noise_multipliers = np.zeros_like(alg.noise_multipliers)
    cohort = proto.plan_round(0, range(NUM_CLIENTS), noise_shares=False)
    vectors = _client_vectors(proto, 0, cohort)
    parts = grouped(proto)
    sums = []
    for members in parts.sum_groups(cohort):  # the transport's sum per group
        total = (
            torch.stack([vectors[c] for c in members]).sum(0)
            if members
            else torch.zeros_like(proto.global_params)
        )
        sums.append(RoundSum(total, len(members), len(members)))
    parts.aggregate_sums(sums, generator=torch.Generator().manual_seed(1))
    sim.run_round(0)
    # bit for bit here (a few messages per group: the stack-sum adds them in the simulator's order)
    assert torch.equal(proto.global_params, sim.global_params)

    # Noise: zero sums, one group at a time; the step is Σ_g ξ_g / Σ_g q_g N̂_g (η_s = 1, no momentum).
    _, noisy = _pair(task, name)
    d, clip = noisy.global_params.numel(), float(noisy.p.clip)
    masks = noisy.masks_at(noisy.global_params)
    for a, lead in noisy._aggregates():
        start = noisy.global_params.clone()
        cohort_size = float((noisy.rates * noisy.public_sizes).sum())
        zeros = [
            RoundSum(torch.zeros(d), 0, 0) if s == a else RoundSum(None, None, 0) for s in range(len(sums))
        ]
        noisy.velocity = torch.zeros(d)
        noisy.aggregate_sums(zeros, generator=torch.Generator().manual_seed(7 + a))
        xi = (noisy.global_params - start) * cohort_size
        kept = masks[lead] if masks[lead] is not None else torch.ones(d, dtype=torch.bool)
        if noisy.sparsify_after_noise():
            kept = xi != 0
        assert torch.all(xi[~kept] == 0)  # nothing outside the group's mask
        sigma = float(noisy.noise_multipliers[lead]) * clip
        assert float(xi[kept].std()) == pytest.approx(sigma, rel=0.15)  # std error ~ σ/√(2·|mask|)
        noisy.global_params = start


@pytest.mark.parametrize("name", ["gdpfed", "gdpfed_plus_public"])
def test_under_secaggplus_the_server_receives_only_per_group_noised_sums(
    task: Any, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A SecAgg+ round per group, its nodes played in process with secagg's own encoding: the server step
    gets one noised sum per group (noise ≈ N(0, z_g² C²) around the un-noised group sum, on the group's
    public mask only for GDPFed+ ``mask = "public"``), counts it never learns (0), no per-client vector, no
    participation count in the round's diagnostics."""
    import ampfl.flower.secagg as secagg
    from ampfl.flower.transport import collect_round, release_round

    _, alg = _pair(task, name)
    masks = alg.masks_at(alg.global_params)  # w^t, before the step
    nodes = {c: 100 + c for c in range(NUM_CLIENTS)}
    client_of = {n: c for c, n in nodes.items()}
    unnoised: dict[int, np.ndarray] = {}
    calls: list[tuple[int, list[int]]] = []

    def played(
        grid: Any, context: Any, algorithm: Any, node_ids: list[int], r: int, t: float, *, part: int
    ) -> Any:
        calls.append((part, sorted(client_of[n] for n in node_ids)))
        rng = np.random.default_rng(part)
        total = np.zeros(algorithm.global_params.numel())
        broadcast = algorithm.broadcast().clone()
        for n in node_ids:  # each node: its own coin, its update or zeros, and always its noise share
            c = client_of[n]
            coin = algorithm.own_coin(c, noise_shares=True)
            u = np.zeros(total.size)
            if rng.random() < coin:
                instructions = ClientInstructions(r, np.array([c]), c, own_coin=True)
                u = algorithm.client_update(broadcast, instructions, None, rng)[0].vector.double().numpy()
            unnoised[c] = u
            total += secagg.encode(algorithm, u, len(node_ids), rng, part=part, broadcast=broadcast)
        return secagg.decode(algorithm, total, len(node_ids), len(node_ids), part)

    received: list[GroupSums] = []
    real_update = alg.server_update
    monkeypatch.setattr(alg, "server_update", lambda sums: (received.append(sums), real_update(sums))[1])
    monkeypatch.setattr(secagg, "secure_sum", played)
    planned = alg.round_events(0)
    cohort = alg.plan_round(0, range(NUM_CLIENTS), noise_shares=True)
    assert cohort == list(range(NUM_CLIENTS))  # every client of an active group: each flips its own coin
    collected = collect_round(None, None, alg, nodes, cohort, 0, 1.0, planned, secure=True)  # type: ignore[arg-type]
    assert calls == [(g, sorted(np.flatnonzero(alg.labels == g).tolist())) for g in range(2)]  # one per group
    assert collected.events == planned and not {"participants", "train_loss"} & set(collected.metrics)
    assert all(s.count is None for s in collected.sums) and len(collected.sums) == 2
    release_round(alg, collected)
    (sums,) = received
    assert (
        sums.counts == (0, 0)
        and sums.present == (True, True)
        and tuple(sums.sums.shape) == (2, alg.global_params.numel())
    )
    for g in range(2):
        members = np.flatnonzero(alg.labels == g)
        noise = sums.sums[g].double().numpy() - sum(unnoised[int(c)] for c in members)
        if masks[g] is not None:
            kept = masks[g].numpy()
            assert np.all(noise[~kept] == 0.0) and kept.sum() < kept.size  # no share outside the mask
            noise = noise[kept]
        sigma = float(alg.noise_multipliers[g]) * float(alg.p.clip)
        assert np.std(noise) == pytest.approx(sigma, rel=0.15)  # the group's calibrated noise, not less
        assert abs(float(np.mean(noise))) < 5 * sigma / math.sqrt(noise.size)


def test_a_group_that_lost_shares_is_accounted_at_its_realised_multiplier(
    task: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group 0's sum completes with 4 of 5 shares, group 1's with all 7: group 0's event at z_0·√(4/5),
    group 1's as planned; the budget check takes each group at its worst case (min over n ≤ N_g of t(n)/n)."""
    import ampfl.flower.secagg as secagg
    from ampfl.flower.noise_shares import worst_case_events, worst_ratio
    from ampfl.flower.transport import budgeted_events, collect_round

    _, alg = _pair(task, "gdpfed")
    z = alg.noise_multipliers.copy()
    q = alg.rates.copy()
    decoded = torch.ones_like(alg.global_params)

    def dropped(*args: Any, part: int) -> Any:
        asked = int((alg.labels == part).sum())
        return secagg.SecureSum(decoded, asked, asked - 1 if part == 0 else asked, part=part)

    monkeypatch.setattr(secagg, "secure_sum", dropped)
    planned = alg.round_events(0)
    nodes = {c: c for c in range(NUM_CLIENTS)}
    collected = collect_round(None, None, alg, nodes, list(range(NUM_CLIENTS)), 0, 1.0, planned, secure=True)  # type: ignore[arg-type]
    assert collected.events == [
        (GroupRoundEvent(sampling_rate=q[0], noise_multiplier=z[0] * math.sqrt(4 / 5), group=0), 1),
        planned[1],
    ]
    assert collected.metrics["noise_multiplier_realised_g0"] == pytest.approx(z[0] * math.sqrt(4 / 5))
    assert collected.metrics["noise_multiplier_realised_g1"] == pytest.approx(z[1])
    seen, plan = RunAccountant(alg.privacy, alg), RunAccountant(alg.privacy, alg)
    seen.compose(collected.events)
    plan.compose(planned)
    assert seen.epsilon_by_group()[0] > plan.epsilon_by_group()[0]  # less noise, more ε
    assert seen.epsilon_by_group()[1] == plan.epsilon_by_group()[1]  # the other group's sum is untouched

    worst = budgeted_events(alg, planned, NUM_CLIENTS, True)
    assert worst == worst_case_events(alg, planned, NUM_CLIENTS)
    assert worst_ratio(5) == pytest.approx(0.6) and worst_ratio(7) == pytest.approx(0.6)  # t(5)/5 = 3/5
    for g, (event, _) in enumerate(worst):
        assert event == GroupRoundEvent(sampling_rate=q[g], noise_multiplier=z[g] * math.sqrt(0.6), group=g)
    assert budgeted_events(alg, planned, NUM_CLIENTS, False) == planned


def test_idp_fedavg_one_sum_lowers_every_group_on_a_dropout(task: Any) -> None:
    """IDP-FedAvg: one secure sum for every group, one z: a lost share lowers every group's multiplier."""
    from ampfl.flower.noise_shares import realised_sum_events

    _, alg = _pair(task, "idp_fedavg")
    (shares,) = alg.sum_shares(alg.global_params)
    one = alg.gaussian_shares()
    assert shares is not None and one is not None and one.events(1.0) == shares.events(1.0)
    assert alg.sum_groups([0, 5, 11]) == [[0, 5, 11]]
    planned = alg.round_events(0)
    z = float(alg.noise_multipliers[0])
    assert realised_sum_events(alg, planned, [(12, 12)]) == planned
    lowered = realised_sum_events(alg, planned, [(12, 9)])
    assert [e.noise_multiplier for e, _ in lowered] == pytest.approx([z * math.sqrt(9 / 12)] * 2)
    assert [e.sampling_rate for e, _ in lowered] == [e.sampling_rate for e, _ in planned]


def test_the_ledger_gives_each_client_its_groups_events(task: Any, tmp_path: Path) -> None:
    """Each client's ledger rows and ε are its group's (Corollary 1), not the max over groups."""
    import json
    import sqlite3

    from ampfl.flower.ledger import LEDGER, PrivacyLedger

    _, alg = _pair(task, "gdpfed")
    ledger = PrivacyLedger(tmp_path / LEDGER, alg.privacy, alg, range(NUM_CLIENTS))
    run = RunAccountant(alg.privacy, alg)
    for r in range(2):
        ledger.record(r, list(range(NUM_CLIENTS)), alg.round_events(r))
        run.compose(alg.round_events(r))
    by_group = run.epsilon_by_group()
    with sqlite3.connect(tmp_path / LEDGER) as db:
        spent = dict(db.execute("SELECT client, epsilon FROM privacy_spent").fetchall())
        rows = db.execute("SELECT client, event FROM privacy_events").fetchall()
    ledger.close()
    for c in range(NUM_CLIENTS):
        g = int(alg.labels[c])
        assert spent[str(c)] == pytest.approx(by_group[g], rel=1e-12)
        assert {json.loads(e)["group"] for client, e in rows if client == str(c)} == {g}
    assert by_group[0] != by_group[1]

    # max_epsilon between the two groups' ε after a third round: only the group below it stays eligible.
    after = RunAccountant(alg.privacy, alg)
    for r in range(3):
        after.compose(alg.round_events(r))
    low, high = sorted(after.epsilon_by_group().values())
    budget = alg.privacy.model_copy(update={"max_epsilon": 0.5 * (low + high)})
    capped = PrivacyLedger(tmp_path / "capped.sqlite", budget, alg, range(NUM_CLIENTS))
    for r in range(2):
        capped.record(r, list(range(NUM_CLIENTS)), alg.round_events(r))
    below = int(np.argmin([after.epsilon_by_group()[g] for g in range(2)]))
    assert capped.eligible(alg.round_events(2)) == np.flatnonzero(alg.labels == below).tolist()
    capped.close()


def test_deploy_problems_and_refusals(task: Any) -> None:
    """Each secure sum needs 3 clients under SecAgg+ (one line naming group_sizes); a protocol unaware of
    sums would see no shares for several groups (and refuse a secure release); aggregate needs one sum."""
    from ampfl.fl.algorithms import ALGORITHMS

    small = _config("gdpfed", group_sizes=[2, 10], expected_group_sizes=[2, 10]).algorithm.params
    problem = ALGORITHMS["gdpfed"].deploy_problem(small, secure_aggregation=True)
    assert problem is not None and problem.startswith("algorithm.group_sizes") and "\n" not in problem
    assert ALGORITHMS["gdpfed"].deploy_problem(small, secure_aggregation=False) is None
    assert ALGORITHMS["idp_fedavg"].deploy_problem(small, secure_aggregation=True) is None  # one sum of 12
    assert (
        ALGORITHMS["p_fedavg"].deploy_problem(small, secure_aggregation=True) is None
    )  # no noise, no SecAgg+
    by_client = _config("gdpfed", client_budgets=[1.0] * 9 + [4.0] * 2, group_budgets=None, group_sizes=None)
    assert ALGORITHMS["pfa"].deploy_problem(by_client.algorithm.params, secure_aggregation=True) is not None
    ok = _config("gdpfed").algorithm.params
    for name in ("gdpfed", "gdpfed_minus", "gdpfed_plus", "idp_fedavg", "pfa", "p_fedavg"):
        cls = ALGORITHMS[name]
        assert cls.deploys and cls.deploy_problem(ok, secure_aggregation=True) is None
    _, alg = _pair(task, "gdpfed")
    assert alg.gaussian_shares() is None and len(alg.sum_shares(alg.global_params)) == 2
    with pytest.raises(ValueError, match="aggregate_sums"):
        alg.aggregate(torch.zeros_like(alg.global_params), count=1, asked=1, generator=None)
    assert alg.own_coin(0, noise_shares=False) is None
    assert alg.own_coin(0, noise_shares=True) == alg.rates[alg.labels[0]]
    alg.retire_groups([1])
    assert (
        alg.plan_round(0, range(NUM_CLIENTS), noise_shares=True) == np.flatnonzero(alg.labels == 0).tolist()
    )
    assert alg.sum_shares(alg.global_params)[1] is None


def test_group_assignment_is_public(task: Any) -> None:
    """The client-to-group assignment comes from the public seed (server and nodes agree whatever the
    privacy key); under ``reproducible`` it is the simulator's earlier draw (privacy key = seed)."""
    config = _config("gdpfed")
    a = build_algorithm(config, task)
    other = type(a)(config.algorithm.params, task, seed=4, privacy=config.privacy, privacy_key=12345)
    assert np.array_equal(a.labels, other.labels)
    legacy = a.rng(-1, groups_module.ROLE_GROUPS).permutation(NUM_CLIENTS)  # privacy key = seed here
    expected = np.empty(NUM_CLIENTS, dtype=np.int64)
    expected[legacy] = np.repeat(np.arange(2), [5, 7])
    assert np.array_equal(a.labels, expected)
