"""The lines of a run: one evaluation's metrics, its privacy fields and the noise levels
(``ampfl.fl.run.experiment``).

An evaluation line holds the round, the algorithm's training metrics and test metrics, ε, δ, the wall-clock
time and the per-group fields; :func:`ampfl.fl.run.release.split_line` then divides it between
``metrics.jsonl`` (released) and ``diagnostics.jsonl`` (not private).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.privacy.run_accountant import RunAccountant


#: Attributes through which an algorithm exposes the noise it actually uses (after any calibration):
#: the noise multiplier z and the absolute std σ (z times the sensitivity).
NOISE_ATTRIBUTES = ("noise_multiplier", "noise_std")


def noise_levels(algorithm: Algorithm) -> dict[str, float]:
    """The summary's ``noise``: the :data:`NOISE_ATTRIBUTES` the algorithm has (set before training)."""
    return {name: float(getattr(algorithm, name)) for name in NOISE_ATTRIBUTES if hasattr(algorithm, name)}


def _scalar(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return float(value)


def evaluation_line(algorithm: Algorithm, done: int, round_metrics: Mapping[str, Any]) -> dict[str, Any]:
    """An evaluation's line without its privacy fields (:func:`with_privacy` adds them)."""
    evaluation = algorithm.evaluate()
    if "accuracy" not in evaluation:
        raise ValueError(f"{type(algorithm).__name__}.evaluate() must return 'accuracy'.")
    line: dict[str, Any] = {"round": done}
    line.update({key: _scalar(value) for key, value in round_metrics.items()})
    line.update({key: _scalar(value) for key, value in evaluation.items()})
    return line


def privacy_fields(ledger: RunAccountant, budgets: Mapping[int, float], exact: bool = True) -> dict[str, Any]:
    """``epsilon``, ``delta`` and the group fields, read from the ledger (on its thread during a run). Not
    ``exact``: ε may be a certified upper bound (:meth:`RunAccountant.epsilon_reading`), then labelled
    ``epsilon_upper_bound: true``."""
    epsilon, is_exact = (ledger.epsilon(), True) if exact else ledger.epsilon_reading()
    fields = {"epsilon": epsilon, "delta": ledger.delta, **group_fields(ledger, budgets)}
    if not is_exact:
        fields["epsilon_upper_bound"] = True
    return fields


def group_fields(ledger: RunAccountant, budgets: Mapping[int, float]) -> dict[str, Any]:
    """``epsilon_by_group`` and ``budget_by_group`` (keys: group ids) for per-group algorithms (paper 001)."""
    if not budgets:
        return {}
    spent = ledger.epsilon_by_group()
    return {
        "epsilon_by_group": {str(g): spent.get(g, 0.0) for g in sorted(budgets)},
        "budget_by_group": {str(g): budgets[g] for g in sorted(budgets)},
    }


def with_privacy(line: dict[str, Any], wall: float, fields: Mapping[str, Any]) -> dict[str, Any]:
    """``line`` with ``epsilon``, ``delta``, ``wall_seconds`` (at evaluation) and the group fields."""
    group = {key: value for key, value in fields.items() if key not in ("epsilon", "delta")}
    return {**line, "epsilon": fields["epsilon"], "delta": fields["delta"], "wall_seconds": wall, **group}
