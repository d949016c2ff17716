"""docs/config.md is the config reference generated from the models that validate a run config."""

from __future__ import annotations

import re
from pathlib import Path

from ampfl.fl.config_reference import reference

REPO = Path(__file__).resolve().parents[2]


def test_the_config_reference_is_current() -> None:
    page = (REPO / "docs" / "config.md").read_text()
    assert page == reference(), "regenerate: python -m ampfl.fl.config_reference > docs/config.md"


def test_every_key_has_a_meaning_and_every_algorithm_a_table() -> None:
    from ampfl.fl.algorithms import ALGORITHMS
    from ampfl.fl.config import RunConfig

    page = reference()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert rows and all(not line.rstrip().endswith("|  |") for line in rows), [
        line for line in rows if line.rstrip().endswith("|  |")
    ]
    assert set(re.findall(r'### `name = "(\w+)"`', page)) == set(ALGORITHMS)
    for name, info in RunConfig.model_fields.items():  # a key, or a table of keys
        assert (f"`{name}`" if info.annotation.__module__ == "builtins" else f"`[{name}]`") in page, name
    assert "| `delta` | float | `1e-05` | > 0, < 1 |" in page  # type, default and range from the model
