"""Benchmark: CPU of one ``train`` message that a node declines, against one it trains.

The round protocol (``ampfl.fl.algorithms.round_protocol``) decides whether a client joins a round (its own
coin, ``own_coin``, or the server's cohort). A node with a cached shard reads that from the shard's meta
(``ampfl.flower.node_cache.cached_coin``), so a node that does not join replies empty without importing
torch. Each message runs in a fresh Python process, as ``flwr-clientapp`` does (Flower 1.41: one process per
message): CPU seconds (user + system of the child) of a declined and a trained message, for the working
tree's ``client_app`` and, with ``--baseline REV``, for ``REV``'s (loaded from ``git show``), interleaved.

Run: ``.venv/bin/python bench/client_decline.py [--algorithm fedavg] [--repeats 5] [--baseline REV]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

CHILD = r"""
import json, sys, importlib.util
import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity
source, run_config, folder = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
cohort, dim = json.loads(sys.argv[4]), int(sys.argv[5])
if source:
    spec = importlib.util.spec_from_file_location("baseline_client_app", source)
    client_app = importlib.util.module_from_spec(spec); spec.loader.exec_module(client_app)
else:
    from ampfl.flower import client_app
node = {"partition-id": 1, "num-partitions": 3, "cache-dir": folder}
context = Context(1, 11, node, RecordDict(), run_config)
TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = 1
content = RecordDict({"arrays": ArrayRecord({"params": Array(np.zeros(dim, dtype=np.float32))}),
                      "config": ConfigRecord({"round": 0, "cohort": cohort})})
reply = client_app.train(Message(content, dst_node_id=11, message_type="train"), context)
print(json.dumps("arrays" in reply.content.array_records))
"""

CONFIG = """
seed = 4
rounds = 2
[dataset]
name = "digits"
[partition]
scheme = "iid"
num_clients = 3
[model]
name = "logreg"
[algorithm]
name = "{name}"
{extra}
"""

#: Settings per algorithm: (config lines, cohort that declines client 1, cohort that trains it).
SETTINGS = {
    "fedavg": ("cohort_size = 2", [0, 2], [0, 1]),
    "dp_dsgd_rp": ("participation = {p}\nnoise_multiplier = 1.0\nlocal_dataset_size = 999", [0], [0]),
}


def message(source: str, run_config: dict, folder: str, cohort: list[int], dim: int) -> tuple[bool, float]:
    """One ``train`` message to client 1 in a fresh process (``CHILD``): (whether it joined, the child's CPU
    seconds, user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    argv = [source, json.dumps(run_config), folder, json.dumps(cohort), str(dim)]
    done = subprocess.run([sys.executable, "-c", CHILD, *argv], capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(done.stderr[-2000:])
    seconds = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return json.loads(done.stdout.splitlines()[-1]), seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", choices=sorted(SETTINGS), default="fedavg")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline", default=None, help="a git revision whose client_app to compare with")
    args = parser.parse_args(argv)

    from ampfl.fl.config import config_to_dict, parse_config
    from ampfl.flower import node_cache
    from ampfl.flower.common import CONFIG_KEY, encode_config

    extra, declined, trained = SETTINGS[args.algorithm]
    contenders = {"tree": ""}
    if args.baseline:
        source = subprocess.run(
            ["git", "show", f"{args.baseline}:src/ampfl/flower/client_app.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        path = Path(tempfile.mkdtemp()) / "baseline_client_app.py"
        path.write_text(source)
        contenders["baseline"] = str(path)
    # the random check-in coin: p = 1e-12 (declines) or 1.0 (trains), each with its own warm cache
    cases = {}
    for kind, cohort, p in (("declined", declined, "1e-12"), ("trained", trained, "1.0")):
        text = CONFIG.format(name=args.algorithm, extra=extra.format(p=p))
        run_config = {CONFIG_KEY: encode_config(config_to_dict(parse_config(tomllib.loads(text))))}
        folder = tempfile.mkdtemp()
        node_cache._MEMO.clear()
        _, algorithm = node_cache.node_algorithm(run_config, {"cache-dir": folder}, 1, 3)
        dim = algorithm.round_protocol().broadcast().numel()
        cases[kind] = (run_config, folder, cohort, dim)
    load = os.getloadavg()[0]
    cpu: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeats):
        for name, source in contenders.items():
            for kind, (run_config, folder, cohort, dim) in cases.items():
                joined, seconds = message(source, run_config, folder, cohort, dim)
                if joined != (kind == "trained"):
                    raise SystemExit(f"{name} {kind}: the client {'joined' if joined else 'declined'}")
                cpu.setdefault((name, kind), []).append(seconds)
    print(
        f"{args.algorithm}: CPU-s per message, median of {args.repeats} (1-min load {load:.1f} -> "
        f"{os.getloadavg()[0]:.1f})"
    )
    print("| client_app | declined | trained | declined / trained |")
    print("|---|---|---|---|")
    for name in contenders:
        d, t = statistics.median(cpu[(name, "declined")]), statistics.median(cpu[(name, "trained")])
        print(f"| {name} | {d:.2f} | {t:.2f} | {d / t:.2f} |")


if __name__ == "__main__":
    main()
