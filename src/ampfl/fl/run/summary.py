"""``summary.json``: one writer for both engines (``ampfl run``'s simulator and ``ampfl deploy``'s Flower).

:func:`build_summary` builds the dict with exactly the keys of :data:`SUMMARY_KEYS` (in that order), plus
``epsilon_by_group`` and ``budget_by_group`` for an algorithm with per-group budgets (paper 001), whichever
engine ran it; ``engine`` says which (``"simulator"`` or ``"flower"``). The keys that only one engine can
fill are ``null`` in the other's summary: ``secure_aggregation`` (``"secaggplus"`` or null: the simulator runs
no secure-aggregation protocol), ``discovery_seconds`` (the ServerApp's wait for the SuperNodes) and the
launcher's ``bring_up_seconds``, ``teardown_seconds`` (a local federation) and ``deploy_seconds`` (filled by
:func:`ampfl.flower.deploy.deploy` after the ServerApp wrote the file).

Everything in it is released (docs/threat_model.md): public configuration, ε and δ, the threat model, the
released metrics of the last evaluation (``final_metrics``) and wall-clock times; ``num_clients`` is null
under a client-level guarantee (N is private under add/remove one client).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ampfl.fl.run.folder import SUMMARY
from ampfl.fl.run.lines import group_fields, noise_levels
from ampfl.fl.run.release import TIMING_KEYS, privacy_randomness, threat_model
from ampfl.io import atomic_write_json

if TYPE_CHECKING:
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.config import RunConfig
    from ampfl.fl.privacy.run_accountant import RunAccountant

#: The engines that write a summary.
ENGINES = ("simulator", "flower")

#: The keys of every ``summary.json`` (both engines), in the file's order.
SUMMARY_KEYS: tuple[str, ...] = (
    "engine",
    "device",
    "secure_aggregation",
    "algorithm",
    "dataset",
    "partition",
    "model",
    "rounds",
    "rounds_completed",
    "stopped",
    "final_accuracy",
    "best_accuracy",
    "accuracy_metric",
    "epsilon",
    "delta",
    "max_epsilon",
    "privacy_unit",
    "neighbouring",
    "protects_against",
    "participation_hidden_from",
    "privacy_randomness",
    "accountant",
    "accountant_requested",
    "accounting",
    "analysis",
    *TIMING_KEYS,
    "final_metrics",
    "num_clients",
    "seed",
    "params",
    "noise",
    "completed",
    "out_dir",
    "files",
)

#: Keys added for an algorithm with per-group budgets (:func:`ampfl.fl.run.lines.group_fields`).
GROUP_KEYS = ("epsilon_by_group", "budget_by_group")

#: The keys the deploy launcher fills after the ServerApp wrote the summary (null until then).
LAUNCHER_KEYS = ("bring_up_seconds", "teardown_seconds", "deploy_seconds")


def run_threat_model(
    algorithm: Algorithm, *, private: bool, noise_shares: bool = False
) -> dict[str, list[str]]:
    """``protects_against`` and ``participation_hidden_from`` of a run: none without a guarantee; the server
    too when each client adds a share of the noise before a secure sum (``noise_shares``); otherwise the
    algorithm's own (:meth:`~ampfl.fl.algorithms.base.Algorithm.threat_model`: e.g. MS-PAFL's client-side
    noise protects against the server, a trusted server's noise against the model consumers only)."""
    if not private:
        return threat_model(private=False)
    if noise_shares:
        return threat_model(private=True, server_sees_only_noised_sum=True)
    return algorithm.threat_model()


