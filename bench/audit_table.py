"""Empirical audit of every private algorithm's quick config (issue 27): the table of docs/audit.md.

Run: ``.venv/bin/python bench/audit_table.py [--canaries 500|auto] [--runs 1] [--out runs/audit_table] [--only
SUBSTRING]``. For each configuration it runs :func:`ampfl.fl.audit.run.audit_run` (secret canaries, real code
path) and prints one markdown row: ε accounted, ε unamplified, ε lower (95%), ratio, the largest ε the audit
could certify (every guess right), canaries, runs, verdict, wall time and the 1-minute load average at the end
of the row. Rows with white-box Dirac canaries (``canary = "dirac"``) carry their own canary and run counts.
A configuration the auditor cannot handle is listed with the one-line reason. Rows marked "patched" run a
deliberately broken algorithm (its accounted noise, or part of it, not added) to show that the scores read
the canaries. One row: ``--only "SUBSTRING OF ITS NAME"``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from ampfl.fl.algorithms import ALGORITHMS
from ampfl.fl.audit.run import audit_run
from ampfl.fl.config import load_config, parse_config

ROOT = Path(__file__).resolve().parents[1]


def _digits(
    algorithm: dict[str, Any],
    *,
    rounds: int,
    clients: int = 20,
    scheme: str = "iid",
    model: str = "logreg",
    **options: Any,
) -> Any:
    return parse_config(
        {
            "seed": 0,
            "rounds": rounds,
            "eval_every": rounds,
            "checkpoint_every": 0,
            "dataset": {"name": "digits"},
            "partition": {"scheme": scheme, "num_clients": clients},
            "model": {"name": model, **({"options": options} if options else {})},
            "algorithm": algorithm,
            "privacy": {"delta": 1e-5},
        }
    )


def configs() -> dict[str, Any]:
    """Row name -> the config, or (config, keyword arguments of :func:`audit_run`)."""
    rp = {
        "name": "dp_dsgd_rp",
        "participation": 0.5,
        "sampling_rate": 0.5,
        "clip": 1.0,
        "learning_rate": 0.5,
        "local_dataset_size": 120,
        "noise_multiplier": 1.0,
    }
    split = load_config(ROOT / "examples" / "digits_dp_sgd_split.toml")
    splitfed = {
        "name": "splitfed_dp",
        "client_fraction": 0.5,
        "num_local_steps": 4,
        "batch_size": 8,
        "eval_examples": 200,
        "eval_clients": 3,
    }
    split_cnn = {"model": "split_cnn", "channels": [4, 8, 8], "groups": 2, "split_layer": 2}
    cnn = _digits(
        {
            "name": "dp_fedavg",
            "client_sampling": "poisson",
            "sampling_rate": 0.5,
            "expected_clients": 10,
            "num_local_steps": 2,
            "batch_size": 5,
            "learning_rate": 0.5,
            "clip": 1.0,
            "target_epsilon": 2.0,
        },
        rounds=5,
        model="cnn",
    )
    return {
        "dp_fedavg (examples/digits_dp_fedavg.toml)": load_config(
            ROOT / "examples" / "digits_dp_fedavg.toml"
        ),
        "dp_fedavg, z = 0 (no guarantee)": _z0(),
        "dp_dsgd_rp (p = q = 0.5, z = 1)": _digits(rp, rounds=20),
        "dp_dsgd_rp, participation revealed (p = q = 0.5, z = 1)": (
            _digits(rp, rounds=20),
            {"participation": "revealed"},
        ),
        "dp_dsgd_rp, every client checks in (p = 1)": _digits({**rp, "participation": 1.0}, rounds=20),
        "ms_pafl (examples/digits_ms_pafl.toml)": load_config(ROOT / "examples" / "digits_ms_pafl.toml"),
        "ms_pafl, 10 rounds, patched: no noise": (
            load_config(ROOT / "examples" / "digits_ms_pafl.toml").model_copy(update={"rounds": 10}),
            {"algorithms": {**ALGORITHMS, "ms_pafl": _SilentMSPAFL}},
        ),
        "dp_sgd_split (examples/digits_dp_sgd_split.toml)": split,
        "dp_sgd_split unsplit twin (num_submodels = 1, same z)": _unsplit(split),
        "dp_sgd_split, 20 rounds, patched: no noise": (
            split.model_copy(update={"rounds": 20}),
            {"algorithms": {**ALGORITHMS, "dp_sgd_split": _SilentSplit}},
        ),
        "gdpfed": _digits(
            {
                "name": "gdpfed",
                "participation": 0.4,
                "learning_rate": 0.2,
                "num_local_steps": 2,
                "batch_size": 8,
                "group_budgets": [1.0, 4.0],
                "group_sizes": [8, 12],
                "expected_group_sizes": [8, 12],
            },
            rounds=10,
        ),
        "splitfed_dp (split CNN, z_s = z_g = 1, 10 rounds)": _digits(
            splitfed, rounds=10, clients=10, **split_cnn
        ),
        "splitfed_dp (z_s = z_g = 30, 4 rounds)": _digits(
            {**splitfed, "smashed_noise_multiplier": 30.0, "noise_multiplier": 30.0},
            rounds=4,
            clients=10,
            **split_cnn,
        ),
        "splitfed_dp (z_s = z_g = 30, 4 rounds), patched: 1% of the smashed noise": (
            _digits(
                {**splitfed, "smashed_noise_multiplier": 30.0, "noise_multiplier": 30.0},
                rounds=4,
                clients=10,
                **split_cnn,
            ),
            {"algorithms": {**ALGORITHMS, "splitfed_dp": _QuietSmashed}},
        ),
        "dp_fedavg, CNN (digits padded to 28×28), input canaries, 5 rounds": (cnn, {"task": _padded(cnn)}),
        "dp_fedavg, CNN, input canaries, patched: no noise": (
            cnn,
            {"task": _padded(cnn), "algorithms": {**ALGORITHMS, "dp_fedavg": _SilentFedAvg}},
        ),
        **dirac_rows(),
    }


def _full_fedavg(z: float, rate: float = 1.0) -> Any:
    """DP-FedAvg on digits, 20 clients, Poisson rate ``rate`` (1: every client every round), 10 rounds."""
    algorithm = {
        "name": "dp_fedavg",
        "client_sampling": "poisson",
        "sampling_rate": rate,
        "expected_clients": 20 * rate,
        "num_local_steps": 2,
        "batch_size": 8,
        "learning_rate": 0.5,
        "clip": 1.0,
        "noise_multiplier": z,
    }
    return _digits(algorithm, rounds=10)


def dirac_rows() -> dict[str, Any]:
    """White-box Dirac canaries scored from every noised sum (100 000 canaries × 4 runs unless stated):
    unamplified DP-FedAvg (every client every round) and DP-SGD (dp_dsgd_rp at p = q = 1, full batches) at
    ε ≈ 2, 4.4 and 7, the same with the noise removed or halved; amplification: DP-FedAvg with Poisson q = 0.5
    with participation hidden (against the amplified ε) and revealed (against the revealed-participation ε;
    the row after it is the same run's hidden view), DP-SGD with local sampling q = 0.5 beside q = 1."""
    dirac = {"canary": "dirac", "canaries": 100_000, "runs": 4}
    sgd = {
        "name": "dp_dsgd_rp",
        "participation": 1.0,
        "sampling_rate": 1.0,
        "clip": 1.0,
        "learning_rate": 0.5,
        "local_dataset_size": 120,
        "noise_multiplier": 3.16,
    }
    rows: dict[str, Any] = {
        f"dp_fedavg, every client, z = {z}, 10 rounds, dirac": (_full_fedavg(z), dirac)
        for z in (6.32, 3.16, 2.1)
    }
    rows["dp_fedavg, every client, z = 3.16, dirac, patched: no noise"] = (
        _full_fedavg(3.16),
        {**dirac, "algorithms": {**ALGORITHMS, "dp_fedavg": _SilentFedAvg}},
    )
    rows["dp_fedavg, every client, z = 3.16, dirac, patched: half the noise"] = (
        _full_fedavg(3.16),
        {**dirac, "algorithms": {**ALGORITHMS, "dp_fedavg": _HalfNoiseFedAvg}},
    )
    rows["dp_fedavg, Poisson q = 0.5, z = 3.16, 10 rounds, dirac"] = (_full_fedavg(3.16, 0.5), dirac)
    revealed = {**dirac, "participation": "revealed"}  # prints the same run's hidden view as a second row
    rows["dp_fedavg, Poisson q = 0.5, participation revealed, z = 3.16, 10 rounds, dirac"] = (
        _full_fedavg(3.16, 0.5),
        revealed,
    )
    rows["dp_fedavg (examples/digits_dp_fedavg.toml: q = 0.5, 40 rounds), dirac"] = (
        load_config(ROOT / "examples" / "digits_dp_fedavg.toml"),
        dirac,
    )
    rows["dp_fedavg (examples/digits_dp_fedavg.toml), participation revealed, dirac"] = (
        load_config(ROOT / "examples" / "digits_dp_fedavg.toml"),
        revealed,
    )
    sgd_dirac = {**dirac, "canaries": 50_000}
    rows["DP-SGD (dp_dsgd_rp, p = q = 1, full batch), z = 3.16, 10 steps, dirac (50 000 × 4)"] = (
        _digits(sgd, rounds=10),
        sgd_dirac,
    )
    rows[
        "DP-SGD with local sampling (dp_dsgd_rp, p = 1, q = 0.5), z = 3.16, 10 steps, dirac (50 000 × 4)"
    ] = (
        _digits({**sgd, "sampling_rate": 0.5}, rounds=10),
        sgd_dirac,
    )
    rows["DP-SGD (dp_dsgd_rp, p = q = 1), z = 3.16, dirac (50 000 × 4), patched: no noise"] = (
        _digits(sgd, rounds=10),
        {**sgd_dirac, "algorithms": {**ALGORITHMS, "dp_dsgd_rp": _SilentSGD}},
    )
    return rows


def _unsplit(split: Any) -> Any:
    """The example with num_submodels = 1 at the split run's calibrated z (its unsplit twin)."""
    from ampfl.fl.run.experiment import build_algorithm, build_task

    z = build_algorithm(split, build_task(split)).noise_multiplier  # type: ignore[attr-defined]
    params = split.algorithm.params.model_copy(
        update={"num_submodels": 1, "target_epsilon": None, "noise_multiplier": z}
    )
    return split.model_copy(update={"algorithm": split.algorithm.model_copy(update={"params": params})})


def _padded(config: Any) -> Any:
    """The digits task of ``config`` as [n, 1, 28, 28] images (8 × 8 centred in zeros) for the 28 × 28 CNN."""
    from ampfl.fl.run.experiment import build_task
    from ampfl.fl.task import Task

    flat = build_task(config)

    def pad(x: np.ndarray) -> np.ndarray:
        return np.pad(x.reshape(-1, 1, 8, 8), ((0, 0), (0, 0), (10, 10), (10, 10)))

    data = dataclasses.replace(
        flat.dataset, x_train=pad(flat.dataset.x_train), x_test=pad(flat.dataset.x_test)
    )
    return Task(data, flat.client_indices, model="cnn", model_options={})


class _SilentMSPAFL(ALGORITHMS["ms_pafl"]):  # type: ignore[misc,valid-type]
    """Broken on purpose: accounts its calibrated noise, adds none."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.noise_std = 0.0


class _SilentFedAvg(ALGORITHMS["dp_fedavg"]):  # type: ignore[misc,valid-type]
    """Broken on purpose: accounts its calibrated noise, adds none."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.noise_std = 0.0


class _HalfNoiseFedAvg(ALGORITHMS["dp_fedavg"]):  # type: ignore[misc,valid-type]
    """Broken on purpose: accounts its noise multiplier, adds half that noise."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.noise_std = self.noise_std / 2


class _SilentSGD(ALGORITHMS["dp_dsgd_rp"]):  # type: ignore[misc,valid-type]
    """Broken on purpose: accounts its noise multiplier, adds no noise."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.noise_std = 0.0


class _SilentSplit(ALGORITHMS["dp_sgd_split"]):  # type: ignore[misc,valid-type]
    """Broken on purpose: reports the events of its calibrated z, adds no noise."""

    claimed = math.nan

    def _set_noise_multiplier(self, z: float) -> None:  # at set-up, and again when the run calibrates z
        super()._set_noise_multiplier(z)
        self.claimed, self.noise_multiplier = self.noise_multiplier, 0.0

    def round_events(self, round_index: int) -> Any:
        self.noise_multiplier = self.claimed
        try:
            return super().round_events(round_index)
        finally:
            self.noise_multiplier = 0.0


class _QuietSmashed(ALGORITHMS["splitfed_dp"]):  # type: ignore[misc,valid-type]
    """Broken on purpose: accounts z_s but adds 1% of that noise to the smashed rows."""

    def dp_step(self, *args: Any) -> Any:
        claimed = self.dp
        self.dp = claimed.model_copy(
            update={"smashed_noise_multiplier": claimed.smashed_noise_multiplier / 100}
        )
        try:
            return super().dp_step(*args)
        finally:
            self.dp = claimed


def _z0() -> Any:
    text = (ROOT / "examples" / "digits_dp_fedavg.toml").read_text("utf-8")
    import tomllib

    data = tomllib.loads(text.replace("target_epsilon = 2.0", "noise_multiplier = 0.0"))
    return parse_config(data)


def _unamplified(config: Any, folder: Path, noise: dict[str, Any]) -> float:
    """ε of the same run under ``[privacy] accounting = "no-amplification"`` (its unamplified twin)."""
    from ampfl.fl.run.experiment import clear_run_folder, run_experiment

    privacy = config.privacy.model_copy(update={"accounting": "no-amplification"})
    params = config.algorithm.params
    if getattr(params, "target_epsilon", None) is not None:  # keep the audited run's noise: no recalibration
        fixed = params.model_copy(
            update={"target_epsilon": None, "noise_multiplier": noise["noise_multiplier"]}
        )
        config = config.model_copy(
            update={"algorithm": config.algorithm.model_copy(update={"params": fixed})}
        )
    clear_run_folder(folder)
    summary = run_experiment(
        config.model_copy(update={"privacy": privacy}), folder, progress=False, plots=False
    )
    return float(summary["epsilon"])


def _row(name: str, r: dict[str, Any], unamplified: float | None, seconds: float) -> str:
    def num(x: float | None) -> str:
        return "—" if x is None else f"{x:.3g}" if math.isfinite(x) else "∞"

    ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}"
    cells = [name, r["privacy_unit"], num(r["epsilon_accounted"]), num(unamplified), num(r["epsilon_lower"])]
    cells += [
        ratio,
        num(r["epsilon_max_certifiable"]),
        str(r["canaries"]),
        str(r["runs"]),
        r["verdict"],
        f"{seconds:.1f}",
        f"{os.getloadavg()[0]:.1f}",
    ]
    return "| " + " | ".join(cells) + " |"


