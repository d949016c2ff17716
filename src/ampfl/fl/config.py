"""The configuration of one training run (``ampfl run CONFIG.toml``), validated with pydantic.

A run config is a TOML file with top-level keys ``seed``, ``rounds``, ``eval_every``, ``checkpoint_every`` and
the tables ``[dataset]``, ``[partition]``, ``[model]`` (with ``[model.options]``), ``[algorithm]``,
``[engine]`` and ``[privacy]`` (the run's accountant, δ and optional ε budget). The ``[algorithm]`` table
holds ``name`` (a key of ``ampfl.fl.algorithms.ALGORITHMS``) and that algorithm's hyper-parameters, validated
by the algorithm's own ``Params`` model; an algorithm parameter ``num_rounds`` (the horizon a noise
calibration targets) defaults to the run's ``rounds``. Every table rejects unknown keys. A bad key or value
raises :class:`ValueError` with one line naming the dotted key path, e.g.
``algorithm.noise_multiplier: Input should be greater than 0 (found -1)``.

Example (``examples/digits_dp_fedavg.toml``)::

    seed = 0
    rounds = 40
    [dataset]
    name = "digits"
    [partition]
    scheme = "label_skew"
    num_clients = 100
    [algorithm]
    name = "dp_fedavg"
    noise_multiplier = 1.0
    [privacy]
    accountant = "rdp"
    delta = 1e-5
    max_epsilon = 8.0
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_validator,
)

from ampfl.fl.engine.device import DEVICE_FORMS, is_device_name
from ampfl.numeric_ranges import config_problems

#: At most this many validation problems are listed in the one-line error.
_MAX_LISTED_ERRORS = 3


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _NoParams(_Section):
    """Placeholder for an invalid ``[algorithm]`` table while the other tables are validated."""


class DatasetConfig(_Section):
    """``[dataset]``: which data set to load (see :func:`ampfl.fl.data.load_dataset`).

    ``name`` is an entry of :data:`ampfl.fl.data.DATASETS`; ``path`` a folder for the user-path datasets, or
    a user's own ``.npz`` file (arrays ``x_train``, ``y_train``, ``x_test``, ``y_test``, optional
    ``client_train``: :mod:`ampfl.fl.data.user`), which alone selects ``name = "npz"``.
    """

    name: str = "digits"
    path: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _npz_path(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and str(data.get("path") or "").endswith(".npz"):
            name = data.get("name", "npz")
            if name != "npz":
                raise ValueError(
                    f"dataset.name ({name!r}) and dataset.path ({data['path']!r}) contradict: a .npz path is "
                    "the npz dataset (leave name out or set it to \"npz\")"
                )
            return {**data, "name": "npz"}
        return data


class PartitionConfig(_Section):
    """``[partition]``: how the training set is split into clients (``ampfl.fl.data.partition_clients``)."""

    scheme: Literal["iid", "dirichlet", "label_skew", "fixed", "natural"] = "label_skew"
    num_clients: int = Field(100, ge=1)
    alpha: float = Field(0.5, gt=0)
    labels_per_client: int = Field(2, ge=1)
    samples_per_client: int | None = Field(None, ge=1)


class ModelConfig(_Section):
    """``[model]``: the model every client trains (see :func:`ampfl.fl.models.build_model`).

    ``name`` is an entry of :data:`ampfl.fl.models.MODELS`; ``factory`` instead names a function in the user's
    own code, ``"package.module:function"`` or ``"path/to/file.py:function"``, called with ``input_shape``,
    ``num_classes`` and ``options``, returning a ``torch.nn.Module`` (checked once to run under vmap).
    """

    name: str = "logreg"
    factory: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_model(self) -> ModelConfig:
        if self.factory is not None:
            if "name" in self.model_fields_set:
                raise ValueError("model.name and model.factory contradict: give one of them")
            if ":" not in self.factory:
                raise ValueError(
                    "model.factory must be 'package.module:function' or 'file.py:function'. "
                    f"Found {self.factory!r}"
                )
        return self

    @property
    def reference(self) -> str:
        """What :func:`~ampfl.fl.models.build_model` builds: the factory reference, else the name."""
        return self.factory if self.factory is not None else self.name


#: The default of ``[engine] threads``.
DEFAULT_THREADS = 1


class EngineConfig(_Section):
    """``[engine]``: how the clients' local work is executed (see
    :class:`ampfl.fl.engine.vectorised.EngineOptions`).

    ``None`` leaves the engine's own default in place.

    Attributes:
        device: where the clients' local work runs (:mod:`ampfl.fl.engine.device`): ``"auto"`` (default: the
            current CUDA device when torch sees one, else the CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``;
            ``ampfl run --device`` overrides it. A CUDA device torch does not see fails when the run starts,
            in one line naming ``engine.device``; ``summary.json`` names the resolved device (``device``).
        memory_cap_mb: working memory of one chunk of clients (MiB); ``None``: sized to the device (1024 on
            the CPU, half the CUDA device's free memory;
            :func:`ampfl.fl.engine.device.default_memory_cap_mb`).
    """

    device: str = "auto"
    vectorized: bool = True
    chunk_size: int | None = Field(None, ge=1)
    memory_cap_mb: float | None = Field(None, gt=0)
    model_fast_path: bool | None = None
    #: torch intra-op threads during the run; ``None`` = :data:`DEFAULT_THREADS` (docs/performance.md: one
    #: thread gives the same bits whatever the machine's cores and load, and 2 threads were at most 1.35×
    #: faster on a quiet 2-core machine and slower on a loaded one).
    threads: int | None = Field(None, ge=1, le=256)

    @field_validator("device", mode="before")
    @classmethod
    def _device_form(cls, value: object) -> str:
        if not is_device_name(value):
            raise ValueError(f"must be {DEVICE_FORMS}")
        return str(value)


class PrivacyConfig(_Section):
    """``[privacy]``: the run's accountant (``ampfl.fl.privacy.run_accountant``), the δ of every reported ε,
    and a budget.

    Attributes:
        accountant: ``"auto"`` (default: the tightest sound one, ``"pld"`` when the PLD accountant accounts
            every event of the algorithm's first round, else ``"rdp"``;
            :func:`ampfl.accounting.accountants.resolve_accountant`), ``"rdp"`` or ``"pld"``
            (:func:`ampfl.accounting.accountants.make_accountant`); it composes every round's events once and
            also calibrates any ``target_epsilon`` of the algorithm. ``summary.json`` names the resolved one.
        delta: δ of the reported ε (``metrics.jsonl``, ``summary.json``) and of noise calibrations.
        max_epsilon: stop before a round whose events would push ε(δ) above this (``stopped = "budget"``);
            ``None``: run all rounds.
        accounting: ``"amplified"`` (the algorithm's events as they are: sampling, participation and split
            amplification used) or ``"no-amplification"`` (each event mapped by
            :func:`ampfl.accounting.unamplified.without_amplification`: the baseline amplification is measured
            against). Also applies to calibrating a ``target_epsilon``.
        neighbouring: ``"add-remove"`` (default: neighbouring datasets differ by one unit added or removed;
            every server step divides by a public constant declared in the config, never by a size computed
            from the data) or ``"replace-one"`` (the dataset sizes are public: one unit replaced, sensitivity
            2C; the normalisers may then come from the data; docs/threat_model.md).
        reproducible: ``False`` (default): the privacy randomness (participation, sampling, noise, secret
            blocks) comes from a per-run key drawn from the operating system and kept only in the private
            checkpoint. ``True``: the key is derived from ``seed`` — a simulation, not a release (the summary
            says ``privacy_randomness = "seeded: a simulation, not a release"``).
    """

    accountant: Literal["auto", "rdp", "pld"] = "auto"
    accounting: Literal["amplified", "no-amplification"] = "amplified"
    delta: float = Field(1e-5, gt=0, lt=1)
    max_epsilon: float | None = Field(None, gt=0)
    neighbouring: Literal["add-remove", "replace-one"] = "add-remove"
    reproducible: bool = False


class AlgorithmConfig(_Section):
    """``[algorithm]``: the algorithm's name and its validated ``Params`` instance."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    name: str
    params: SerializeAsAny[BaseModel]


