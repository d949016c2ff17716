"""Atomic writers and strict JSON output (ampfl.io)."""

import json
import math

from ampfl.io import atomic_write_csv, atomic_write_json, atomic_write_text, dumps_json


def test_dumps_json_writes_infinity_as_valid_json_number():
    # Prepare / Execute
    text = dumps_json({"epsilon": math.inf, "neg": -math.inf, "nan": math.nan, "x": 1.5})
    # Assert: strict parsers accept it (no Infinity / NaN tokens) and Python reads inf back.
    assert "Infinity" not in text and "NaN" not in text
    loaded = json.loads(text)
    assert loaded == {"epsilon": math.inf, "neg": -math.inf, "nan": None, "x": 1.5}


def test_dumps_json_converts_numpy_values():
    import numpy as np

    loaded = json.loads(dumps_json({"a": np.float64(0.25), "b": np.arange(3), "c": np.int64(7)}))
    assert loaded == {"a": 0.25, "b": [0, 1, 2], "c": 7}


def test_atomic_writes_leave_no_temporary_files(tmp_path):
    atomic_write_text(tmp_path / "a.txt", "hello")
    atomic_write_json(tmp_path / "sub" / "b.json", {"k": 1})
    atomic_write_csv(tmp_path / "c.csv", ["x", "y"], [(1, 0.5), (2, 0.25)])
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["a.txt", "b.json", "c.csv"]
    assert (tmp_path / "c.csv").read_text() == "x,y\n1,0.5\n2,0.25\n"
    assert json.loads((tmp_path / "sub" / "b.json").read_text()) == {"k": 1}


def test_atomic_files_honour_the_umask(tmp_path):
    # Written files get 0o666 less the umask (0644 under the usual 022), as a plain open() would give them.
    import os

    from ampfl.io import atomic_write_text

    previous = os.umask(0o022)
    try:
        default = atomic_write_text(tmp_path / "a.txt", "x")
        os.umask(0o077)
        private = atomic_write_text(tmp_path / "b.txt", "x")
    finally:
        os.umask(previous)
    assert default.stat().st_mode & 0o777 == 0o644
    assert private.stat().st_mode & 0o777 == 0o600
