"""Throughput of the simulator's engine: vectorised vs sequential clients vs centralized training.

For each model (logistic regression on Adult, the 004 Fig. 8 CNN on Fashion-MNIST) and each cohort size K, one
"round" is K clients each running Q local SGD steps on mini-batches of b examples (000 Eq. 2b), and the
aggregation (mean of the K models). We time

* ``vectorised``: :meth:`ampfl.fl.engine.vectorised.Engine.local_sgd` with ``average=True`` (the mean of the K
  models, what FedAvg keeps; vmap over clients; for the CNN its ``forward_stacked`` fast path with the first
  FC layer in low-rank form, and ``vmap path`` = the same with ``EngineOptions(model_fast_path=False)``);
* ``sequential``: the same call with ``EngineOptions(vectorized=False)`` (a Python loop over clients and steps
  with plain autograd);
* ``centralized``: one model, Q steps of plain ``loss.backward(); optimizer.step()`` on batches of K·b
  examples — the same number of example-gradients (K·Q·b) per "round"; for image inputs also
  ``centralized channels-last`` (model and inputs in ``torch.channels_last``, a stronger baseline).

The vectorised, vmap-path and centralized callables are timed interleaved (one call of each per repetition,
median reported) so that load bursts on a shared machine hit them alike; the sequential path is timed apart.
Mini-batch index sampling is done once outside the timed region. Prints median ms/round, client-updates/s,
the ratios sequential/vectorised and vectorised/centralized, and the load average at the start.

With ``--dp`` also DP-FedAvg's client work, interleaved with the others: ``dp`` =
``local_sgd(clip_updates=C)`` (the sum of the clipped updates, for the CNN from the low-rank factors),
``dp_full`` = the K models formed and their updates clipped (the computation before), each as a ratio to
``vectorised`` (FedAvg's round).

Usage: ``.venv/bin/python bench/engine.py [--quick] [--threads N] [--models logreg,cnn] [--ks 10,100,1000]
[--clock wall|cpu] [--seq-max-k K] [--dp]``.
Not a test; numbers go to docs/performance.md.
"""

from __future__ import annotations

import os

# as the ampfl command sets it (ampfl.cli._prefer_huge_pages), before torch is imported; every contender runs
# under it (THP_MEM_ALLOC_ENABLE=0 measures without, docs/performance.md)
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch

from ampfl.fl.engine.clipping import clip_rows
from ampfl.fl.engine.vectorised import Engine, EngineOptions, FunctionalModel
from ampfl.fl.models import build_model
from ampfl.fl.sampling import local_batches


