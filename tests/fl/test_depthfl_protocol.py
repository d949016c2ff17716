"""DepthFL as a round protocol (issue 28 item 3: ``ampfl deploy`` runs ``depthfl``), in process, no Flower.

Each cohort client's ``client_update`` (its prefix trained on the simulator's mini-batches) and the server's
``aggregate`` on the sum of the messages reproduce ``run_round``'s new blocks and heads (to float rounding:
one client alone vs. the stacked cohort); the server divides
each coordinate by the number of its holders (the indicator at the end of each message) and keeps a
coordinate nobody held; with ``masks`` a message carries the client's binary mask, drawn from its own
randomness. The real-process deployment is tests/flower/test_deploy_depthfl.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from ampfl.fl.algorithms.round_protocol import ClientInstructions
from ampfl.fl.config import parse_config
from ampfl.fl.run.experiment import build_algorithm, build_task

NUM_CLIENTS = 6


def _config(**extra: Any) -> Any:
    algorithm = {
        "name": "depthfl",
        "client_fraction": 0.5,
        "num_local_steps": 3,
        "batch_size": 8,
        "learning_rate": 0.01,
        "client_splits": [1, 2, 3],
        "eval_examples": 200,
        **extra,
    }
    return parse_config(
        {
            "seed": 1,
            "rounds": 2,
            "dataset": {"name": "digits"},
            "partition": {"scheme": "iid", "num_clients": NUM_CLIENTS},
            "model": {"name": "split_cnn", "options": {"channels": [4, 8, 8], "groups": 2}},
            "algorithm": algorithm,
            "privacy": {"reproducible": True},
        }
    )


@pytest.fixture(scope="module")
def task() -> Any:
    return build_task(_config())


def _messages(protocol: Any, round_index: int, cohort: list[int], seed: int = 0) -> dict[int, Any]:
    broadcast = protocol.broadcast().clone()
    out = {}
    for c in cohort:
        instructions = ClientInstructions(round_index, np.asarray(cohort, dtype=np.int64), c)
        own = np.random.default_rng(seed + c)
        message, state = protocol.client_update(broadcast, instructions, None, own)
        assert state is None
        out[c] = message
    return out


@pytest.mark.parametrize("bottleneck", [False, True])
def test_clients_and_server_reproduce_run_round(task: Any, bottleneck: bool) -> None:
    sim = build_algorithm(_config(bottleneck=bottleneck), task)
    alg = build_algorithm(_config(bottleneck=bottleneck), task)
    protocol = alg.round_protocol()
    assert protocol is alg and alg.deploys and protocol.own_coin(0, noise_shares=False) is None
    layers = len(alg.shapes)
    for r in range(2):
        cohort = protocol.plan_round(r, list(range(NUM_CLIENTS)), noise_shares=False)
        assert cohort == [int(c) for c in sim.participants(r)] and len(cohort) == 3
        messages = _messages(protocol, r, cohort)
        for c, m in messages.items():
            held = (torch.arange(layers) < int(alg.splits[c])).float()
            assert m.vector.numel() == protocol.broadcast().numel() + layers
            assert torch.equal(m.vector[-layers:], held)
        total = torch.stack([m.vector for m in messages.values()]).sum(0)
        protocol.aggregate(total, count=len(cohort), asked=len(cohort), generator=None)
        expected = sim.run_round(r)
        reduced = protocol.reduce_metrics([m.metrics for m in messages.values()])
        assert reduced["train_loss"] == pytest.approx(expected["train_loss"], rel=1e-5)
        # one client's prefix alone vs. the stacked cohort (grouped convolutions): float rounding only
        # (measured: at most 1.2e-7 after two rounds)
        assert torch.allclose(alg.bottom, sim.bottom, rtol=0.0, atol=1e-5)
        assert torch.allclose(alg.heads, sim.heads, rtol=0.0, atol=1e-5)
    ours, theirs = protocol.server_evaluate(), sim.evaluate()
    assert ours.keys() == theirs.keys()
    assert all(abs(ours[k] - theirs[k]) <= 0.005 for k in ours)


def test_each_coordinate_is_divided_by_its_holders(task: Any) -> None:
    alg = build_algorithm(_config(), task)
    nb, nh, layers = alg.bottom.numel(), alg.heads.numel(), len(alg.shapes)
    bottom, heads = alg.bottom.clone(), alg.heads.clone()
    summed = torch.arange(1.0, nb + nh + 1.0)
    total = torch.cat([summed, torch.tensor([3.0, 2.0, 0.0])])  # 3 hold block 1, 2 block 2, nobody block 3
    alg.aggregate(total, count=3, asked=4, generator=None)
    for layer, holders in enumerate((3.0, 2.0)):
        assert torch.equal(alg.bottom[alg.block_of == layer], summed[:nb][alg.block_of == layer] / holders)
        assert torch.equal(alg.heads[alg.head_of == layer], summed[nb:][alg.head_of == layer] / holders)
    assert torch.equal(alg.bottom[alg.block_of == 2], bottom[alg.block_of == 2])  # nobody held it: kept
    assert torch.equal(alg.heads[alg.head_of == 2], heads[alg.head_of == 2])
    kept = alg.broadcast().clone()
    alg.aggregate(torch.zeros(nb + nh), count=0, asked=3, generator=None)  # nobody replied: the transport's 0
    assert torch.equal(alg.broadcast(), kept)
    with pytest.raises(ValueError, match="must hold"):
        alg.aggregate(torch.zeros(nb + nh), count=2, asked=3, generator=None)
    assert layers == 3
    with pytest.raises(ValueError, match="not in the round's cohort"):
        alg.client_update(kept, ClientInstructions(0, np.array([0, 2]), 1), None, np.random.default_rng(0))


def test_masks_upload_a_binary_mask_from_the_clients_own_randomness(task: Any) -> None:
    alg = build_algorithm(_config(masks=True), task)
    nb, layers = alg.bottom.numel(), len(alg.shapes)
    cohort = alg.plan_round(0, list(range(NUM_CLIENTS)), noise_shares=False)
    messages = _messages(alg, 0, cohort)
    for c, m in messages.items():
        depth = int(alg.splits[c])
        blocks, heads = m.vector[:nb], m.vector[nb:-layers]
        assert set(blocks[alg.block_of < depth].unique().tolist()) == {0.0, 1.0}
        assert not blocks[alg.block_of >= depth].any() and not heads[alg.head_of >= depth].any()
        assert heads[alg.head_of < depth].abs().sum() > 0
    # the mask is the client's draw: another rng, another mask; the same rng, the same message
    again = _messages(alg, 0, cohort)
    other = _messages(alg, 0, cohort, seed=100)
    for c in cohort:
        assert torch.equal(messages[c].vector, again[c].vector)
        assert not torch.equal(messages[c].vector[:nb], other[c].vector[:nb])
    vectors = torch.stack([m.vector for m in messages.values()])
    alg.aggregate(vectors.sum(0), count=len(cohort), asked=len(cohort), generator=None)
    depth = alg.splits[torch.tensor(cohort)]
    for layer in range(layers):
        holders = depth > layer
        part = alg.block_of == layer
        if holders.any():  # θ = the mean of the holders' masks (Eq. 5)
            mean = vectors[holders][:, :nb][:, part].sum(0) / holders.sum()
            assert torch.equal(alg.bottom[part], mean)
        else:
            assert torch.equal(alg.bottom[part], torch.full_like(alg.bottom[part], 0.5))


def test_depthfl_deploys_without_secure_aggregation() -> None:
    from ampfl.flower.common import check_deployable, deployable
    from ampfl.flower.secagg import secure_algorithms

    config = _config()
    assert "depthfl" in deployable() and "depthfl" not in secure_algorithms()
    check_deployable(config)  # the trusted server: runs
    assert build_algorithm(config, build_task(config)).privacy_unit is None  # ε = ∞, as ampfl run says
    with pytest.raises(ValueError) as err:
        check_deployable(config, "secaggplus")
    text = str(err.value)
    assert text.startswith("algorithm.name: depthfl") and "\n" not in text and "secure" in text
    assert build_algorithm(config, build_task(config)).round_protocol().message_bound() == float("inf")
