"""Parsers: raw dataset files to numpy arrays (no downloading here; see :mod:`ampfl.fl.data.sources`).

- MNIST-format ``idx`` files (optionally gzip-compressed): Fashion-MNIST, EMNIST and any idx folder.
- UCI Adult CSV, preprocessed as in 000 Sec. VI-B: the 14 attributes (6 numeric, 8 categorical label-encoded),
  min-max normalised to [0, 1] with the training set's range, binary label 1 = ">50K".
- CIFAR-10 python pickle batches.
- scikit-learn digits (bundled with scikit-learn) and a synthetic Gaussian mixture for tests.

Only numpy is imported at module level; scikit-learn is imported inside :func:`digits_raw`.
"""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ADULT_COLUMNS",
    "ADULT_NUMERIC",
    "Arrays",
    "digits_raw",
    "images_to_float",
    "load_cifar10_arrays",
    "load_idx_folder",
    "make_synthetic_arrays",
    "parse_adult",
    "read_idx",
    "split_digits",
]

#: ``{"x_train", "y_train", "x_test", "y_test"}`` -> array.
Arrays = dict[str, np.ndarray]

#: The 14 attributes of UCI Adult in file order (adult.names), then the label.
ADULT_COLUMNS: tuple[str, ...] = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
)
#: The continuous attributes; the other eight are categorical.
ADULT_NUMERIC: frozenset[str] = frozenset(
    {"age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"}
)

_IDX_DTYPES: dict[int, np.dtype[Any]] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
}


def read_bytes(path: Path) -> bytes:
    """The content of ``path``, gunzipped when its name ends with ``.gz``."""
    data = path.read_bytes()
    return gzip.decompress(data) if path.name.endswith(".gz") else data


