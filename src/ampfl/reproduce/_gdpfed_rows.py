"""Rows of ``gdpfed-table2`` (paper 001): one result per run, the noise energy of each method in one formula,
and the verdict per reading of the baseline and of κ.

Noise energy in the aggregate (``noise_energy["aggregate"]``), the same formula for every method: the
expected squared norm of the noise in the averaged update the server applies (before η_s), i.e. the sum
over the run's secure sums s of E‖ξ_s‖² (on the kept coordinates) divided by M², M the public expected
cohort the server step divides by (DP-FedAvg: ``expected_clients`` = qN; the group methods: Σ_g q_g N̂_g).
``measured`` uses the realised ‖ξ_s‖² averaged over rounds, ``expected`` the released std's
Σ_s ⌈κ_s d⌉ z_s² C² (for κ = 1: Σ_s d z_s² C² / M²).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: The private rows IDP-FedAvg is compared with (001's verdict: "the best private method by the mean").
PRIVATE = (
    "dp_fedavg",
    "dp_fedavg_per_group",
    "gdpfed",
    "gdpfed_minus",
    "gdpfed_plus",
    "gdpfed_plus_kappa0.5",
    "gdpfed_plus_ranked",
    "pfa",
)
#: (claim, minuend, subtrahend, verdict) compared by seed on every dataset: 001's ordering DP-FedAvg <
#: GDPFed < GDPFed+ < P-FedAvg under each reading of the baseline and each κ rule, GDPFed− against GDPFed
#: and the moderate κ rows against GDPFed− (001's Table VIII), and IDP-FedAvg against every other private
#: row. A claim with a ``verdict`` name is also a verdict row of :func:`verdicts` (one seed, with the
#: noise energies).
PAIRED: tuple[tuple[str, str, str, str | None], ...] = (
    (
        "GDPFed above DP-FedAvg (a), one sum over all clients",
        "gdpfed",
        "dp_fedavg",
        "GDPFed vs DP-FedAvg, one sum over all clients",
    ),
    (
        "GDPFed above DP-FedAvg (b), one noisy sum per group at ε_min",
        "gdpfed",
        "dp_fedavg_per_group",
        "GDPFed vs DP-FedAvg, one noisy sum per group at the strictest ε",
    ),
    ("GDPFed+ (planner's κ) above GDPFed", "gdpfed_plus", "gdpfed", "GDPFed+ (planner's κ) vs GDPFed"),
    (
        "GDPFed+ (κ = 0.5) above GDPFed",
        "gdpfed_plus_kappa0.5",
        "gdpfed",
        "GDPFed+ (κ = 0.5 for every group) vs GDPFed",
    ),
    (
        "GDPFed+ (κ by budget rank) above GDPFed",
        "gdpfed_plus_ranked",
        "gdpfed",
        "GDPFed+ (κ by budget rank) vs GDPFed",
    ),
    ("GDPFed− (planner's q_g, κ = 1) above GDPFed", "gdpfed_minus", "gdpfed", None),
    ("GDPFed+ (κ = 0.5) above GDPFed−", "gdpfed_plus_kappa0.5", "gdpfed_minus", None),
    ("GDPFed+ (κ by budget rank) above GDPFed−", "gdpfed_plus_ranked", "gdpfed_minus", None),
    ("P-FedAvg above GDPFed+ (planner's κ)", "p_fedavg", "gdpfed_plus", None),
    ("P-FedAvg above GDPFed+ (κ = 0.5)", "p_fedavg", "gdpfed_plus_kappa0.5", None),
    ("P-FedAvg above GDPFed+ (κ by budget rank)", "p_fedavg", "gdpfed_plus_ranked", None),
    *(("IDP-FedAvg above every other private method", "idp_fedavg", m, None) for m in PRIVATE),
)
#: (name of the comparison, method, reference): the verdict rows of every dataset, difference of the final
#: accuracy (method − reference) and of the aggregate noise energy (method / reference).
COMPARISONS: tuple[tuple[str, str, str], ...] = tuple(
    (verdict, a, b) for _, a, b, verdict in PAIRED if verdict is not None
)


def dp_fedavg_noise(config: Any, task: Any) -> dict[str, float]:
    """DP-FedAvg's noise energy: its central noise re-drawn from the run's own generator, every round."""
    import torch

    from ampfl.fl.algorithms.base import ROLE_NOISE
    from ampfl.fl.run.experiment import build_algorithm

    alg = build_algorithm(config, task)
    shape = alg.global_params.shape  # type: ignore[attr-defined]
    std = float(alg.noise_std)  # type: ignore[attr-defined]
    total = 0.0
    for r in range(config.rounds):
        noise = torch.randn(shape, generator=alg.torch_generator(r, ROLE_NOISE)) * std
        total += float(noise.double().square().sum())
    z = float(alg.noise_multiplier)  # type: ignore[attr-defined]
    clip = float(config.algorithm.params.clip)
    return {
        "measured": total / config.rounds,
        "expected": shape.numel() * z * z * clip * clip,
        "noise_multiplier": z,
        # the public constant the server divides by
        "cohort": float(config.algorithm.params.expected_clients),
    }


def result_row(
    method: str,
    algorithm: str,
    dataset: str,
    lr: float,
    summary: dict[str, Any],
    final: dict[str, Any],
    extra: dict[str, float] | None,
    *,
    budgets: Sequence[float],
    public_sizes: Sequence[int],
    source: str,
) -> dict[str, Any]:
    """A results row of run ``method`` (``[algorithm] name`` ``algorithm``); ``final``: the run's last line
    merged with its diagnostics (the plan's q_g, κ_g, z_g and the realised noise energy); ``extra``:
    :func:`dp_fedavg_noise` for DP-FedAvg; ``budgets``: the row's group budgets (the budgets its
    mechanism is run at); ``public_sizes``: the declared group sizes N̂_g."""
    groups = range(len(budgets))
    if algorithm == "dp_fedavg":
        assert extra is not None
        eps = {str(g): summary["epsilon"] for g in groups}  # one mechanism over every client
        z = {str(g): extra["noise_multiplier"] for g in groups}
        q = {str(g): summary["params"]["sampling_rate"] for g in groups}
        kappa = {str(g): 1.0 for g in groups}
        energy: dict[str, Any] = {"measured": extra["measured"], "expected": extra["expected"]}
        cohort = extra["cohort"]
    elif algorithm == "p_fedavg":
        eps = {str(g): summary["epsilon"] for g in groups}
        z = {str(g): 0.0 for g in groups}
        q = {str(g): final[f"q_g{g}"] for g in groups}
        kappa = {str(g): 1.0 for g in groups}
        energy = {"measured": 0.0, "expected": 0.0}
        cohort = sum(q[str(g)] * public_sizes[g] for g in groups)
    else:
        eps = dict(summary["epsilon_by_group"])
        z = {str(g): final[f"noise_multiplier_g{g}"] for g in groups}
        q = {str(g): final[f"q_g{g}"] for g in groups}
        kappa = {str(g): final[f"kappa_g{g}"] for g in groups}
        sums = [g for g in groups if f"noise_energy_mean_g{g}" in final]  # one per secure sum
        energy = {
            "measured": sum(final[f"noise_energy_mean_g{g}"] for g in sums),
            "expected": sum(final[f"noise_energy_expected_g{g}"] for g in sums),
            "expected_topk": sum(
                final.get(f"noise_energy_expected_topk_g{g}", final[f"noise_energy_expected_g{g}"])
                for g in sums
            ),
            "by_sum": {
                str(g): {
                    "measured": final[f"noise_energy_mean_g{g}"],
                    "expected": final[f"noise_energy_expected_g{g}"],
                }
                for g in sums
            },
        }
        cohort = sum(q[str(g)] * public_sizes[g] for g in groups)  # the server step's Σ_g q_g N̂_g
    if energy["expected"] > 0:
        energy["ratio"] = energy["measured"] / energy["expected"]
        energy["ratio_topk"] = energy["measured"] / energy.get("expected_topk", energy["expected"])
    energy["cohort"] = cohort
    energy["aggregate"] = energy["measured"] / cohort**2
    energy["aggregate_expected"] = energy["expected"] / cohort**2
    return {
        "method": method,
        "dataset": dataset,
        "learning_rate": lr,
        "final_accuracy": summary["final_accuracy"],
        "best_accuracy": summary["best_accuracy"],
        "epsilon": eps,
        "budget": {str(g): float(b) for g, b in enumerate(budgets)},
        "delta": summary["delta"],
        "noise_multiplier": z,
        "sampling_rate": q,
        "kappa": kappa,
        "noise_energy": energy,
        "stopped": summary["stopped"],
        "published": None,
        "published_source": source,
    }


def verdicts(results: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per dataset, each comparison of ``COMPARISONS`` whose two rows exist: the accuracy difference
    (method − reference, each at its best η of the same grid), the ratio of their aggregate noise energies,
    and whether the method wins (``"holds"``: difference > 0; one seed: no spread behind it)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for dataset in dict.fromkeys(r["dataset"] for r in results):
        rows = {r["method"]: r for r in results if r["dataset"] == dataset}
        found = []
        for name, method, reference in COMPARISONS:
            if method not in rows or reference not in rows:
                continue
            a, b = rows[method], rows[reference]
            ea, eb = a["noise_energy"]["aggregate"], b["noise_energy"]["aggregate"]
            diff = a["final_accuracy"] - b["final_accuracy"]
            found.append(
                {
                    "comparison": name,
                    "method": method,
                    "reference": reference,
                    "accuracy_difference": diff,
                    "noise_energy_ratio": ea / eb if eb > 0 else None,
                    "holds": diff > 0,
                }
            )
        out[dataset] = found
    return out


def paired_claims(datasets: Sequence[str], methods: Sequence[str]) -> list[dict[str, str]]:
    """The claims of :data:`PAIRED` whose two rows are in ``methods``, once per dataset: dicts
    ``{"claim", "minuend", "subtrahend", "dataset"}`` (:mod:`ampfl.reproduce._seeds`; the claim's text
    starts with the dataset, and the two rows are that dataset's)."""
    return [
        {"claim": f"{dataset}: {claim}", "minuend": a, "subtrahend": b, "dataset": dataset}
        for dataset in datasets
        for claim, a, b, _ in PAIRED
        if a in methods and b in methods
    ]
