"""Paper 002 (Dong, Chen, Özgür) Table 1 as training: ``ampfl reproduce dong-table1-training``.

002 Sec. 4 fine-tunes ResNet-101 (GroupNorm) on CIFAR-10 with DP-SGD after a non-private pre-training on 8 of
the 10 classes of the other half of the data, and compares model splitting (d = 3, 8) with and without its
amplification against no splitting. Here, scaled to this machine (docs/partition.md "Training"):

- **data**: Fashion-MNIST; the training set is split in two halves with a fixed seed. Half A restricted to
  the classes 0-7 pre-trains the model without DP (plain SGD, momentum 0.9); DP fine-tuning runs on (a subset
  of) half B with all 10 classes, one example per client (record-level DP-SGD); test accuracy is on the
  (first ``test_examples`` of the) FMNIST test set, all 10 classes.
- **model**: ``cnn_gn`` (two conv + GroupNorm blocks, two FC layers, ~22k parameters). Partial split as in
  002 §3.2.2: the first block (``stem``) and the output layer (``classifier.2``) are the non-split part, the
  second block and the hidden FC layer are split into d blocks of units; C_s = C_ns = C/√2 and one noise
  multiplier z for both parts, so the noise std on every coordinate is z·C/√2 — the column
  ``noise_std_over_clip`` (σ/C, comparable with standard DP-SGD's z).
- **methods**, each calibrated to the same (ε, δ) by :func:`ampfl.fl.privacy.run_accountant.calibrate_noise`
  on the event its run composes: ``standard`` (DP-SGD, Poisson at q, no split: 002's "relaxation"),
  ``standard-bis`` (its twin with Balanced Iteration Subsampling, k = 1 of T_e = 1/q steps per epoch),
  ``split-d`` (002 Alg. 1, Poisson, the sound bound of ``ampfl account model-split --rate``: the better of
  Zhu–Wang over Thm 3.4 and the no-split bound: 002's "amplification") and ``split-d-no-amplification`` (the
  same training accounted without the split credit: 002's "baseline"), d ∈ {3, 8}. The noise multiplier of the
  paper's own Table 1 reading (binomial expansion, remove direction only, not sound) is listed next to each
  split method (``paper_reading_noise_std_over_clip``) but never trained with.
- every method runs the same learning-rate grid and is reported at its best final accuracy (the grid search
  is not accounted, as in 002; 002 states no learning rate).
- scales: ``FULL``, ``QUICK`` (``--quick``) and ``MEDIUM`` (``--medium``, several seeds: the quick
  fine-tuning set, a larger pre-training and test set, 002's ε = 8 instead of 2, η ∈ {0.05, 0.1, 0.2, 0.4}:
  the quick grid widened upwards, since every method chose its top edge 0.1 there). ``seed`` seeds the
  pre-training and the DP fine-tuning; the two halves of the data are the same for every seed.
- ``dong-table1-regime`` (:func:`table1_regime`, :data:`REGIME`) is the same experiment in 002 Table 1's own
  regime: q = 0.25, 400 steps (100 epochs), ε = 8, where the split's sound noise credit is large; the DP
  fine-tuning set is 200 examples (expected batch 50) and the methods are standard and d = 8 (the largest
  credit) so that it fits a medium run. Every method there is calibrated and accounted by the PLD
  accountant (``Setting.accountant``): the RDP bound gives the split no credit at q = 0.25.
- the summary lists, in ``paired``, the claims compared by seed (:func:`paired_claims`: each amplified split
  minus its unamplified twin, standard minus each split, BIS minus Poisson) when it has one target ε;
  ``ampfl.reproduce._seeds.run_seeds`` adds their paired 95 % intervals.
- each fine-tuning run's result is stored under ``OUT/finetune``; running again into the same folder reuses
  the finished runs of the same configuration (an interrupted or widened run resumes).
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

DELTA = 1e-5
#: The non-split part of the partial split (002 §3.2.2: first and last blocks).
SHARED = ("stem.", "classifier.2.")
PRETRAIN_CLASSES = 8


@dataclasses.dataclass(frozen=True)
class Setting:
    """One scale of the experiment (the full run, or ``--quick``)."""

    pretrain_examples: int
    pretrain_epochs: int
    finetune_examples: int
    test_examples: int
    sampling_rate: float
    epochs: int
    epsilons: tuple[float, ...]
    learning_rates: tuple[float, ...]
    clip: float = 1.0
    #: The run's accountant (``[privacy] accountant``): it calibrates z and composes every round's events.
    accountant: str = "rdp"
    methods: tuple[str, ...] = (
        "standard",
        "standard-bis",
        "split-3-no-amplification",
        "split-3",
        "split-8-no-amplification",
        "split-8",
    )


FULL = Setting(
    pretrain_examples=24000,
    pretrain_epochs=3,
    finetune_examples=10000,
    test_examples=10000,
    sampling_rate=0.001,
    epochs=3,
    epsilons=(2.0, 8.0),
    learning_rates=(0.025, 0.05, 0.1, 0.2),  # every method chose 0.05 of {0.05, 0.1, 0.2} (seed 0)
)
MEDIUM = Setting(
    pretrain_examples=12000,
    pretrain_epochs=2,
    finetune_examples=2000,
    test_examples=4000,
    sampling_rate=0.005,
    epochs=2,
    epsilons=(8.0,),
    learning_rates=(0.05, 0.1, 0.2, 0.4),
)
#: 002 Table 1 (ResNet-101, CIFAR-10, ε = 8): validation accuracy per method (relaxation = standard).
PUBLISHED = {
    "standard": 0.8499,
    "split-3-no-amplification": 0.7980,
    "split-3": 0.8243,
    "split-8-no-amplification": 0.7680,
    "split-8": 0.8052,
}
PUBLISHED_EPSILON = 8.0
PUBLISHED_SOURCE = "002 Table 1, ResNet-101 on CIFAR-10, epsilon = 8 (not Fashion-MNIST: compare orderings)"
QUICK = dataclasses.replace(
    MEDIUM, pretrain_examples=6000, test_examples=2000, epsilons=(2.0,), learning_rates=(0.05, 0.1)
)
#: 002's own regime (``ampfl reproduce dong-table1-regime``): 002 Table 1's q = 0.25, 400 steps (100
#: epochs) and ε = 8, where the split's sound noise credit is large (``dong-credit``); to fit a medium run
#: the DP fine-tuning set is 200 examples (expected batch 50) instead of the medium 2,000. No BIS twin.
#: The PLD accountant for every method: at q = 0.25 the RDP bound certifies the split no better than the
#: no-split bound (its ε at PLD's z = 3.34 is 12.4 against PLD's 8.0), so an RDP run gets no credit at all.
REGIME = dataclasses.replace(
    MEDIUM,
    finetune_examples=200,
    sampling_rate=0.25,
    epochs=100,
    learning_rates=(0.025, 0.05, 0.1, 0.2, 0.4),
    accountant="pld",
    methods=("standard", "split-8-no-amplification", "split-8"),
)
REGIME_QUICK = dataclasses.replace(
    REGIME, pretrain_examples=6000, test_examples=2000, epochs=10, learning_rates=(0.1,)
)


def paired_claims(s: Setting) -> list[dict[str, str]]:
    """The claims compared by seed (``ampfl.reproduce._seeds.paired_interval``) among ``s.methods``:
    each amplified split minus its unamplified twin, standard minus each split, BIS minus Poisson."""
    claims = []
    for d in (3, 8):
        split, twin = f"split-{d}", f"split-{d}-no-amplification"
        if split in s.methods and twin in s.methods:
            claims.append({"claim": f"amplification gain (d = {d})", "minuend": split, "subtrahend": twin})
    for method in s.methods:
        if method.startswith("split-") and "standard" in s.methods:
            claims.append({"claim": f"standard above {method}", "minuend": "standard", "subtrahend": method})
    if "standard-bis" in s.methods and "standard" in s.methods:
        claims.append({"claim": "BIS above Poisson", "minuend": "standard-bis", "subtrahend": "standard"})
    return claims


def _halves(dataset: Any, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the two halves of the training set (each class split in two, 002 Sec. 4)."""
    rng = np.random.default_rng(seed)
    a, b = [], []
    for c in range(dataset.num_classes):
        idx = rng.permutation(np.flatnonzero(dataset.y_train == c))
        a.append(idx[: len(idx) // 2])
        b.append(idx[len(idx) // 2 :])
    return rng.permutation(np.concatenate(a)), rng.permutation(np.concatenate(b))


def pretrain(algorithm: Any, x: np.ndarray, y: np.ndarray, *, epochs: int, seed: int) -> Any:
    """Non-private SGD (momentum 0.9, batch 64, rate 0.05) of the algorithm's model; returns flat params."""
    import torch

    module = algorithm.model.module
    spec = algorithm.model.spec
    with torch.no_grad():
        for name, tensor in spec.unflatten(algorithm.global_params).items():
            module.get_parameter(name).copy_(tensor)
    weights = list(module.parameters())
    velocity = [torch.zeros_like(w) for w in weights]  # momentum 0.9 by hand (torch.optim imports dynamo)
    gen = torch.Generator().manual_seed(seed)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(epochs):
        order = torch.randperm(len(yt), generator=gen)
        for lo in range(0, len(order), 64):
            batch = order[lo : lo + 64]
            grads = torch.autograd.grad(module.per_sample_loss(module(xt[batch]), yt[batch]).mean(), weights)
            with torch.no_grad():
                for w, v, g in zip(weights, velocity, grads, strict=True):
                    v.mul_(0.9).add_(g)
                    w.sub_(0.05 * v)
    return spec.flatten(module)


def _params(method: str, s: Setting, epsilon: float, lr: float) -> dict[str, Any]:
    rounds = round(s.epochs / s.sampling_rate)
    out: dict[str, Any] = {
        "num_local_steps": 1,
        "batch_size": 1,
        "learning_rate": 1.0,
        "server_learning_rate": lr,
        "target_epsilon": epsilon,
        "num_rounds": rounds,
        "clip": s.clip,
        "sampling": "poisson",
        "sampling_rate": s.sampling_rate,
    }
    if method == "standard-bis":
        out.update(sampling="bis", sampling_rate=None, bis_participations=1)
        out["bis_iterations"] = round(1.0 / s.sampling_rate)
    elif method.startswith("split-"):
        part = s.clip / math.sqrt(2.0)
        out.update(
            num_submodels=int(method.split("-")[1]), shared=list(SHARED), clip=part, nonsplit_clip=part
        )
        if method.endswith("-no-amplification"):
            out["split_credit"] = "none"
    return out


def _paper_reading(method: str, s: Setting, epsilon: float) -> float | None:
    """σ/C of 002's own Table 1 analysis (remove direction only, not sound) for a split method."""
    if not method.startswith("split-") or method.endswith("-no-amplification"):
        return None
    from ampfl.accounting.partition import calibrate_subsampled_split

    z = calibrate_subsampled_split(
        target_epsilon=epsilon,
        target_delta=DELTA,
        num_submodels=int(method.split("-")[1]),
        sampling_rate=s.sampling_rate,
        steps=round(s.epochs / s.sampling_rate),
        nonsplit_share=0.5,
        expansion="remove-only",
    )
    return float(z)


def _engine() -> Any:
    """The engine of ``reproduce --device`` (None: the algorithm's default engine)."""
    from ampfl.reproduce import figure_device

    device = figure_device()
    if device is None:
        return None
    from ampfl.fl.engine.vectorised import Engine, EngineOptions

    return Engine(EngineOptions(device=device))


def finetune(
    task: Any, start: Any, params: dict[str, Any], *, seed: int = 0, accountant: str = "rdp"
) -> dict[str, Any]:
    """One DP fine-tuning run from ``start``: the run's ``accountant`` calibrates z to the target ε and
    composes every round's events."""
    from ampfl.fl.algorithms.dp_sgd_partition import DPSGDPartition
    from ampfl.fl.config import PrivacyConfig
    from ampfl.fl.privacy.calibration import calibrate_algorithm

    privacy = PrivacyConfig.model_validate({"accountant": accountant, "delta": DELTA, "reproducible": True})
    if "expected_clients" not in params:  # 002's expected batch: q·N (BIS: N/T_e), N the published set size
        rate = params.get("sampling_rate") or 1.0 / float(params["bis_iterations"])
        params = {**params, "expected_clients": float(rate) * task.num_clients}
    algorithm = DPSGDPartition(
        DPSGDPartition.Params(**params), task, seed=seed, privacy=privacy, engine=_engine()
    )
    algorithm.global_params = start.clone()
    ledger = calibrate_algorithm(algorithm, privacy)  # a target ε: calibrated by the run's accountant
    for r in range(int(params["num_rounds"])):
        ledger.compose(algorithm.round_events(r))
        algorithm.run_round(r)
    z = algorithm.noise_multiplier
    shared = bool(params.get("shared"))
    return {
        "final_accuracy": algorithm.global_accuracy(),
        "epsilon": ledger.epsilon(),
        "delta": DELTA,
        "noise_multiplier": z,
        "noise_std_over_clip": z / math.sqrt(2.0) if shared else z,
        "analysis": ledger.analysis(),
        "accountant": accountant,
        "split_credit": algorithm.credit,
        "rounds": int(params["num_rounds"]),
    }


def _finetune_once(
    out: Path, task: Any, start: Any, s: Setting, method: str, eps: float, lr: float, seed: int
) -> dict[str, Any]:
    """:func:`finetune`, or its stored result when ``out`` holds one of the same configuration (an
    interrupted or widened run resumes)."""
    import json

    from ampfl.io import atomic_write_json

    params = _params(method, s, eps, lr)
    key = {
        "params": params,
        "seed": seed,
        "pretrain": [s.pretrain_examples, s.pretrain_epochs],
        "data": [s.finetune_examples, s.test_examples],
    }
    if s.accountant != "rdp":  # RDP runs stored before the setting named its accountant stay reusable
        key["accountant"] = s.accountant
    path = out / "finetune" / f"{method}_eps{eps:g}_lr{lr:g}.json"
    if path.exists():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            stored = None
        if isinstance(stored, dict) and stored.get("key") == json.loads(json.dumps(key)):
            return dict(stored["run"])
    run = finetune(task, start, params, seed=seed, accountant=s.accountant)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, {"key": key, "run": run})
    return run


def table1_regime(out: Path, *, quick: bool = False, medium: bool = False, seed: int = 0) -> dict[str, Any]:
    """002 Table 1 in 002's own regime (:data:`REGIME`: q = 0.25, ε = 8) as training; ``quick``:
    :data:`REGIME_QUICK`. Same files and keys as :func:`table1_training`."""
    return table1_training(
        out, setting=REGIME_QUICK if quick else REGIME, quick=quick, medium=medium, seed=seed
    )


def table1_training(
    out: Path,
    *,
    quick: bool = False,
    setting: Setting | None = None,
    medium: bool = False,
    seed: int = 0,
) -> dict[str, Any]:
    """002 Table 1's comparison as training runs on Fashion-MNIST (module docstring); CSV + JSON + PNG."""
    import torch

    from ampfl.fl.algorithms.dp_sgd_partition import DPSGDPartition
    from ampfl.fl.data import Dataset, DataUnavailableError, load_dataset
    from ampfl.fl.task import Task
    from ampfl.io import atomic_write_csv, atomic_write_json
    from ampfl.reproduce._plot import scale_fields

    s = setting or (QUICK if quick else MEDIUM if medium else FULL)
    started = time.monotonic()
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    try:
        data = load_dataset("fmnist")
    except DataUnavailableError as exc:
        raise ValueError(
            f"dong-table1-training needs Fashion-MNIST: {exc} (try: ampfl data fetch fmnist)"
        ) from None
    half_a, half_b = _halves(data, seed=0)
    pre = half_a[data.y_train[half_a] < PRETRAIN_CLASSES][: s.pretrain_examples]
    fine = half_b[: s.finetune_examples]
    ds = Dataset(
        name="fmnist-finetune",
        x_train=data.x_train[fine],
        y_train=data.y_train[fine],
        x_test=data.x_test[: s.test_examples],
        y_test=data.y_test[: s.test_examples],
        num_classes=data.num_classes,
        source=data.source,
    )
    task = Task(ds, [np.array([i], dtype=np.int64) for i in range(len(fine))], model="cnn_gn")
    base = DPSGDPartition(
        DPSGDPartition.Params(noise_multiplier=0.0, sampling="full"), task, seed=seed, engine=_engine()
    )
    start = pretrain(base, data.x_train[pre], data.y_train[pre], epochs=s.pretrain_epochs, seed=seed)
    pretrained_accuracy = base.global_accuracy(start)
    runs, results = [], []
    for eps in s.epsilons:
        for method in s.methods:
            best: dict[str, Any] | None = None
            paper = _paper_reading(method, s, eps)
            for lr in s.learning_rates:
                run = {"method": method, "target_epsilon": eps, "learning_rate": lr}
                run.update(_finetune_once(out, task, start, s, method, eps, lr, seed))
                run["paper_reading_noise_std_over_clip"] = None if paper is None else paper / math.sqrt(2.0)
                run["published"] = PUBLISHED.get(method) if eps == PUBLISHED_EPSILON else None
                run["published_source"] = PUBLISHED_SOURCE
                runs.append(run)
                if best is None or run["final_accuracy"] > best["final_accuracy"]:
                    best = run
            assert best is not None
            results.append(best)
    columns = [
        "method",
        "target_epsilon",
        "learning_rate",
        "final_accuracy",
        "epsilon",
        "noise_multiplier",
        "noise_std_over_clip",
        "paper_reading_noise_std_over_clip",
        "split_credit",
    ]
    csv_path = atomic_write_csv(
        out / "dong_table1_training.csv", columns, [[r[c] for c in columns] for r in runs]
    )
    png = _plot(out, results, s, quick, medium, seed)
    files = [str(csv_path), str(png)]
    summary: dict[str, Any] = {
        "files": files,
        **scale_fields(quick=quick, medium=medium, seed=seed),
        "setting": dataclasses.asdict(s),
        "pretrained_accuracy": pretrained_accuracy,
        "results": results,
        "runs": runs,
        "seconds": time.monotonic() - started,
    }
    if len(s.epsilons) == 1:  # the claims name rows by method alone
        summary["paired"] = paired_claims(s)
    json_path = atomic_write_json(out / "dong_table1_training.json", summary)
    files.append(str(json_path))
    return summary


def _plot(
    out: Path, results: list[dict[str, Any]], s: Setting, quick: bool, medium: bool = False, seed: int = 0
) -> Path:
    from ampfl.reproduce._plot import new_figure, save, scale_note

    fig, ax = new_figure(width=6.5, height=3.8)
    labels = [f"{r['method']}\nε={r['target_epsilon']:g}" for r in results]
    ax.bar(range(len(results)), [r["final_accuracy"] for r in results])
    for i, r in enumerate(results):
        ax.text(
            i,
            r["final_accuracy"],
            f"σ/C={r['noise_std_over_clip']:.3g}",
            ha="center",
            va="bottom",
            fontsize=7,
        )
    ax.set_xticks(range(len(results)), labels, fontsize=7)
    ax.set_ylabel("test accuracy after DP fine-tuning")
    ax.set_title("002 Table 1 as training (Fashion-MNIST, cnn_gn, partial split)", fontsize=9)
    note = (
        f"pretrain: {s.pretrain_examples} examples of classes 0-{PRETRAIN_CLASSES - 1}, no DP; DP fine-tune: "
        f"{s.finetune_examples} examples, q = {s.sampling_rate:g}, {s.epochs} epochs, δ = {DELTA:g}, "
        f"C = {s.clip:g}; each method at its best learning rate of {list(s.learning_rates)}."
        + scale_note(quick=quick, medium=medium, seed=seed)
    )
    return Path(save(fig, out / "dong_table1_training.png", note=note))


FIGURES = {"dong-table1-training": table1_training, "dong-table1-regime": table1_regime}