def read_idx(path: str | Path) -> np.ndarray:
    """Read an idx file (the MNIST format: magic 0x0000 | dtype code | ndim, big-endian int32 dims, data).

    Raises:
        ValueError: if the header or the size does not match.
    """
    path = Path(path)
    data = read_bytes(path)
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise ValueError(f"{path.name} is not an idx file (bad magic number {data[:4]!r}).")
    ndim = data[3]
    header = 4 + 4 * ndim
    dims = tuple(int(d) for d in np.frombuffer(data, dtype=">i4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[data[2]]
    expected = header + int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        raise ValueError(
            f"{path.name}: idx header says {expected} bytes for shape {dims}, file has {len(data)}."
        )
    array = np.frombuffer(data, dtype=dtype, offset=header).reshape(dims)
    return array.astype(dtype.newbyteorder("="), copy=True)


def images_to_float(images: np.ndarray) -> np.ndarray:
    """uint8 images ``[n, C, H, W]`` -> float32 in [0, 1]."""
    return (images.astype(np.float32) / np.float32(255.0)).astype(np.float32, copy=False)


def load_idx_folder(folder: Path, files: dict[str, str], *, transpose: bool = False) -> Arrays:
    """Read the four idx files named in ``files`` (keys x_train, y_train, x_test, y_test) from ``folder``.

    Images come back as uint8 ``[n, 1, H, W]``, labels as int64. ``transpose=True`` swaps H and W (EMNIST
    stores its images transposed with respect to MNIST).
    """
    out: Arrays = {}
    for key, name in files.items():
        array = read_idx(folder / name)
        if key.startswith("x"):
            if array.ndim != 3 or array.dtype != np.uint8:
                raise ValueError(
                    f"{name}: expected uint8 images [n, H, W], found {array.dtype} {array.shape}."
                )
            if transpose:
                array = np.ascontiguousarray(array.transpose(0, 2, 1))
            out[key] = np.ascontiguousarray(array[:, None, :, :])
        else:
            if array.ndim != 1:
                raise ValueError(f"{name}: expected labels of shape [n], found {array.shape}.")
            out[key] = array.astype(np.int64)
    for split in ("train", "test"):
        if out[f"x_{split}"].shape[0] != out[f"y_{split}"].shape[0]:
            raise ValueError(
                f"{split}: {out[f'x_{split}'].shape[0]} images but {out[f'y_{split}'].shape[0]} labels."
            )
    return out


def parse_adult(
    train_text: bytes, test_text: bytes, *, drop_missing: bool = False
) -> tuple[Arrays, dict[str, list[str]]]:
    """UCI Adult as in 000 Sec. VI-B: 14 normalised features and a binary label.

    Preprocessing (000 states only "14 normalized features" and 32,561 training samples, so rows with a
    missing value ``?`` are kept by default; ``?`` is then one more category):

    - numeric attributes are taken as they are; each of the 8 categorical attributes is label-encoded by
      the index of its value in the sorted list of values seen in train ∪ test;
    - every feature is min-max scaled with the training set's minimum and maximum to [0, 1]; test values
      are clipped to [0, 1];
    - label 1 for ``>50K`` and 0 for ``<=50K`` (the test file writes them with a trailing ``.``).

    Args:
        train_text: content of ``adult.data``.
        test_text: content of ``adult.test`` (its first line ``|1x3 Cross validator`` is skipped).
        drop_missing: drop rows with a ``?`` (30162 train / 15060 test rows remain, per adult.names).

    Returns:
        ``(arrays, categories)``: float32 features ``[n, 14]`` and int64 labels; ``categories`` maps each
        categorical attribute to its sorted values (code = position).
    """
    train_rows, train_y = _adult_rows(train_text, "adult.data", drop_missing)
    test_rows, test_y = _adult_rows(test_text, "adult.test", drop_missing)
    categories: dict[str, list[str]] = {}
    columns = []
    for j, name in enumerate(ADULT_COLUMNS):
        values_train = [row[j] for row in train_rows]
        values_test = [row[j] for row in test_rows]
        if name in ADULT_NUMERIC:
            try:
                col_train = np.array(values_train, dtype=np.float64)
                col_test = np.array(values_test, dtype=np.float64)
            except ValueError as exc:
                raise ValueError(f"adult: non-numeric value in column {name!r}: {exc}") from None
        else:
            vocab = sorted(set(values_train) | set(values_test))
            categories[name] = vocab
            code = {v: float(i) for i, v in enumerate(vocab)}
            col_train = np.array([code[v] for v in values_train], dtype=np.float64)
            col_test = np.array([code[v] for v in values_test], dtype=np.float64)
        columns.append((col_train, col_test))
    x_train = np.stack([c[0] for c in columns], axis=1)
    x_test = np.stack([c[1] for c in columns], axis=1)
    low = x_train.min(axis=0)
    span = x_train.max(axis=0) - low
    span[span == 0] = 1.0
    x_train = (x_train - low) / span
    x_test = np.clip((x_test - low) / span, 0.0, 1.0)
    arrays = {
        "x_train": x_train.astype(np.float32),
        "y_train": np.asarray(train_y, dtype=np.int64),
        "x_test": x_test.astype(np.float32),
        "y_test": np.asarray(test_y, dtype=np.int64),
    }
    return arrays, categories


def _adult_rows(text: bytes, name: str, drop_missing: bool) -> tuple[list[list[str]], list[int]]:
    rows: list[list[str]] = []
    labels: list[int] = []
    for number, raw in enumerate(text.decode("ascii").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("|"):
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 15:
            raise ValueError(
                f"{name} line {number}: expected 15 comma-separated fields, found {len(fields)}."
            )
        label = fields[14].rstrip(".")
        if label not in (">50K", "<=50K"):
            raise ValueError(f"{name} line {number}: unknown label {fields[14]!r}.")
        if drop_missing and "?" in fields[:14]:
            continue
        rows.append(fields[:14])
        labels.append(1 if label == ">50K" else 0)
    return rows, labels


def load_cifar10_arrays(folder: Path) -> Arrays:
    """CIFAR-10 from the python pickle batches (``data_batch_1..5``, ``test_batch``) in ``folder``.

    Images come back as uint8 ``[n, 3, 32, 32]`` (the batches store rows of 3072 bytes, channel-major).
    """

    def read(name: str) -> tuple[np.ndarray, np.ndarray]:
        with (folder / name).open("rb") as handle:
            batch = pickle.load(handle, encoding="bytes")
        data = np.asarray(batch[b"data"], dtype=np.uint8)
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
        if data.ndim != 2 or data.shape[1] != 3072 or data.shape[0] != labels.shape[0]:
            raise ValueError(f"{name}: unexpected CIFAR-10 batch shapes {data.shape} / {labels.shape}.")
        return data.reshape(-1, 3, 32, 32), labels

    train = [read(f"data_batch_{i}") for i in range(1, 6)]
    x_test, y_test = read("test_batch")
    return {
        "x_train": np.concatenate([x for x, _ in train]),
        "y_train": np.concatenate([y for _, y in train]),
        "x_test": x_test,
        "y_test": y_test,
    }


def split_digits(x_raw: np.ndarray, y: np.ndarray, seed: int, *, test_fraction: float = 0.2) -> Arrays:
    """Split scikit-learn's digits (1797 8×8 images, pixel counts 0..16) and scale the 64 features to [0, 1].

    The split is stratified: in every class, ``round(test_fraction · n_class)`` samples chosen with ``seed``
    go to the test set (1438 train / 359 test with the default fraction).
    """
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0xD161]))
    test_mask = np.zeros(y.size, dtype=bool)
    for c in np.unique(y):
        members = np.flatnonzero(y == c)
        take = round(test_fraction * members.size)
        test_mask[rng.choice(members, size=take, replace=False)] = True
    x = (x_raw.astype(np.float64) / 16.0).astype(np.float32)
    return {
        "x_train": x[~test_mask],
        "y_train": y[~test_mask],
        "x_test": x[test_mask],
        "y_test": y[test_mask],
    }


def digits_raw() -> tuple[np.ndarray, np.ndarray]:
    """The unsplit digits arrays as stored by scikit-learn (uint8 pixel counts 0..16, int64 labels).

    Raises:
        ImportError: if scikit-learn is not installed (the ``train`` extra).
    """
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return np.asarray(bunch.data).astype(np.uint8), np.asarray(bunch.target).astype(np.int64)


def make_synthetic_arrays(
    seed: int, *, n_train: int = 2000, n_test: int = 500, features: int = 20, classes: int = 4
) -> Arrays:
    """A deterministic Gaussian mixture for tests: balanced classes, unit-variance noise around class means
    of norm 2.5 (a linear model reaches roughly 85–95% accuracy)."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5E7]))
    means = rng.normal(size=(classes, features))
    means *= 2.5 / np.linalg.norm(means, axis=1, keepdims=True)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.permutation(np.arange(n, dtype=np.int64) % classes)
        x = means[y] + rng.normal(size=(n, features))
        return x.astype(np.float32), y

    x_train, y_train = draw(n_train)
    x_test, y_test = draw(n_test)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}
