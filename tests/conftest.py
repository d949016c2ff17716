"""Shared test helpers: run the CLI in-process and parse its one JSON object."""

from __future__ import annotations

import compileall
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

import ampfl
from ampfl.cli import main

# CI runs the same property-test examples every time (a red CI must be reproducible, not a lottery);
# `HYPOTHESIS_PROFILE=explore pytest` searches with fresh random examples.
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """``run_cli(argv) -> (exit code, stdout, stderr)`` for an in-process ``ampfl`` call."""

    def run(argv: list[str]) -> tuple[int, str, str]:
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


@pytest.fixture
def cli_json(run_cli: Callable[..., tuple[int, str, str]]) -> Callable[..., dict[str, Any]]:
    """``cli_json(argv) -> dict``: runs ``ampfl ARGV --json``, asserts exit 0 and exactly one JSON object."""

    def run(argv: list[str]) -> dict[str, Any]:
        code, out, err = run_cli([*argv, "--json"])
        assert code == 0, err
        value = json.loads(out)  # raises on anything but exactly one JSON value
        assert isinstance(value, dict)
        return value

    return run


def pytest_configure(config: pytest.Config) -> None:
    """The suite's child processes reuse ampfl's bytecode instead of compiling its sources at every start.

    Many tests start Python processes: the CLI, and the Flower federations, where Flower 1.41 starts a fresh
    ``flwr-clientapp`` process for every message (≈ 0.4 CPU-s of such a process compiles ampfl when
    ``PYTHONDONTWRITEBYTECODE`` is set, as in some CI images). The controller compiles ``src/ampfl`` once
    (up-to-date files are skipped) and the processes of the session may read and write bytecode caches. What
    runs is the same source."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    if not hasattr(config, "workerinput"):  # the xdist controller, or a run without xdist
        compileall.compile_dir(Path(ampfl.__file__).parent, quiet=1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the tests marked ``slow`` (the real-process Flower federations, the quick reproductions) first,
    spread over the workers.

    pytest-xdist (``-n N``, load scheduling) hands each worker a first batch of consecutive tests, a
    quarter of its share. Sorted to the front, every slow test would land in worker 0's batch and run one
    after another (~9 min of Flower federations on one worker: the suite's tail). So the slow tests are
    dealt round-robin to the front of each worker's first batch; they then overlap with the short ones on
    every worker. The order is deterministic (every worker must collect the same list) and unchanged within
    each group.
    """
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    fast = [item for item in items if item.get_closest_marker("slow") is None]
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    if workers <= 1:
        items[:] = slow + fast
        return
    batch = max(len(items) // workers // 4, 2)  # xdist's first batch per worker (scheduler/load.py)
    order: list[pytest.Item] = []
    rest = iter(fast)
    for worker in range(workers):
        dealt = slow[worker::workers]
        order.extend(dealt)
        order.extend(item for _, item in zip(range(batch - len(dealt)), rest, strict=False))
    order.extend(rest)
    items[:] = order
