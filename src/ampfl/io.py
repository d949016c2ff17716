"""Atomic file output shared by run folders and figure reproduction.

Every file ampfl writes goes to a temporary sibling first and is moved into place with ``os.replace``,
so a reader (or a resumed run) never sees a half-written file.

The CLI imports this module at start-up for :func:`dumps_json`, so the writers import ``csv``, ``pathlib``
and ``tempfile`` where they run (together ~10 ms, ~5 % of ``ampfl account poisson``).
"""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (``os.umask`` sets it, which a
    writer on another thread could observe), else by setting and restoring it."""
    from pathlib import Path

    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temporary file in the same folder, then rename). The file gets
    the mode a plain ``open`` would give it (0o666 less the umask: 0644 by default), not ``mkstemp``'s
    0600."""
    import tempfile
    from pathlib import Path

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def write_text_if_changed(path: str | os.PathLike[str], text: str) -> bool:
    """Write ``text`` atomically unless ``path`` already holds exactly it (a resume leaves an unchanged
    config untouched, so a full disk cannot fail on it); whether it wrote."""
    from pathlib import Path

    target = Path(path)
    data = text.encode("utf-8")
    try:
        if target.read_bytes() == data:
            return False
    except OSError:
        pass
    atomic_write_bytes(target, data)
    return True


class AppendLog:
    """An append-only text file (``metrics.jsonl``) whose appends are all or nothing, with a rollback mark.

    Each :meth:`append` writes its bytes with unbuffered ``os.write`` calls; if one fails (a full disk), the
    file is truncated back to where the append started, so no half line is left. :meth:`mark` records the
    current end (at a checkpoint) and :meth:`rollback` truncates back to it: after a failed write the file
    holds exactly the lines of the last checkpoint. Truncating needs no free space.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        self._mark = os.fstat(self._fd).st_size

    def append(self, text: str) -> None:
        data = memoryview(text.encode("utf-8"))
        start = os.fstat(self._fd).st_size
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except BaseException:
            os.ftruncate(self._fd, start)
            raise

    def mark(self) -> None:
        self._mark = os.fstat(self._fd).st_size

    def rollback(self) -> None:
        os.ftruncate(self._fd, self._mark)

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> AppendLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def to_jsonable(value: Any) -> Any:
    """Convert numpy scalars/arrays, paths and non-finite floats into strict-JSON-safe values.

    ``inf`` is written as the JSON number ``1e999``, which strict parsers accept and Python reads back as
    ``inf``; NaN becomes ``null`` (ampfl never returns NaN as a result on purpose).
    """
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):
        return to_jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else value
    return value


def dumps_json(value: Any, *, indent: int | None = None) -> str:
    """Serialise ``value`` as strict JSON (see :func:`to_jsonable`)."""
    text = json.dumps(to_jsonable(value), indent=indent, allow_nan=True, default=str)
    # json writes +-inf as the non-standard tokens Infinity/-Infinity; 1e999 is valid JSON for the same value.
    return text.replace("-Infinity", "-1e999").replace("Infinity", "1e999")


def atomic_write_json(path: str | os.PathLike[str], value: Any) -> Path:
    """Write ``value`` as indented strict JSON, atomically."""
    return atomic_write_text(path, dumps_json(value, indent=2) + "\n")


def atomic_write_csv(
    path: str | os.PathLike[str], header: Sequence[str], rows: Iterable[Sequence[Any]]
) -> Path:
    """Write a CSV table with a header row, atomically."""
    import csv

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([_csv_cell(v) for v in row])
    return atomic_write_text(path, buffer.getvalue())


def _csv_cell(value: Any) -> Any:
    if isinstance(value, float):
        return repr(value)
    return value


def atomic_save_figure(fig: Any, path: str | os.PathLike[str], *, dpi: int = 130) -> Path:
    """Save a matplotlib figure as PNG atomically."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return atomic_write_bytes(path, buffer.getvalue())
