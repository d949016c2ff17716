"""Benchmark: how long a SecAgg+ node takes to reply when its check-in coin says yes and when it says no.

Under ``--secure-aggregation secaggplus`` the server sees when each node's reply arrives; if a node whose coin
said no replied sooner, its reply time would reveal the participation the analysis assumes hidden. This script
calls the ClientApp's ``train`` (:func:`ampfl.flower.secagg.train`, the node's whole work for one round apart
from the SecAgg+ masking, which is the same for every node) in this process, many times, with the node's own
coin as deployed (``participation = 0.5``), reads from the spy records which calls joined, and prints the
median and quartiles of the reply time per group and their ratio, per model.

Run: ``.venv/bin/python bench/secagg_reply_time.py [--calls 40] [--models logreg mlp]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import tomllib
from pathlib import Path

CONFIG = """
seed = 0
rounds = 1
[dataset]
name = "digits"
[partition]
scheme = "iid"
num_clients = 3
[model]
name = "{model}"
[algorithm]
name = "dp_dsgd_rp"
clip = 1.0
noise_multiplier = 1.0
learning_rate = 0.5
participation = 0.5
sampling_rate = {sampling_rate}
local_dataset_size = 500
"""


def reply_times(model: str, calls: int, sampling_rate: float = 1.0) -> dict[bool, list[float]]:
    """Seconds per ``train`` call of node 0, keyed by whether its coin said yes."""
    from flwr.app import Context, Message, RecordDict
    from flwr.common import FitIns, ndarrays_to_parameters
    from flwr.compat.common import recorddict_compat as compat
    from flwr.supercore.task_identity import TaskIdentity

    from ampfl.fl.config import config_to_dict, parse_config
    from ampfl.fl.run.experiment import build_algorithm, build_task
    from ampfl.flower import secagg
    from ampfl.flower.common import CONFIG_KEY, encode_config

    config = parse_config(tomllib.loads(CONFIG.format(model=model, sampling_rate=sampling_rate)))
    params = build_algorithm(config, build_task(config)).round_protocol().broadcast().numpy()
    run_config = {CONFIG_KEY: encode_config(config_to_dict(config))}
    context = Context(0, 1, {"partition-id": 0, "num-partitions": 3}, RecordDict(), run_config)  # type: ignore[arg-type]
    for name in ("_run_id", "_node_id", "_task_id"):  # what flwr-clientapp sets before a message is built
        setattr(TaskIdentity, name, 1)
    times: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as spy:
        os.environ[secagg.SPY_ENV] = spy
        try:
            for call in range(calls + 1):
                fitins = FitIns(ndarrays_to_parameters([params]), {"round": call, "asked": 3, "part": 0})
                msg = Message(compat.fitins_to_recorddict(fitins, keep_input=True), dst_node_id=1,
                              message_type="train")  # fmt: skip
                begun = time.perf_counter()
                secagg.train(msg, context)
                elapsed = time.perf_counter() - begun
                if call:  # the first call builds the algorithm (the same for every node)
                    joined = json.loads(Path(spy, "client-0.jsonl").read_text().splitlines()[-1])["joined"]
                    times[bool(joined)].append(elapsed)
        finally:
            del os.environ[secagg.SPY_ENV]
    return times


def _summary(values: list[float]) -> str:
    if len(values) < 2:
        return f"n={len(values)}"
    q = statistics.quantiles(values, n=4)
    median = statistics.median(values) * 1e3
    return f"n={len(values):3d}  median {median:7.2f} ms  IQR [{q[0] * 1e3:.2f}, {q[2] * 1e3:.2f}]"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--models", nargs="+", default=["logreg", "mlp"])
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    for model in args.models:
        times = reply_times(model, args.calls)
        joined, declined = times[True], times[False]
        both = joined and declined
        ratio = statistics.median(joined) / statistics.median(declined) if both else float("nan")
        print(f"{model:8s} joined   {_summary(joined)}")
        print(f"{model:8s} declined {_summary(declined)}")
        print(f"{model:8s} median ratio joined / declined: {ratio:.2f}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
