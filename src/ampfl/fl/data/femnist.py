"""FEMNIST (LEAF) from a user path: one client per writer (003 Sec. 6.1, Caldas et al. 2018).

Input: LEAF's json files (``data/femnist/data/...`` after LEAF's preprocessing), each
``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [[784 floats]], "y": [labels]}}}``.
The path is either

* a folder with ``train/`` and ``test/`` sub-folders of json files (LEAF's own train/test split, e.g. after
  ``preprocess.sh --sf 0.05 -k 0 -s niid -t sample``): both are read as they are; or
* a folder of json files (e.g. LEAF's ``all_data/``): every writer's examples are split here as LEAF's
  ``sample`` split does: a seeded permutation, the first ``max(1, int(0.9 n))`` train, the rest test
  (003: "about 90% of each client's data used for training"); writers with fewer than 2 examples are dropped.

Images become float32 ``[n, 1, 28, 28]`` with the values as stored (LEAF keeps pixel/255 of the NIST scans);
labels 0..61 (digits, upper case, lower case). A writer's examples in several files are concatenated.
``writers`` picks a seeded subset of that many writers (003 samples 190), sorted by writer id; the parsed
arrays are cached under ``data_dir()/femnist`` (keyed by the files' names, sizes and modification times).
"""

from __future__ import annotations

import hashlib
import json
import string
from pathlib import Path

import numpy as np

from ampfl.fl.data.natural import NaturalData, group_indices
from ampfl.fl.data.sources import DataUnavailableError, data_dir, load_arrays, save_arrays

__all__ = ["CLASS_NAMES", "NUM_CLASSES", "TRAIN_FRACTION", "load_femnist", "read_leaf_folder"]

NUM_CLASSES = 62
CLASS_NAMES = tuple(string.digits + string.ascii_uppercase + string.ascii_lowercase)
#: LEAF's default ``--tf`` (train fraction of every writer's examples).
TRAIN_FRACTION = 0.9
_PIXELS = 28 * 28
_CACHE_VERSION = "v1"

Writers = dict[str, tuple[np.ndarray, np.ndarray]]


def read_leaf_folder(folder: Path) -> Writers:
    """Writer id -> (x ``[n, 784]`` float32, y ``[n]`` int64) from every ``*.json`` file in ``folder``.

    Raises:
        DataUnavailableError: no json file, or a file that is not LEAF FEMNIST (one line naming it).
    """
    files = sorted(folder.glob("*.json"))
    if not files:
        raise DataUnavailableError(f"femnist: no *.json files in {folder}")
    parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for file in files:
        try:
            blob = json.loads(file.read_text(encoding="utf-8"))
            users, user_data = blob["users"], blob["user_data"]
            counts = blob.get("num_samples", [None] * len(users))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataUnavailableError(
                f"femnist: {file} is not a LEAF json file (users, user_data): {type(exc).__name__}"
            ) from None
        for user, count in zip(users, counts, strict=True):
            x = np.asarray(user_data[user]["x"], dtype=np.float32).reshape(-1, _PIXELS)
            y = np.asarray(user_data[user]["y"], dtype=np.int64).reshape(-1)
            if x.shape[0] != y.shape[0] or (count is not None and int(count) != y.shape[0]):
                raise DataUnavailableError(
                    f"femnist: {file}: writer {user} has {x.shape[0]} images, {y.shape[0]} labels and "
                    f"num_samples {count}"
                )
            if y.size and (y.min() < 0 or y.max() >= NUM_CLASSES):
                raise DataUnavailableError(f"femnist: {file}: writer {user} has labels outside 0..61")
            parts.setdefault(str(user), []).append((x, y))
    return {
        user: (np.concatenate([x for x, _ in p]), np.concatenate([y for _, y in p]))
        for user, p in parts.items()
    }