class RunConfig(_Section):
    """A complete, validated run configuration.

    Attributes:
        seed: the public seed: model initialisation, the partition and the evaluation subsets; the privacy
            randomness only with ``[privacy] reproducible = true`` or in a run without a guarantee.
        rounds: number of rounds T.
        eval_every: evaluate (and write a ``metrics.jsonl`` line) every this many rounds; the last round is
            always evaluated.
        checkpoint_every: write a checkpoint every this many rounds (0: only at the end or when stopped).
        plots: draw ``accuracy.png`` and ``epsilon.png`` at the end (``ampfl run --no-plots`` turns it off;
            matplotlib is imported only to draw them).
        dataset, partition, model, algorithm, engine, privacy: the sections described in the module docstring.
    """

    seed: int = Field(0, ge=0)
    rounds: int = Field(ge=1)
    eval_every: int = Field(1, ge=1)
    checkpoint_every: int = Field(10, ge=0)
    plots: bool = True
    dataset: DatasetConfig = Field(default_factory=lambda: DatasetConfig.model_validate({}))
    partition: PartitionConfig = Field(default_factory=lambda: PartitionConfig.model_validate({}))
    model: ModelConfig = Field(default_factory=lambda: ModelConfig.model_validate({}))
    algorithm: AlgorithmConfig
    engine: EngineConfig = Field(default_factory=lambda: EngineConfig.model_validate({}))
    privacy: PrivacyConfig = Field(default_factory=lambda: PrivacyConfig.model_validate({}))

    @model_validator(mode="after")
    def _no_contradiction(self) -> RunConfig:
        """Settings that cannot hold together are refused, naming both keys."""
        params = self.algorithm.params
        target = getattr(params, "target_epsilon", None)
        budget = self.privacy.max_epsilon
        if budget is not None and isinstance(target, int | float) and budget < target:
            raise ValueError(
                f"privacy.max_epsilon ({budget}) is below algorithm.target_epsilon ({target}): the run would "
                "stop before its first round; raise the budget or lower the target"
            )
        part = self.partition
        expected = getattr(params, "expected_clients", None)
        if (
            isinstance(expected, int | float)
            and part.scheme != "natural"
            and expected > part.num_clients
        ):
            raise ValueError(
                f"algorithm.expected_clients ({expected}) exceeds partition.num_clients ({part.num_clients})"
            )
        cohort = getattr(params, "cohort_size", None)
        fixed = getattr(params, "client_sampling", "fixed") == "fixed"  # a Poisson cohort has no size
        if isinstance(cohort, int) and fixed and part.scheme != "natural" and cohort > part.num_clients:
            raise ValueError(
                f"algorithm.cohort_size ({cohort}) exceeds partition.num_clients ({part.num_clients})"
            )
        scheme_keys = {"iid": (), "fixed": ("samples_per_client",), "natural": (), "dirichlet": ("alpha",),
                       "label_skew": ("labels_per_client",)}  # fmt: skip
        # a key set away from its default (a resolved config lists every key at its default: it round-trips)
        used = {
            key
            for key in ("alpha", "labels_per_client", "samples_per_client")
            if getattr(part, key) != PartitionConfig.model_fields[key].default
        }
        for key in sorted(used - set(scheme_keys[part.scheme])):
            if part.scheme == "fixed" and key == "samples_per_client":
                continue
            raise ValueError(
                f"partition.{key} and partition.scheme = {part.scheme!r} contradict: {key} applies only to "
                + " / ".join(repr(s) for s, keys in scheme_keys.items() if key in keys)
            )
        return self


