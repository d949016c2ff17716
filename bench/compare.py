"""End to end: ``ampfl run`` vs a per-client PyTorch loop vs centralized training, as ratios.

One workload = R rounds of FedAvg (or DP-FedAvg: client updates clipped to C = 1, Gaussian noise z = 1 on the
sum) with K clients per round, each running Q = 5 local SGD steps on mini-batches of b = 10 examples, and one
evaluation at the end. The same workload runs through

* ``ampfl``: :func:`ampfl.fl.run.experiment.run_experiment` on a config (vectorised engine, run accountant,
  metrics, summary; checkpoints and plots off; the task built once, outside the timing, like a warm data
  cache);
* ``loop``: what one writes by hand in PyTorch: for every client, load the global weights into an
  ``nn.Module``, run Q steps of ``torch.optim.SGD``, collect the update (DP: clip it, noise the sum), average;
* ``central``: one model, R·Q steps of plain SGD on batches of K·b examples — the same example-gradients;
* ``central-cl`` (image models): the same with model and inputs in ``torch.channels_last`` memory layout, the
  stronger centralized baseline on CPU;
* ``flower``: Flower's simulation (``flwr[simulation]``) when it is installed; skipped otherwise, and said so.

The paths run interleaved (one call of each per repetition, median reported) so that load bursts on a shared
machine hit them alike; the 1-minute load average is printed. ``ampfl ÷ central`` compares the R-round runs
end to end (start-up, the final evaluation and the run folder's files included); ``steady ÷ central``
compares one steady-state round: the same paths also run S·R rounds (``--steady S``, default 3), ratio
(t_ampfl(S·R) − t_ampfl(R)) / (t_central(S·R) − t_central(R)), which cancels every once-per-run cost (and
``steady ÷ central-cl`` the same against ``central-cl``).
``--clock cpu`` times CPU seconds of the process instead of wall seconds (on a machine shared with other jobs
the wall time of a small model mostly measures the wait for a core). Results and the method:
docs/performance.md.

Usage: ``.venv/bin/python bench/compare.py [--models logreg,cnn] [--ks 10,100] [--rounds 10] [--repeats 3]
[--steady 3] [--clock wall|cpu] [--no-dp] [--no-loop]``.
"""

from __future__ import annotations

import os

# as the ampfl command sets it (ampfl.cli._prefer_huge_pages), before torch is imported; every contender runs
# under it (THP_MEM_ALLOC_ENABLE=0 measures without, docs/performance.md)
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ampfl.fl.config import parse_config
from ampfl.fl.models import build_model
from ampfl.fl.run.experiment import build_task, clear_run_folder, run_experiment
from engine import timed_interleaved
from flower_workload import flower_available, flower_run

DATASET = {"logreg": "adult", "cnn": "fmnist"}
STEPS, BATCH, LR, CLIP, NOISE = 5, 10, 0.05, 1.0, 1.0


def _config(model: str, k: int, rounds: int, dp: bool) -> object:
    algorithm = {
        "name": "dp_fedavg" if dp else "fedavg",
        "client_sampling": "fixed",
        "cohort_size": k,
        "num_local_steps": STEPS,
        "batch_size": BATCH,
        "learning_rate": LR,
    }
    if dp:
        algorithm.update(clip=CLIP, noise_multiplier=NOISE)
    return parse_config(
        {
            "seed": 0,
            "rounds": rounds,
            "eval_every": rounds,
            "checkpoint_every": 0,
            "dataset": {"name": DATASET[model]},
            "partition": {"scheme": "iid", "num_clients": k},
            "model": {"name": model},
            "algorithm": algorithm,
        }
    )


def workload(
    model: str, k: int, rounds: int, dp: bool, folder: Path, flower: bool = False, steady: int = 1
) -> dict[str, Callable[[], object]]:
    """The timed callables of one workload (module docstring); with ``steady > 1`` also ``ampfl+`` and
    ``central+``, the same with ``steady · rounds`` rounds."""
    config = _config(model, k, rounds, dp)
    task = build_task(config)  # type: ignore[arg-type]
    fns: dict[str, Callable[[], object]] = _paths(model, k, rounds, dp, folder, task, flower)
    if steady > 1:
        more = _paths(model, k, steady * rounds, dp, folder, task, False)
        fns.update({f"{name}+": more[name] for name in ("ampfl", "central", "central-cl") if name in more})
    return fns


