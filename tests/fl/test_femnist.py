"""FEMNIST (LEAF json, one client per writer) and the fmnist_styles stand-in, on tiny synthetic data."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ampfl.fl.data import DataUnavailableError, load_dataset
from ampfl.fl.data.femnist import TRAIN_FRACTION, load_femnist, read_leaf_folder
from ampfl.fl.data.writer_styles import apply_style, draw_styles, style_clients


def _writer(rng: np.random.Generator, n: int) -> dict[str, list]:
    return {"x": rng.random((n, 784)).round(3).tolist(), "y": rng.integers(0, 62, n).tolist()}


def _leaf_file(path, users: dict[str, dict[str, list]]) -> None:
    blob = {"users": list(users), "num_samples": [len(u["y"]) for u in users.values()], "user_data": users}
    path.write_text(json.dumps(blob), encoding="utf-8")


@pytest.fixture
def leaf(tmp_path):
    rng = np.random.default_rng(3)
    users = {f"f{i:04d}_{i}": _writer(rng, n) for i, n in enumerate([10, 7, 1, 12, 5])}
    names = list(users)
    folder = tmp_path / "all_data"
    folder.mkdir()
    _leaf_file(folder / "all_data_0.json", {k: users[k] for k in names[:3]})
    _leaf_file(folder / "all_data_1.json", {k: users[k] for k in names[3:]})
    return folder, users


def test_read_and_split_per_writer(leaf, tmp_path):
    folder, users = leaf
    read = read_leaf_folder(folder)
    assert set(read) == set(users)
    for name, (x, y) in read.items():
        assert np.array_equal(x, np.asarray(users[name]["x"], dtype=np.float32))
        assert np.array_equal(y, users[name]["y"])
    nat = load_femnist(folder, cache_dir=tmp_path / "cache")
    kept = sorted(k for k, u in users.items() if len(u["y"]) >= 2)  # the 1-example writer is dropped
    assert nat.clients == tuple(kept)
    ds = nat.dataset
    assert ds.x_train.shape[1:] == (1, 28, 28) and ds.num_classes == 62 and ds.x_train.dtype == np.float32
    for i, name in enumerate(kept):
        n = len(users[name]["y"])
        tr, te = nat.train[i], nat.test[i]
        assert len(tr) == max(1, int(TRAIN_FRACTION * n)) and len(tr) + len(te) == n
        # the writer's examples, every one exactly once, in train or test
        got = np.concatenate([ds.x_train[tr].reshape(-1, 784), ds.x_test[te].reshape(-1, 784)])
        want = np.asarray(users[name]["x"], dtype=np.float32)
        assert sorted(map(tuple, got.tolist())) == sorted(map(tuple, want.tolist()))
        labels = np.concatenate([ds.y_train[tr], ds.y_test[te]])
        assert sorted(labels.tolist()) == sorted(users[name]["y"])
    # cached: the same arrays again; the seed changes the per-writer split
    again = load_femnist(folder, cache_dir=tmp_path / "cache")
    assert np.array_equal(again.dataset.x_train, ds.x_train)
    assert len(list((tmp_path / "cache").rglob("*.npz"))) == 1
    other = load_femnist(folder, seed=1, cache_dir=tmp_path / "cache")
    assert not np.array_equal(other.dataset.y_train, ds.y_train) or not np.array_equal(
        other.dataset.x_train, ds.x_train
    )


def test_train_test_folders_and_writer_subset(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "train").mkdir()
    (tmp_path / "test").mkdir()
    train = {f"w{i}": _writer(rng, 4 + i) for i in range(4)}
    test = {f"w{i}": _writer(rng, 2) for i in (0, 2, 3)}  # w1 has no test examples
    _leaf_file(tmp_path / "train" / "a.json", train)
    _leaf_file(tmp_path / "test" / "a.json", test)
    nat = load_femnist(tmp_path, cache_dir=tmp_path / "cache")
    assert nat.clients == ("w0", "w1", "w2", "w3")
    assert [len(t) for t in nat.train] == [4, 5, 6, 7] and [len(t) for t in nat.test] == [2, 0, 2, 2]
    assert np.array_equal(nat.dataset.y_test[nat.test[2]], test["w2"]["y"])
    sub = load_femnist(tmp_path, writers=2, cache_dir=tmp_path / "cache")
    assert len(sub.clients) == 2 and set(sub.clients) <= set(train)
    for i, name in enumerate(sub.clients):
        assert np.array_equal(sub.dataset.y_train[sub.train[i]], train[name]["y"])
    assert load_dataset("femnist", path=tmp_path, cache_dir=tmp_path / "cache").y_train.size == 22


def test_femnist_errors(tmp_path):
    with pytest.raises(DataUnavailableError, match="LEAF"):
        load_dataset("femnist")
    with pytest.raises(DataUnavailableError, match=r"no \*\.json"):
        load_femnist(tmp_path, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="writers must be >= 1"):
        load_femnist(tmp_path, writers=0)
    rng = np.random.default_rng(0)
    bad = {"u": _writer(rng, 3)}
    blob = {"users": ["u"], "num_samples": [4], "user_data": bad}
    (tmp_path / "x.json").write_text(json.dumps(blob), encoding="utf-8")
    with pytest.raises(DataUnavailableError, match="num_samples 4"):
        load_femnist(tmp_path, cache_dir=tmp_path / "c")
    (tmp_path / "x.json").write_text('{"nope": 1}', encoding="utf-8")
    with pytest.raises(DataUnavailableError, match="not a LEAF json"):
        load_femnist(tmp_path, cache_dir=tmp_path / "c")


def test_styles_geometry_and_determinism():
    img = np.zeros((1, 1, 28, 28), np.float32)
    img[0, 0, 5, 13:15] = 1.0
    assert np.array_equal(apply_style(img, np.zeros(4)), img)
    shifted = apply_style(img, np.array([0.0, 2.0, -3.0, 0.0]))  # 2 down, 3 left
    assert np.array_equal(shifted[0, 0], np.roll(np.roll(img[0, 0], 2, 0), -3, 1))
    quarter = apply_style(img, np.array([90.0, 0.0, 0.0, 0.0]))[0, 0]
    assert np.allclose(quarter, np.rot90(img[0, 0]), atol=1e-5)  # a quarter turn about the centre
    thick = apply_style(img, np.array([0.0, 0.0, 0.0, 1.0]))[0, 0]
    assert thick.sum() == 8 and thick[4, 13] == 1 and thick[5, 12] == 1  # 2 pixels + 6 cross neighbours
    assert apply_style(img, np.array([0.0, 0.0, 0.0, -1.0])).sum() == 0  # a 1-pixel stroke disappears
    styles = draw_styles(50, 0)
    assert np.array_equal(styles, draw_styles(50, 0)) and not np.array_equal(styles, draw_styles(50, 1))
    assert np.abs(styles[:, 0]).max() <= 30 and np.abs(styles[:, 1:3]).max() <= 3
    assert set(styles[:, 3].tolist()) == {-1.0, 0.0, 1.0}


def test_style_clients_partition():
    rng = np.random.default_rng(0)
    x_tr = rng.random((40, 1, 12, 12)).astype(np.float32)
    x_te = rng.random((12, 1, 12, 12)).astype(np.float32)
    a_tr, a_te, train, test, styles = style_clients(x_tr, x_te, 4, seed=5)
    assert sorted(np.concatenate(train).tolist()) == list(range(40))
    assert sorted(np.concatenate(test).tolist()) == list(range(12))
    for i in range(4):
        assert np.allclose(a_tr[train[i]], apply_style(x_tr[train[i]], styles[i]))
        assert np.allclose(a_te[test[i]], apply_style(x_te[test[i]], styles[i]))
    with pytest.raises(ValueError, match="num_clients must be in"):
        style_clients(x_tr, x_te, 13, seed=0)


def test_table1_on_a_tiny_leaf_folder(tmp_path, monkeypatch, capsys):
    """``pm-sfl-table1 --dataset femnist --data-path P``: one client per writer, each on its own test data."""
    import math

    from ampfl.cli import main
    from ampfl.reproduce import pm_sfl_attack, pm_sfl_training, run_figure

    rng = np.random.default_rng(1)
    folder = tmp_path / "leaf"
    folder.mkdir()
    _leaf_file(folder / "a.json", {f"w{i}": _writer(rng, 12) for i in range(5)})
    tiny = {**pm_sfl_training.QUICK, "num_clients": 4, "client_fraction": 0.5, "rounds": 2, "local_steps": 1,
            "evaluations": 1, "learning_rates": (0.05,), "eval_clients": 4,
            "channels": [4, 8, 8]}  # fmt: skip
    monkeypatch.setattr(pm_sfl_training, "QUICK", tiny)
    monkeypatch.setattr(pm_sfl_training, "MODEL", {"groups": 2, "split_layer": 2})
    methods = {k: pm_sfl_training.METHODS[k] for k in ("PM-SFL",)}
    monkeypatch.setattr(pm_sfl_training, "METHODS", methods)
    monkeypatch.setenv("AMPFL_DATA", str(tmp_path / "cache"))
    out = run_figure("pm-sfl-table1", tmp_path / "t", quick=True, dataset="femnist", data_path=str(folder))
    assert out["dataset"] == "femnist" and out["setting"]["num_clients"] == 4  # 4 of the 5 writers
    assert [r["method"] for r in out["results"]] == list(methods)
    for r in out["results"]:  # each of the 4 writers has 1 test example: accuracy is a multiple of 1/4
        assert math.isclose(r["final_accuracy"] * 4, round(r["final_accuracy"] * 4), abs_tol=1e-9)
    assert (tmp_path / "t" / "femnist" / "pm_sfl" / "lr0.05" / "summary.json").is_file()
    monkeypatch.setattr(pm_sfl_attack, "ATTACK_STEPS", 2)
    monkeypatch.setattr(pm_sfl_attack, "ATTACK_IMAGES", 2)
    hit = run_figure("pm-sfl-attack", tmp_path / "a", quick=True, dataset="femnist", data_path=str(folder))
    assert hit["dataset"] == "femnist" and all(r["psnr"] > 0 for r in hit["results"])
    assert {r["gradient_matching"] for r in hit["results"]} == {False, True}
    assert (
        main(["reproduce", "pm-sfl-table1", "--quick", "--dataset", "femnist", "--out", str(tmp_path / "u")])
        == 2
    )
    assert "needs --data-path" in capsys.readouterr().err
    assert main(["reproduce", "ms-pafl-fig3", "--dataset", "femnist", "--out", str(tmp_path / "v")]) == 2
    assert "--dataset is not an option of figure ms-pafl-fig3" in capsys.readouterr().err
