"""A user's own data: arrays in a ``.npz`` file or in memory, with an optional natural client partition.

The file holds ``x_train`` ``[n, ...]``, ``y_train`` ``[n]`` (integer labels ``0 .. K − 1``), ``x_test``
``[m, ...]``, ``y_test`` ``[m]`` and optionally ``client_train`` ``[n]`` (the client id of each training
example, ``0 .. N − 1``: a cross-silo partition such as one hospital per id). Features are used as given
(cast to float32); nothing is normalised. ``[dataset] path = "file.npz"`` loads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ampfl.fl.data.dataset import Dataset, count_classes, make_dataset

__all__ = ["ARRAYS", "OPTIONAL_ARRAYS", "dataset_from_arrays", "load_npz", "load_npz_entry"]

#: The arrays a user dataset must hold, and the optional one.
ARRAYS = ("x_train", "y_train", "x_test", "y_test")
OPTIONAL_ARRAYS = ("client_train",)


def _labels(name: str, key: str, y: Any) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim != 1 or not (np.issubdtype(y.dtype, np.integer) or y.size == 0):
        raise ValueError(
            f"dataset {name}: {key} must be a 1-d array of integer labels. Found {y.dtype} {y.shape}."
        )
    if y.size and int(y.min()) < 0:
        raise ValueError(f"dataset {name}: {key} must hold labels >= 0. Found {int(y.min())}.")
    labels: np.ndarray = y.astype(np.int64)
    return labels


def dataset_from_arrays(name: str, arrays: Mapping[str, Any], *, source: str = "user arrays") -> Dataset:
    """A :class:`Dataset` from a mapping holding :data:`ARRAYS` (and optionally ``client_train``).

    Raises:
        ValueError: one line naming the missing, extra or malformed array.
    """
    missing = [k for k in ARRAYS if k not in arrays]
    if missing:
        raise ValueError(
            f"dataset {name}: missing array(s) {', '.join(missing)} (needs {', '.join(ARRAYS)})."
        )
    extra = sorted(set(arrays) - set(ARRAYS) - set(OPTIONAL_ARRAYS))
    if extra:
        raise ValueError(
            f"dataset {name}: unknown array(s) {', '.join(extra)} "
            f"(allowed: {', '.join(ARRAYS + OPTIONAL_ARRAYS)})."
        )
    a: dict[str, np.ndarray] = {}
    for split in ("train", "test"):
        x = np.asarray(arrays[f"x_{split}"])
        if x.ndim < 2 or not np.issubdtype(x.dtype, np.number):
            raise ValueError(
                f"dataset {name}: x_{split} must be a numeric array [n, ...]. Found {x.dtype} {x.shape}."
            )
        y = _labels(name, f"y_{split}", arrays[f"y_{split}"])
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"dataset {name}: x_{split} has {x.shape[0]} rows, y_{split} {y.shape[0]}.")
        if not np.isfinite(x).all():
            raise ValueError(f"dataset {name}: x_{split} holds non-finite values.")
        a[f"x_{split}"], a[f"y_{split}"] = x, y
    if a["y_train"].size == 0:
        raise ValueError(f"dataset {name}: y_train is empty.")
    client_train = None
    if "client_train" in arrays:
        client_train = _labels(name, "client_train", arrays["client_train"])
        if client_train.shape != a["y_train"].shape:
            raise ValueError(
                f"dataset {name}: client_train must have one client id per training example "
                f"({a['y_train'].shape[0]}). Found {client_train.shape[0]}."
            )
        empty = np.flatnonzero(np.bincount(client_train) == 0)
        if empty.size:
            raise ValueError(
                f"dataset {name}: client_train ids must be 0 .. N - 1; client {int(empty[0])} has no example."
            )
    ds = make_dataset(name, a, count_classes(a), source, tuple(str(i) for i in range(count_classes(a))))
    if client_train is None:
        return ds
    return Dataset(
        name=ds.name, x_train=ds.x_train, y_train=ds.y_train, x_test=ds.x_test, y_test=ds.y_test,
        num_classes=ds.num_classes, source=ds.source, class_names=ds.class_names, client_train=client_train,
    )  # fmt: skip


def load_npz(path: str | Path, *, name: str = "npz") -> Dataset:
    """The user dataset stored at ``path`` (``.npz``, see the module docstring).

    Raises:
        ValueError: a missing file or malformed arrays (one line naming the array).
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise ValueError(f"dataset.path: no such file {str(file)!r}.")
    with np.load(file, allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in npz.files}
    return dataset_from_arrays(name, arrays, source=f"user file {file}")


def load_npz_entry(name: str, *, path: str | Path | None, seed: int, cache: Path) -> Dataset:
    """The registry's ``npz`` loader: :func:`load_npz` of ``path``."""
    if path is None:
        raise ValueError("dataset.path: the npz dataset needs path = \"file.npz\".")
    return load_npz(path, name=Path(path).stem)
