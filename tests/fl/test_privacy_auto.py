"""``[privacy] accountant = "auto"`` (the default of runs, issue 11): the tightest sound accountant.

"auto" is "pld" when the PLD accountant accounts every event of the first round, else "rdp"; the summary
names the resolved one; its ε is exactly the one of naming that accountant; a calibration uses the same
accountant as the ledger; resumption continues the resolved ledger. RDP numbers elsewhere name "rdp".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from pydantic import BaseModel, ConfigDict, Field

from ampfl.accounting.accountants import (
    ACCOUNTANT_CHOICES,
    NeighboringRelation,
    PLDAccountant,
    RDPAccountant,
    accountant_for,
    resolve_accountant,
)
from ampfl.accounting.calibrate import calibrate
from ampfl.accounting.events import (
    BernoulliMaskEvent,
    GaussianEvent,
    PoissonSampledEvent,
    PrivacyEvent,
)
from ampfl.fl.algorithms.base import Algorithm
from ampfl.fl.config import PrivacyConfig, parse_config
from ampfl.fl.privacy.calibration import NoiseTarget
from ampfl.fl.privacy.run_accountant import RunAccountant, planned_epsilon
from ampfl.fl.run import experiment as run_module
from ampfl.fl.run.experiment import build_calibrated, load_checkpoint, run_experiment
from ampfl.fl.task import Task

MASK = BernoulliMaskEvent(c=0.3, dim=2)  # PM-SFL's mask bits: exact RDP, no PLD (UnsupportedEventError)


def _poisson(z: float, q: float = 0.2) -> PoissonSampledEvent:
    return PoissonSampledEvent(sampling_rate=q, event=GaussianEvent(noise_multiplier=z))


class _Fake(Algorithm):
    """No training: one weight, and the events named by ``events`` each round (optionally calibrated)."""

    name: ClassVar[str] = "fake"
    privacy_unit = "client"

    class Params(BaseModel):
        model_config = ConfigDict(extra="forbid")
        events: str = "poisson"  # "poisson" | "poisson+mask"
        noise_multiplier: float = Field(3.0, gt=0)
        sampling_rate: float = 0.2
        target_epsilon: float | None = None
        num_rounds: int = 4

    def __init__(
        self,
        params: BaseModel,
        task: Task,
        *,
        seed: int,
        engine: Any = None,
        privacy: Any = None,
        privacy_key: int | None = None,
    ):
        super().__init__(params, task, seed=seed, engine=engine, privacy=privacy, privacy_key=privacy_key)
        p: Any = params
        self.p = p
        self.noise_multiplier = float(p.noise_multiplier)
        self.weight = torch.zeros(1)
        type(self).built += 1

    built: ClassVar[int] = 0  # constructor calls

    def noise_targets(self) -> list[NoiseTarget]:  # calibrated on its Poisson part alone (PLD-accountable)
        if self.p.target_epsilon is None:
            return []
        return [NoiseTarget("z", self.event_at, self.p.target_epsilon, self.p.num_rounds)]

    def set_noise(self, resolved: Any) -> None:
        self.noise_multiplier = resolved["z"].noise_multiplier

    def event_at(self, z: float) -> PoissonSampledEvent:
        return _poisson(z, self.p.sampling_rate)

    def run_round(self, round_index: int) -> dict[str, float]:
        self.weight = self.weight + torch.randn(1, generator=self.torch_generator(round_index, 0))
        return {"participants": 1.0}

    def evaluate(self) -> dict[str, float]:
        return {"accuracy": 0.5}

    def round_events(self, round_index: int) -> list[tuple[PrivacyEvent, int]]:
        events: list[tuple[PrivacyEvent, int]] = [(self.event_at(self.noise_multiplier), 1)]
        if self.p.events == "poisson+mask":
            events.append((MASK, 1))
        return events

    def state_dict(self) -> dict[str, Any]:
        return {"weight": self.weight.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.weight = state["weight"].clone()


@dataclass(frozen=True)
class _Data:
    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int = 2


def _task() -> Task:
    x, y = np.zeros((8, 2), np.float32), np.zeros(8, np.int64)
    return Task(dataset=_Data("tiny", x, y, x, y), client_indices=list(np.array_split(np.arange(8), 4)))  # type: ignore[arg-type]


def _config(privacy: dict[str, Any] | None = None, **algorithm: Any) -> Any:
    data = {"rounds": 4, "eval_every": 2, "checkpoint_every": 2, "dataset": {"name": "tiny"}}
    data["algorithm"] = {"name": "fake", **algorithm}
    data["privacy"] = privacy or {}
    return parse_config(data, algorithms={"fake": _Fake})


@pytest.fixture(autouse=True)
def _no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_module, "build_engine", lambda config: object())


def _run(config: Any, out: Any, **kwargs: Any) -> dict[str, Any]:
    return run_experiment(
        config, out, progress=False, plots=False, algorithms={"fake": _Fake}, task=_task(), **kwargs
    )


def test_resolution_rule() -> None:
    assert ACCOUNTANT_CHOICES == ("auto", "rdp", "pld") and PrivacyConfig().accountant == "auto"
    assert resolve_accountant("auto", [_poisson(3.0), GaussianEvent(noise_multiplier=3.0)]) == "pld"
    assert resolve_accountant("auto", [_poisson(3.0), MASK]) == "rdp"  # no PLD for one of them
    assert resolve_accountant("auto", [_poisson(3.0)], NeighboringRelation.REPLACE_ONE) == "rdp"
    assert resolve_accountant("auto", [GaussianEvent(noise_multiplier=1e-6)]) == "rdp"  # PLD grid too large
    assert resolve_accountant("auto", []) == "pld"
    for name in ("rdp", "pld"):  # named accountants are taken as they are
        assert resolve_accountant(name, [MASK]) == name
    assert isinstance(accountant_for("auto", [_poisson(3.0)]), PLDAccountant)
    assert isinstance(accountant_for("auto", [MASK]), RDPAccountant)
    with pytest.raises(ValueError, match="accountant must be one of auto, rdp, pld"):
        resolve_accountant("moments", [])


def test_auto_run_names_pld_and_equals_the_named_run(tmp_path: Any) -> None:
    auto = _run(_config(), tmp_path / "auto")
    pld = _run(_config({"accountant": "pld"}), tmp_path / "pld")
    rdp = _run(_config({"accountant": "rdp"}), tmp_path / "rdp")
    assert (auto["accountant"], auto["accountant_requested"]) == ("pld", "auto")
    assert (rdp["accountant"], rdp["accountant_requested"]) == ("rdp", "rdp")
    assert auto["analysis"].startswith("pld accountant") and auto["analysis"] == pld["analysis"]
    assert auto["epsilon"] == pld["epsilon"]
    independent = PLDAccountant().compose(_poisson(3.0), 4).get_epsilon(1e-5)
    assert auto["epsilon"] == pytest.approx(independent, rel=1e-9)  # 4 compositions vs one 4-fold
    assert 0 < auto["epsilon"] <= rdp["epsilon"] * (1 + 1e-9)  # the PLD is the tighter sound bound here


def test_auto_run_falls_back_to_rdp_when_the_pld_cannot_account(tmp_path: Any) -> None:
    auto = _run(_config(events="poisson+mask"), tmp_path / "auto")
    rdp = _run(_config({"accountant": "rdp"}, events="poisson+mask"), tmp_path / "rdp")
    assert (auto["accountant"], auto["accountant_requested"]) == ("rdp", "auto")
    assert auto["epsilon"] == rdp["epsilon"] and auto["analysis"] == rdp["analysis"]
    with pytest.raises(ValueError, match=r"^privacy\.accountant: the 'pld' accountant cannot account fake"):
        _run(_config({"accountant": "pld"}, events="poisson+mask"), tmp_path / "pld")


def test_auto_run_resumes_its_resolved_ledger(tmp_path: Any) -> None:
    config = _config()
    full = _run(config, tmp_path / "full")
    assert _run(config, tmp_path / "split", stop_after=2)["completed"] is False
    assert load_checkpoint(tmp_path / "split")["privacy"]["accountant"]["accountant"] == "pld"
    resumed = _run(config, tmp_path / "split", resume=True)
    assert resumed["epsilon"] == full["epsilon"] and resumed["accountant"] == "pld"
    assert load_checkpoint(tmp_path / "split")["privacy"] == load_checkpoint(tmp_path / "full")["privacy"]
    # A ledger of another kind is refused with a one-line hint (e.g. a pre-"auto" RDP checkpoint).
    ledger = RunAccountant(PrivacyConfig(accountant="rdp"), _Fake(_Fake.Params(), _task(), seed=0))
    with pytest.raises(ValueError, match=r"^--resume: .*\(pld\) does not match this run's \(rdp\)"):
        ledger.load_state_dict(load_checkpoint(tmp_path / "full")["privacy"])


def test_calibration_uses_the_ledger_accountant(tmp_path: Any) -> None:
    target, q = 0.5, 1.0  # q = 1: cheap PLDs
    summary = _run(_config(target_epsilon=target, sampling_rate=q), tmp_path / "auto")
    z = summary["noise"]["noise_multiplier"]
    # Calibrated by the PLD accountant that reports: within 0.5% of the smallest z meeting the target on it.
    assert summary["accountant"] == "pld" and summary["epsilon"] <= target
    assert PLDAccountant().compose(_poisson(z / 1.006, q), 4).get_epsilon(1e-5) > target
    # The calibration event is PLD-accountable but the round is not (mask bits): calibrated again with "rdp",
    # the algorithm built once.
    config = _config(target_epsilon=target, sampling_rate=q, events="poisson+mask")
    before = _Fake.built
    algorithm, ledger = build_calibrated(config, _task(), algorithms={"fake": _Fake}, privacy_key=0)
    z_rdp = calibrate(algorithm.event_at, target_epsilon=target, target_delta=1e-5, accountant="rdp", count=4)  # type: ignore[attr-defined]
    assert (ledger.kind, ledger.requested, _Fake.built - before) == ("rdp", "auto", 1)
    assert algorithm.noise_multiplier == z_rdp > z  # type: ignore[attr-defined]


@pytest.mark.parametrize(("q", "z", "rounds"), [(0.1, 2.0, 20), (0.5, 3.0, 5), (1.0, 2.0, 3)])
def test_auto_epsilon_is_never_above_rdp(q: float, z: float, rounds: int) -> None:
    events = [(_poisson(z, q), rounds)]
    auto = planned_epsilon(events, privacy=PrivacyConfig())
    rdp = planned_epsilon(events, privacy=PrivacyConfig(accountant="rdp"))
    assert auto == planned_epsilon(events, privacy=PrivacyConfig(accountant="pld"))
    assert 0 < auto <= rdp * (1 + 1e-9) and math.isfinite(rdp)


REAL = [  # (algorithm table, resolved accountant)
    (
        {
            "name": "dp_fedavg",
            "client_sampling": "poisson",
            "sampling_rate": 0.5,
            "noise_multiplier": 3.0,
            "expected_clients": 6,
        },
        "pld",
    ),
    ({"name": "dp_fedavg", "cohort_size": 4, "noise_multiplier": 3.0}, "rdp"),  # replace-one: no PLD
    ({"name": "ms_pafl", "participation": 0.3, "noise_multiplier": 3.0}, "pld"),
    (
        {
            "name": "dp_dsgd_rp",
            "participation": 0.5,
            "sampling_rate": 0.5,
            "noise_multiplier": 3.0,
            "local_dataset_size": 167,
        },
        "pld",
    ),
]


@pytest.mark.parametrize(("algorithm", "kind"), REAL, ids=lambda x: x["name"] if isinstance(x, dict) else x)
def test_real_algorithms_resolve(algorithm: dict[str, Any], kind: str) -> None:
    from ampfl.fl.run.experiment import build_algorithm, build_task

    data = {"rounds": 2, "dataset": {"name": "synthetic"}, "partition": {"scheme": "iid", "num_clients": 12}}
    config = parse_config({**data, "algorithm": algorithm})
    ledger = RunAccountant(config.privacy, build_algorithm(config, build_task(config)))
    assert (ledger.requested, ledger.kind) == ("auto", kind) and ledger.analysis().startswith(kind)
