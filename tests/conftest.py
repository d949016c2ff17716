"""Shared test helpers: run the CLI in-process and parse its one JSON object."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import settings

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the tests marked ``slow`` (the real-process Flower federations, the quick reproductions) first.

    With ``pytest -n 2`` the long ones then overlap with the many short ones on the other worker instead of
    leaving one worker busy alone at the end; the order within each group is unchanged.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