def _location(prefix: tuple[str, ...], loc: tuple[int | str, ...]) -> str:
    parts = [*prefix, *(str(part) for part in loc)]
    return ".".join(parts) if parts else "config"


def _describe(prefix: tuple[str, ...], exc: ValidationError) -> list[str]:
    lines = []
    for error in exc.errors(include_url=False):
        where = _location(prefix, tuple(error["loc"]))
        message = str(error["msg"]).removeprefix("Value error, ")  # a validator's own message
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        elif error["type"] != "missing" and error["loc"]:  # a whole-table validator names its own values
            found = repr(error["input"])
            message += f" (found {found if len(found) <= 60 else found[:57] + '...'})"
        lines.append(f"{where}: {message}")
    return lines


def _one_line(problems: list[str]) -> str:
    text = "; ".join(problems[:_MAX_LISTED_ERRORS])
    if len(problems) > _MAX_LISTED_ERRORS:
        text += f" (and {len(problems) - _MAX_LISTED_ERRORS} more)"
    return " ".join(text.split())  # one line, whatever the inputs contain


def parse_config(data: Mapping[str, Any], *, algorithms: Mapping[str, Any] | None = None) -> RunConfig:
    """Validate a run configuration given as a (TOML-shaped) mapping.

    Args:
        data: the parsed TOML document (nested dicts).
        algorithms: the registry of algorithm classes by name (default ``ampfl.fl.algorithms.ALGORITHMS``);
            each class has a pydantic ``Params`` model that validates the rest of the ``[algorithm]`` table.

    Returns:
        The validated :class:`RunConfig`.

    Raises:
        ValueError: one line naming the dotted key path of each problem (at most three listed).
    """
    if algorithms is None:
        from ampfl.fl.algorithms import ALGORITHMS

        algorithms = ALGORITHMS
    if not isinstance(data, Mapping):
        raise ValueError(f"config must be a table of keys. Found {type(data).__name__}.")
    raw = dict(data)
    problems: list[str] = config_problems(raw)
    section = raw.get("algorithm")
    algorithm: AlgorithmConfig | None = None
    if section is None:
        problems.append(
            "algorithm: missing table [algorithm] (with name = one of " + ", ".join(algorithms) + ")"
        )
    elif not isinstance(section, Mapping):
        problems.append(f"algorithm: Input should be a table (found {section!r})")
    else:
        rest = dict(section)
        name = rest.pop("name", None)
        if name not in algorithms:
            found = "nothing" if name is None else repr(name)
            problems.append(f"algorithm.name: must be one of {', '.join(sorted(algorithms))} (found {found})")
        else:
            params_model = algorithms[name].Params
            if "num_rounds" in params_model.model_fields and "num_rounds" not in rest and "rounds" in raw:
                rest["num_rounds"] = raw["rounds"]  # calibration horizon defaults to the run's length
            try:
                params = params_model.model_validate(rest)
            except ValidationError as exc:
                problems.extend(_describe(("algorithm",), exc))
            else:
                algorithm = AlgorithmConfig(name=name, params=params)
    # Validate everything else even when [algorithm] is bad, so that all problems are reported at once.
    raw["algorithm"] = algorithm if algorithm is not None else AlgorithmConfig(name="?", params=_NoParams())
    try:
        config = RunConfig.model_validate(raw)
    except ValidationError as exc:
        problems.extend(_describe((), exc))
    if problems:
        raise ValueError(_one_line(problems))
    return config


