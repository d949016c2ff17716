"""vmap-friendly models of the simulator (no BatchNorm, no in-place state).

Every model is an :class:`FLModel`: a ``torch.nn.Module`` whose ``forward`` maps a batch of inputs to outputs,
plus ``per_sample_loss(outputs, targets)`` (one loss per example, shape ``[batch]``), ``penalty(params)`` (a
data-independent regulariser added to every example's loss, e.g. the γ term of 000 Eq. 20) and
``predict(outputs)`` (class labels). The engine calls them through ``torch.func.functional_call`` with
parameters stacked per client.

:data:`MODELS` is the registry of model factories by name: the built-ins ``"logreg"`` (000 Eqs. 20–21),
``"mlp"``, ``"cnn"`` (004 Fig. 8), ``"cnn_gn"`` (GroupNorm, 002 Sec. 4), ``"char_gru"`` (Shakespeare, 001),
and any the user adds with :func:`register_model`. :func:`build_model` also takes a reference to a factory in
a user's own code: ``"package.module:function"`` or ``"path/to/file.py:function"`` (``[model] factory``). A
factory is called as ``factory(input_shape=..., num_classes=..., **options)`` and returns an ``nn.Module``
(a plain module's outputs are logits: :class:`~ampfl.fl.models.user.UserModel`); a model that is not a
built-in is checked once (:func:`~ampfl.fl.models.user.check_functional`).
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from torch import nn

from ampfl.fl.models.base import FLModel
from ampfl.fl.models.user import UserModel, check_functional
from ampfl.registry import Registry, resolve_reference

#: A model factory: ``(*, input_shape, num_classes, **options) -> nn.Module``.
ModelFactory = Callable[..., nn.Module]

MODELS: Registry[ModelFactory] = Registry(
    "model.name",
    {
        "logreg": "ampfl.fl.models.linear:LogisticRegression",
        "mlp": "ampfl.fl.models.mlp:MLP",
        "cnn": "ampfl.fl.models.cnn:HasirciogluCNN",
        "cnn_gn": "ampfl.fl.models.gn_cnn:GroupNormCNN",
        "char_gru": "ampfl.fl.models.char_gru:CharGRU",
    },
)
BUILT_IN = frozenset(MODELS)


def register_model(name: str, factory: ModelFactory | str, *, replace: bool = False) -> None:
    """Add a model factory (or a ``"module:function"`` reference to one) under ``name``."""
    MODELS.register(name, factory, replace=replace)


def resolve_factory(reference: str, *, parameter: str = "model.factory") -> ModelFactory:
    """The factory a ``"package.module:function"`` or ``"path/to/file.py:function"`` reference names.

    Raises:
        ValueError: one line naming ``parameter`` (bad form, missing file/module/attribute, not callable).
    """
    module_part, sep, attribute = reference.rpartition(":")
    if sep and module_part.endswith(".py"):
        file = Path(module_part).expanduser()
        if not file.is_file():
            raise ValueError(f"{parameter}: no such file {str(file)!r}.")
        module_name = f"ampfl_user_model_{abs(hash(str(file.resolve())))}"
        module = sys.modules.get(module_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(module_name, file)
            if spec is None or spec.loader is None:
                raise ValueError(f"{parameter}: cannot load {str(file)!r} as Python.")
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            try:
                spec.loader.exec_module(module)
            except Exception as err:
                del sys.modules[module_name]
                raise ValueError(f"{parameter}: importing {str(file)!r} failed: {err}") from None
        factory = getattr(module, attribute, None)
        if factory is None:
            raise ValueError(f"{parameter}: {str(file)!r} has no attribute {attribute!r}.")
    else:
        factory = resolve_reference(reference, parameter=parameter)
    if not callable(factory):
        raise ValueError(f"{parameter}: {reference!r} is not callable.")
    return factory  # type: ignore[no-any-return]


def _call_factory(factory: ModelFactory, label: str, input_shape: tuple[int, ...], num_classes: int,
                  options: dict[str, Any]) -> nn.Module:  # fmt: skip
    try:
        params: Mapping[str, inspect.Parameter] = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    shape_args = {
        key: value
        for key, value in (("input_shape", input_shape), ("num_classes", num_classes))
        if takes_all or key in params
    }
    try:
        model = factory(**shape_args, **options)
    except TypeError as err:  # unknown keyword option
        raise ValueError(f"bad option for model {label!r}: {err}") from None
    if not isinstance(model, nn.Module):
        raise ValueError(
            f"model {label!r}: the factory must return a torch.nn.Module. Found {type(model).__name__}."
        )
    return model


def build_model(name: str, *, input_shape: tuple[int, ...], num_classes: int, **options: Any) -> FLModel:
    """Build a model by registered name or factory reference (module docstring).

    Args:
        name: a key of :data:`MODELS`, or ``"package.module:function"`` / ``"file.py:function"``.
        input_shape: shape of one example (e.g. ``(14,)`` or ``(1, 28, 28)``).
        num_classes: number of labels (2 for a binary task).
        **options: model options (logreg: ``gamma``, ``bias``, ``init_std``; mlp: ``hidden``; a factory's own
            keyword arguments).

    Raises:
        ValueError: for an unknown name, a bad shape, an unknown option or a model that is not functional.
    """
    if ":" not in name and name not in MODELS:
        named = sorted(n for n in MODELS if not n.startswith("python:"))  # not the Python API's own objects
        raise ValueError(f"model must be one of {named}. Found {name!r}.")
    if not input_shape or any(int(s) < 1 for s in input_shape):
        raise ValueError(f"input_shape must be a non-empty tuple of positive sizes. Found {input_shape!r}.")
    if isinstance(num_classes, bool) or int(num_classes) < 2:
        raise ValueError(f"num_classes must be an integer >= 2. Found {num_classes!r}.")
    shape, classes = tuple(int(s) for s in input_shape), int(num_classes)
    if name in BUILT_IN:
        try:
            built: Any = MODELS[name](input_shape=shape, num_classes=classes, **options)
        except TypeError as err:  # unknown keyword option
            raise ValueError(f"bad option for model {name!r}: {err}") from None
        return built  # type: ignore[no-any-return]
    factory = MODELS[name] if name in MODELS else resolve_factory(name)
    module = _call_factory(factory, name, shape, classes, dict(options))
    model = module if isinstance(module, FLModel) else UserModel(module, num_classes=classes)
    check_functional(model, shape, name="model")
    return model


def loss_fn(model: nn.Module) -> Any:
    """The per-sample loss of a model (``outputs, targets -> [batch]``)."""
    if not isinstance(model, FLModel):
        raise ValueError(f"model must be an FLModel. Found {type(model).__name__}.")
    return model.per_sample_loss


def num_parameters(model: nn.Module) -> int:
    """Total number of trainable scalars d."""
    return sum(math.prod(p.shape) for p in model.parameters())


__all__ = [
    "BUILT_IN",
    "MODELS",
    "FLModel",
    "ModelFactory",
    "UserModel",
    "build_model",
    "check_functional",
    "loss_fn",
    "num_parameters",
    "register_model",
    "resolve_factory",
]