HEADER = (
    "| configuration | unit | ε accounted | ε unamplified | ε lower (95%) | ratio | max certifiable "
    "| canaries | runs | verdict | time (s) | load |"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--canaries", default="500", help="a count, or auto")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("runs") / "audit_table")
    parser.add_argument("--only", default="", help="rows whose name contains this")
    args = parser.parse_args()
    print(HEADER)
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    canaries: int | str = "auto" if args.canaries == "auto" else int(args.canaries)
    for i, (name, row) in enumerate(configs().items()):
        if args.only not in name:
            continue
        config, kwargs = row if isinstance(row, tuple) else (row, {})
        kwargs = {"canaries": canaries, "runs": args.runs, **kwargs}  # a row's own counts win
        started = time.perf_counter()
        try:
            r = audit_run(config, args.out / str(i), progress=False, **kwargs)
        except (ValueError, RuntimeError) as exc:
            print(f"| {name} | | | | not audited: {str(exc).splitlines()[0][:120]} | | | | | | | |")
            continue
        seconds = time.perf_counter() - started
        twin: float | None = math.inf
        if "patched" in name or "task" in kwargs:  # a broken algorithm, or a task built here: no twin run
            twin = None
        elif math.isfinite(r["epsilon_accounted"]):
            twin = _unamplified(config, args.out / f"{i}-unamplified", r["noise"] or {})
        print(_row(name, r, twin, seconds), flush=True)
        if "hidden_view" in r:  # the same run, participation hidden, against the amplified ε
            hidden = {**r, **r["hidden_view"]}
            hidden["ratio"] = hidden["epsilon_lower"] / hidden["epsilon_accounted"]
            print(_row(f"{name}: its hidden view (same run)", hidden, twin, seconds), flush=True)


if __name__ == "__main__":
    main()
