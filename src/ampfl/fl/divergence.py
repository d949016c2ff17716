"""Training that diverges: detected after each round, reported as one line, never checkpointed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from ampfl.accounting._checks import NumericalError

if TYPE_CHECKING:
    from ampfl.fl.config import RunConfig

__all__ = ["TrainingDiverged", "diverged_message", "numerical_failure"]

_NUMERICAL_WORDS = re.compile(r"\b(overflow|nan|inf|infinity|non-finite)\b")


class TrainingDiverged(NumericalError):
    """The model's parameters stopped being finite numbers; the run folder keeps its last good checkpoint."""


def numerical_failure(exc: BaseException) -> bool:
    """Whether an exception raised inside a round is arithmetic trouble (overflow, inf, nan), not a bug."""
    if isinstance(exc, ArithmeticError):
        return True
    return _NUMERICAL_WORDS.search(str(exc).lower()) is not None


def diverged_message(
    config: RunConfig, round_number: int, saved_at: int, out: Path, exc: BaseException | None
) -> str:
    lr = getattr(config.algorithm.params, "learning_rate", None)
    cause = "non-finite model parameters" if exc is None else f"{type(exc).__name__}: {exc}"
    kept = f"the last good checkpoint (round {saved_at})" if saved_at >= 0 else "no checkpoint yet"
    return (
        f"round {round_number}: training diverged ({cause}); the likely cause is a learning rate too large "
        f"for this model (algorithm.learning_rate = {lr:g}); {out} keeps {kept}."
        if isinstance(lr, int | float)
        else f"round {round_number}: training diverged ({cause}); {out} keeps {kept}."
    )
