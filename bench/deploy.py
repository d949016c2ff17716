"""Benchmark: CPU per Flower message of ampfl's ClientApp against a minimal torch ClientApp.

Flower 1.41 starts one ``flwr-clientapp`` process per message, so a message costs Flower's own start-up,
the app's imports and whatever the app builds. Two contenders, deployed the same way (one local federation
each: SuperLink, one SuperNode per client, ampfl's ServerApp driving the rounds, the same config):

- ``minimal``: a ClientApp that imports torch and replies a fixed zero update of the model's size (the floor
  any torch ClientApp pays: Flower's process plus the torch import);
- ``ampfl``: ``ampfl.flower.client_app`` (the cached shard of the task, :mod:`ampfl.flower.node_cache`);
- ``ampfl-nocache`` (``--nocache``): the same on nodes without ``state-dir``, so each message builds the task.

Every ``flwr-clientapp`` process is started through a wrapper placed first on the SuperNodes' ``PATH`` that
waits for it and records its CPU seconds (user + system, ``os.wait4``: the process and the children it
waited for), peak RSS and wall time. A node's first message is its ``query`` (where ampfl builds the node's
cache); the rest are ``train`` messages. The contenders alternate within one run (the machine is shared);
the table shows medians over every train message and the ratio, the 1-minute load average before and after.
``--readme`` also times the README's example end to end (``ampfl deploy examples/flower_dp_fedavg.toml``,
a fresh run folder each time).

Run: ``.venv/bin/python bench/deploy.py [--repeats 2] [--config examples/flower_dp_fedavg.toml] [--readme]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_WRAPPER = """#!{python} -S
import os, signal, sys, time
real = {real!r}
begun = time.monotonic()
pid = os.fork()
if pid == 0:
    os.execv(real, [real, *sys.argv[1:]])
for number in (signal.SIGTERM, signal.SIGINT):
    signal.signal(number, lambda n, frame: os.kill(pid, n))
while True:
    try:
        _, status, usage = os.wait4(pid, 0)
        break
    except InterruptedError:
        continue
with open(os.environ["AMPFL_BENCH_CPU"], "a") as log:
    cpu = usage.ru_utime + usage.ru_stime
    wall = time.monotonic() - begun
    log.write(f"{{os.getppid()}} {{begun:.3f}} {{cpu:.4f}} {{usage.ru_maxrss}} {{wall:.3f}}\\n")
