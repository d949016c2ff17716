"""The config reference (docs/config.md), written from the pydantic models that validate a run config.

Every key of every table, with its type, default, allowed values and meaning, is read from the models
themselves (:class:`~ampfl.fl.config.RunConfig`, its sections and each built-in algorithm's ``Params``), so
the page cannot drift from what :func:`~ampfl.fl.config.parse_config` accepts; a test regenerates it and
compares. The meaning comes from the field's ``description`` or, failing that, from the ``Attributes:``
section of the model's docstring.

Regenerate: ``python -m ampfl.fl.config_reference > docs/config.md``.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from ampfl.fl.config import (
    DatasetConfig,
    EngineConfig,
    ModelConfig,
    PartitionConfig,
    PrivacyConfig,
    RunConfig,
)

_HEADER = """# Config reference

A run config is a TOML file: top-level keys, then the tables `[dataset]`, `[partition]`, `[model]`,
`[algorithm]` (with `name` and that algorithm's keys), `[engine]` and `[privacy]`. `ampfl run`, `ampfl deploy`
and `ampfl audit run` read the same file; an unknown key, a value outside its range or two keys that
contradict each other fail in one line naming the key (exit 2). Units: docs/units.md (noise is always a noise
multiplier, the clip norm separate).

This page is generated from the models that validate the config (`python -m ampfl.fl.config_reference`);
a test checks it is current.
"""
_SECTIONS: tuple[tuple[str, type[BaseModel], str], ...] = (
    ("dataset", DatasetConfig, "Which data set to load."),
    ("partition", PartitionConfig, "How the training set is split into clients."),
    ("model", ModelConfig, "The model every client trains."),
    (
        "engine",
        EngineConfig,
        "How the clients' local work is executed (no effect on the result's bits except `threads`).",
    ),
    (
        "privacy",
        PrivacyConfig,
        "The run's accountant, the δ of every reported ε, a budget, and the threat model's choices.",
    ),
)
#: Meanings of the keys whose model documents them only in prose.
_MEANING = {
    (DatasetConfig, "name"): "a dataset of the registry (docs/datasets.md); `npz` for a user's .npz file",
    (DatasetConfig, "path"): "a folder for the user-path datasets, or a user's .npz file (selects `npz`)",
    (PartitionConfig, "scheme"): "how the training set is split into clients (docs/partition.md)",
    (PartitionConfig, "num_clients"): "N, the number of clients",
    (PartitionConfig, "alpha"): "Dirichlet concentration (`dirichlet` only)",
    (PartitionConfig, "labels_per_client"): "labels each client holds (`label_skew` only)",
    (PartitionConfig, "samples_per_client"): "records each client holds (`fixed` only)",
    (ModelConfig, "name"): "a model of the registry",
    (ModelConfig, "factory"): "`package.module:function` or `file.py:function` returning a `torch.nn.Module`"
    " (instead of `name`; docs/integrations/custom_model_data.md)",
    (ModelConfig, "options"): "keyword arguments of the model's builder",
    (
        EngineConfig,
        "vectorized",
    ): "train the clients of a round together (`torch.func.vmap`); false: one by one",
    (EngineConfig, "chunk_size"): "clients per vectorised chunk; empty: chosen from `memory_cap_mb`",
    (EngineConfig, "model_fast_path"): "the closed-form path of the linear models; empty: where it applies",
    (
        EngineConfig,
        "threads",
    ): "torch intra-op threads during the run; empty: 1 (the same bits on any machine)",
}

#: Meanings of algorithm keys declared without a description (by key; the same key means one thing).
_KEY_MEANING = {
    "client_sampling": "`fixed`: a cohort of `cohort_size` clients; `poisson`: each client with probability "
    "`sampling_rate`",
    "noise_placement": "`central`: the server draws the noise; `distributed`: per-client shares of it "
    "(fixed cohort only)",
    "sampling": "how units are sampled per round: Poisson at `sampling_rate`, Balanced Iteration Subsampling "
    "(`bis_iterations`, `bis_participations`) or every unit",
    "split_credit": "account the model split's amplification (`split`), not (`none`), or whichever gives the "
    "smaller ε (`auto`)",
    "analysis": "`sound`: the planner's RDP calibration; `paper`: the inferred Theorem 1 as printed "
    "(labelled, not recommended)",
    "mask": "`after_noise`: top-κ of each noised group sum; `public`: a public mask fixed at the broadcast "
    "model",
    "client_splits": "each client's split depth, `client_splits[i mod len]` for client i",
}


def _meaning(model: type[BaseModel], name: str, info: FieldInfo) -> str:
    """The field's description, else its parent model's for the same key, else the prose tables above."""
    if info.description:
        return info.description
    for parent in model.__mro__[1:]:
        fields = getattr(parent, "model_fields", {})
        if name in fields and fields[name].description:
            return str(fields[name].description)
    return _MEANING.get((model, name)) or _KEY_MEANING.get(name) or _attributes(model).get(name, "")


def _attributes(model: type[BaseModel]) -> dict[str, str]:
    """``name: text`` entries of the ``Attributes:`` section of ``model``'s docstring, joined to one line."""
    doc = model.__doc__ or ""
    if "Attributes:" not in doc:
        return {}
    out: dict[str, str] = {}
    current: list[str] | None = None
    for line in doc.split("Attributes:", 1)[1].splitlines():
        entry = re.match(r"^ {4}([a-z_, ]+): (.*)$", line)
        if entry:
            current = [entry.group(2)]
            for name in entry.group(1).split(","):
                out[name.strip()] = ""
            names = [name.strip() for name in entry.group(1).split(",")]
            for name in names:
                out[name] = " ".join(current)
            last = names
        elif current is not None and line.startswith(" " * 8):
            current.append(line.strip())
            for name in last:
                out[name] = " ".join(current)
        elif line.strip():
            current = None
    return out


def _type(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{value!r}`".replace("'", '"') for value in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        return " or ".join(_type(a) for a in args) + (" (or empty)" if optional else "")
    if origin is dict:
        return "table"
    if origin is list:
        return "list"
    return getattr(annotation, "__name__", str(annotation))


def _range(info: FieldInfo) -> str:
    words = {
        annotated_types.Ge: "≥",
        annotated_types.Gt: ">",
        annotated_types.Le: "≤",
        annotated_types.Lt: "<",
    }
    parts = []
    for item in info.metadata:
        for kind, word in words.items():
            if isinstance(item, kind):
                parts.append(f"{word} {getattr(item, kind.__name__.lower())}")
    return ", ".join(parts)


def _default(info: FieldInfo) -> str:
    if info.default is PydanticUndefined and info.default_factory is None:
        return "required"
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "empty"
    if value == {}:
        return "`{}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value!r}`".replace("'", '"')


def _cell(text: str) -> str:
    """One table cell of docstring text: reST roles and literals as markdown code, on one line."""
    text = re.sub(r":\w+:`~([^`]+)`", lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text)
    text = re.sub(r":\w+:`([^`]+)`", r"`\1`", text).replace("``", "`")
    return " ".join(text.split()).replace("|", "\\|")


def table(model: type[BaseModel], skip: tuple[str, ...] = ()) -> str:
    """The markdown table of ``model``'s keys: key, type, default, allowed, meaning."""
    rows = ["| key | type | default | allowed | meaning |", "|---|---|---|---|---|"]
    for name, info in model.model_fields.items():
        if name in skip:
            continue
        meaning = _meaning(model, name, info)
        rows.append(
            f"| `{name}` | {_type(info.annotation)} | {_default(info)} | {_range(info)} | {_cell(meaning)} |"
        )
    return "\n".join(rows)


def reference() -> str:
    """The whole page: top-level keys, each section, then each built-in algorithm's keys."""
    from ampfl.fl.algorithms import ALGORITHMS

    tables = (*(name for name, _, _ in _SECTIONS), "algorithm")
    parts = [_HEADER, "## Top-level keys", "", table(RunConfig, skip=tables)]
    for name, model, intro in _SECTIONS:
        parts += ["", f"## `[{name}]`", "", intro, "", table(model)]
    parts += [
        "",
        "## `[algorithm]`",
        "",
        "`name`: one of the algorithms below; the other keys are that one's.",
    ]
    for name in sorted(ALGORITHMS):
        params = ALGORITHMS[name].Params
        summary = (params.__doc__ or "").strip().splitlines()
        parts += ["", f'### `name = "{name}"`', ""]
        if summary:
            parts += [_cell(summary[0]), ""]
        parts.append(table(params))
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    print(reference(), end="")
