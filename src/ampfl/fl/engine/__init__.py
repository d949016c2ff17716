"""How clients' local work runs: the vectorised engine (``torch.func``, one call for a whole cohort), its
sequential reference, evaluation, per-example gradients, low-rank updates, the functional model and the
device. ``from ampfl.fl.engine import Engine`` is the engine of :mod:`~ampfl.fl.engine.vectorised`.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from ampfl.fl.engine.vectorised import Engine

        return Engine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Engine"]
