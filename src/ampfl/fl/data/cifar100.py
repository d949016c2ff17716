"""CIFAR-100 from a user path (the python pickle release ``cifar-100-python``: ``train``, ``test``, ``meta``).

Each of ``train`` / ``test`` is a pickled dict with ``b"data"`` (uint8 rows of 3072 bytes, channel-major:
1024 red, 1024 green, 1024 blue, each 32×32 row-major) and ``b"fine_labels"`` (0..99; ``b"coarse_labels"``,
the 20 superclasses, with ``coarse=True``); ``meta`` holds the label names (``b"fine_label_names"``,
``b"coarse_label_names"``). Images come back as float32 ``[n, 3, 32, 32]`` in [0, 1] (003 Sec. 6.1 uses the
100 fine labels). The published MD5 digests (:data:`CIFAR100_MD5`) are checked when ``verify`` is set
(a synthetic test copy would fail them).
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import numpy as np

from ampfl.fl.data.sources import DataUnavailableError, data_dir

__all__ = ["CIFAR100_MD5", "find_cifar100", "load_cifar100_arrays"]

#: MD5 digests of the python release's files (as listed by torchvision's CIFAR100; no SHA-256 is published).
CIFAR100_MD5 = {
    "train": "16019d7e3df5f24257cddd939b257f8d",
    "test": "f0ef6b0ae62326f3e7ffdfab6717acfc",
    "meta": "7973b15100ade9c7d40fb424638fde48",
}


def find_cifar100(path: str | Path | None, cache_dir: Path | None = None) -> Path:
    """The folder holding ``train``, ``test`` and ``meta``: ``path`` itself, ``path/cifar-100-python``, or
    the same under the cache (``$AMPFL_DATA``)."""
    roots = [Path(path).expanduser()] if path is not None else []
    roots.append(cache_dir if cache_dir is not None else data_dir())
    for root in roots:
        for sub in ("", "cifar-100-python", "cifar100", "cifar100/cifar-100-python"):
            folder = root / sub if sub else root
            if all((folder / name).is_file() for name in CIFAR100_MD5):
                return folder
    where = "pass path= / --path" if path is None else f"looked in {path}"
    raise DataUnavailableError(
        f"cifar100: train, test and meta not found ({where}); extract cifar-100-python.tar.gz and pass "
        "the folder cifar-100-python"
    )


def _read(file: Path, label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    try:
        with file.open("rb") as handle:
            batch = pickle.load(handle, encoding="bytes")
        data = np.asarray(batch[b"data"], dtype=np.uint8)
        labels = np.asarray(batch[label_key], dtype=np.int64)
    except (OSError, pickle.UnpicklingError, KeyError, TypeError, EOFError, ValueError) as exc:
        raise DataUnavailableError(
            f"cifar100: {file} is not a CIFAR-100 pickle: {type(exc).__name__}"
        ) from None
    if data.ndim != 2 or data.shape[1] != 3072 or data.shape[0] != labels.shape[0]:
        raise DataUnavailableError(f"cifar100: {file}: unexpected shapes {data.shape} / {labels.shape}")
    return data.reshape(-1, 3, 32, 32), labels


def load_cifar100_arrays(
    folder: Path, *, coarse: bool = False, verify: bool = True
) -> tuple[dict[str, np.ndarray], tuple[str, ...]]:
    """(``x_train``/``y_train``/``x_test``/``y_test`` with uint8 images ``[n, 3, 32, 32]``, label names).

    Raises:
        DataUnavailableError: a file fails its MD5 (``verify``), is not a CIFAR-100 pickle, or has labels
            outside the range.
    """
    if verify:
        for name, md5 in CIFAR100_MD5.items():
            found = hashlib.md5((folder / name).read_bytes(), usedforsecurity=False).hexdigest()
            if found != md5:
                raise DataUnavailableError(
                    f"cifar100: {folder / name} fails the published MD5 (expected {md5}, found {found})"
                )
    key = b"coarse_labels" if coarse else b"fine_labels"
    x_train, y_train = _read(folder / "train", key)
    x_test, y_test = _read(folder / "test", key)
    classes = 20 if coarse else 100
    for y in (y_train, y_test):
        if y.size and (y.min() < 0 or y.max() >= classes):
            raise DataUnavailableError(f"cifar100: labels outside 0..{classes - 1} in {folder}")
    try:
        with (folder / "meta").open("rb") as handle:
            meta = pickle.load(handle, encoding="bytes")
        raw = meta[b"coarse_label_names" if coarse else b"fine_label_names"]
        names = tuple(n.decode() if isinstance(n, bytes) else str(n) for n in raw)
    except (OSError, pickle.UnpicklingError, KeyError, TypeError, EOFError) as exc:
        raise DataUnavailableError(f"cifar100: {folder / 'meta'} unreadable: {type(exc).__name__}") from None
    if len(names) != classes:
        raise DataUnavailableError(f"cifar100: {folder / 'meta'} lists {len(names)} names, not {classes}")
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}, names
