"""The built-in datasets' loaders, one function each, registered by name in :data:`ampfl.fl.data.DATASETS`.

Every loader takes ``(name, *, path, seed, cache)`` and returns a :class:`~ampfl.fl.data.dataset.Dataset`;
``load_dataset`` resolves the cache folder and looks the loader up. Sources, checksums and the cache:
:mod:`ampfl.fl.data.sources`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from ampfl.fl.data import loaders
from ampfl.fl.data.dataset import Dataset, count_classes, float_images, make_dataset
from ampfl.fl.data.sources import (
    DataUnavailableError,
    data_dir,
    ensure_files,
    load_arrays,
    read_manifest,
    save_arrays,
)

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


def load_synthetic(name: str, *, path: str | Path | None, seed: int, cache: Path) -> Dataset:
    a = loaders.make_synthetic_arrays(seed)
    return make_dataset(name, a, 4, f"generated (seed {seed})", tuple(str(i) for i in range(4)))


def load_digits(name: str, *, path: str | Path | None, seed: int, cache: Path) -> Dataset:
    x_raw, y_raw = digits_verified()
    return make_dataset(name, loaders.split_digits(x_raw, y_raw, seed), 10, "scikit-learn bundled digits",
                        tuple(str(i) for i in range(10)))  # fmt: skip


def load_adult(name: str, *, path: str | Path | None, seed: int, cache: Path) -> Dataset:
    a, source = cached(name, "adult", cache, path)
    return make_dataset(name, a, 2, source, ("<=50K", ">50K"), loaders.ADULT_COLUMNS)


def load_fmnist(name: str, *, path: str | Path | None, seed: int, cache: Path) -> Dataset:
    a, source = cached(name, "fmnist", cache, path)
    return make_dataset(name, float_images(a), 10, source, _FMNIST_CLASSES)


def load_cifar10(name: str, *, path: str | Path | None, seed: int, cache: Path) -> Dataset:
    folder = _cifar10_folder(path, cache)
    return make_dataset(name, float_images(loaders.load_cifar10_arrays(folder)), 10, f"user path {folder}",
                        _CIFAR10_CLASSES)  # fmt: skip


def load_cifar100(name: str, *, path: str | Path | None, seed: int, cache: Path) -> Dataset:
    from ampfl.fl.data.cifar100 import find_cifar100, load_cifar100_arrays

    folder = find_cifar100(path, cache)
    a, names = load_cifar100_arrays(folder)
    return make_dataset(name, float_images(a), 100, f"user path {folder}", names)


def load_femnist_dataset(name: str, *, path: str | Path | None, seed: int, cache: Path) -> Dataset:
    """FEMNIST's arrays; its natural partition: :func:`ampfl.fl.data.femnist.load_femnist`."""
    from ampfl.fl.data.femnist import load_femnist

    if path is None:
        raise DataUnavailableError(
            "femnist: pass path= / --path to LEAF's FEMNIST json folder (train/ and test/, or all_data/)"
        )
    return load_femnist(path, cache_dir=cache).dataset


def load_shakespeare_dataset(name: str, *, path: str | Path | None, seed: int, cache: Path) -> Dataset:
    """Shakespeare's arrays; its natural partition: :func:`ampfl.fl.data.shakespeare.load_shakespeare`."""
    from ampfl.fl.data.shakespeare import load_shakespeare

    return load_shakespeare(cache)[0]


def load_emnist(name: str, *, path: str | Path | None, seed: int, cache: Path) -> Dataset:
    folder, files = _emnist_files(name, path, cache)
    a = loaders.load_idx_folder(folder, files, transpose=True)
    return make_dataset(name, float_images(a), count_classes(a), f"user path {folder}")


def load_idx(name: str, *, path: str | Path | None, seed: int, cache: Path) -> Dataset:
    folder, files = _idx_files(path, cache)
    a = loaders.load_idx_folder(folder, files)
    return make_dataset(name, float_images(a), count_classes(a), f"user path {folder}")


def digits_verified() -> tuple[np.ndarray, np.ndarray]:
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


def cached(name: str, raw: str, cache: Path, path: str | Path | None) -> tuple[dict[str, np.ndarray], str]:
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
