"""The dataset type every loader returns: a train/test split, with an optional natural partition (numpy)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ampfl.fl.data.loaders import images_to_float

__all__ = ["Dataset", "count_classes", "float_images", "make_dataset"]


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
    #: A natural partition, if the data has one: the client id (0 .. N − 1) of every training example.
    client_train: np.ndarray | None = None

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
        if self.client_train is not None:
            c = self.client_train
            if c.dtype != np.int64 or c.shape != self.y_train.shape or (c.size and int(c.min()) < 0):
                raise ValueError(
                    f"{self.name}: client_train must be int64 [n_train] with client ids >= 0. "
                    f"Found {c.dtype} {c.shape}."
                )

    def natural_partition(self) -> list[np.ndarray] | None:
        """The training indices of each client of :attr:`client_train` (ids 0 .. max), or None."""
        if self.client_train is None:
            return None
        order = np.argsort(self.client_train, kind="stable")
        counts = np.bincount(self.client_train)
        return [part.astype(np.int64) for part in np.split(order, np.cumsum(counts)[:-1])]

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


def make_dataset(
    name: str,
    a: dict[str, np.ndarray],
    num_classes: int,
    source: str,
    class_names: tuple[str, ...] = (),
    feature_names: tuple[str, ...] = (),
) -> Dataset:
    """A :class:`Dataset` from arrays ``x_train, y_train, x_test, y_test`` (cast to float32 / int64)."""
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


def float_images(a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """uint8 image arrays scaled to float32 in [0, 1]; other arrays unchanged."""
    out = dict(a)
    for key in ("x_train", "x_test"):
        if out[key].dtype == np.uint8:
            out[key] = images_to_float(out[key])
    return out


def count_classes(a: dict[str, np.ndarray]) -> int:
    """1 + the largest label of either split."""
    return int(max(a["y_train"].max(), a["y_test"].max())) + 1