def load_config(path: str | Path, *, algorithms: Mapping[str, Any] | None = None) -> RunConfig:
    """Read and validate a TOML run configuration.

    Raises:
        ValueError: the file cannot be read, is not valid TOML, or fails validation (one line, prefixed by
            the file name).
    """
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{source}: cannot read the config file ({exc.strerror or exc}).") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(_one_line([f"{source}: invalid TOML: {exc}"])) from None
    try:
        return parse_config(data, algorithms=algorithms)
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None


def with_device(config: RunConfig, device: str) -> RunConfig:
    """``config`` with ``[engine] device = device`` (``ampfl run --device``).

    Raises:
        ValueError: one line naming ``engine.device`` when ``device`` has none of the accepted forms.
    """
    try:
        engine = EngineConfig.model_validate({**config.engine.model_dump(), "device": device})
    except ValidationError as exc:
        raise ValueError(_one_line(_describe(("engine",), exc))) from None
    return config.model_copy(update={"engine": engine})


def config_to_dict(config: RunConfig) -> dict[str, Any]:
    """The resolved configuration as a TOML-shaped dict (the ``[algorithm]`` table flattened again).

    ``parse_config(config_to_dict(c))`` gives back ``c``.
    """
    data = config.model_dump(mode="json", exclude={"algorithm"})
    data["algorithm"] = {"name": config.algorithm.name, **config.algorithm.params.model_dump(mode="json")}
    return data


def to_toml(data: Mapping[str, Any]) -> str:
    """A small TOML writer for resolved configs: scalars, lists of scalars and nested tables.

    Keys whose value is None are left out (TOML has no null; the defaults restore them).
    """
    lines: list[str] = []
    _write_table(lines, (), data)
    return "\n".join(lines).strip() + "\n"


def _write_table(lines: list[str], prefix: tuple[str, ...], data: Mapping[str, Any]) -> None:
    tables = []
    if prefix:
        lines.append("")
        lines.append("[" + ".".join(_toml_key(k) for k in prefix) + "]")
    for key, value in data.items():
        if value is None:
            continue
        if isinstance(value, Mapping):
            tables.append((key, value))
        else:
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    for key, value in tables:
        _write_table(lines, (*prefix, str(key)), value)


def _toml_key(key: str) -> str:
    bare = key.replace("_", "").replace("-", "").isalnum() and key.isascii()
    return key if bare else _toml_string(key)


def _toml_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise ValueError(f"cannot write a value of type {type(value).__name__} to TOML.")