def load(
    name: str, synthetic_shape: tuple[int, ...], n: int, classes: int
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """The real dataset if it can be loaded, else synthetic data of the same shape."""
    try:
        from ampfl.fl.data import load_dataset

        ds = load_dataset(name)
        return torch.from_numpy(ds.x_train), torch.from_numpy(ds.y_train), f"{name} ({ds.source})"
    except Exception as err:  # any failure falls back to synthetic data
        gen = torch.Generator().manual_seed(0)
        x = torch.randn((n, *synthetic_shape), generator=gen)
        y = torch.randint(0, classes, (n,), generator=gen)
        return x, y, f"synthetic {list(synthetic_shape)} ({type(err).__name__}: {err})"


def timed(fn: Callable[[], object], repeats: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """Median of ``repeats`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return float(np.median(times))


def timed_interleaved(
    fns: dict[str, Callable[[], object]], repeats: int, clock: Callable[[], float] = time.perf_counter
) -> dict[str, float]:
    """Median time of each callable over ``repeats`` rounds that call them in turn (after one warm-up call
    each), so that a burst of load on a shared machine hits all of them alike. ``clock``: wall time by
    default; ``time.process_time`` gives the process's CPU time (what a loaded machine inflates least)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = clock()
            fn()
            times[name].append(clock() - t0)
    return {name: float(np.median(ts)) for name, ts in times.items()}


def _round_functions(
    model_name: str,
    fm: FunctionalModel,
    x: torch.Tensor,
    y: torch.Tensor,
    batches: torch.Tensor,
    classes: int,
    dp: bool = False,
) -> dict[str, Callable[[], object]]:
    """The timed callables of one cohort: vectorised (model fast path, and plain vmap for models that have a
    fast path), sequential, centralized (and, for image models, centralized in channels-last layout); with
    ``dp``, DP-FedAvg's client work: the sum of the clipped updates by the engine (``dp``:
    ``local_sgd(clip_updates=C)``, from the low-rank factors where the model has them) and by forming the K
    models and clipping their rows (``dp_full``, the computation before)."""
    k, steps, batch = batches.shape
    w0 = fm.initial()
    vec_engine, seq_engine = Engine(), Engine(EngineOptions(vectorized=False))
    vmap_engine = Engine(EngineOptions(model_fast_path=False))

    def vec() -> torch.Tensor:  # the mean of the K models, as FedAvg asks for it (average=True)
        return vec_engine.local_sgd(fm, w0, x, y, batches, learning_rate=0.05, average=True).params

    def vec_vmap() -> torch.Tensor:
        return vmap_engine.local_sgd(fm, w0, x, y, batches, learning_rate=0.05, average=True).params

    def seq() -> torch.Tensor:
        return seq_engine.local_sgd(fm, w0, x, y, batches, learning_rate=0.05).params.mean(0)

    flat_idx = batches.permute(1, 0, 2).reshape(steps, k * batch)
    central_model = build_model(model_name, input_shape=tuple(x.shape[1:]), num_classes=classes)
    opt = torch.optim.SGD(central_model.parameters(), lr=0.05)

    def central() -> None:
        for r in range(steps):
            idx = flat_idx[r]
            opt.zero_grad()
            loss = central_model.per_sample_loss(central_model(x[idx]), y[idx]).mean()
            loss.backward()
            opt.step()

    fns: dict[str, Callable[[], object]] = {"vec": vec, "seq": seq, "central": central}
    if dp:  # C = 1e-3: every client clipped (the clip's cost does not depend on how many are)

        def dp_sum() -> torch.Tensor:
            return vec_engine.local_sgd(fm, w0, x, y, batches, learning_rate=0.05, clip_updates=1e-3).params

        def dp_full() -> torch.Tensor:
            models = vec_engine.local_sgd(fm, w0, x, y, batches, learning_rate=0.05).params
            return clip_rows(models - w0, 1e-3)[0].sum(0)

        fns |= {"dp": dp_sum, "dp_full": dp_full}
    if fm.has_stacked_forward:
        fns["vec_vmap"] = vec_vmap
    if x.dim() == 4:  # images: centralized training in the channels-last layout (a stronger baseline)
        cl = torch.channels_last
        cl_model = build_model(model_name, input_shape=tuple(x.shape[1:]), num_classes=classes)
        cl_model = cl_model.to(memory_format=cl)  # type: ignore[call-overload]
        cl_opt = torch.optim.SGD(cl_model.parameters(), lr=0.05)

        def central_cl() -> None:
            for r in range(steps):
                idx = flat_idx[r]
                cl_opt.zero_grad()
                out = cl_model(x[idx].contiguous(memory_format=cl))
                cl_model.per_sample_loss(out, y[idx]).mean().backward()
                cl_opt.step()

        fns["central_cl"] = central_cl
    return fns


def bench_model(
    model_name: str,
    x: torch.Tensor,
    y: torch.Tensor,
    classes: int,
    ks: list[int],
    *,
    steps: int,
    batch: int,
    repeats: int,
    seq_max_k: int,
    clock: Callable[[], float] = time.perf_counter,
    dp: bool = False,
) -> list[dict[str, float]]:
    shape = tuple(x.shape[1:])
    torch.manual_seed(0)
    module = build_model(model_name, input_shape=shape, num_classes=classes)
    fm = FunctionalModel(module, shape)
    rows = []
    for k in ks:
        # K clients with an IID share of the data each; mini-batches drawn with replacement (000 Eq. 9 "WR").
        perm = np.random.default_rng(0).permutation(len(y))
        clients = np.array_split(perm, k)
        batches = local_batches(
            clients,
            np.arange(k),
            num_steps=steps,
            batch_size=batch,
            scheme="wr",
            rng=np.random.default_rng(1),
        )
        fns = _round_functions(model_name, fm, x, y, batches, classes, dp)
        seq = fns.pop("seq")
        t = timed_interleaved(fns, repeats, clock)
        t_vec, t_cen = t["vec"], t["central"]
        t_seq = timed(seq, max(1, repeats // 3), clock) if k <= seq_max_k else float("nan")
        nan = float("nan")
        rows.append(
            {
                "K": k,
                "vec_ms": 1e3 * t_vec,
                "vec_vmap_ms": 1e3 * t.get("vec_vmap", nan),
                "seq_ms": 1e3 * t_seq,
                "central_ms": 1e3 * t_cen,
                "central_cl_ms": 1e3 * t.get("central_cl", nan),
                "vec_updates_per_s": k / t_vec,
                "seq_updates_per_s": k / t_seq,
                "seq_over_vec": t_seq / t_vec,
                "vec_over_central": t_vec / t_cen,
                "vec_over_central_cl": t_vec / t.get("central_cl", nan),
                "dp_over_vec": t.get("dp", nan) / t_vec,
                "dp_full_over_vec": t.get("dp_full", nan) / t_vec,
            }
        )
        r = rows[-1]
        extra = ""
        if not np.isnan(r["vec_vmap_ms"]):
            extra += f" | vmap path {r['vec_vmap_ms']:8.2f} ms"
        if not np.isnan(r["central_cl_ms"]):
            extra += (
                f" | centralized channels-last {r['central_cl_ms']:8.2f} ms  "
                f"vec/central-cl {r['vec_over_central_cl']:5.2f}x"
            )
        if dp:
            extra += (
                f" | DP-FedAvg sum {1e3 * t['dp']:8.2f} ms ({r['dp_over_vec']:4.2f}x vec), "
                f"formed K models {1e3 * t['dp_full']:8.2f} ms ({r['dp_full_over_vec']:4.2f}x vec)"
            )
        print(
            f"  {model_name:6s} K={k:5d}  vectorised {r['vec_ms']:9.2f} ms  "
            f"sequential {r['seq_ms']:9.2f} ms  "
            f"centralized {r['central_ms']:8.2f} ms | updates/s vec {r['vec_updates_per_s']:9.0f} "
            f"seq {r['seq_updates_per_s']:8.0f} | seq/vec {r['seq_over_vec']:6.1f}x  "
            f"vec/central {r['vec_over_central']:5.2f}x{extra}",
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="K in {10, 100}, fewer repeats, CNN K <= 100")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--models", default="logreg,cnn")
    ap.add_argument("--ks", default=None, help="comma-separated cohort sizes (default 10,100,1000)")
    ap.add_argument("--cnn-ks", default=None, help="cohort sizes for the CNN (default: --ks, capped at 100)")
    ap.add_argument("--steps", type=int, default=5, help="Q local steps")
    ap.add_argument("--batch", type=int, default=10, help="b examples per step")
    ap.add_argument("--repeats", type=int, default=7, help="timed repetitions (median reported)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="cpu: the process's CPU time")
    ap.add_argument("--seq-max-k", type=int, default=100, help="largest K timed sequentially (CNN)")
    ap.add_argument("--dp", action="store_true", help="also DP-FedAvg's clipped sum (factors / K models)")
    args = ap.parse_args(argv)
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    torch.set_num_threads(args.threads)
    ks = [int(k) for k in args.ks.split(",")] if args.ks else ([10, 100] if args.quick else [10, 100, 1000])
    repeats = 3 if args.quick else args.repeats
    loadavg = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
        f"Q = {args.steps}, b = {args.batch}, "
        f"{os.cpu_count()} CPUs, 1-min load average {loadavg:.1f}, {args.clock} clock"
    )
    models = args.models.split(",")
    if "logreg" in models:
        x, y, source = load("adult", (14,), 32561, 2)
        print(f"logreg (000 Eq. 21, d = {x.shape[1]}) on {source}")
        bench_model(
            "logreg",
            x,
            y,
            2,
            ks,
            steps=args.steps,
            batch=args.batch,
            repeats=repeats,
            seq_max_k=1000,
            clock=clock,
            dp=args.dp,
        )
    if "cnn" in models:
        x, y, source = load("fmnist", (1, 28, 28), 60000, 10)
        cnn_ks = [int(k) for k in args.cnn_ks.split(",")] if args.cnn_ks else [k for k in ks if k <= 100]
        print(f"cnn (004 Fig. 8) on {source}")
        bench_model(
            "cnn",
            x,
            y,
            10,
            cnn_ks,
            steps=args.steps,
            batch=args.batch,
            repeats=max(3, repeats // 2),
            seq_max_k=args.seq_max_k,
            clock=clock,
            dp=args.dp,
        )


if __name__ == "__main__":
    main()
