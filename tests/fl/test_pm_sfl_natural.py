"""Split algorithms on a natural partition (clients own test examples too); the CIFAR-100 loader."""

from __future__ import annotations

import hashlib
import pickle

import numpy as np
import pytest
import torch

from ampfl.fl.config import parse_config
from ampfl.fl.data import DataUnavailableError, cifar100, load_dataset
from ampfl.fl.data.cifar100 import CIFAR100_MD5, find_cifar100, load_cifar100_arrays
from ampfl.fl.data.natural import NaturalData
from ampfl.fl.models.split_cnn import bottom_forward
from ampfl.fl.run.experiment import build_algorithm, build_task
from ampfl.fl.split.common import unflatten


def _config(name: str, **algo: object):
    return parse_config(
        {
            "seed": 0,
            "rounds": 1,
            "dataset": {"name": "digits"},
            "partition": {"scheme": "iid", "num_clients": 4},
            "model": {"name": "split_cnn", "options": {"channels": [4, 8], "groups": 2, "split_layer": 1}},
            "algorithm": {"name": name, "client_fraction": 0.5, "num_local_steps": 2, "batch_size": 8,
                          "eval_examples": 0, "eval_clients": 4, "learning_rate": 0.01, **algo},
            "privacy": {"accountant": "rdp", "reproducible": True},
        }
    )  # fmt: skip


def _natural(config, tests: list[np.ndarray]):
    base = build_task(config)
    nat = NaturalData(base.dataset, list(base.client_indices), tests, tuple(f"w{i}" for i in range(4)))
    return nat.task(config.model.name, dict(config.model.options))


def _own(alg, weights, idx: np.ndarray) -> float:
    x = alg.x_test[torch.from_numpy(idx)]
    with torch.no_grad():
        pred = alg.top(bottom_forward(weights, x, alg.spec.groups)).argmax(1)
    return float((pred == alg.y_test[torch.from_numpy(idx)]).double().mean())


def test_standalone_scores_each_client_on_its_own_test_examples():
    config = _config("standalone")
    n_test = build_task(config).dataset.y_test.size
    tests = [np.arange(i, n_test, 5) for i in range(3)] + [np.zeros(0, np.int64)]  # client 3: no test data
    alg = build_algorithm(config, _natural(config, tests))
    alg.run_round(0)
    assert list(alg.eval_ids()) == [0, 1, 2]  # clients without test examples are not scored
    got = alg.evaluate()
    own = [_own(alg, unflatten(alg.store[c], alg.shapes), tests[c]) for c in range(3)]
    assert got["accuracy"] == pytest.approx(np.mean(own), abs=1e-12)
    assert got["local_accuracy_std"] == pytest.approx(np.std(own), abs=1e-9)


@pytest.mark.parametrize("name", ["splitfed", "depthfl"])
def test_shared_model_on_the_whole_test_set_equals_the_label_reweighted_metric(name):
    # every client owning the whole test set: the natural metric is the plain accuracy on it, which the
    # label-share path reports as global_accuracy (eval_examples = 0: the whole test set)
    config = _config(name, **({"client_splits": [1, 2]} if name == "depthfl" else {}))
    plain = build_algorithm(config, build_task(config))
    n_test = plain.task.dataset.y_test.size
    natural = build_algorithm(config, _natural(config, [np.arange(n_test)] * 4))
    plain.run_round(0)
    natural.run_round(0)
    a, b = plain.evaluate(), natural.evaluate()
    assert b["accuracy"] == pytest.approx(a["global_accuracy"], abs=1e-6)
    assert b["global_accuracy"] == pytest.approx(a["global_accuracy"], abs=1e-6)
    assert b["local_accuracy_std"] == pytest.approx(0.0, abs=1e-12)
    if name == "depthfl":  # each client's own-depth ensemble on the whole test set
        counts = torch.bincount(plain._eval_y, minlength=10).float()
        per = [float(plain._class_accuracy(plain.bottom, int(plain.splits[c])) @ counts / counts.sum())
               for c in natural.eval_ids()]  # fmt: skip
        assert b["own_depth_accuracy"] == pytest.approx(np.mean(per), abs=1e-6)
    if name == "splitfed":  # and it is the direct computation
        assert b["accuracy"] == pytest.approx(_own(natural, unflatten(natural.bottom, natural.shapes),
                                                   np.arange(n_test)), abs=1e-12)  # fmt: skip


def _pickle(path, obj) -> None:
    with path.open("wb") as handle:
        pickle.dump(obj, handle)


def test_cifar100_pickles(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    x = rng.integers(0, 256, (5, 3072), dtype=np.uint8)
    fine, coarse = [3, 99, 0, 42, 7], [1, 19, 0, 2, 3]
    _pickle(folder / "train", {b"data": x, b"fine_labels": fine, b"coarse_labels": coarse})
    _pickle(folder / "test", {b"data": x[:2], b"fine_labels": fine[:2], b"coarse_labels": coarse[:2]})
    names = {b"fine_label_names": [f"f{i}".encode() for i in range(100)],
             b"coarse_label_names": [f"c{i}".encode() for i in range(20)]}  # fmt: skip
    _pickle(folder / "meta", names)
    assert find_cifar100(tmp_path, tmp_path / "empty") == folder
    a, labels = load_cifar100_arrays(folder, verify=False)
    assert a["x_train"].shape == (5, 3, 32, 32) and labels[42] == "f42"
    # channel-major rows: red plane first, each 32×32 row-major
    assert a["x_train"][1, 2, 3, 4] == x[1, 2 * 1024 + 3 * 32 + 4]
    assert a["y_train"].tolist() == fine and a["y_test"].tolist() == fine[:2]
    c, coarse_names = load_cifar100_arrays(folder, coarse=True, verify=False)
    assert c["y_train"].tolist() == coarse and len(coarse_names) == 20
    with pytest.raises(DataUnavailableError, match="fails the published MD5"):
        load_dataset("cifar100", path=tmp_path, cache_dir=tmp_path / "empty")
    # with the digests of these files, load_dataset accepts them: float images in [0, 1], 100 classes
    digests = {
        n: hashlib.md5((folder / n).read_bytes(), usedforsecurity=False).hexdigest() for n in CIFAR100_MD5
    }
    monkeypatch.setattr(cifar100, "CIFAR100_MD5", digests)
    ds = load_dataset("cifar100", path=tmp_path, cache_dir=tmp_path / "empty")
    assert ds.num_classes == 100 and ds.x_train.dtype == np.float32 and ds.class_names[99] == "f99"
    assert np.allclose(ds.x_train * 255, a["x_train"]) and ds.y_test.tolist() == fine[:2]
    monkeypatch.undo()
    with pytest.raises(DataUnavailableError, match="train, test and meta not found"):
        load_dataset("cifar100", path=tmp_path / "nowhere", cache_dir=tmp_path / "empty")
    _pickle(folder / "test", {b"data": x[:2], b"fine_labels": [100, 0]})
    with pytest.raises(DataUnavailableError, match=r"labels outside 0\.\.99"):
        load_cifar100_arrays(folder, verify=False)
    (folder / "test").write_bytes(b"not a pickle")
    with pytest.raises(DataUnavailableError, match="not a CIFAR-100 pickle"):
        load_cifar100_arrays(folder, verify=False)
