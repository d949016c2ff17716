"""``[engine] device`` / ``--device`` (issue 30 item 1): the forms, their resolution, the one-line errors, the
CPU's bit-identity, and the engine's device path (exercised on the CPU: no GPU here)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.fl.config import parse_config, with_device
from ampfl.fl.engine import device as device_mod
from ampfl.fl.engine.device import default_memory_cap_mb, is_device_name, model_on, on_device, resolve_device
from ampfl.fl.engine.vectorised import Engine, EngineOptions, FunctionalModel
from ampfl.fl.models import build_model
from ampfl.fl.run.experiment import run_experiment

TINY = {
    "seed": 1,
    "rounds": 3,
    "checkpoint_every": 0,
    "dataset": {"name": "synthetic"},
    "partition": {"scheme": "iid", "num_clients": 10},
    "algorithm": {"name": "dp_fedavg", "cohort_size": 5, "clip": 1.0, "noise_multiplier": 1.0},
    "privacy": {"reproducible": True},
}


def _fake_cuda(monkeypatch: pytest.MonkeyPatch, count: int = 2, current: int = 1) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current)


# -- forms and resolution ---------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=8), st.from_regex(r"cuda:[0-9]{1,3}", fullmatch=True), st.integers()))
def test_device_names_are_exactly_the_four_forms(name):
    # independent spelling of the forms: auto, cpu, cuda, cuda:<ASCII digits>
    index = name[5:] if isinstance(name, str) and name.startswith("cuda:") else None
    ascii_digits = index is not None and index != "" and all(c in "0123456789" for c in index)
    expected = isinstance(name, str) and (name in ("auto", "cpu", "cuda") or ascii_digits)
    assert is_device_name(name) == expected


def test_resolution_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    assert resolve_device("cpu") == "cpu"
    for name in ("cuda", "cuda:0"):
        with pytest.raises(ValueError, match=r"^engine\.device: .* torch sees no CUDA device") as err:
            resolve_device(name)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"^--device: must be"):
        resolve_device("gpu", setting="--device")


def test_resolution_with_cuda(monkeypatch):
    _fake_cuda(monkeypatch, count=2, current=1)
    assert resolve_device("auto") == "cuda:1"
    assert resolve_device("cuda") == "cuda:1"
    assert resolve_device("cuda:0") == "cuda:0"
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(ValueError, match=r"^engine\.device: 'cuda:2' but torch sees 2 CUDA device"):
        resolve_device("cuda:2")


def test_memory_default_is_sized_to_the_device(monkeypatch):
    assert default_memory_cap_mb("cpu") == device_mod.CPU_MEMORY_CAP_MB
    free = 140 * 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda _d=None: (free, 2 * free))
    assert default_memory_cap_mb("cuda:0") == pytest.approx(device_mod.CUDA_MEMORY_SHARE * free / 2**20)
    _fake_cuda(monkeypatch, count=1, current=0)
    # global torch flags
    monkeypatch.setattr("ampfl.fl.engine.vectorised.use_deterministic_cuda", lambda: None)
    engine = Engine(EngineOptions(device="cuda"))
    assert engine.device == "cuda:0" and engine.options.device == "cuda:0"
    # a K = 1000 CNN round (Q·b = 50 examples per client, low-rank path) is one chunk on a 140 GiB card
    cnn = FunctionalModel(build_model("cnn", input_shape=(1, 28, 28), num_classes=10), (1, 28, 28))
    assert engine.chunk_size(cnn, 50, low_rank=True) >= 1000
    assert Engine(EngineOptions(device="cuda", memory_cap_mb=8.0)).memory_cap_mb == 8.0


# -- the config and the command line ---------------------------------------------------------------------
def test_config_names_engine_device():
    assert parse_config(TINY).engine.device == "auto"  # the default
    for bad in ("gpu", "cuda:", "CUDA", 0):
        with pytest.raises(
            ValueError, match=r"^engine\.device: must be \"auto\", \"cpu\", \"cuda\" or"
        ) as err:
            parse_config({**TINY, "engine": {"device": bad}})
        assert "\n" not in str(err.value)
    assert with_device(parse_config(TINY), "cuda:3").engine.device == "cuda:3"
    with pytest.raises(ValueError, match=r"^engine\.device: must be"):
        with_device(parse_config(TINY), "tpu")


def _toml(path: Path, device: str | None) -> Path:
    engine = "" if device is None else f'\n[engine]\ndevice = "{device}"\n'
    path.write_text(
        'seed = 1\nrounds = 2\n[dataset]\nname = "synthetic"\n[partition]\nscheme = "iid"\nnum_clients = 10\n'
        '[algorithm]\nname = "fedavg"\n' + engine
    )
    return path


@pytest.mark.parametrize(
    ("device", "flag", "named"),
    [(None, "gpu", "--device"), (None, "cuda", "--device"), ("cuda:0", None, "engine.device")],
)
def test_cli_refuses_a_device_in_one_line(tmp_path, run_cli, monkeypatch, device, flag, named):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = _toml(tmp_path / "c.toml", device)
    out = tmp_path / "run"
    code, _, err = run_cli(
        ["run", str(config), "--out", str(out), "--no-progress", *(["--device", flag] * bool(flag))]
    )
    assert (code == 2 and err.startswith(f"ampfl: error: {named}")) or f": {named}:" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (out / "config.json").exists()


def test_demo_refuses_a_device_in_one_line(tmp_path, run_cli, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for flag in ("gpu", "cuda:0"):
        code, _, err = run_cli(
            ["demo", "--quick", "--no-progress", "--out", str(tmp_path / "d"), "--device", flag]
        )
        assert code == 2 and err.startswith("ampfl: error: --device: ") and err.count("\n") == 1
    assert not (tmp_path / "d").exists()


def test_resume_may_change_the_device(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = parse_config({**TINY, "engine": {"device": "cpu"}})
    whole = run_experiment(config, tmp_path / "whole", progress=False, plots=False)
    run_experiment(config, tmp_path / "split", progress=False, plots=False, stop_after=1)
    resumed = run_experiment(
        with_device(config, "auto"), tmp_path / "split", progress=False, plots=False, resume=True
    )
    assert resumed["device"] == whole["device"] == "cpu"
    assert _released_and_diagnostics(tmp_path / "split") == _released_and_diagnostics(tmp_path / "whole")


def test_cli_device_flag_overrides_the_config(tmp_path, cli_json):
    config = _toml(tmp_path / "c.toml", "cuda:7")  # would fail: the flag wins
    summary = cli_json(["run", str(config), "--out", str(tmp_path / "r"), "--no-progress", "--device", "cpu"])
    assert summary["device"] == "cpu"
    assert json.loads((tmp_path / "r" / "config.json").read_text())["engine"]["device"] == "cpu"


# -- the CPU's numbers -----------------------------------------------------------------------------------
def _released_and_diagnostics(folder: Path) -> list[dict]:
    lines = []
    for name in ("metrics.jsonl", "diagnostics.jsonl"):
        for text in (folder / name).read_text().splitlines():
            line = json.loads(text)
            line.pop("wall_seconds", None)
            lines.append(line)
    return lines


def test_cpu_absent_and_auto_give_the_same_bits(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    runs = {}
    for label, engine in (("absent", None), ("cpu", "cpu"), ("auto", "auto")):
        data = dict(TINY) if engine is None else {**TINY, "engine": {"device": engine}}
        summary = run_experiment(parse_config(data), tmp_path / label, progress=False, plots=False)
        assert summary["device"] == "cpu"
        runs[label] = _released_and_diagnostics(tmp_path / label)
    assert runs["absent"] == runs["cpu"] == runs["auto"]
    assert len(runs["cpu"]) > 2


# -- the device path, run on the CPU (every move a no-op, every copy made) --------------------------------
def _problem(model: str, k: int = 7, q: int = 3, b: int = 4):
    shape = (1, 28, 28) if model == "cnn" else (6,)
    torch.manual_seed(0)
    fm = FunctionalModel(build_model(model, input_shape=shape, num_classes=3), shape)
    x, y = torch.randn(40, *shape), torch.randint(0, 3, (40,))
    batches = torch.randint(0, 40, (k, q, b))
    return fm, fm.initial(), x, y, batches


@pytest.mark.parametrize("model", ["logreg", "cnn"])
@pytest.mark.parametrize("average", [False, True])
def test_device_path_gives_the_same_numbers(monkeypatch, model, average):
    fm, start, x, y, batches = _problem(model)
    ids = np.arange(10, 17)

    def hook(step: int, clients: np.ndarray, g: torch.Tensor) -> torch.Tensor:
        assert g.device.type == "cpu"
        return g * torch.from_numpy(clients % 2 + 1.0).to(g.dtype)[:, None]

    def calls(engine: Engine) -> list[torch.Tensor]:
        plain = engine.local_sgd(fm, start, x, y, batches, learning_rate=0.1, average=average)
        hooked = engine.local_sgd(
            fm, start.expand(7, -1).clone(), x, y, batches, learning_rate=0.1, grad_hook=hook, client_ids=ids
        )
        mask = (batches[:, :1] % 3 != 0).to(torch.float32)
        clipped = engine.clipped_gradient_sum(fm, start, x, y, batches[:, :1], mask, clip=0.5)
        acc = engine.class_accuracy(fm, torch.stack([start, plain.params.reshape(-1, fm.dim)[0]]), x, y, 3)
        return [plain.params, plain.loss, hooked.params, hooked.loss, clipped.params, clipped.loss, acc]

    engine = Engine(EngineOptions(chunk_size=3))
    want = calls(engine)
    monkeypatch.setattr(Engine, "_moves", lambda self, home: True)
    got = calls(engine)
    for a, b in zip(want, got, strict=True):
        assert a.device == b.device and torch.equal(a, b)


@pytest.mark.parametrize(("model", "average"), [("logreg", False), ("cnn", True)])
def test_a_chunk_out_of_memory_runs_again_in_halves(monkeypatch, model, average):
    fm, start, x, y, batches = _problem(model)
    want = Engine(EngineOptions(chunk_size=7)).local_sgd(
        fm, start, x, y, batches, learning_rate=0.1, average=average
    )
    real, sizes = Engine._local_sgd_chunk, []

    def tight(self, model, out, params, *rest):  # type: ignore[no-untyped-def]
        sizes.append(params.shape[0])
        done = real(self, model, out, params, *rest)  # then fails: what it wrote must not count
        if params.shape[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return done

    monkeypatch.setattr(Engine, "_moves", lambda self, home: True)
    monkeypatch.setattr(Engine, "_local_sgd_chunk", tight)
    got = Engine(EngineOptions(chunk_size=7)).local_sgd(
        fm, start, x, y, batches, learning_rate=0.1, average=average
    )
    assert sizes[:3] == [7, 3, 1] and max(sizes[3:]) <= 2 and sum(s for s in sizes if s <= 2) == 7
    assert torch.allclose(got.params, want.params, rtol=0, atol=1e-6) and torch.allclose(got.loss, want.loss)
    monkeypatch.setattr(Engine, "_moves", lambda self, home: False)  # on the CPU: no retry
    with pytest.raises(torch.OutOfMemoryError):
        Engine(EngineOptions(chunk_size=7)).local_sgd(fm, start, x, y, batches, learning_rate=0.1)


def test_resident_copies_and_model_twins():
    x = torch.arange(6.0)
    first = on_device(x, "meta")
    assert first.device.type == "meta" and on_device(x, "meta") is first  # one copy per host tensor
    x.add_(1.0)  # changed in place: copied again
    assert on_device(x, "meta") is not first
    assert on_device(x, "cpu") is x
    fm = FunctionalModel(build_model("mlp", input_shape=(4,), num_classes=2), (4,))
    twin = model_on(fm, "meta")
    assert model_on(fm, "meta") is twin and model_on(fm, "cpu") is fm
    assert all(p.device.type == "meta" for p in twin.module.parameters())
    assert all(p.device.type == "cpu" for p in fm.module.parameters())
    assert twin.spec == fm.spec and twin.activation_numel == fm.activation_numel
