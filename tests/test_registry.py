"""The one registry type (algorithms, models, datasets): lazy references, one-line errors, and the
algorithm table's entries named after their classes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ampfl.registry import Registry, resolve_reference


def test_a_reference_is_imported_on_first_use_and_kept() -> None:
    table: Registry[object] = Registry("thing", {"join": "os.path:join", "direct": len})
    assert "join" in table and "missing" not in table
    assert list(table) == ["join", "direct"] and len(table) == 2
    import os.path

    assert table["join"] is os.path.join
    assert table["direct"] is len
    assert table.get("missing") is None


def test_unknown_names_and_bad_references_are_one_line_errors() -> None:
    table: Registry[object] = Registry("model.name", {"a": "os.path:join"})
    with pytest.raises(ValueError, match=r"^model.name must be one of \['a'\]. Found 'b'.$"):
        table.lookup("b")
    with pytest.raises(ValueError, match="already registered"):
        table.register("a", len)
    table.register("a", len, replace=True)
    assert table.lookup("a") is len
    table.unregister("a")
    assert "a" not in table
    with pytest.raises(ValueError, match=r"must be 'package\.module:attribute'"):
        resolve_reference("os.path.join", parameter="model.factory")
    with pytest.raises(ValueError, match="cannot import module 'no_such_module_x'"):
        resolve_reference("no_such_module_x:f", parameter="model.factory")
    with pytest.raises(ValueError, match="has no attribute 'nope'"):
        resolve_reference("os.path:nope", parameter="model.factory")
    with pytest.raises(ValueError, match="non-empty string"):
        table.register("", len)


def test_every_algorithm_entry_is_the_class_of_that_name() -> None:
    from ampfl.fl.algorithms import ALGORITHMS
    from ampfl.fl.algorithms.base import Algorithm

    assert len(ALGORITHMS) == 20
    for name in ALGORITHMS:
        cls = ALGORITHMS[name]
        assert issubclass(cls, Algorithm) and cls.name == name


def test_the_algorithm_table_imports_no_algorithm() -> None:
    code = (
        "import sys; from ampfl.fl.algorithms import ALGORITHMS; 'fedavg' in ALGORITHMS; "
        "print(sorted(m for m in sys.modules if m.startswith('ampfl.fl.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['ampfl.fl.algorithms']"
    from ampfl.fl import algorithms

    assert algorithms.FedAvg is algorithms.ALGORITHMS["fedavg"]
    with pytest.raises(AttributeError):
        _ = algorithms.NoSuchAlgorithm
