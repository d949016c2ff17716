"""The real algorithms through ``run_experiment``: bit-identical resumption (engine, client store, momentum)
and the no-amplification accounting (moved from test_run.py, whose tests use a small fake algorithm)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from ampfl.accounting.accountants import RDPAccountant
from ampfl.accounting.events import GaussianEvent
from ampfl.fl.config import parse_config
from ampfl.fl.run.experiment import load_checkpoint, run_experiment

REAL_PARAMS = {
    "fedavg": {"cohort_size": 4},
    "local_only": {"participation": 0.5},
    "dp_fedavg": {"cohort_size": 4, "noise_multiplier": 1.0},
    "ms_pafl": {"participation": 0.3},
    "dp_dsgd_rp": {
        "participation": 0.3,
        "sampling_rate": 0.1,
        "momentum": 0.9,
        "noise_multiplier": 2.0,
        "local_dataset_size": 167,  # the largest client's records (public bound)
    },
}


@pytest.mark.parametrize("name", list(REAL_PARAMS))
def test_real_algorithm_resumes_bit_identically(tmp_path, name):
    # Prepare: the real algorithms (engine, client store, momentum) on the small synthetic data set.
    config = parse_config(
        {
            "seed": 5,
            "rounds": 4,
            "eval_every": 2,
            "checkpoint_every": 2,
            "dataset": {"name": "synthetic"},
            "partition": {"scheme": "iid", "num_clients": 12},
            "algorithm": {"name": name, **REAL_PARAMS[name]},
            # rdp: fast; "auto" resumes in tests/fl/test_privacy_auto.py
            "privacy": {"accountant": "rdp", "reproducible": True},
        }
    )
    # Execute
    full = run_experiment(config, tmp_path / "full", progress=False, plots=False)
    run_experiment(config, tmp_path / "split", progress=False, plots=False, stop_after=2)
    resumed = run_experiment(config, tmp_path / "split", resume=True, progress=False, plots=False)
    # Assert
    a, b = load_checkpoint(tmp_path / "full"), load_checkpoint(tmp_path / "split")
    _assert_same_state(a["algorithm"], b["algorithm"])
    assert [{k: v for k, v in m.items() if k != "wall_seconds"} for m in a["metrics"]] == [
        {k: v for k, v in m.items() if k != "wall_seconds"} for m in b["metrics"]
    ]
    assert full["final_accuracy"] == resumed["final_accuracy"] and full["epsilon"] == resumed["epsilon"]
    assert a["privacy"] == b["privacy"]
    private = name not in ("fedavg", "local_only")
    assert (0 < full["epsilon"] < math.inf) if private else full["epsilon"] == math.inf
    units = {"fedavg": None, "local_only": None, "dp_fedavg": "client"}
    assert full["privacy_unit"] == units.get(name, "record")


def _assert_same_state(a: Any, b: Any) -> None:
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert set(a) == set(b)
        for key in a:
            _assert_same_state(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same_state(x, y)
    else:
        assert a == b


def test_real_no_amplification_accounting_composes_the_plain_gaussian(tmp_path):
    # Prepare: DP-DSGD-RP accounted without amplification: each round a Gaussian at the same z.
    z, rounds = 3.0, 3
    data = {
        "rounds": rounds,
        "dataset": {"name": "synthetic"},
        "partition": {"scheme": "iid", "num_clients": 12},
        "algorithm": {
            "name": "dp_dsgd_rp",
            "participation": 0.3,
            "sampling_rate": 0.1,
            "noise_multiplier": z,
            "local_dataset_size": 167,
        },
    }
    data["privacy"] = {"accountant": "rdp", "reproducible": True}  # the independent ε below is RDP's
    amplified = run_experiment(parse_config(data), tmp_path / "a", progress=False, plots=False)
    data["privacy"] = {"accountant": "rdp", "accounting": "no-amplification", "reproducible": True}
    plain = run_experiment(parse_config(data), tmp_path / "b", progress=False, plots=False)
    # Assert: same training, independently composed Gaussian ε, and amplification is worth something.
    expected = RDPAccountant().compose(GaussianEvent(noise_multiplier=z), rounds).get_epsilon(1e-5)
    assert plain["epsilon"] == pytest.approx(expected, rel=1e-12)
    assert plain["accounting"] == "no-amplification" and amplified["accounting"] == "amplified"
    assert amplified["epsilon"] < plain["epsilon"]
    assert plain["final_accuracy"] == amplified["final_accuracy"]
