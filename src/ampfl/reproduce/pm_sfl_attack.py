"""Paper 003 (PM-SFL, arXiv:2509.14603) Sec. 3 / Fig. 5: the reconstruction attack on the trained models.

``pm-sfl-attack`` trains SplitFed and PM-SFL in the setting of :mod:`ampfl.reproduce.pm_sfl_training`
(``--quick`` / ``--medium`` / ``--dataset`` as there, a fixed learning rate each, ``ATTACK_LR``), then runs
the DLG-style smashed-data attack of :mod:`ampfl.fl.split.attack` on ``ATTACK_IMAGES`` training images of
client 0: SplitFed with the exact bottom, PM-SFL with the client's secret mask M ~ Bern(θ_0) and the
attacker's most likely mask 1[θ > 0.5] (and, as an upper bound on leakage, an oracle that knows M). Reports
PSNR and SSIM per method and writes a PNG grid. Two more rows add the gradient-matching term
(``ATTACK_GRAD_WEIGHT``) where the attacker knows the weights the gradient is taken at: SplitFed, and the
PM-SFL oracle (PM-SFL itself uploads binary masks, which carry no per-example gradient).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ampfl.reproduce import pm_sfl_training as setting
from ampfl.reproduce.pm_sfl_training import DATASETS, pm_sfl_config, pm_sfl_figure, pm_sfl_task

ATTACK_PUBLISHED_SOURCE = (
    "003 Fig. 5 (images, no PSNR/SSIM printed): SplitFed's smashed data reveal the inputs, PM-SFL's do not"
)
#: Learning rates of the attack's training runs (SplitFed trains weights, PM-SFL mask scores).
ATTACK_LR = {"splitfed": 1e-2, "pm_sfl": 1e-1}
ATTACK_IMAGES = 6
#: Cases of :func:`ampfl.fl.split.attack.attack_client` on PM-SFL, and their labels.
PM_CASES = {"masked": "PM-SFL", "oracle": "PM-SFL (oracle: mask known)"}
#: Attack settings, the best of tv ∈ {0, 0.003, 0.01, 0.03} × steps ∈ {200, 600} against quick SplitFed.
ATTACK_STEPS = 200
ATTACK_TV = 0.03
#: Weight λ of the gradient-matching term in the "+ gradient" rows (relative squared error of the bottom's
#: gradient, :func:`ampfl.fl.split.attack.reconstruct`), the best of {0.1, 1, 10, 100} against quick SplitFed.
ATTACK_GRAD_WEIGHT = 10.0
#: Rows with the gradient term: case of :func:`~ampfl.fl.split.attack.attack_client` -> label.
GRAD_CASES = {
    "splitfed": {"exact": "SplitFed (smashed + gradient)"},
    "pm_sfl": {"oracle": "PM-SFL (oracle: mask known, smashed + gradient)"},
}


def _trained(
    algorithm: str,
    s: dict[str, Any],
    out: Path,
    task: Any,
    dataset: str,
    data_path: str | None,
    seed: int = 0,
) -> tuple[Any, dict[str, Any]]:
    from ampfl.fl.run.experiment import build_algorithm, load_checkpoint, run_or_reuse

    config = pm_sfl_config(algorithm, {}, ATTACK_LR[algorithm], s, dataset, data_path, task.num_clients, seed)
    folder = out / algorithm
    summary = run_or_reuse(config, folder, task=task, label=f"attack: {algorithm}")
    alg = build_algorithm(config, task)
    alg.load_state_dict(load_checkpoint(folder)["algorithm"])
    return alg, summary


@pm_sfl_figure
def attack(
    out: Path, quick: bool, dataset: str, data_path: str | None, medium: bool, seed: int
) -> dict[str, Any]:
    """003 Sec. 3 / Fig. 5: DLG-style reconstruction from smashed data, SplitFed vs PM-SFL (PSNR, SSIM);
    ``dataset`` as :func:`table1` (the victim is client 0, its first training images)."""
    from ampfl.fl.split.attack import attack_client
    from ampfl.io import atomic_write_csv
    from ampfl.reproduce._plot import save_image_grid, scale_fields, scale_note

    s = setting.setting_of(quick=quick, medium=medium)
    task = pm_sfl_task(
        pm_sfl_config("splitfed", {}, 1e-3, s, dataset, data_path, seed=seed),
        "pm-sfl-attack",
        quick or medium,
    )
    if dataset != "fmnist":
        out = out / dataset
    steps = ATTACK_STEPS
    results: list[dict[str, Any]] = []
    recon_rows: dict[str, Any] = {}
    csv_rows: list[list[Any]] = []
    x = None
    for algorithm, cases in (("splitfed", {"exact": "SplitFed"}), ("pm_sfl", PM_CASES)):
        alg, summary = _trained(algorithm, s, out, task, dataset, data_path, seed)
        x, found = attack_client(alg, 0, images=ATTACK_IMAGES, steps=steps, tv_weight=ATTACK_TV)
        _, with_grad = attack_client(
            alg, 0, images=ATTACK_IMAGES, steps=steps, tv_weight=ATTACK_TV, grad_weight=ATTACK_GRAD_WEIGHT
        )
        labelled = [(found[c], label) for c, label in cases.items()]
        labelled += [(with_grad[c], label) for c, label in GRAD_CASES[algorithm].items()]
        for r, label in labelled:
            recon_rows[label] = r["reconstruction"]
            results.append(
                {
                    "method": label,
                    "psnr": r["psnr"],
                    "ssim": r["ssim"],
                    "gradient_matching": r["gradient_matching"],
                    "final_accuracy": summary["final_accuracy"],
                    "epsilon": summary["epsilon"],
                    "published": None,
                    "published_source": ATTACK_PUBLISHED_SOURCE,
                }
            )
            csv_rows.extend(
                [label, i, p, q]
                for i, (p, q) in enumerate(zip(r["psnr_per_image"], r["ssim_per_image"], strict=True))
            )
    assert x is not None
    note = (
        f"DLG-style attack on smashed data ({steps} Adam steps, TV weight {ATTACK_TV}; '+ gradient': also "
        f"the bottom's gradient, weight {ATTACK_GRAD_WEIGHT:g}), {ATTACK_IMAGES}"
        " training images of client 0,"
        f" {DATASETS[dataset][0]}; models after {s['rounds']} rounds."
        " PM-SFL attacker uses the mask 1[θ > 0.5]." + scale_note(quick=quick, medium=medium, seed=seed)
    )
    png = save_image_grid(out / "pm_sfl_attack.png", x, recon_rows, note=note)
    csv_path = atomic_write_csv(out / "pm_sfl_attack.csv", ["method", "image", "psnr", "ssim"], csv_rows)
    return {
        "files": [str(png), str(csv_path)],
        **scale_fields(quick=quick, medium=medium, seed=seed),
        "dataset": dataset,
        "attack_steps": steps,
        "tv_weight": ATTACK_TV,
        "grad_weight": ATTACK_GRAD_WEIGHT,
        "results": results,
    }


FIGURES = {"pm-sfl-attack": attack}
