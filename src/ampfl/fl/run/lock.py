"""One writer per run folder: a lock file with the run's token and its owner's process id.

``ampfl run`` and ``ampfl deploy`` take the lock of ``--out`` before writing anything and release it when they
end. A second run into a folder whose owner is alive fails in one line (exit 2). A lock left by an owner
that died (``kill -9``) is stale: the next run takes it over with a new token, and whatever still runs for
the old owner — a Flower ServerApp outliving ``ampfl deploy`` — checks :func:`owns` before each write and
stops when the token is no longer its own, so a new run is never written by an old one. (Whether the folder
may be used at all — a fresh run refuses a folder that holds a run, ``--resume`` continues it — is checked
separately.)
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: The lock file of a run folder.
LOCK = ".ampfl.lock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True


def _read(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _holder(path: Path) -> int | None:
    """The live owner's pid of the lock at ``path`` (None: no lock, unreadable, another host's, or stale)."""
    data = _read(path)
    if data is None or data.get("host") != socket.gethostname():
        return None
    pid = data.get("pid")
    return pid if isinstance(pid, int) and pid != os.getpid() and _alive(pid) else None


def acquire(folder: str | Path) -> str:
    """Take the lock of ``folder`` (created if needed) for this process; returns the run's new token.

    Raises:
        ValueError: one line when a live process holds the folder.
    """
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK
    token = secrets.token_hex(16)
    text = json.dumps({"token": token, "pid": os.getpid(), "host": socket.gethostname()})
    for _ in range(3):
        holder = _holder(path)
        if holder is not None:
            raise ValueError(
                f"{out} is in use by another ampfl run (pid {holder}); wait for it to end or choose "
                "another --out."
            )
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:  # a stale lock (dead owner): take it over
            temporary = path.with_name(f"{LOCK}.{token}")
            temporary.write_text(text, encoding="utf-8")
            if _holder(path) is None:
                os.replace(temporary, path)
                return token
            temporary.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        return token
    raise ValueError(f"{out}: could not take the run folder's lock ({path}); try again.")


def owns(folder: str | Path, token: str) -> bool:
    """Whether the run with ``token`` still owns ``folder`` (its lock file names it)."""
    data = _read(Path(folder) / LOCK)
    return data is not None and data.get("token") == token


def release(folder: str | Path, token: str) -> None:
    """Remove the lock if it is still ``token``'s (a run that was taken over leaves the new owner's)."""
    path = Path(folder) / LOCK
    if owns(folder, token):
        path.unlink(missing_ok=True)


@contextmanager
def locked(folder: str | Path) -> Iterator[str]:
    """:func:`acquire` … :func:`release` around a run; a folder this created and left empty is removed."""
    out = Path(folder)
    created = not out.exists()
    token = acquire(out)
    try:
        yield token
    finally:
        release(out, token)
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
