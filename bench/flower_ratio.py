"""Benchmark: Flower's simulation against ``ampfl run --no-plots`` on one FedAvg workload, fresh processes.

The workload: R rounds (default 200) of FedAvg, a fixed cohort of K = 100 of N = 1000 clients (the ``iid``
partition of UCI Adult, logistic regression), Q = 5 local SGD steps of b = 10 at η = 0.05, one evaluation at
the end. Rows, each a fresh process, interleaved (one of each per repeat, so a change of the machine's load
hits them alike):

- ``import torch``: ``python -c "import torch"``, the floor of any process that trains with torch;
- ``ampfl run --no-plots``: the command on the workload's TOML config (metrics, summary, no figures);
- ``ampfl run``: the same with its two figures (``accuracy.png``, ``epsilon.png``);
- ``flower``: the same workload as a Flower 1.41 ``ServerApp``/``ClientApp`` (``flower_workload.py``) in
  Flower's simulation (ray backend): N simulated SuperNodes, Flower's ``FedAvg`` strategy sampling K of them
  per round; skipped, and said so, when ``flwr[simulation]`` (ray) is not installed.

Per row the median wall time and CPU time (user + system of the child and the descendants it waited for,
``getrusage``) and their ratio to ``ampfl run --no-plots``. Ray's worker processes are started by ray's own
daemons, so Flower's CPU column counts only what its driver process reaped: a lower bound; its wall time is
the comparable number, and on two cores ray's daemons and the driver share the cores with the workers.

Run: ``.venv/bin/python bench/flower_ratio.py [--rounds R] [--clients N] [--cohort K] [--repeats 3]
[--no-flower]``. Results: docs/performance.md ("Against Flower's simulation").
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flower_workload import BATCH, LR, STEPS, flower_available

HERE = Path(__file__).resolve().parent
ROWS_WITHOUT_FLOWER = ("import torch", "ampfl run --no-plots", "ampfl run")


def config_toml(rounds: int, clients: int, cohort: int, dataset: str = "adult") -> str:
    """The workload as an ``ampfl run`` config."""
    return f"""seed = 0
rounds = {rounds}
eval_every = {rounds}
checkpoint_every = 0

[dataset]
name = "{dataset}"

[partition]
scheme = "iid"
num_clients = {clients}

[model]
name = "logreg"

[algorithm]
name = "fedavg"
client_sampling = "fixed"
cohort_size = {cohort}
num_local_steps = {STEPS}
batch_size = {BATCH}
learning_rate = {LR}
"""


def flower_child(rounds: int, clients: int, cohort: int, dataset: str) -> None:
    """Run the workload in Flower's simulation in this process (the ``flower`` row's child)."""
    import torch

    from ampfl.fl.config import load_config
    from ampfl.fl.models import build_model
    from ampfl.fl.run.experiment import build_task
    from flower_workload import flower_run

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "workload.toml")
        path.write_text(config_toml(rounds, clients, cohort, dataset))
        task = build_task(load_config(path))
    ds = task.dataset
    x, y = torch.from_numpy(ds.x_train), torch.from_numpy(ds.y_train)
    x_test, y_test = torch.from_numpy(ds.x_test), torch.from_numpy(ds.y_test)
    shape = tuple(x.shape[1:])

    def make() -> torch.nn.Module:
        return build_model("logreg", input_shape=shape, num_classes=ds.num_classes)

    def evaluate(module: torch.nn.Module) -> float:
        with torch.no_grad():
            return float((module.predict(module(x_test)) == y_test).float().mean())  # type: ignore[operator]

    indices = [torch.from_numpy(ix) for ix in task.client_indices]
    flower_run(make, x, y, indices, rounds, evaluate, cohort=cohort)()


def rows(
    folder: Path, rounds: int, clients: int, cohort: int, dataset: str, flower: bool
) -> dict[str, list[str]]:
    config = folder / "workload.toml"
    config.write_text(config_toml(rounds, clients, cohort, dataset))
    ampfl = [sys.executable, "-m", "ampfl.cli", "run", str(config), "--no-progress"]
    out = {
        "import torch": [sys.executable, "-c", "import torch"],
        "ampfl run --no-plots": [*ampfl, "--out", str(folder / "a"), "--no-plots"],
        "ampfl run": [*ampfl, "--out", str(folder / "b")],
    }
    if flower:
        args = [
            "--rounds",
            str(rounds),
            "--clients",
            str(clients),
            "--cohort",
            str(cohort),
            "--dataset",
            dataset,
        ]
        out["flower"] = [sys.executable, str(Path(__file__).resolve()), "--flower-child", *args]
    return out


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system of the child and what it reaped) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--cohort", type=int, default=100)
    parser.add_argument("--dataset", default="adult")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-flower", action="store_true", help="skip Flower even when installed")
    parser.add_argument("--flower-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.flower_child:
        flower_child(args.rounds, args.clients, args.cohort, args.dataset)
        return
    flower = flower_available() and not args.no_flower
    env = dict(os.environ, FLWR_TELEMETRY_ENABLED="0", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    print(
        f"FedAvg, {args.rounds} rounds, K = {args.cohort} of N = {args.clients} clients, logreg on "
        f"{args.dataset}; {args.repeats} repeats, interleaved; {os.cpu_count()} CPUs"
    )
    if not flower:
        print("flower: skipped (flwr[simulation] with ray is not installed)")
    with tempfile.TemporaryDirectory() as tmp:
        commands = rows(Path(tmp), args.rounds, args.clients, args.cohort, args.dataset, flower)
        wall: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        loads = []
        for repeat in range(args.repeats):
            loads.append(os.getloadavg()[0])
            for name, command in commands.items():
                w, c = timed(command, env)
                wall[name].append(w)
                cpu[name].append(c)
                print(
                    f"repeat {repeat + 1}: {name}: {w:.2f} s wall, {c:.2f} s CPU", file=sys.stderr, flush=True
                )
    print(f"load (1 min) before each repeat: {', '.join(f'{x:.1f}' for x in loads)}")
    base_wall = statistics.median(wall["ampfl run --no-plots"])
    base_cpu = statistics.median(cpu["ampfl run --no-plots"])
    print("| row | median wall (s) | ÷ ampfl run --no-plots | median CPU (s) | ÷ ampfl run --no-plots |")
    print("|---|---:|---:|---:|---:|")
    for name in commands:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(f"| {name} | {w:.2f} | {w / base_wall:.2f}× | {c:.2f} | {c / base_cpu:.2f}× |")


if __name__ == "__main__":
    main()