def _split_writer(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    order = rng.permutation(n)
    cut = max(1, int(TRAIN_FRACTION * n))
    return order[:cut], order[cut:]


def _build(root: Path, seed: int) -> dict[str, np.ndarray]:
    if (root / "train").is_dir() and (root / "test").is_dir():
        train, test = read_leaf_folder(root / "train"), read_leaf_folder(root / "test")
        empty = (np.zeros((0, _PIXELS), np.float32), np.zeros(0, np.int64))
        names = sorted(train)
        pairs = [(train[w], test.get(w, empty)) for w in names]
    else:
        writers = read_leaf_folder(root)
        names = sorted(w for w, (_, y) in writers.items() if y.size >= 2)
        pairs = []
        for i, w in enumerate(names):
            x, y = writers[w]
            tr, te = _split_writer(y.size, np.random.default_rng([seed, 0, i]))
            pairs.append(((x[tr], y[tr]), (x[te], y[te])))
    if not names:
        raise DataUnavailableError(f"femnist: no writer with at least 2 examples in {root}")
    return {
        "x_train": np.concatenate([a[0] for a, _ in pairs]),
        "y_train": np.concatenate([a[1] for a, _ in pairs]),
        "x_test": np.concatenate([b[0] for _, b in pairs]),
        "y_test": np.concatenate([b[1] for _, b in pairs]),
        "owner_train": np.concatenate([np.full(a[1].size, i) for i, (a, _) in enumerate(pairs)]),
        "owner_test": np.concatenate([np.full(b[1].size, i) for i, (_, b) in enumerate(pairs)]),
        "writers": np.array(names),
    }


def _cache_key(root: Path, seed: int) -> str:
    files = sorted(p for p in root.rglob("*.json") if p.is_file())
    h = hashlib.sha256(f"{_CACHE_VERSION}|{root.resolve()}|{seed}".encode())
    for p in files:
        st = p.stat()
        h.update(f"|{p.relative_to(root)}|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def load_femnist(
    path: str | Path,
    *,
    writers: int | None = None,
    seed: int = 0,
    cache_dir: Path | None = None,
) -> NaturalData:
    """FEMNIST with one client per writer (module docstring).

    Args:
        path: LEAF folder (``train/`` + ``test/``, or json files to split per writer).
        writers: keep a seeded subset of this many writers (``None``: all).
        seed: seed of the per-writer split and of the writer subset.
        cache_dir: cache root (default :func:`~ampfl.fl.data.sources.data_dir`).

    Raises:
        ValueError: ``writers`` < 1.
        DataUnavailableError: the folder is missing or holds no LEAF FEMNIST data.
    """
    from ampfl.fl.data.dataset import Dataset

    if writers is not None and writers < 1:
        raise ValueError(f"writers must be >= 1 (or None for all). Found {writers}.")
    root = Path(path).expanduser()
    if not root.is_dir():
        raise DataUnavailableError(f"femnist: {root} is not a folder of LEAF json files")
    cache = (cache_dir if cache_dir is not None else data_dir()) / "femnist"
    npz = cache / f"femnist-{_cache_key(root, seed)}.npz"
    arrays = load_arrays(npz)
    if arrays is None:
        arrays = _build(root, seed)
        save_arrays(npz, arrays)
    names = [str(w) for w in arrays["writers"]]
    keep = np.arange(len(names))
    if writers is not None and writers < len(names):
        keep = np.sort(np.random.default_rng([seed, 1]).choice(len(names), writers, replace=False))
    remap = np.full(len(names), -1)
    remap[keep] = np.arange(keep.size)
    rows = {}
    for split in ("train", "test"):
        new_owner = remap[arrays[f"owner_{split}"]]
        picked = np.flatnonzero(new_owner >= 0)
        rows[split] = (arrays[f"x_{split}"][picked], arrays[f"y_{split}"][picked], new_owner[picked])
    dataset = Dataset(
        "femnist",
        rows["train"][0].reshape(-1, 1, 28, 28),
        rows["train"][1],
        rows["test"][0].reshape(-1, 1, 28, 28),
        rows["test"][1],
        NUM_CLASSES,
        source=f"user path {root} (LEAF json), {keep.size} of {len(names)} writers",
        class_names=CLASS_NAMES,
    )
    return NaturalData(
        dataset,
        group_indices(rows["train"][2], keep.size),
        group_indices(rows["test"][2], keep.size),
        tuple(names[i] for i in keep),
        note=f"FEMNIST, one client per writer ({keep.size} writers)",
    )
