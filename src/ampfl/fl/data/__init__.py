"""Datasets and client partitions for the simulator (numpy only: importing this never imports torch).

>>> ds = load_dataset("synthetic")
>>> ds.x_train.shape, ds.num_classes
((2000, 20), 4)
>>> parts = partition_clients(ds.y_train, scheme="label_skew", num_clients=10, seed=0, labels_per_client=2)

Datasets (``load_dataset(name)``):

- ``synthetic``: deterministic Gaussian mixture, 20 features, 4 classes, 2000 / 500 samples (tests).
- ``digits``: scikit-learn's bundled 8×8 digits, 64 features in [0, 1], 10 classes (embedded default).
- ``adult``: UCI Adult preprocessed as in 000 Sec. VI-B, 14 features in [0, 1], label 1 = ">50K";
  32561 / 16281 rows (rows with missing values kept, as 000's count of 32,561 implies).
  ``adult-complete``: the same without rows that have a missing value (30162 / 15060).
- ``fmnist``: Fashion-MNIST, images ``[1, 28, 28]`` in [0, 1], 10 classes, 60000 / 10000.
- user-path datasets (``path=`` or under ``$AMPFL_DATA``): ``cifar10`` (python pickle batches,
  ``[3, 32, 32]``), ``emnist`` / ``emnist-<split>`` (the idx release, ByClass by default as in 004 Sec. 6),
  ``idx`` (any folder of MNIST-format files), ``cifar100`` (python pickle ``train``/``test``/``meta``,
  :mod:`ampfl.fl.data.cifar100`), ``femnist`` (LEAF json; its writer partition:
  :func:`ampfl.fl.data.femnist.load_femnist`; a stand-in without it: :mod:`ampfl.fl.data.writer_styles`).

- a user's own data: ``load_dataset("npz", path="file.npz")`` (``[dataset] path = "file.npz"``; arrays and
  the optional natural partition ``client_train``: :mod:`ampfl.fl.data.user`), or any loader added with
  :func:`register_dataset`.

Every name is an entry of the registry :data:`DATASETS` (built-in loaders: :mod:`ampfl.fl.data.builtin`).
Sources, checksums and the cache are described in :mod:`ampfl.fl.data.sources` and ``docs/datasets.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ampfl.fl.data import builtin
from ampfl.fl.data.dataset import Dataset
from ampfl.fl.data.partitions import SCHEMES, ClientPartition, max_fixed_clients, partition_clients
from ampfl.fl.data.sources import DataUnavailableError, data_dir
from ampfl.registry import Registry

__all__ = [
    "DATASETS",
    "DESCRIPTIONS",
    "FETCHABLE",
    "SCHEMES",
    "ClientPartition",
    "DataUnavailableError",
    "Dataset",
    "DatasetLoader",
    "data_dir",
    "fetch",
    "fetch_one",
    "load_dataset",
    "max_fixed_clients",
    "partition_clients",
    "register_dataset",
]

#: A loader: ``(name, *, path, seed, cache) -> Dataset`` (``cache``: the cache folder to use).
DatasetLoader = Callable[..., Dataset]

_B = "ampfl.fl.data.builtin:"

#: Datasets by name: each entry a loader (a ``"module:function"`` reference for the built-ins).
DATASETS: Registry[DatasetLoader] = Registry(
    "dataset",
    {
        "synthetic": _B + "load_synthetic",
        "digits": _B + "load_digits",
        "adult": _B + "load_adult",
        "adult-complete": _B + "load_adult",
        "fmnist": _B + "load_fmnist",
        "cifar10": _B + "load_cifar10",
        "emnist": _B + "load_emnist",
        "idx": _B + "load_idx",
        "femnist": _B + "load_femnist_dataset",
        "cifar100": _B + "load_cifar100",
        "shakespeare": _B + "load_shakespeare_dataset",
        "npz": "ampfl.fl.data.user:load_npz_entry",
    },
)

#: One line per dataset name, for ``ampfl data list``.
DESCRIPTIONS: dict[str, str] = {
    "synthetic": "Gaussian mixture for tests: 20 features, 4 classes, 2000/500 samples (generated)",
    "digits": "scikit-learn bundled 8x8 digits: 64 features in [0, 1], 10 classes (embedded default)",
    "adult": "UCI Adult as in 000: 14 features in [0, 1], binary label >50K, 32561/16281 rows",
    "adult-complete": "UCI Adult without rows with missing values: 30162/15060 rows",
    "fmnist": "Fashion-MNIST: [1, 28, 28] images in [0, 1], 10 classes, 60000/10000",
    "cifar10": "CIFAR-10 from python pickle batches at a user path: [3, 32, 32] in [0, 1], 10 classes",
    "emnist": "EMNIST ByClass (or emnist-<split>) in idx format at a user path: [1, 28, 28], 62 classes",
    "idx": "any folder of MNIST-format idx files at a user path (train-/t10k- images and labels)",
    "femnist": "FEMNIST (LEAF json) at a user path: [1, 28, 28], 62 classes, one client per writer",
    "cifar100": "CIFAR-100 python pickle (train/test/meta) at a user path: [3, 32, 32], 100 classes",
    "shakespeare": "Shakespeare plays (LEAF-style): 80-char windows, next char of 80, one client per role",
    "npz": "your own arrays in a .npz file (path=): x_train, y_train, x_test, y_test, optional client_train",
}

#: Names accepted by :func:`fetch` and ``ampfl data fetch``.
FETCHABLE: tuple[str, ...] = ("adult", "fmnist", "digits", "shakespeare")


def register_dataset(
    name: str, loader: DatasetLoader | str, *, description: str = "", replace: bool = False
) -> None:
    """Add a dataset by name: ``loader(name, *, path, seed, cache) -> Dataset`` (or a ``"module:function"``
    reference to one); then ``[dataset] name = "<name>"`` loads it."""
    DATASETS.register(name, loader, replace=replace)
    DESCRIPTIONS[name] = description or f"user dataset {name!r}"


def load_dataset(
    name: str, *, path: str | Path | None = None, seed: int = 0, cache_dir: Path | None = None
) -> Dataset:
    """Load a dataset by name (see the module docstring), fetching and caching it when needed.

    Args:
        name: an entry of :data:`DATASETS` (``emnist-<split>`` also accepted).
        path: a folder (or for CIFAR-10 the folder holding ``cifar-10-batches-py``) for user-path datasets;
            the ``.npz`` file of ``npz``; for ``adult``/``fmnist`` an extra place to look for the raw files.
        seed: generation seed of ``synthetic`` and train/test split seed of ``digits``; unused otherwise.
        cache_dir: the cache folder (default :func:`data_dir`).

    Raises:
        ValueError: unknown name.
        DataUnavailableError: the data cannot be obtained (one line saying why).
    """
    base = name.split("-", 1)[0] if name.startswith("emnist-") else name
    if base not in DATASETS:
        raise ValueError(f"dataset must be one of {', '.join(DATASETS)}. Found {name!r}.")
    cache = cache_dir if cache_dir is not None else data_dir()
    loader: Any = DATASETS[base]
    dataset: Dataset = loader(name, path=path, seed=seed, cache=cache)
    return dataset


def fetch_one(name: str, *, cache_dir: Path | None = None) -> Path:
    """Fetch, verify and cache one of :data:`FETCHABLE`; return where it landed.

    Raises:
        ValueError: unknown name.
        DataUnavailableError: it cannot be obtained.
    """
    if name not in FETCHABLE:
        raise ValueError(f"name must be one of {', '.join(FETCHABLE)}. Found {name!r}.")
    if name == "digits":
        builtin.digits_verified()
        import sklearn.datasets

        return Path(sklearn.datasets.__file__).parent / "data" / "digits.csv.gz"
    cache = cache_dir if cache_dir is not None else data_dir()
    if name == "shakespeare":
        load_dataset(name, cache_dir=cache)
        return cache / name
    builtin.cached(name, name, cache, None)
    return cache / name


def fetch(names: list[str], *, cache_dir: Path | None = None) -> dict[str, Path]:
    """Fetch several datasets (:func:`fetch_one` each); all are tried before failing.

    Raises:
        DataUnavailableError: if any failed, with the reasons joined on one line.
    """
    landed: dict[str, Path] = {}
    errors: list[str] = []
    for name in names:
        try:
            landed[name] = fetch_one(name, cache_dir=cache_dir)
        except DataUnavailableError as exc:
            errors.append(str(exc))
    if errors:
        raise DataUnavailableError(" | ".join(errors))
    return landed
