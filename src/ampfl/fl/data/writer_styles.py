"""``fmnist_styles``: a STAND-IN for FEMNIST's writer partition (used when no FEMNIST path is given).

FEMNIST's clients are writers: the same 62 characters, each written in the writer's own hand (slant, size,
position, stroke width), so the clients differ mainly in their *features*. This stand-in builds that kind of
heterogeneity from Fashion-MNIST, which is available offline: it is not FEMNIST, and its numbers are not
comparable with 003's FEMNIST column.

* Fashion-MNIST's 60,000 training and 10,000 test images are each split uniformly at random into
  ``num_clients`` near-equal shares (IID labels: the heterogeneity is in the features only); client i owns one
  training share and one test share.
* Client i has a fixed "writer style", drawn once from ``seed``: a rotation by an angle uniform in
  ±:data:`MAX_ROTATION` degrees, a shift uniform in ±:data:`MAX_SHIFT` pixels on each axis (both about the
  image centre, bilinear, zero background), and a stroke change: thinner (grey erosion), unchanged or
  thicker (grey dilation), each with probability 1/3, with a 3×3 cross.
* The style is applied to all of the client's training *and* test images, so each client is scored on test
  images in its own style (:class:`~ampfl.fl.data.natural.NaturalTask`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ampfl.fl.data.natural import NaturalData

__all__ = ["MAX_ROTATION", "MAX_SHIFT", "apply_style", "draw_styles", "load_fmnist_styles", "style_clients"]

MAX_ROTATION = 30.0
MAX_SHIFT = 3.0
_CROSS = np.array([[[0, 1, 0], [1, 1, 1], [0, 1, 0]]], dtype=bool)


def draw_styles(num_clients: int, seed: int) -> np.ndarray:
    """``[num_clients, 4]``: rotation (degrees), shift down, shift right (pixels), stroke (−1, 0, 1)."""
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1. Found {num_clients}.")
    rng = np.random.default_rng([seed, 0x5717])
    return np.column_stack(
        [
            rng.uniform(-MAX_ROTATION, MAX_ROTATION, num_clients),
            rng.uniform(-MAX_SHIFT, MAX_SHIFT, (num_clients, 2)),
            rng.integers(-1, 2, num_clients),
        ]
    )


def apply_style(images: np.ndarray, style: np.ndarray) -> np.ndarray:
    """``images`` ``[n, 1, H, W]`` (float) in the style ``(angle, dy, dx, stroke)`` of :func:`draw_styles`.

    Output pixel o takes the input at R⁻¹(o − centre − shift) + centre (bilinear, zero outside), then the
    stroke change; a zero style returns the images unchanged.
    """
    from scipy import ndimage

    angle, dy, dx, stroke = (float(v) for v in style)
    n, ch, h, w = images.shape
    flat = images.reshape(n * ch, h, w).astype(np.float32, copy=False)
    out = flat.copy()
    if angle or dy or dx:
        t = np.deg2rad(angle)
        inv = np.array([[np.cos(t), np.sin(t)], [-np.sin(t), np.cos(t)]])  # R(angle)^-1, (row, col) axes
        centre = np.array([(h - 1) / 2.0, (w - 1) / 2.0])
        matrix = np.eye(3)
        matrix[1:, 1:] = inv
        offset = np.concatenate([[0.0], centre - inv @ (centre + np.array([dy, dx]))])
        out = ndimage.affine_transform(flat, matrix, offset=offset, order=1, mode="constant", cval=0.0)
    if stroke > 0:
        out = ndimage.grey_dilation(out, footprint=_CROSS)
    elif stroke < 0:
        out = ndimage.grey_erosion(out, footprint=_CROSS)
    return np.clip(out, 0.0, 1.0).astype(np.float32).reshape(n, ch, h, w)


def style_clients(
    x_train: np.ndarray, x_test: np.ndarray, num_clients: int, seed: int
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], list[np.ndarray], np.ndarray]:
    """Split train and test uniformly into ``num_clients`` shares and style each client's share.

    Returns (styled x_train, styled x_test, train indices per client, test indices per client, styles).
    """
    if not 1 <= num_clients <= min(len(x_train), len(x_test)):
        raise ValueError(
            f"num_clients must be in [1, {min(len(x_train), len(x_test))}]. Found {num_clients}."
        )
    rng = np.random.default_rng([seed, 0x5718])
    train = [np.sort(p) for p in np.array_split(rng.permutation(len(x_train)), num_clients)]
    test = [np.sort(p) for p in np.array_split(rng.permutation(len(x_test)), num_clients)]
    styles = draw_styles(num_clients, seed)
    xs_tr, xs_te = x_train.copy(), x_test.copy()
    for i in range(num_clients):
        xs_tr[train[i]] = apply_style(x_train[train[i]], styles[i])
        xs_te[test[i]] = apply_style(x_test[test[i]], styles[i])
    return xs_tr, xs_te, [p.astype(np.int64) for p in train], [p.astype(np.int64) for p in test], styles


def load_fmnist_styles(
    num_clients: int, *, seed: int = 0, path: str | Path | None = None, cache_dir: Path | None = None
) -> NaturalData:
    """Fashion-MNIST with one fixed writer style per client (module docstring); a stand-in for FEMNIST."""
    from ampfl.fl.data import load_dataset
    from ampfl.fl.data.dataset import Dataset

    base = load_dataset("fmnist", path=path, cache_dir=cache_dir)
    x_tr, x_te, train, test, styles = style_clients(base.x_train, base.x_test, num_clients, seed)
    dataset = Dataset(
        "fmnist_styles",
        x_tr,
        base.y_train,
        x_te,
        base.y_test,
        base.num_classes,
        source=f"stand-in for FEMNIST: {base.source}, {num_clients} client styles (seed {seed})",
        class_names=base.class_names,
    )
    names = tuple(
        f"style{i}(rot={s[0]:+.1f},dy={s[1]:+.1f},dx={s[2]:+.1f},stroke={int(s[3]):+d})"
        for i, s in enumerate(styles)
    )
    note = "fmnist_styles: STAND-IN for FEMNIST (Fashion-MNIST, IID labels, one fixed style per client)"
    return NaturalData(dataset, train, test, names, note=note)