sys.exit(os.waitstatus_to_exitcode(status))
"""

_MINIMAL = """\"\"\"The minimal ClientApp of bench/deploy.py: imports torch, replies a fixed array.\"\"\"
import torch
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.query()
def query(msg: Message, context: Context) -> Message:
    pid = int(context.node_config["partition-id"])
    total = int(context.node_config["num-partitions"])
    metrics = MetricRecord({{"partition-id": pid, "num-partitions": total}})
    return Message(RecordDict({{"metrics": metrics}}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    update = ArrayRecord({{"update": Array(torch.zeros({dim}).numpy())}})
    metrics = MetricRecord({{"train_loss": 0.0, "clipped": 0.0, "num-examples": 1.0}})
    return Message(RecordDict({{"arrays": update, "metrics": metrics}}), reply_to=msg)
"""


def _wrapper_dir(folder: Path) -> Path:
    """A folder holding the ``flwr-clientapp`` wrapper (module docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    real = str(Path(sys.executable).parent / "flwr-clientapp")
    script = folder / "flwr-clientapp"
    script.write_text(_WRAPPER.format(python=sys.executable, real=real))
    script.chmod(0o755)
    return folder


def run_contender(
    name: str, config_path: Path, workdir: Path, timeout: float
) -> list[tuple[str, float, int, float]]:
    """One deployment of ``config_path`` with the ``name`` ClientApp; returns ``(kind, cpu_s, rss_kb,
    wall_s)`` per message (``kind`` ``query`` or ``train``)."""
    from ampfl.fl.config import config_to_dict, load_config
    from ampfl.fl.run.experiment import SUMMARY
    from ampfl.flower.common import algorithm_from_config
    from ampfl.flower.deploy import write_app
    from ampfl.flower.local import LocalFederation, flwr_run

    config = load_config(config_path)
    out = workdir / "run"
    (out / "logs").mkdir(parents=True)
    app_dir = write_app(workdir / "app", config_to_dict(config), out)
    if name == "minimal":
        dim = int(algorithm_from_config(config).global_params.numel())  # type: ignore[attr-defined]
        (app_dir / "minimal_client.py").write_text(_MINIMAL.format(dim=dim))
        toml = app_dir / "pyproject.toml"
        toml.write_text(toml.read_text().replace("ampfl.flower.client_app:app", "minimal_client:app"))
    log = workdir / "cpu.log"
    federation = LocalFederation(
        config.partition.num_clients,
        out / "logs",
        workdir / "flwr-home",
        marker=f"bench-{name}-{os.getpid()}-{workdir.name}",
        state_dir=None if name == "ampfl-nocache" else out / "node-state",  # no state-dir: no task cache
        fork_processes=False,  # each process started cold, as Flower starts it, through the wrapper
    )
    federation.env["PATH"] = str(_wrapper_dir(workdir / "bin")) + os.pathsep + federation.env["PATH"]
    federation.env["AMPFL_BENCH_CPU"] = str(log)
    with federation:
        code = flwr_run(app_dir, federation.env, out / "logs" / "flwr-run.log", timeout)
    if code != 0 or not (out / SUMMARY).is_file():
        raise RuntimeError(f"{name}: the Flower run failed (code {code}); see {out / 'logs'}")
    rows = [line.split() for line in log.read_text().splitlines()]
    rows.sort(key=lambda row: float(row[1]))  # by start time
    seen: set[str] = set()
    messages = []
    for parent, _, cpu, rss, wall in rows:
        kind = "train" if parent in seen else "query"  # a node's first message is its query
        seen.add(parent)
        messages.append((kind, float(cpu), int(rss), float(wall)))
    return messages


def time_readme(config_path: Path, workdir: Path) -> float:
    """Wall seconds of ``ampfl deploy CONFIG --out FRESH --no-progress``."""
    script = Path(sys.executable).with_name("ampfl")
    begun = time.perf_counter()
    subprocess.run(
        [str(script), "deploy", str(config_path), "--out", str(workdir / "run"), "--no-progress"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - begun


def _memory_kb(pid: int) -> tuple[int, int]:
    """``(PSS, RSS)`` of a live process in kB (``/proc/PID/smaps_rollup``; PSS shares each shared page among
    the processes mapping it)."""
    values = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        parts = line.split()
        if parts and parts[0] in ("Pss:", "Rss:"):
            values[parts[0]] = int(parts[1])
    return values["Pss:"], values["Rss:"]


def idle_nodes(count: int, workdir: Path, timeout: float) -> None:
    """Start a local federation of ``count`` SuperNodes (no run), wait until the SuperLink has accepted them
    all and print the memory of the processes per kind."""
    from ampfl.flower.local import LocalFederation, marked_processes

    marker = f"bench-idle-{os.getpid()}"
    federation = LocalFederation(count, workdir / "logs", workdir / "flwr-home", marker=marker)
    (workdir / "logs").mkdir(parents=True)
    begun = time.perf_counter()
    with federation:
        deadline = time.monotonic() + timeout
        while federation.connected() < count and time.monotonic() < deadline:
            time.sleep(1.0)
        connected = time.perf_counter() - begun
        time.sleep(10.0)  # every SuperNode's flower-superexec is up
        kinds: dict[str, list[tuple[int, int]]] = {}
        for pid in marked_processes(marker):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                memory = _memory_kb(pid)
            except (OSError, KeyError):
                continue
            name = next((Path(p.decode()).name for p in command if b"flower-" in p or b"flwr" in p), "other")
            kinds.setdefault(name, []).append(memory)
        available = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if "MemAvailable" in line
        )
    print(
        f"{federation.connected()} of {count} SuperNodes connected in {connected:.0f} s "
        f"(load {os.getloadavg()[0]:.2f})"
    )
    print("| process | count | PSS MB each (median) | RSS MB each (median) | PSS MB total |")
    print("|---|---|---|---|---|")
    node_pss = 0.0
    for name, rows in sorted(kinds.items()):
        pss = [row[0] / 1024 for row in rows]
        rss = [row[1] / 1024 for row in rows]
        print(f"| {name} | {len(rows)} | {_median(pss):.0f} | {_median(rss):.0f} | {sum(pss):.0f} |")
        if name != "flower-superlink":
            node_pss += sum(pss)
    print(
        f"per SuperNode (its processes, PSS): {node_pss / count:.0f} MB; "
        f"MemAvailable at the end: {available / 1024:.0f} MB"
    )


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="deployments per contender (alternating)")
    parser.add_argument("--config", type=Path, default=ROOT / "examples" / "flower_dp_fedavg.toml")
    parser.add_argument("--readme", action="store_true", help="also time the README example end to end")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument(
        "--nocache", action="store_true", help="also ampfl's ClientApp on nodes without a cache folder"
    )
    parser.add_argument("--idle-nodes", type=int, default=0, help="only: memory of N idle SuperNodes")
    args = parser.parse_args(argv)
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    if args.idle_nodes:
        with tempfile.TemporaryDirectory(prefix="ampfl-bench-nodes-") as tmp:
            idle_nodes(args.idle_nodes, Path(tmp), args.timeout)
        return
    load = [os.getloadavg()[0]]
    names = ["minimal", "ampfl", *(["ampfl-nocache"] if args.nocache else [])]
    results: dict[str, list[tuple[str, float, int, float]]] = {name: [] for name in names}
    walls: dict[str, list[float]] = {name: [] for name in names}
    readme: list[float] = []
    with tempfile.TemporaryDirectory(prefix="ampfl-bench-deploy-") as tmp:
        for rep in range(args.repeats):
            order = names if rep % 2 == 0 else names[::-1]
            for name in order:
                begun = time.perf_counter()
                results[name] += run_contender(name, args.config, Path(tmp) / f"{name}-{rep}", args.timeout)
                walls[name].append(time.perf_counter() - begun)
                print(f"  {name} run {rep}: {walls[name][-1]:.1f} s", file=sys.stderr)
            if args.readme:
                readme.append(time_readme(args.config, Path(tmp) / f"readme-{rep}"))
                print(f"  README example run {rep}: {readme[-1]:.1f} s", file=sys.stderr)
            load.append(os.getloadavg()[0])
    print(f"config: {args.config.relative_to(ROOT) if args.config.is_relative_to(ROOT) else args.config}")
    print(f"1-minute load average: {' -> '.join(f'{x:.2f}' for x in load)} ({os.cpu_count()} CPUs)")
    print()
    header = "| ClientApp | train msgs | CPU s / train (median) | ratio | peak RSS MB | wall s / train | "
    print(header + "CPU s / query (median) | deployment wall s (median) |")
    print("|---|---|---|---|---|---|---|---|")
    base = _median([cpu for kind, cpu, _, _ in results["minimal"] if kind == "train"])
    for name in names:
        train = [row for row in results[name] if row[0] == "train"]
        query = [row for row in results[name] if row[0] == "query"]
        cpu = _median([row[1] for row in train])
        print(
            f"| {name} | {len(train)} | {cpu:.2f} | {cpu / base:.2f}x | "
            f"{_median([row[2] / 1024 for row in train]):.0f} | {_median([row[3] for row in train]):.2f} | "
            f"{_median([row[1] for row in query]):.2f} | {_median(walls[name]):.1f} |"
        )
    if readme:
        runs = ", ".join(f"{x:.1f}" for x in readme)
        print(
            f"\nREADME example (ampfl deploy, wall): median {_median(readme):.1f} s "
            f"over {len(readme)} ({runs})"
        )


if __name__ == "__main__":
    main()
