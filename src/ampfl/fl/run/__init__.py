"""A run: the experiment (config → task → algorithm → rounds), its round loop, its folder (atomic writes,
lock, resume), the lines and summary it releases, what it keeps apart (:mod:`~ampfl.fl.run.release`) and its
plots. The public entry points are re-exported here: ``from ampfl.fl.run import run_experiment``.
"""

from __future__ import annotations

from typing import Any

_PUBLIC = ("run_experiment", "build_task", "build_algorithm", "construct_algorithm", "load_checkpoint")


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        from ampfl.fl.run import experiment

        return getattr(experiment, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_PUBLIC)