def _paths(
    model: str, k: int, rounds: int, dp: bool, folder: Path, task: Any, flower: bool
) -> dict[str, Callable[[], object]]:
    config = _config(model, k, rounds, dp)
    ds = task.dataset
    x, y = torch.from_numpy(ds.x_train), torch.from_numpy(ds.y_train)
    x_test, y_test = torch.from_numpy(ds.x_test), torch.from_numpy(ds.y_test)

    def evaluate(module: torch.nn.Module) -> float:
        with torch.no_grad():
            hits = sum(
                int((module.predict(module(x_test[i : i + 4096])) == y_test[i : i + 4096]).sum())
                for i in range(0, len(y_test), 4096)
            )
        return hits / len(y_test)

    shape, classes = tuple(x.shape[1:]), ds.num_classes
    gen = torch.Generator().manual_seed(0)
    indices = [torch.from_numpy(ix) for ix in task.client_indices]

    def ampfl_run() -> None:
        clear_run_folder(folder)
        run_experiment(config, folder, task=task, progress=False, plots=False)  # type: ignore[arg-type]

    def loop() -> None:
        module = build_model(model, input_shape=shape, num_classes=classes)
        global_state = [p.detach().clone() for p in module.parameters()]
        for _ in range(rounds):
            total = [torch.zeros_like(p) for p in global_state]
            for ix in indices:
                with torch.no_grad():
                    for p, g in zip(module.parameters(), global_state, strict=True):
                        p.copy_(g)
                opt = torch.optim.SGD(module.parameters(), lr=LR)
                for _ in range(STEPS):
                    batch = ix[torch.randint(len(ix), (BATCH,), generator=gen)]
                    opt.zero_grad()
                    module.per_sample_loss(module(x[batch]), y[batch]).mean().backward()
                    opt.step()
                delta = [p.detach() - g for p, g in zip(module.parameters(), global_state, strict=True)]
                if dp:
                    norm = torch.sqrt(sum((d**2).sum() for d in delta))
                    delta = [d / max(1.0, float(norm) / CLIP) for d in delta]
                for t, d in zip(total, delta, strict=True):
                    t += d
            for g, t in zip(global_state, total, strict=True):
                noise = torch.randn(t.shape, generator=gen) * NOISE * CLIP if dp else 0.0
                g += (t + noise) / len(indices)
        with torch.no_grad():
            for p, g in zip(module.parameters(), global_state, strict=True):
                p.copy_(g)
        evaluate(module)

    def centralized(layout: torch.memory_format) -> Callable[[], None]:
        def central() -> None:
            module = build_model(model, input_shape=shape, num_classes=classes)
            module = module.to(memory_format=layout)  # type: ignore[call-overload]
            opt = torch.optim.SGD(module.parameters(), lr=LR)
            for _ in range(rounds * STEPS):
                batch = torch.randint(len(x), (k * BATCH,), generator=gen)
                opt.zero_grad()
                out = module(x[batch].contiguous(memory_format=layout))
                module.per_sample_loss(out, y[batch]).mean().backward()
                opt.step()
            evaluate(module)

        return central

    fns: dict[str, Callable[[], object]] = {
        "ampfl": ampfl_run,
        "loop": loop,
        "central": centralized(torch.contiguous_format),
    }
    if x.dim() == 4:
        fns["central-cl"] = centralized(torch.channels_last)
    if flower and not dp:
        fns["flower"] = flower_run(
            lambda: build_model(model, input_shape=shape, num_classes=classes),
            x,
            y,
            indices,
            rounds,
            evaluate,
        )
    return fns


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="logreg,cnn")
    parser.add_argument("--ks", default="10,100")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-flower", action="store_true", help="skip Flower even when installed")
    parser.add_argument("--steady", type=int, default=3, help="S: also time S·R rounds (1: skip)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--no-dp", action="store_true", help="only the runs without DP")
    parser.add_argument("--no-loop", action="store_true", help="skip the per-client loop (slow for the CNN)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    flower = flower_available() and not args.no_flower
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    print(f"load average {os.getloadavg()[0]:.2f}, threads {args.threads}, rounds {args.rounds}, "
          f"steady {args.steady}·R, {args.clock} clock")  # fmt: skip
    if not flower:
        print("flower: skipped (flwr[simulation] with ray is not installed)")
    header = (
        "| model | K | DP | ampfl s | loop ÷ ampfl | ampfl ÷ central | steady ÷ central | ampfl ÷ central-cl"
        " | steady ÷ central-cl | flower ÷ ampfl"
    )
    print(header + " |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            for k in (int(v) for v in args.ks.split(",")):
                for dp in (False,) if args.no_dp else (False, True):
                    fns = workload(model, k, args.rounds, dp, Path(tmp) / "run", flower, args.steady)
                    if args.no_loop:
                        del fns["loop"]
                    t = timed_interleaved(fns, args.repeats, clock)
                    lp = f"{t['loop'] / t['ampfl']:.1f}×" if "loop" in t else "—"
                    fl = f"{t['flower'] / t['ampfl']:.1f}×" if "flower" in t else "—"
                    st, cl, st_cl = "—", "—", "—"
                    if "ampfl+" in t:
                        st = f"{(t['ampfl+'] - t['ampfl']) / (t['central+'] - t['central']):.2f}×"
                    if "central-cl" in t:
                        cl = f"{t['ampfl'] / t['central-cl']:.2f}×"
                    if "central-cl+" in t:
                        steady_cl = (t["ampfl+"] - t["ampfl"]) / (t["central-cl+"] - t["central-cl"])
                        st_cl = f"{steady_cl:.2f}×"
                    print(
                        f"| {model} | {k} | {'yes' if dp else 'no'} | {t['ampfl']:.3f} | "
                        f"{lp} | {t['ampfl'] / t['central']:.2f}× | {st} | {cl} | {st_cl} | {fl} |",
                        flush=True,
                    )
                    print(f"  load average {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
