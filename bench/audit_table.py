"""Empirical audit of every private algorithm's quick config (issue 27): the table of docs/audit.md.

Run: ``.venv/bin/python bench/audit_table.py [--canaries 500] [--runs 1] [--out runs/audit_table]``. For each
configuration it runs :func:`ampfl.fl.audit_run.audit_run` (secret canaries, real code path) and prints one
markdown row: ε accounted, ε lower (95%), ratio, canaries, runs, verdict and wall time. A configuration the
auditor cannot handle is listed with the one-line reason.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

from ampfl.fl.audit_run import audit_run
from ampfl.fl.config import load_config, parse_config

ROOT = Path(__file__).resolve().parents[1]


def _digits(algorithm: dict[str, Any], *, rounds: int, clients: int = 20, scheme: str = "iid") -> Any:
    return parse_config(
        {
            "seed": 0,
            "rounds": rounds,
            "eval_every": rounds,
            "checkpoint_every": 0,
            "dataset": {"name": "digits"},
            "partition": {"scheme": scheme, "num_clients": clients},
            "model": {"name": "logreg"},
            "algorithm": algorithm,
            "privacy": {"delta": 1e-5},
        }
    )


def configs() -> dict[str, Any]:
    rp = {
        "name": "dp_dsgd_rp",
        "participation": 0.5,
        "sampling_rate": 0.5,
        "clip": 1.0,
        "learning_rate": 0.5,
        "local_dataset_size": 120,
        "noise_multiplier": 1.0,
    }
    return {
        "dp_fedavg (examples/digits_dp_fedavg.toml)": load_config(
            ROOT / "examples" / "digits_dp_fedavg.toml"
        ),
        "dp_fedavg, z = 0 (no guarantee)": _z0(),
        "dp_dsgd_rp (p = q = 0.5, z = 1)": _digits(rp, rounds=20),
        "dp_dsgd_rp, every client checks in (p = 1)": _digits({**rp, "participation": 1.0}, rounds=20),
        "ms_pafl (examples/digits_ms_pafl.toml)": load_config(ROOT / "examples" / "digits_ms_pafl.toml"),
        "dp_sgd_split (examples/digits_dp_sgd_split.toml)": load_config(
            ROOT / "examples" / "digits_dp_sgd_split.toml"
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
    }


def _z0() -> Any:
    text = (ROOT / "examples" / "digits_dp_fedavg.toml").read_text("utf-8")
    import tomllib

    data = tomllib.loads(text.replace("target_epsilon = 2.0", "noise_multiplier = 0.0"))
    return parse_config(data)


def _unamplified(config: Any, folder: Path, noise: dict[str, Any]) -> float:
    """ε of the same run under ``[privacy] accounting = "no-amplification"`` (its unamplified twin)."""
    from ampfl.fl.run import clear_run_folder, run_experiment

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


def _row(name: str, r: dict[str, Any], unamplified: float, seconds: float) -> str:
    def num(x: float) -> str:
        return f"{x:.3g}" if math.isfinite(x) else "∞"

    ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}"
    cells = [name, r["privacy_unit"], num(r["epsilon_accounted"]), num(unamplified), num(r["epsilon_lower"])]
    cells += [ratio, str(r["canaries"]), str(r["runs"]), r["verdict"], f"{seconds:.1f}"]
    return "| " + " | ".join(cells) + " |"


HEADER = (
    "| configuration | unit | ε accounted | ε unamplified | ε lower (95%) | ratio | canaries | runs "
    "| verdict | time (s) |"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--canaries", type=int, default=500)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("runs") / "audit_table")
    args = parser.parse_args()
    print(HEADER)
    print("|---|---|---|---|---|---|---|---|---|---|")
    for i, (name, config) in enumerate(configs().items()):
        started = time.perf_counter()
        try:
            r = audit_run(config, args.out / str(i), canaries=args.canaries, runs=args.runs, progress=False)
        except (ValueError, RuntimeError) as exc:
            print(f"| {name} | | | | not audited: {str(exc).splitlines()[0][:120]} | | | | | |")
            continue
        seconds = time.perf_counter() - started
        twin = math.inf
        if math.isfinite(r["epsilon_accounted"]):
            twin = _unamplified(config, args.out / f"{i}-unamplified", r["noise"] or {})
        print(_row(name, r, twin, seconds), flush=True)


if __name__ == "__main__":
    main()
