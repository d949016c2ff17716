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

Sources, checksums and the cache are described in :mod:`ampfl.fl.data.sources` and ``docs/datasets.md``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ampfl.fl.data import loaders
from ampfl.fl.data.partitions import SCHEMES, ClientPartition, max_fixed_clients, partition_clients
from ampfl.fl.data.sources import (
    DataUnavailableError,
    data_dir,
    ensure_files,
    load_arrays,
    read_manifest,
    save_arrays,
)

__all__ = [
    "DATASETS",
    "FETCHABLE",
    "SCHEMES",
    "ClientPartition",
    "DataUnavailableError",
    "Dataset",
    "data_dir",
    "fetch",
    "fetch_one",
    "load_dataset",
    "max_fixed_clients",
    "partition_clients",
]

#: Datasets known by name, with a one-line description.
DATASETS: dict[str, str] = {
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
}

#: Names accepted by :func:`fetch` and ``ampfl data fetch``.
FETCHABLE: tuple[str, ...] = ("adult", "fmnist", "digits", "shakespeare")

#: Version of the parsed-array cache format; bump it when preprocessing changes.
_CACHE_VERSION = "v1"

#: SHA-256 of scikit-learn's digits arrays (uint8 pixels, then int64 targets); scikit-learn 1.9.1.
DIGITS_SHA256 = "65e5b4619795efb40c1082f4c350c049e4ad552200d369b6ae99e21eef5e72c5"

_FMNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)  # fmt: skip
_CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
#: Published MD5 digests of the CIFAR-10 python batches (cs.toronto.edu/~kriz/cifar.html, as listed by
#: torchvision). No SHA-256 is published for them.
CIFAR10_MD5 = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
}
_EMNIST_SPLITS = ("byclass", "bymerge", "balanced", "letters", "digits", "mnist")


@dataclass(frozen=True, eq=False)
class Dataset:
    """A train/test split ready for training: float32 features, int64 labels ``0 .. num_classes - 1``."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    source: str = ""
    class_names: tuple[str, ...] = ()
    feature_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for split in ("train", "test"):
            x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
            if x.dtype != np.float32 or y.dtype != np.int64 or y.ndim != 1 or x.shape[0] != y.shape[0]:
                raise ValueError(
                    f"{self.name}: x_{split} must be float32 [n, ...] and y_{split} int64 [n]. "
                    f"Found {x.dtype} {x.shape} and {y.dtype} {y.shape}."
                )
        if self.x_train.shape[1:] != self.x_test.shape[1:]:
            raise ValueError(
                f"{self.name}: train and test inputs differ: {self.x_train.shape} vs {self.x_test.shape}."
            )

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input, e.g. ``(14,)`` or ``(1, 28, 28)``."""
        return tuple(int(d) for d in self.x_train.shape[1:])

    def summary(self) -> dict[str, object]:
        """Shapes, class counts and source, for ``ampfl data info``."""
        return {
            "name": self.name,
            "input_shape": list(self.input_shape),
            "num_classes": self.num_classes,
            "n_train": int(self.y_train.shape[0]),
            "n_test": int(self.y_test.shape[0]),
            "train_class_counts": np.bincount(self.y_train, minlength=self.num_classes).tolist(),
            "test_class_counts": np.bincount(self.y_test, minlength=self.num_classes).tolist(),
            "x_min": float(self.x_train.min()),
            "x_max": float(self.x_train.max()),
            "source": self.source,
            "class_names": list(self.class_names),
        }