def build_summary(
    *,
    engine: Literal["simulator", "flower"],
    config: RunConfig,
    algorithm: Algorithm,
    ledger: RunAccountant,
    metrics: Sequence[Mapping[str, Any]],
    final: Mapping[str, Any],
    rounds_completed: int,
    stopped: str,
    wall_seconds: float,
    round_seconds: Sequence[float],
    threats: Mapping[str, list[str]],
    num_clients: int,
    out: Path,
    files: Sequence[str],
    secure_aggregation: str | None = None,
    discovery_seconds: float | None = None,
) -> dict[str, Any]:
    """The run's summary (module docstring).

    Args:
        engine: ``"simulator"`` or ``"flower"``.
        config: the run configuration.
        algorithm: the run's algorithm (its ``privacy_unit``, ``released_metrics``, noise levels, groups).
        ledger: the run's accountant (ε, δ, accountant kind, analysis).
        metrics: the released lines of ``metrics.jsonl``.
        final: the last released line (``final_metrics``).
        rounds_completed: the rounds done.
        stopped: ``"rounds"`` or ``"budget"``.
        wall_seconds: the run's wall-clock time.
        round_seconds: the wall-clock time of each round run by this process (mean, or NaN when none).
        threats: ``protects_against`` and ``participation_hidden_from`` (:func:`run_threat_model`).
        num_clients: N (released only without a client-level guarantee).
        out: the run folder.
        files: the names of the files of the run folder.
        secure_aggregation: the secure aggregation protocol the server decoded sums with, or None.
        discovery_seconds: seconds the ServerApp waited for the SuperNodes (Flower), or None.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {list(ENGINES)}. Found {engine!r}.")
    released = tuple(algorithm.released_metrics)
    headline = released[0] if released else "accuracy"
    private = ledger.private
    scores = [m[headline] for m in metrics if m.get(headline) is not None]
    budgets = algorithm.group_budgets()
    content: dict[str, Any] = {
        "engine": engine,
        # where the clients' work ran (the resolved [engine] device); Flower's clients run on their own nodes
        "device": algorithm.compute_device() if engine == "simulator" else None,
        "secure_aggregation": secure_aggregation,
        "algorithm": config.algorithm.name,
        "dataset": config.dataset.name,
        "partition": config.partition.scheme,
        "model": config.model.reference,
        "rounds": config.rounds,
        "rounds_completed": rounds_completed,
        "stopped": stopped,
        "final_accuracy": final.get(headline),
        "best_accuracy": max(scores, default=final.get(headline)),
        "accuracy_metric": headline,  # the released metric final_accuracy and best_accuracy report
        "epsilon": ledger.epsilon(),
        "delta": ledger.delta,
        "max_epsilon": config.privacy.max_epsilon,
        "privacy_unit": algorithm.privacy_unit,
        "neighbouring": config.privacy.neighbouring if private else None,
        "protects_against": list(threats["protects_against"]),
        "participation_hidden_from": list(threats["participation_hidden_from"]),
        "privacy_randomness": privacy_randomness(config.privacy.reproducible, private),
        "accountant": ledger.kind,  # the resolved one ("pld" or "rdp"; None without a guarantee)
        "accountant_requested": config.privacy.accountant if private else None,
        "accounting": config.privacy.accounting if private else "none",
        "analysis": ledger.analysis(),
        "wall_seconds": wall_seconds,
        "round_seconds_mean": sum(round_seconds) / len(round_seconds) if round_seconds else math.nan,
        "discovery_seconds": discovery_seconds,
        **dict.fromkeys(LAUNCHER_KEYS),
        "final_metrics": dict(final),
        # N itself is private under a client-level guarantee (add/remove one client): not released then
        "num_clients": None if algorithm.privacy_unit == "client" else num_clients,
        "seed": config.seed,
        "params": config.algorithm.params.model_dump(mode="json"),
        "noise": noise_levels(algorithm),
        "completed": True,
        "out_dir": str(out),
        "files": [str(out / name) for name in files],
        **group_fields(ledger, budgets),
    }
    return content


def write_summary(out: Path, content: Mapping[str, Any]) -> None:
    """Write ``summary.json`` atomically (``content``: :func:`build_summary`'s dict)."""
    atomic_write_json(out / SUMMARY, dict(content))
