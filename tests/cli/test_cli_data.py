"""``ampfl data fetch`` and ``ampfl data info``: JSON contract, exit codes, one-line errors (in-process)."""

from __future__ import annotations

import json

import pytest

from ampfl.cli import main
from ampfl.fl.data import DataUnavailableError, load_dataset, sources


@pytest.fixture
def offline_empty(tmp_path, monkeypatch):
    """No cache, no network, no Debian package: nothing but the bundled digits can be fetched."""
    monkeypatch.setenv("AMPFL_NO_NETWORK", "1")
    monkeypatch.setenv("AMPFL_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(sources, "FMNIST_SYSTEM_DIRS", ())
    return tmp_path / "data"


def test_cli_names_match_the_library():
    from ampfl.commands import data as command
    from ampfl.fl.data import FETCHABLE

    assert command._FETCHABLE == FETCHABLE


def test_fetch_digits_json(offline_empty, capsys):
    assert main(["data", "fetch", "digits", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] == {} and result["fetched"]["digits"].endswith("digits.csv.gz")
    assert result["cache"] == str(offline_empty)


def test_fetch_failure_exits_1_with_one_line_per_dataset(offline_empty, capsys):
    code = main(["data", "fetch", "fmnist", "digits", "--json"])
    assert code == 1
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert set(result["fetched"]) == {"digits"} and set(result["failed"]) == {"fmnist"}
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "ampfl: error: could not fetch fmnist: fmnist: cannot obtain"
    )


def test_fetch_cache_flag(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AMPFL_NO_NETWORK", "1")
    monkeypatch.setattr(sources, "FMNIST_SYSTEM_DIRS", ())
    assert main(["data", "fetch", "digits", "--cache", str(tmp_path / "elsewhere"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cache"] == str(tmp_path / "elsewhere")


def test_info_synthetic_json(capsys):
    assert main(["data", "info", "synthetic", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["input_shape"] == [20] and result["num_classes"] == 4
    assert (result["n_train"], result["n_test"]) == (2000, 500)
    assert result["train_class_counts"] == [500, 500, 500, 500]


def test_info_table_output(capsys):
    assert main(["data", "info", "digits"]) == 0
    out = capsys.readouterr().out
    assert "input_shape" in out and "scikit-learn" in out


def test_info_unavailable_user_path_dataset_exits_1(offline_empty, capsys):
    code = main(["data", "info", "cifar10", "--path", str(offline_empty / "none")])
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("ampfl: error: cifar10:") and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["data"],
        ["data", "fetch"],
        ["data", "fetch", "mnist"],
        ["data", "info", "nope"],
        ["data", "frobnicate"],
    ],
)
def test_usage_errors_exit_2_one_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ampfl: error:") and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.realdata
def test_info_adult_uses_the_fetched_cache(capsys):
    try:
        load_dataset("adult")
    except DataUnavailableError as exc:
        pytest.skip(f"adult cannot be fetched here: {exc}")
    assert main(["data", "info", "adult", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    # UCI adult.names: train = 32561, test = 16281 instances; 14 attributes.
    assert (result["n_train"], result["n_test"], result["input_shape"]) == (32561, 16281, [14])