def load_dataset(
    name: str, *, path: str | Path | None = None, seed: int = 0, cache_dir: Path | None = None
) -> Dataset:
    """Load a dataset by name (see the module docstring), fetching and caching it when needed.

    Args:
        name: one of :data:`DATASETS` (``emnist-<split>`` also accepted).
        path: a folder (or for CIFAR-10 the folder holding ``cifar-10-batches-py``) for user-path datasets;
            for ``adult``/``fmnist`` an extra place to look for the raw files.
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
    if name == "synthetic":
        a = loaders.make_synthetic_arrays(seed)
        return _make(name, a, 4, f"generated (seed {seed})", tuple(str(i) for i in range(4)))
    if name == "digits":
        x_raw, y_raw = _digits_verified()
        return _make(name, loaders.split_digits(x_raw, y_raw, seed), 10, "scikit-learn bundled digits",
                     tuple(str(i) for i in range(10)))  # fmt: skip
    if name in ("adult", "adult-complete"):
        a, source = _cached(name, "adult", cache, path)
        return _make(name, a, 2, source, ("<=50K", ">50K"), loaders.ADULT_COLUMNS)
    if name == "fmnist":
        a, source = _cached(name, "fmnist", cache, path)
        return _make(name, _float_images(a), 10, source, _FMNIST_CLASSES)
    if name == "cifar10":
        folder = _cifar10_folder(path, cache)
        return _make(name, _float_images(loaders.load_cifar10_arrays(folder)), 10, f"user path {folder}",
                     _CIFAR10_CLASSES)  # fmt: skip
    if name == "cifar100":
        from ampfl.fl.data.cifar100 import find_cifar100, load_cifar100_arrays

        folder = find_cifar100(path, cache)
        a, names = load_cifar100_arrays(folder)
        return _make(name, _float_images(a), 100, f"user path {folder}", names)
    if name == "femnist":  # its natural partition: ampfl.fl.data.femnist.load_femnist
        from ampfl.fl.data.femnist import load_femnist

        if path is None:
            raise DataUnavailableError(
                "femnist: pass path= / --path to LEAF's FEMNIST json folder (train/ and test/, or all_data/)"
            )
        return load_femnist(path, cache_dir=cache).dataset
    if name == "shakespeare":  # its natural partition: ampfl.fl.data.shakespeare.load_shakespeare
        from ampfl.fl.data.shakespeare import load_shakespeare

        return load_shakespeare(cache)[0]
    if base == "emnist":
        folder, files = _emnist_files(name, path, cache)
        a = loaders.load_idx_folder(folder, files, transpose=True)
        return _make(name, _float_images(a), _num_classes(a), f"user path {folder}")
    if name == "idx":
        folder, files = _idx_files(path, cache)
        a = loaders.load_idx_folder(folder, files)
        return _make(name, _float_images(a), _num_classes(a), f"user path {folder}")
    raise ValueError(f"dataset must be one of {', '.join(DATASETS)}. Found {name!r}.")  # pragma: no cover


def fetch_one(name: str, *, cache_dir: Path | None = None) -> Path:
    """Fetch, verify and cache one of :data:`FETCHABLE`; return where it landed.

    Raises:
        ValueError: unknown name.
        DataUnavailableError: it cannot be obtained.
    """
    if name not in FETCHABLE:
        raise ValueError(f"name must be one of {', '.join(FETCHABLE)}. Found {name!r}.")
    if name == "digits":
        _digits_verified()
        import sklearn.datasets

        return Path(sklearn.datasets.__file__).parent / "data" / "digits.csv.gz"
    cache = cache_dir if cache_dir is not None else data_dir()
    if name == "shakespeare":
        load_dataset(name, cache_dir=cache)
        return cache / name
    _cached(name, name, cache, None)
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


# ----------------------------------------------------------------------------------------------------------


def _make(
    name: str,
    a: dict[str, np.ndarray],
    num_classes: int,
    source: str,
    class_names: tuple[str, ...] = (),
    feature_names: tuple[str, ...] = (),
) -> Dataset:
    return Dataset(
        name=name,
        x_train=np.ascontiguousarray(a["x_train"], dtype=np.float32),
        y_train=np.ascontiguousarray(a["y_train"], dtype=np.int64),
        x_test=np.ascontiguousarray(a["x_test"], dtype=np.float32),
        y_test=np.ascontiguousarray(a["y_test"], dtype=np.int64),
        num_classes=num_classes,
        source=source,
        class_names=class_names,
        feature_names=feature_names,
    )


def _float_images(a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = dict(a)
    for key in ("x_train", "x_test"):
        if out[key].dtype == np.uint8:
            out[key] = loaders.images_to_float(out[key])
    return out


def _num_classes(a: dict[str, np.ndarray]) -> int:
    return int(max(a["y_train"].max(), a["y_test"].max())) + 1


def _digits_verified() -> tuple[np.ndarray, np.ndarray]:
    try:
        x, y = loaders.digits_raw()
    except ImportError:
        raise DataUnavailableError(
            "digits: scikit-learn is not installed (install the 'train' extra: pip install 'ampfl[train]')"
        ) from None
    digest = hashlib.sha256(x.tobytes() + y.tobytes()).hexdigest()
    if digest != DIGITS_SHA256:
        raise DataUnavailableError(
            f"digits: scikit-learn's digits arrays fail the checksum (sha256 {digest})"
        )
    return x, y


def _cached(name: str, raw: str, cache: Path, path: str | Path | None) -> tuple[dict[str, np.ndarray], str]:
    """Parsed arrays of ``name`` from the npz cache, else parsed from the verified raw files and cached."""
    folder = cache / raw
    npz = folder / f"{name}-{_CACHE_VERSION}.npz"
    arrays = load_arrays(npz)
    if arrays is None:
        folder = ensure_files(raw, cache_dir=cache, path=path)
        if raw == "adult":
            arrays, _ = loaders.parse_adult(
                (folder / "adult.data").read_bytes(),
                (folder / "adult.test").read_bytes(),
                drop_missing=name == "adult-complete",
            )
        else:
            arrays = loaders.load_idx_folder(
                folder,
                {
                    "x_train": "train-images-idx3-ubyte.gz",
                    "y_train": "train-labels-idx1-ubyte.gz",
                    "x_test": "t10k-images-idx3-ubyte.gz",
                    "y_test": "t10k-labels-idx1-ubyte.gz",
                },
            )
        save_arrays(npz, arrays)
    files = read_manifest(folder).get("files", {})
    origins = sorted({str(o).rsplit("/", 1)[0] for o in files.values()}) if isinstance(files, dict) else []
    return arrays, f"{folder} (from {', '.join(origins) or 'cache'})"


def _search_folders(path: str | Path | None, cache: Path, subfolders: tuple[str, ...]) -> list[Path]:
    roots = [Path(path).expanduser()] if path is not None else []
    roots += [cache, data_dir()]
    return [root / sub if sub else root for root in roots for sub in ("", *subfolders)]


def _cifar10_folder(path: str | Path | None, cache: Path) -> Path:
    folders = _search_folders(path, cache, ("cifar-10-batches-py", "cifar10", "cifar10/cifar-10-batches-py"))
    for folder in folders:
        if all((folder / name).is_file() for name in CIFAR10_MD5):
            for name, md5 in CIFAR10_MD5.items():
                found = hashlib.md5((folder / name).read_bytes(), usedforsecurity=False).hexdigest()
                if found != md5:
                    raise DataUnavailableError(
                        f"cifar10: {folder / name} fails the published MD5 (expected {md5}, found {found})"
                    )
            return folder
    hint = "extract cifar-10-python.tar.gz and pass path= (or --path) to the folder cifar-10-batches-py"
    where = "pass path= / --path" if path is None else f"looked in {path}"
    raise DataUnavailableError(f"cifar10: data_batch_1..5 and test_batch not found ({where}); {hint}")


def _first_existing(folder: Path, stem: str) -> str | None:
    for candidate in (stem, stem + ".gz"):
        if (folder / candidate).is_file():
            return candidate
    return None


def _find_idx(folders: list[Path], stems: dict[str, str]) -> tuple[Path, dict[str, str]] | None:
    for folder in folders:
        found = {key: _first_existing(folder, stem) for key, stem in stems.items()}
        if all(found.values()):
            return folder, {k: str(v) for k, v in found.items()}
    return None


def _emnist_files(name: str, path: str | Path | None, cache: Path) -> tuple[Path, dict[str, str]]:
    split = name.split("-", 1)[1] if "-" in name else "byclass"
    if split not in _EMNIST_SPLITS:
        raise ValueError(f"EMNIST split must be one of {', '.join(_EMNIST_SPLITS)}. Found {split!r}.")
    stems = {
        "x_train": f"emnist-{split}-train-images-idx3-ubyte",
        "y_train": f"emnist-{split}-train-labels-idx1-ubyte",
        "x_test": f"emnist-{split}-test-images-idx3-ubyte",
        "y_test": f"emnist-{split}-test-labels-idx1-ubyte",
    }
    hit = _find_idx(_search_folders(path, cache, ("emnist", "gzip", "emnist/gzip")), stems)
    if hit is None:
        raise DataUnavailableError(
            f"{name}: {stems['x_train']}[.gz] and its three siblings not found; pass path= / --path to the "
            "folder of the EMNIST idx release (gzip.zip from the NIST EMNIST page, extracted)"
        )
    return hit


def _idx_files(path: str | Path | None, cache: Path) -> tuple[Path, dict[str, str]]:
    if path is None:
        raise DataUnavailableError("idx: pass path= / --path to a folder of MNIST-format idx files")
    for prefix in ("t10k", "test"):
        stems = {
            "x_train": "train-images-idx3-ubyte",
            "y_train": "train-labels-idx1-ubyte",
            "x_test": f"{prefix}-images-idx3-ubyte",
            "y_test": f"{prefix}-labels-idx1-ubyte",
        }
        hit = _find_idx([Path(path).expanduser()], stems)
        if hit is not None:
            return hit
    raise DataUnavailableError(
        f"idx: {path} must hold train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and "
        "t10k-labels-idx1-ubyte (optionally .gz)"
    )
