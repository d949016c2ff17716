"""The numeric range of every CLI flag and config key: what ampfl computes reliably in double precision.

The Python API checks each parameter's mathematical domain (a probability in (0, 1], a noise multiplier in
(0, inf)); inside that domain some values are too extreme for any accountant to evaluate in float64 or in
bounded time and memory (a sampling rate of 1e-320 is subnormal, 1/z² overflows for z = 1e-300, a PLD over
10^20 steps needs terabytes). The CLI refuses those at parse time with one line naming the flag and its range
(exit 2) instead of failing inside an accountant, and a run config refuses them in its one-line validation
error. :func:`guard_numeric_flags` wraps the ``type=`` of every ``int``/``float`` argument of the parser with
the range of its quantity (:data:`RANGES`, keyed by the quantity's one name, docs/units.md: the argparse
``dest`` of a flag, the key of a TOML value) or the generic range; :func:`config_problems` checks every number
of a parsed TOML document the same way. Standard library only: the CLI imports it at start-up.

Rules, applied to the parsed number before the API sees it:

* every float must be finite (no ``nan``, ``inf``);
* a nonzero number must have its magnitude within the quantity's range ``[low, high]``; zero and the sign are
  left to the API's own check (so ``--q 0`` keeps its message "--q must be in (0, 1]");
* the generic range is ``[1e-100, 1e100]`` for floats and ``|n| <= 2**53`` for integers (exact in float64).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Range:
    """Accepted magnitudes of one quantity's nonzero values, with the reason given in docs/units.md.

    ``high = None``: the quantity's own check already bounds it above (a probability by 1), so its message
    ("must be in (0, 1]") is the one the user sees.
    """

    low: float
    high: float | None


GENERIC_FLOAT = Range(1e-100, 1e100)
GENERIC_INT = Range(1, 2**53)

_PROBABILITY = Range(1e-15, None)  # below 1e-15 products such as p·q underflow toward the subnormals
_NOISE = Range(1e-6, 1e4)  # 1/(2z²) overflows near z = 1e-154; above 1e4 every analysis gives ε ≈ 0
_EPSILON = Range(1e-12, 100.0)  # e^ε stays far from overflow; ε > 100 is no guarantee
_DELTA = Range(1e-100, None)
_COUNT = Range(1, 10**9)  # steps, rounds, iterations (RDP composes any T; PLD costs grow with T)
_SIZE = Range(1, 10**7)  # records per client, dimensions: arrays of this length are built

#: Range of each quantity, keyed by argparse ``dest`` (the quantity's one name with ``_`` for ``-``).
RANGES: dict[str, Range] = {
    "noise_multiplier": _NOISE,
    "nonsplit_noise_multiplier": _NOISE,
    "p": _PROBABILITY,
    "q": _PROBABILITY,
    "rate": _PROBABILITY,
    "participation": _PROBABILITY,
    "beta": _PROBABILITY,
    "min_rate": _PROBABILITY,
    "epsilon": _EPSILON,
    "eps_local": _EPSILON,
    "delta": _DELTA,
    "delta_local": _DELTA,
    "delta_tilde": _DELTA,
    "steps": _COUNT,
    "iterations": _COUNT,
    "rounds": _COUNT,
    "epochs": _COUNT,
    "local_steps": _COUNT,
    "submodels": _COUNT,
    "k": _COUNT,
    "d": _SIZE,
    "dim": _SIZE,
    "batch": _SIZE,
    "dataset_size": Range(1, 10**12),
    "clients": Range(1, 10**12),
    "clip": Range(1e-12, 1e12),
    "nonsplit_clip": Range(1e-12, 1e12),
    # run-config keys (docs/units.md "Run configuration")
    "smashed_noise_multiplier": _NOISE,
    "sampling_rate": _PROBABILITY,
    "target_epsilon": _EPSILON,
    "max_epsilon": _EPSILON,
    "round_epsilon": _EPSILON,
    "round_delta": _DELTA,
    "local_dataset_size": _SIZE,
    "num_rounds": _COUNT,
}


def range_of(name: str, value: float) -> Range:
    """The range of quantity ``name`` (the generic one for names without their own)."""
    generic = GENERIC_INT if isinstance(value, int) else GENERIC_FLOAT
    return RANGES.get(name, generic)


def problem(name: str, value: float) -> str | None:
    """Why ``value`` is outside the numeric range of quantity ``name`` (a sentence tail); None if inside."""
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    allowed = range_of(name, value)
    too_small = value != 0 and abs(value) < allowed.low
    if too_small or (allowed.high is not None and abs(value) > allowed.high):
        upper = "1" if allowed.high is None else _describe(allowed.high)  # high = None: probabilities, δ
        return f"must be in [{_describe(allowed.low)}, {upper}] (ampfl's numeric range for it, docs/units.md)"
    return None


def config_problems(data: Mapping[str, Any], prefix: str = "") -> list[str]:
    """One ``"key.path: must be ... (found v)"`` entry per number of a TOML document outside its range."""
    problems = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            problems.extend(config_problems(value, f"{path}."))
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, int | float) and not isinstance(item, bool):
                reason = problem(str(key), item)
                if reason is not None:
                    problems.append(f"{path}: {reason} (found {item!r})")
                    break
    return problems


def _describe(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def bounded(parse: Callable[[str], float], flag: str, name: str) -> Callable[[str], float]:
    """An argparse ``type=``: parse with ``parse`` (``int``, ``float``), then check the range of ``name``."""

    def check(text: str) -> float:
        value = parse(text)  # a ValueError here keeps argparse's "invalid float value" message
        reason = problem(name, value)
        if reason is not None:
            raise argparse.ArgumentTypeError(f"{reason}. Found {text}.")  # argparse adds "argument --flag:"
        return value

    check.__name__ = parse.__name__  # argparse names the type in "invalid float value" messages
    return check


def guard_numeric_flags(parser: argparse.ArgumentParser) -> None:
    """Wrap every ``int``/``float`` argument of ``parser`` and its subparsers with its quantity's range."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                guard_numeric_flags(sub)
        elif action.option_strings and action.type in (int, float):
            flag = max(action.option_strings, key=len)
            action.type = bounded(action.type, flag, action.dest)
