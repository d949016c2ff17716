"""Checks of an output folder flag before any work starts (one line, exit 2, instead of an OSError later)."""

from __future__ import annotations

import os
from pathlib import Path


def check_out_dir(path: Path, flag: str = "--out") -> Path:
    """``path`` if it can be (or already is) a writable folder; else ValueError naming ``flag``.

    Refused: a path that is a file, a path under a file, and a folder (or its nearest existing parent) that
    this process may not write to.
    """
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise ValueError(f"{flag} must be a folder. Found a file: {target}.")
    existing = target
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise ValueError(f"{flag} must be a folder path. Found {target}, under the file {existing}.")
    if existing.exists() and not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(
            f"{flag} must be a writable folder. Found {target}: no permission to write in {existing}."
        )
    return target
