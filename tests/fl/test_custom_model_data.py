"""A user's own model and data: the model and dataset registries, the functional check, ``[model] factory``,
``[dataset] path = "*.npz"`` with a natural partition, the Python API, and the config's contradictions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from ampfl.fl.config import parse_config
from ampfl.fl.data import load_dataset
from ampfl.fl.data.user import dataset_from_arrays, load_npz
from ampfl.fl.models import MODELS, UserModel, build_model, register_model
from ampfl.fl.run import build_task, run_experiment

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "custom_model"
FACTORY = "examples/custom_model/my_model.py:two_layer_convnet"


def _arrays(n: int = 120, sites: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(3, size=n)
    x = (rng.normal(size=(n, 1, 8, 8)) + y[:, None, None, None]).astype(np.float32)
    return {
        "x_train": x[: n - 30], "y_train": y[: n - 30], "x_test": x[n - 30 :], "y_test": y[n - 30 :],
        "client_train": np.arange(n - 30) % sites,
    }  # fmt: skip


def _config(**sections: object) -> dict[str, object]:
    base: dict[str, object] = {"seed": 0, "rounds": 2, "eval_every": 1, "checkpoint_every": 0}
    base.update(sections)
    return base


def test_a_factory_in_a_users_file_builds_a_wrapped_functional_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    model = build_model(FACTORY, input_shape=(1, 8, 8), num_classes=10, channels=4)
    assert isinstance(model, UserModel) and model(torch.zeros(3, 1, 8, 8)).shape == (3, 10)
    with pytest.raises(ValueError, match=r"^bad option for model"):
        build_model(FACTORY, input_shape=(1, 8, 8), num_classes=10, width=4)


@pytest.mark.parametrize(
    ("net", "needle"),
    [
        (lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.BatchNorm1d(8), nn.Linear(8, 3)),
         r"^model: BatchNorm1d at 'net.2' keeps running statistics .*GroupNorm or LayerNorm\.$"),
        (lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.Dropout(0.5), nn.Linear(8, 3)),
         r"^model: its forward does not run under torch\.func\.vmap"),
        (lambda: nn.Sequential(nn.Flatten()), r"^model: the module has no parameters to train\.$"),
    ],
)  # fmt: skip
def test_a_model_that_breaks_vmap_is_refused_in_one_line(net, needle) -> None:  # type: ignore[no-untyped-def]
    register_model("tmp_bad", lambda **_: net(), replace=True)
    try:
        with pytest.raises(ValueError, match=needle) as info:
            build_model("tmp_bad", input_shape=(1, 8, 8), num_classes=3)
        assert "\n" not in str(info.value)
    finally:
        MODELS.unregister("tmp_bad")


def test_bad_factory_references_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^model\.factory: no such file"):
        build_model(str(tmp_path / "nope.py") + ":f", input_shape=(4,), num_classes=2)
    (tmp_path / "m.py").write_text("x = 1\n")
    with pytest.raises(ValueError, match="has no attribute 'f'"):
        build_model(str(tmp_path / "m.py") + ":f", input_shape=(4,), num_classes=2)
    with pytest.raises(ValueError, match="is not callable"):
        build_model(str(tmp_path / "m.py") + ":x", input_shape=(4,), num_classes=2)
    with pytest.raises(ValueError, match=r"^model must be one of"):
        build_model("resnet", input_shape=(4,), num_classes=2)


def test_user_arrays_are_validated_in_one_line_naming_the_array(tmp_path: Path) -> None:
    a = _arrays()
    ds = dataset_from_arrays("mine", a)
    parts = ds.natural_partition()
    assert parts is not None and [len(p) for p in parts] == [23, 23, 22, 22]
    assert all((a["client_train"][p] == i).all() for i, p in enumerate(parts))
    np.savez(tmp_path / "d.npz", **a)
    assert load_dataset("npz", path=tmp_path / "d.npz").num_classes == 3
    for broken, needle in [
        ({k: v for k, v in a.items() if k != "y_test"}, "missing array"),
        ({**a, "extra": a["y_test"]}, "unknown array"),
        ({**a, "client_train": a["client_train"][:-1]}, "one client id per training example"),
        ({**a, "client_train": a["client_train"] * 2}, "client 1 has no example"),
        ({**a, "y_train": a["y_train"] - 1}, "labels >= 0"),
        ({**a, "x_train": a["x_train"][:, 0, 0, 0]}, r"x_train must be a numeric array \[n, \.\.\.\]"),
    ]:
        with pytest.raises(ValueError, match=needle):
            dataset_from_arrays("mine", broken)
    with pytest.raises(ValueError, match=r"^dataset\.path: no such file"):
        load_npz(tmp_path / "missing.npz")


def test_an_npz_path_selects_its_natural_partition_and_contradictions_name_both_keys(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", **_arrays())
    algorithm = {"name": "fedavg", "cohort_size": 2}
    config = parse_config(_config(dataset={"path": str(tmp_path / "d.npz")}, algorithm=algorithm))
    assert config.dataset.name == "npz"
    task = build_task(config)
    assert task.num_clients == 4 and task.client_sizes().tolist() == [23, 23, 22, 22]
    iid = parse_config(_config(dataset={"path": str(tmp_path / "d.npz")}, partition={"scheme": "iid",
                                "num_clients": 3}, algorithm=algorithm))  # fmt: skip
    assert build_task(iid).num_clients == 3
    wrong = parse_config(_config(dataset={"path": str(tmp_path / "d.npz")}, partition={"num_clients": 7},
                                 algorithm=algorithm))  # fmt: skip
    with pytest.raises(ValueError, match=r"partition\.num_clients \(7\) contradicts the dataset's natural"):
        build_task(wrong)
    natural = parse_config(_config(partition={"scheme": "natural"}, algorithm=algorithm))
    with pytest.raises(ValueError, match="needs a dataset with a client partition"):
        build_task(natural)
    with pytest.raises(ValueError, match=r"dataset\.name \('digits'\) and dataset\.path .* contradict"):
        parse_config(_config(dataset={"name": "digits", "path": "x.npz"}, algorithm=algorithm))


@pytest.mark.parametrize(
    ("sections", "needle"),
    [
        ({"algorithm": {"name": "dp_fedavg", "client_sampling": "poisson", "sampling_rate": 0.5,
                        "expected_clients": 5,
                        "target_epsilon": 2.0}, "privacy": {"max_epsilon": 0.5}},
         r"privacy\.max_epsilon \(0\.5\) is below algorithm\.target_epsilon \(2\.0\)"),
        ({"algorithm": {"name": "dp_fedavg", "client_sampling": "poisson", "sampling_rate": 0.5,
                        "expected_clients": 500,
                        "noise_multiplier": 1.0}},
         r"algorithm\.expected_clients \(500(\.0)?\) exceeds partition\.num_clients \(100\)"),
        ({"partition": {"scheme": "iid", "labels_per_client": 3}, "algorithm": {"name": "fedavg"}},
         r"partition\.labels_per_client and partition\.scheme = 'iid' contradict"),
        ({"partition": {"scheme": "label_skew", "alpha": 0.3}, "algorithm": {"name": "fedavg"}},
         r"partition\.alpha and partition\.scheme = 'label_skew' contradict"),
        ({"model": {"name": "mlp", "factory": "a:b"}, "algorithm": {"name": "fedavg"}},
         r"model\.name and model\.factory contradict"),
        ({"algorithm": {"name": "fedavg", "cohort_size": 200}},
         r"algorithm\.cohort_size \(200\) exceeds partition\.num_clients \(100\)"),
    ],
)  # fmt: skip
def test_contradictory_settings_are_refused_naming_both_keys(
    sections: dict[str, object], needle: str
) -> None:
    with pytest.raises(ValueError, match=needle) as info:
        parse_config(_config(**sections))
    assert "\n" not in str(info.value)


def _eps(tmp_path: Path, name: str, model: dict[str, object], algorithm: dict[str, object]) -> float:
    np.savez(tmp_path / "d.npz", **_arrays())
    config = parse_config(_config(dataset={"path": str(tmp_path / "d.npz")}, model=model, algorithm=algorithm,
                                  privacy={"delta": 1e-5}))  # fmt: skip
    summary = run_experiment(config, tmp_path / name, progress=False, plots=False)
    assert summary["completed"] and np.isfinite(summary["epsilon"])
    return float(summary["epsilon"])


@pytest.mark.parametrize(
    "algorithm",
    [
        {"name": "dp_dsgd_rp", "participation": 0.5, "sampling_rate": 0.2, "local_dataset_size": 30,
         "noise_multiplier": 1.0, "learning_rate": 0.05},
        {"name": "dp_fedavg", "client_sampling": "poisson", "sampling_rate": 0.5, "expected_clients": 2,
         "noise_multiplier": 1.0, "learning_rate": 0.05},
    ],
)  # fmt: skip
def test_a_users_model_trains_with_the_epsilon_of_a_built_in_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, algorithm: dict[str, object]
) -> None:
    monkeypatch.chdir(REPO)
    mine = _eps(tmp_path, "mine", {"factory": FACTORY, "options": {"channels": 4}}, algorithm)
    built_in = _eps(tmp_path, "mlp", {"name": "mlp"}, algorithm)
    assert mine == built_in  # the accountant never depends on the model


def test_the_python_api_takes_a_factory_and_arrays(tmp_path: Path) -> None:
    def factory(*, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(input_shape)), num_classes))

    config = parse_config(_config(algorithm={"name": "fedavg", "cohort_size": 2, "learning_rate": 0.1}))
    summary = run_experiment(config, tmp_path / "run", model=factory, dataset=_arrays(), progress=False,
                             plots=False)  # fmt: skip
    assert summary["num_clients"] == 4 and summary["completed"]
    with pytest.raises(ValueError, match="dataset must be a Dataset or a mapping of arrays"):
        run_experiment(config, tmp_path / "run2", dataset=[1, 2], progress=False)


def test_the_cli_refuses_a_batchnorm_model_in_one_line_and_runs_the_example(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    data = subprocess.run([sys.executable, str(EXAMPLES / "make_data.py"), str(tmp_path / "h.npz")],
                          capture_output=True, text=True, check=True, cwd=REPO, env=env)  # fmt: skip
    assert data.stdout.strip().endswith("h.npz")
    text = (EXAMPLES / "dp_dsgd_rp.toml").read_text()
    text = text.replace('"runs/hospitals.npz"', json.dumps(str(tmp_path / "h.npz")))
    text = text.replace("rounds = 40", "rounds = 2").replace("eval_every = 10", "eval_every = 1")
    (tmp_path / "ok.toml").write_text(text)
    (tmp_path / "bad.toml").write_text(text.replace(":two_layer_convnet", ":batchnorm_convnet").replace(
        "[model.options]\nchannels = 8\n", ""))  # fmt: skip
    cli = [str(Path(sys.executable).parent / "ampfl")]
    ok = subprocess.run([*cli, "run", str(tmp_path / "ok.toml"), "--out", str(tmp_path / "ok"), "--json"],
                        capture_output=True, text=True, cwd=REPO, env=env)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["privacy_unit"] == "record"
    bad = subprocess.run([*cli, "run", str(tmp_path / "bad.toml"), "--out", str(tmp_path / "bad")],
                         capture_output=True, text=True, cwd=REPO, env=env)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    assert "BatchNorm2d at 'net.1' keeps running statistics" in bad.stderr
    assert not (tmp_path / "bad").exists()


def test_the_python_example_runs() -> None:
    done = subprocess.run([sys.executable, str(EXAMPLES / "train_python.py"), "3"], capture_output=True,
                          text=True, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("accuracy ") and "unit: client" in done.stdout
