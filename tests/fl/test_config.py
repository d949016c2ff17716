"""Run configs: defaults, round trip, one-line errors naming the dotted key of unknown keys and bad values."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import BaseModel, ConfigDict, Field

from ampfl.fl.config import RunConfig, config_to_dict, load_config, parse_config, to_toml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class _Gaussian:
    """Only ``Params`` matters to the config layer."""

    name: ClassVar[str] = "gaussian"

    class Params(BaseModel):
        model_config = ConfigDict(extra="forbid")
        noise_multiplier: float = Field(1.0, gt=0)
        clip: float = Field(1.0, gt=0)
        sampling: str = "poisson"


REGISTRY = {"gaussian": _Gaussian}


def _data(**overrides):
    data = {"rounds": 10, "algorithm": {"name": "gaussian"}}
    data.update(overrides)
    return data


def _error(data) -> str:
    with pytest.raises(ValueError) as info:
        parse_config(data, algorithms=REGISTRY)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_defaults_are_filled_in():
    # Execute
    config = parse_config(_data(), algorithms=REGISTRY)
    # Assert
    assert isinstance(config, RunConfig)
    assert config.seed == 0 and config.eval_every == 1 and config.dataset.name == "digits"
    assert config.partition.scheme == "label_skew" and config.partition.num_clients == 100
    assert config.algorithm.name == "gaussian"
    assert config.algorithm.params.noise_multiplier == 1.0  # type: ignore[attr-defined]
    # [privacy]: the tightest sound accountant ("auto", resolved by the run), δ = 1e-5, no budget
    assert (config.privacy.accountant, config.privacy.delta, config.privacy.max_epsilon) == (
        "auto",
        1e-5,
        None,
    )


def test_resolved_dict_and_toml_round_trip(tmp_path):
    # Prepare
    config = parse_config(
        _data(
            model={"name": "mlp", "options": {"hidden": [32, 16], "gamma": 0.001}},
            algorithm={"name": "gaussian", "noise_multiplier": 0.7},
            privacy={"accountant": "pld", "delta": 1e-6, "max_epsilon": 3.5},
        ),
        algorithms=REGISTRY,
    )
    # Execute
    again = parse_config(config_to_dict(config), algorithms=REGISTRY)
    (tmp_path / "c.toml").write_text(to_toml(config_to_dict(config)))
    from_toml = load_config(tmp_path / "c.toml", algorithms=REGISTRY)
    # Assert
    assert again == config and from_toml == config
    assert config_to_dict(config)["algorithm"] == {
        "name": "gaussian",
        "noise_multiplier": 0.7,
        "clip": 1.0,
        "sampling": "poisson",
    }
    assert config_to_dict(config)["privacy"] == {
        "accountant": "pld",
        "accounting": "amplified",
        "delta": 1e-6,
        "max_epsilon": 3.5,
        "neighbouring": "add-remove",
        "reproducible": False,
    }


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            _data(algorithm={"name": "gaussian", "noise_multiplier": -1}),
            "algorithm.noise_multiplier: Input should be greater than 0 (found -1)",
        ),
        (
            _data(algorithm={"name": "gaussian", "noise_multipler": 1.0}),
            "algorithm.noise_multipler: unknown key",
        ),
        (_data(algorithm={"name": "nope"}), "algorithm.name: must be one of gaussian (found 'nope')"),
        (
            _data(algorithm={"noise_multiplier": 1.0}),
            "algorithm.name: must be one of gaussian (found nothing)",
        ),
        ({"rounds": 3}, "algorithm: missing table [algorithm]"),
        (_data(rounds=0), "rounds: Input should be greater than or equal to 1 (found 0)"),
        ({"algorithm": {"name": "gaussian"}}, "rounds: Field required"),
        (_data(partition={"num_clients": "many"}), "partition.num_clients: Input should be a valid integer"),
        (_data(partition={"scheme": "round_robin"}), "partition.scheme: Input should be"),
        (_data(dataset={"name": "digits", "size": 3}), "dataset.size: unknown key"),
        (_data(engine={"chunk_size": 0}), "engine.chunk_size: Input should be greater than or equal to 1"),
        (_data(learning_rate=0.1), "learning_rate: unknown key"),
        (
            _data(privacy={"accountant": "moments"}),
            "privacy.accountant: Input should be 'auto', 'rdp' or 'pld'",
        ),
        (_data(privacy={"delta": 1.0}), "privacy.delta: Input should be less than 1 (found 1.0)"),
        (_data(privacy={"max_epsilon": 0}), "privacy.max_epsilon: Input should be greater than 0"),
        (_data(privacy={"target_delta": 1e-5}), "privacy.target_delta: unknown key"),
    ],
    ids=[
        "bad-param",
        "unknown-param",
        "unknown-algorithm",
        "no-name",
        "no-algorithm",
        "rounds-0",
        "no-rounds",
        "num-clients-str",
        "bad-scheme",
        "unknown-dataset-key",
        "chunk-0",
        "unknown-top-key",
        "bad-accountant",
        "delta-1",
        "budget-0",
        "unknown-privacy-key",
    ],
)
def test_bad_keys_and_values_give_one_line_naming_the_key(data, expected):
    assert expected in _error(data)


def test_several_problems_are_reported_on_one_line():
    message = _error(_data(rounds=-1, seed=-2, algorithm={"name": "gaussian", "clip": 0}))
    assert "algorithm.clip" in message and "rounds" in message and "seed" in message


def test_load_config_errors_name_the_file(tmp_path):
    # Prepare
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("rounds = [\n")
    bad_value = tmp_path / "value.toml"
    bad_value.write_text('rounds = 5\n[algorithm]\nname = "gaussian"\nclip = -3\n')
    # Execute / Assert
    for path, expected in [
        (tmp_path / "missing.toml", "cannot read the config file"),
        (bad_toml, "invalid TOML"),
        (bad_value, "algorithm.clip: Input should be greater than 0 (found -3)"),
    ]:
        with pytest.raises(ValueError) as info:
            load_config(path, algorithms=REGISTRY)
        assert str(info.value).startswith(str(path)) and expected in str(info.value)
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["digits_ms_pafl.toml", "digits_dp_fedavg.toml"])
def test_example_configs_are_valid(name):
    # Uses the real algorithm registry: the examples must stay in sync with the algorithms' Params.
    config = load_config(EXAMPLES / name)
    assert config.dataset.name == "digits"
    assert config.algorithm.name in {"ms_pafl", "dp_fedavg"}
    assert config.privacy.accountant == "auto" and config.privacy.delta == 1e-5


def test_engine_section_accepts_every_engine_option():
    # Every EngineOptions field can be set from [engine]; the config must not silently lag behind the engine.
    import dataclasses

    from ampfl.fl.config import EngineConfig
    from ampfl.fl.engine.vectorised import EngineOptions

    fields = {f.name for f in dataclasses.fields(EngineOptions)}
    assert fields <= set(EngineConfig.model_fields)


def test_engine_threads_default_and_range():
    from ampfl.fl.config import DEFAULT_THREADS, parse_config

    base = {"rounds": 1, "algorithm": {"name": "fedavg"}}
    assert parse_config(base).engine.threads is None and DEFAULT_THREADS == 1
    assert parse_config({**base, "engine": {"threads": 2}}).engine.threads == 2
    with pytest.raises(ValueError, match=r"engine\.threads"):
        parse_config({**base, "engine": {"threads": 0}})


def test_run_uses_the_configured_threads_and_restores_the_callers(tmp_path, monkeypatch):
    import torch

    from ampfl.fl.config import parse_config
    from ampfl.fl.run import experiment as run_module

    seen = []
    monkeypatch.setattr(
        run_module, "_run_experiment", lambda config, out, **kw: seen.append(torch.get_num_threads()) or {}
    )
    before = torch.get_num_threads()
    config = parse_config({"rounds": 1, "algorithm": {"name": "fedavg"}, "engine": {"threads": 1}})
    run_module.run_experiment(config, tmp_path / "run")
    assert seen == [1] and torch.get_num_threads() == before
