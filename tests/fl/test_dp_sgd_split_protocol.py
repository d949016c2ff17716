"""dp_sgd_split's round protocol (``ampfl deploy``, issue 28 item 3), in-process: no Flower processes.

The client half (secret mask drawn on the client, masked local steps, the two parts clipped separately) plus
the server half (noise per part, divided by the public m̄) reproduce the simulator's round at zero noise; the
mask comes from the client's own randomness only; the noise std of each part; one-line refusals of what
``ampfl deploy`` cannot run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from ampfl.fl.algorithms import ALGORITHMS
from ampfl.fl.algorithms.base import ROLE_SAMPLING
from ampfl.fl.algorithms.dp_sgd_partition import ROLE_MASK, DPSGDPartition
from ampfl.fl.algorithms.round_protocol import ClientInstructions
from ampfl.fl.config import PrivacyConfig
from ampfl.fl.data import load_dataset
from ampfl.fl.task import Task

DIGITS = load_dataset("digits")
N = 8


def _task(per_client: int, hidden: int = 16) -> Task:
    return Task(
        DIGITS,
        [np.arange(i * per_client, (i + 1) * per_client, dtype=np.int64) for i in range(N)],
        model="mlp",
        model_options={"hidden": [hidden]},
    )


def _algo(per_client: int = 6, *, key: int = 11, hidden: int = 16, **kw: Any) -> DPSGDPartition:
    params = {
        "sampling": "poisson",
        "sampling_rate": 0.5,
        "expected_clients": 4.0,
        "noise_multiplier": 0.0,
        "num_local_steps": 2,
        "batch_size": 3,
        "learning_rate": 0.5,
        **kw,
    }
    privacy = PrivacyConfig.model_validate({"accountant": "rdp"})
    return DPSGDPartition(
        DPSGDPartition.Params(**params), _task(per_client, hidden), seed=3, privacy=privacy, privacy_key=key
    )


def _deployed_round(
    server: DPSGDPartition, client: DPSGDPartition, round_index: int, masks: torch.Tensor | None
) -> tuple[list[int], list[dict[str, float]]]:
    """One round through the protocol: the server plans, each asked client updates (with the simulator's
    mask row when ``masks`` is given), the server aggregates the sum with its own generator."""
    cohort = server.plan_round(round_index, range(N), noise_shares=False)
    broadcast = server.broadcast()
    total = torch.zeros_like(broadcast)
    metrics = []
    for row, c in enumerate(cohort):
        if masks is not None:
            client.client_mask = lambda rng, row=row: masks[row]  # type: ignore[method-assign]
        instructions = ClientInstructions(round_index, np.asarray(cohort), c)
        message, state = client.round_protocol().client_update(
            broadcast, instructions, None, np.random.default_rng(100 + c)
        )
        assert state is None
        total = total + message.vector
        metrics.append(message.metrics)
    server.aggregate(total, count=len(cohort), asked=len(cohort), generator=torch.Generator().manual_seed(5))
    return cohort, metrics


CASES = {
    "blocks+shared": {"num_submodels": 3, "shared": ["net.2"], "clip": 0.05, "nonsplit_clip": 0.02},
    "dropout": {"partition": "dropout", "clip": 0.05},
    "bis": {"sampling": "bis", "bis_iterations": 4, "bis_participations": 2, "num_submodels": 2},
    "dp-sgd (fast path)": {"num_local_steps": 1, "batch_size": 1, "learning_rate": 1.0, "clip": 0.5},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_protocol_at_zero_noise_reproduces_the_simulator_round(case: str) -> None:
    kw = CASES[case]
    per_client = 1 if kw.get("batch_size") == 1 else 6
    simulator = _algo(per_client, **kw)
    server, client = _algo(per_client, **kw), _algo(per_client, **kw)  # three processes, one privacy key
    assert simulator.fast_path == (case == "dp-sgd (fast path)")
    for r in range(3):
        cohort = simulator.participants_of(r)
        masks = simulator.masks(r, cohort) if len(cohort) else None
        expected = simulator.run_round(r)
        planned, metrics = _deployed_round(server, client, r, masks)
        assert planned == [int(c) for c in cohort]
        assert torch.allclose(server.global_params, simulator.global_params, rtol=0.0, atol=1e-6)
        reduced = server.reduce_metrics(metrics)
        if len(cohort):
            assert reduced["train_loss"] == pytest.approx(expected["train_loss"], rel=1e-5)
            clipped = sum(m["clipped"] for m in metrics) / len(metrics)  # reduced only for a private run
            assert clipped == pytest.approx(expected["clipped_fraction"], abs=1e-12)
    assert not torch.equal(server.global_params, server.model.initial())


def test_the_mask_is_drawn_on_the_client_from_its_own_randomness() -> None:
    """The block comes from the client's generator only: never from the privacy key (which the server holds
    under ``reproducible``), never sent as a value; the message's support is one block plus the shared
    part."""
    algo = _algo(num_submodels=3, shared=["net.2"], clip=1e6, nonsplit_clip=1e6)
    roles: list[int] = []
    spied = algo.rng

    def spy(round_index: int, role: int) -> np.random.Generator:
        roles.append(role)
        return spied(round_index, role)

    algo.rng = spy  # type: ignore[method-assign]
    cohort = algo.plan_round(0, range(N), noise_shares=False)
    assert cohort and set(roles) == {ROLE_SAMPLING}  # the server's half: sampling only
    roles.clear()
    instructions = ClientInstructions(0, np.asarray(cohort), cohort[0])
    blocks_seen = set()
    block_of = algo.block_of_group[algo.group_of.clamp(min=0)]
    for seed in range(12):
        message, _ = algo.client_update(algo.broadcast(), instructions, None, np.random.default_rng(seed))
        assert set(message.metrics) == {"train_loss", "clipped", "num-examples"}  # no block, no mask
        trained = (message.vector != 0) & algo.split_coords
        blocks = set(block_of[trained].tolist())
        assert len(blocks) == 1  # one block b_i, plus the shared part
        assert bool((message.vector[~algo.split_coords] != 0).any())
        blocks_seen |= blocks
        again, _ = algo.client_update(algo.broadcast(), instructions, None, np.random.default_rng(seed))
        assert torch.equal(again.vector, message.vector)  # a function of the client's generator
    assert blocks_seen == {0, 1, 2}
    assert ROLE_MASK not in roles  # neither the block nor the partition came from the privacy key


def test_the_server_adds_the_noise_of_each_part_and_divides_by_the_public_constant() -> None:
    z, c_s, c_ns, m = 1.5, 0.4, 0.1, 4.0
    algo = _algo(
        hidden=64, num_submodels=2, shared=["net.2"], clip=c_s, nonsplit_clip=c_ns, noise_multiplier=z
    )
    start = algo.global_params.clone()
    algo.aggregate(torch.zeros_like(start), count=3, asked=5, generator=torch.Generator().manual_seed(9))
    noise = (algo.global_params - start) * m  # η_s = 1, m̄ = expected_clients, whatever count and asked are
    split = algo.split_coords
    assert 0 < int((~split).sum()) < int(split.sum())
    xi = torch.randn(start.shape, generator=torch.Generator().manual_seed(9))
    assert torch.allclose(noise, xi * torch.where(split, z * c_s, z * c_ns), atol=1e-5)
    assert float(noise[split].std()) == pytest.approx(z * c_s, rel=0.1)
    assert float(noise[~split].std()) == pytest.approx(z * c_ns, rel=0.1)
    shares = algo.gaussian_shares()  # in message units: the shared part scaled by C_s/C_ns
    assert shares is not None and shares.std == pytest.approx(z * c_s) and algo.message_bound() == c_s


def test_secure_sum_of_noise_shares_gives_each_part_its_noise() -> None:
    """SecAgg+'s path in process (its encode/decode, no quantisation): each node's message plus its share
    N(0, z²C_s²/n) on every coordinate; the server rescales the shared part by the public C_ns/C_s, so the
    released noise is N(0, z²C_s²) on the split part and N(0, z²C_ns²) on the shared part."""
    from ampfl.flower.secagg import decode, encode

    z, c_s, c_ns, n = 2.0, 0.4, 0.1, 3
    algo = _algo(
        hidden=64, num_submodels=2, shared=["net.2"], clip=c_s, nonsplit_clip=c_ns, noise_multiplier=z
    )
    assert DPSGDPartition.deploy_problem(algo.p, secure_aggregation=True) is None
    start = algo.broadcast().clone()
    own = np.random.default_rng(7)
    sent, unnoised = [], torch.zeros_like(start)
    for c in range(n):
        instructions = ClientInstructions(0, np.array([c]), c, own_coin=True)
        message, _ = algo.client_update(start, instructions, None, own)
        assert float(message.vector.abs().max()) <= algo.message_bound() + 1e-6
        unnoised += message.vector
        sent.append(encode(algo, message.vector.double().numpy(), n, own))
    secure = decode(algo, np.sum(sent, axis=0), n, n)
    assert secure.total is not None and secure.joined is None  # nothing but the noised sum
    algo.aggregate(secure.total, count=None, asked=n, generator=None)
    scale = algo.message_scale()
    assert scale is not None
    noise = (
        algo.global_params - start
    ) * algo.expected - unnoised / scale  # η_s = 1  # what was released minus Σ_i Δ_i
    split = algo.split_coords
    assert float(noise[split].std()) == pytest.approx(z * c_s, rel=0.1)
    assert float(noise[~split].std()) == pytest.approx(z * c_ns, rel=0.1)


def test_noise_shares_and_coins_under_secure_aggregation() -> None:
    algo = _algo(noise_multiplier=1.2, clip=0.3)  # no shared part: one std
    shares = algo.gaussian_shares()
    assert shares is not None and shares.std == pytest.approx(1.2 * 0.3) and shares.noise_multiplier == 1.2
    assert shares.event_at(0.6) == algo.event_at(0.6)
    assert algo.own_coin(0, noise_shares=True) == 0.5 and algo.own_coin(0, noise_shares=False) is None
    assert algo.plan_round(0, [3, 1, 2], noise_shares=True) == [1, 2, 3]
    same = _algo(noise_multiplier=1.0, shared=["net.2"], clip=0.2, nonsplit_clip=0.2, sampling="full")
    assert same.gaussian_shares() is not None and same.own_coin(0, noise_shares=True) == 1.0
    # the client's own coin: mini-batches and mask from its generator only
    message, _ = algo.client_update(
        algo.broadcast(),
        ClientInstructions(0, np.array([2]), 2, own_coin=True),
        None,
        np.random.default_rng(1),
    )
    assert float(torch.linalg.vector_norm(message.vector)) <= 0.3 + 1e-6


def _params(**kw: Any) -> Any:
    base = {"sampling": "poisson", "sampling_rate": 0.5, "noise_multiplier": 1.0}
    return DPSGDPartition.Params(**{**base, **kw})


@pytest.mark.parametrize(
    ("kw", "key"),
    [
        ({"sampling": "bis", "bis_iterations": 4, "bis_participations": 2}, "algorithm.sampling"),
    ],
)
def test_secure_aggregation_refusals_name_the_key(kw: dict[str, Any], key: str) -> None:
    params = _params(**kw)
    assert DPSGDPartition.deploy_problem(params, secure_aggregation=False) is None  # central noise: runs
    problem = DPSGDPartition.deploy_problem(params, secure_aggregation=True)
    assert problem is not None and problem.startswith(key + ":") and "\n" not in problem
    assert DPSGDPartition.deploy_problem(_params(), secure_aggregation=True) is None
    assert DPSGDPartition.deploy_problem(_params(sampling="full"), secure_aggregation=True) is None
    two_clips = _params(shared=["net.2"], clip=1.0, nonsplit_clip=0.5)  # one std in message units
    assert DPSGDPartition.deploy_problem(two_clips, secure_aggregation=True) is None


#: Each algorithm ``ampfl deploy`` refuses (of these files) and a word of its reason.
REFUSED = {
    "local_only": "ampfl run",
    "splitfed": "every local step needs a server round trip",
    "standalone": "every local step needs a server round trip",
    "pm_sfl": "every local step needs a server round trip",
    "splitfed_pm": "every local step needs a server round trip",
    "pm_sfl_hetero": "every local step needs a server round trip",
    "lg_fedavg": "every local step needs a server round trip",
    "splitfed_dp": "every local step needs a server round trip",
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_each_non_deploying_algorithm_refuses_in_one_line(name: str) -> None:
    from ampfl.fl.config import parse_config
    from ampfl.flower.common import check_deployable, deployable

    cls = ALGORITHMS[name]
    assert not cls.deploys and name not in deployable()
    model = "mlp" if name == "local_only" else "split_cnn"
    config = parse_config(
        {
            "rounds": 1,
            "dataset": {"name": "digits"},
            "partition": {"num_clients": 4},
            "model": {"name": model},
            "algorithm": {"name": name},
        }
    )
    for secure in ("none", "secaggplus"):
        with pytest.raises(ValueError) as err:
            check_deployable(config, secure)
        text = str(err.value)
        assert text.startswith("algorithm.name: ") and name in text and "\n" not in text
        assert REFUSED[name] in text


def test_dp_sgd_split_is_deployable() -> None:
    from ampfl.flower.common import deployable
    from ampfl.flower.secagg import secure_algorithms

    assert "dp_sgd_split" in deployable() and "dp_sgd_split" in secure_algorithms()
