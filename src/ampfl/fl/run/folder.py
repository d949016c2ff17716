"""A run folder's files: names, the checkpoint (save, load) and the checks before a run starts or resumes.

The folder's layout is described in :mod:`ampfl.fl.run.experiment`; every file is written atomically
(temporary file + ``os.replace``). Checkpoints are loaded with ``torch.load(..., weights_only=False)``: resume
only run folders you trust.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ampfl.fl.run.lock import LOCK
from ampfl.fl.run.plots import ACCURACY_PNG, EPSILON_PNG
from ampfl.fl.run.release import DIAGNOSTICS, TIMING
from ampfl.io import atomic_write_bytes

if TYPE_CHECKING:
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.privacy.run_accountant import RunAccountant

__all__ = [
    "CHECKPOINT",
    "CONFIG_JSON",
    "CONFIG_TOML",
    "METRICS",
    "RESUMABLE_CHANGES",
    "SUMMARY",
    "clear_run_folder",
    "load_checkpoint",
    "open_run_folder",
    "read_lines",
    "save_checkpoint",
]

CONFIG_JSON = "config.json"
CONFIG_TOML = "config.toml"
METRICS = "metrics.jsonl"
CHECKPOINT = "checkpoint.pt"
SUMMARY = "summary.json"

#: Config keys that may change between an interrupted run and its resumption (they change no numbers;
#: engine.device only the float rounding of the clients' work, never the privacy randomness).
RESUMABLE_CHANGES = frozenset(
    {"rounds", "eval_every", "checkpoint_every", "plots", "privacy.max_epsilon", "engine.device"}
)

_CHECKPOINT_FORMAT = 2


def clear_run_folder(folder: str | Path) -> None:
    """Delete the files a run writes in ``folder`` (and the folder if that leaves it empty); nothing else.

    Used by the demo and the figure reproductions, which own their run folders and may run again.
    """
    path = Path(folder)
    names = [CONFIG_JSON, CONFIG_TOML, METRICS, DIAGNOSTICS, TIMING, CHECKPOINT, SUMMARY, ACCURACY_PNG]
    names.append(EPSILON_PNG)
    (path / LOCK).unlink(missing_ok=True)
    for name in names:
        (path / name).unlink(missing_ok=True)
    if path.is_dir() and not any(path.iterdir()):
        path.rmdir()


def read_lines(folder: str | Path, *, diagnostics: bool = False) -> list[dict[str, Any]]:
    """The evaluation lines of a run folder's ``metrics.jsonl``; with ``diagnostics``, each merged with the
    same round's line of ``diagnostics.jsonl`` (for experiments on the trusted side: the merged lines are
    NOT a release, :mod:`ampfl.fl.run.release`)."""
    path = Path(folder)
    lines = [json.loads(text) for text in (path / METRICS).read_text("utf-8").splitlines() if text.strip()]
    if not diagnostics or not (path / DIAGNOSTICS).is_file():
        return lines
    extra: dict[int, dict[str, Any]] = {}
    for text in (path / DIAGNOSTICS).read_text("utf-8").splitlines():
        if text.strip():
            line = json.loads(text)
            if "round" in line:
                extra[int(line["round"])] = line
    return [{**extra.get(int(line["round"]), {}), **line} for line in lines]


def save_checkpoint(
    out: Path,
    algorithm: Algorithm,
    *,
    rounds_done: int,
    metrics: list[dict[str, Any]],
    config: dict[str, Any],
    diagnostics: list[dict[str, Any]] | None = None,
    wall: float,
    privacy: RunAccountant,
) -> Path:
    """Write ``checkpoint.pt`` atomically (the previous one stays valid until the new one is complete)."""
    import torch

    state = {
        "format": _CHECKPOINT_FORMAT,
        "rounds_done": rounds_done,
        "algorithm": algorithm.state_dict(),
        "privacy_key": algorithm.privacy_key,  # secret: the root of the run's privacy randomness
        "diagnostics": list(diagnostics or []),
        "privacy": privacy.state_dict(),
        "metrics": list(metrics),
        "torch_rng_state": torch.get_rng_state(),
        "config": config,
        "wall_seconds": wall,
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return atomic_write_bytes(out / CHECKPOINT, buffer.getvalue())


def load_checkpoint(out: Path) -> dict[str, Any]:
    """Read the run folder's checkpoint (ValueError when there is none or it is unreadable)."""
    import torch

    path = out / CHECKPOINT
    if not path.is_file():
        raise ValueError(f"--resume: no checkpoint in {out} (expected {path.name}).")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # a damaged file: say so in one line
        raise ValueError(
            f"--resume: cannot read {path}: {type(exc).__name__}: {exc}".splitlines()[0]
        ) from None
    if not isinstance(state, dict) or state.get("format") != _CHECKPOINT_FORMAT:
        raise ValueError(f"--resume: {path} is not an ampfl checkpoint of format {_CHECKPOINT_FORMAT}.")
    return state


def open_run_folder(out: Path, resolved: dict[str, Any], *, resume: bool) -> dict[str, Any] | None:
    """The checkpoint to resume from (``resume``), or None for a fresh run in an unused folder (ValueError
    for a resume with another config or fewer rounds, and for a fresh run in a used folder)."""
    if resume:
        checkpoint = load_checkpoint(out)
        changed = _changed_keys(checkpoint["config"], resolved) - RESUMABLE_CHANGES
        if changed:
            raise ValueError(
                f"--resume: the config differs from the one of {out} in {', '.join(sorted(changed))}; "
                "only rounds, eval_every and checkpoint_every may change."
            )
        done = int(checkpoint["rounds_done"])
        if done > int(resolved["rounds"]):
            raise ValueError(
                f"--resume: rounds must be at least the {done} rounds already done. "
                f"Found {resolved['rounds']}."
            )
        return checkpoint
    used = [name for name in (CONFIG_JSON, METRICS, CHECKPOINT, SUMMARY) if (out / name).exists()]
    if used:
        raise ValueError(
            f"{out} already holds a run ({used[0]}); pass --resume to continue it or choose another --out."
        )
    return None


def _changed_keys(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> set[str]:
    changed: set[str] = set()
    for key in set(old) | set(new):
        a, b = old.get(key), new.get(key)
        name = f"{prefix}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            changed |= _changed_keys(a, b, prefix=f"{name}.")
        elif json.dumps(a, sort_keys=True, default=str) != json.dumps(b, sort_keys=True, default=str):
            changed.add(name)
    return changed
