"""Lazy attributes of the accounting packages (PEP 562), one implementation for all of them.

A package names its public attributes and the module that defines each; a module is imported only when
one of its names is first used, so that importing a package (``ampfl account poisson``, the simulator's
algorithms, a Flower ClientApp) does not import SciPy through analyses it never runs. Package plumbing:
no paper, no equation.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str,
    exports: Mapping[str, str],
    *,
    prefix: str = "",
    aliases: Mapping[str, str] | None = None,
    modules: Iterable[str] = (),
    public: list[str],
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package``.

    Args:
        package: the package's ``__name__`` (error messages, submodule attributes).
        exports: public name -> the module that defines it, imported as ``prefix + module``.
        prefix: prepended to every module of ``exports`` (e.g. the package's own name and a dot).
        aliases: a second public name -> the exported name it stands for.
        modules: submodules of ``package`` returned as attributes themselves.
        public: what ``__dir__`` lists (the package's ``__all__``).
    """
    second_names = dict(aliases or {})
    submodules = frozenset(modules)

    def attribute(name: str) -> Any:
        name = second_names.get(name, name)
        if name in exports:
            return getattr(importlib.import_module(prefix + exports[name]), name)
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def names() -> list[str]:
        return public

    return attribute, names
