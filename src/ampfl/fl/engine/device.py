"""Where the engine computes: ``[engine] device`` (``--device``) and what lives there.

The setting is one of ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (:data:`DEVICE_FORMS`).
:func:`is_device_name` checks its form without torch (the config's validator); :func:`resolve_device` turns
it into the device the engine uses: ``"auto"`` is ``"cuda:I"`` (I the current CUDA device) when torch sees a
CUDA device and ``"cpu"`` otherwise; ``"cuda"``/``"cuda:N"`` without such a device is a one-line
:class:`ValueError` naming the setting.

What lives on the device (:class:`ampfl.fl.engine.vectorised.Engine`): the data the clients train and are
scored on (one resident copy per data tensor, :func:`on_device`), a copy of the model's module (its buffers;
the parameters the engine passes are flat vectors, :func:`model_on`), the global model broadcast each round,
the ``[k, d]`` client stacks of each chunk and their gradients. What does not: the algorithms' server side —
the global model between rounds, clipping, noise and aggregation — stays on the caller's device (CPU), so the
privacy randomness comes from the same secret-keyed CPU generators, bit for bit, on every device
(docs/performance.md).
"""

from __future__ import annotations

import os
import re
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import torch

    from ampfl.fl.engine.functional_model import FunctionalModel

#: The accepted forms of ``[engine] device`` / ``--device``.
DEVICE_FORMS = '"auto", "cpu", "cuda" or "cuda:N" (N a device index >= 0)'

#: The engine's working-memory budget per chunk of clients on the CPU (MiB), when ``memory_cap_mb`` is unset.
CPU_MEMORY_CAP_MB = 1024.0

#: On a CUDA device, the share of the device's free memory (at the engine's start) one chunk may use when
#: ``memory_cap_mb`` is unset; the rest is left for the resident data, the results and workspaces.
CUDA_MEMORY_SHARE = 0.5

_FORM = re.compile(r"auto|cpu|cuda(:[0-9]+)?")

#: Resident device copies of host tensors: id -> (weak reference to the host tensor, its version, the copy).
_RESIDENT: dict[tuple[int, str], tuple[weakref.ref[torch.Tensor], int, torch.Tensor]] = {}
#: Most resident copies kept (the training and test inputs and labels of a run, with room to spare).
_MAX_RESIDENT = 8
_TWINS: weakref.WeakKeyDictionary[FunctionalModel, dict[str, FunctionalModel]] = weakref.WeakKeyDictionary()


def is_device_name(name: object) -> bool:
    """Whether ``name`` has one of the :data:`DEVICE_FORMS` (without asking torch which devices exist)."""
    return isinstance(name, str) and _FORM.fullmatch(name) is not None


def resolve_device(name: str, *, setting: str = "engine.device") -> str:
    """The device ``name`` denotes on this machine, as a string: ``"cpu"`` or ``"cuda:N"`` (module docstring).

    ``reproduce``, ``demo`` and ``run`` resolve through this one function (it is what ``[engine] device`` and
    ``--device`` mean).

    Raises:
        ValueError: one line naming ``setting``: a malformed name, CUDA asked for where torch has none, or a
            device index beyond the devices present.
    """
    import torch

    if not is_device_name(name):
        raise ValueError(f"{setting}: must be {DEVICE_FORMS} (found {name!r})")
    if name == "cpu":
        return "cpu"
    available = torch.cuda.is_available()
    if name == "auto":
        return f"cuda:{torch.cuda.current_device()}" if available else "cpu"
    if not available:
        raise ValueError(
            f"{setting}: {name!r} but torch sees no CUDA device (torch {torch.__version__}, "
            f'built with CUDA {torch.version.cuda or "none"}); use "auto" or "cpu"'
        )
    index = int(name.partition(":")[2] or torch.cuda.current_device())
    count = torch.cuda.device_count()
    if index >= count:
        raise ValueError(
            f"{setting}: {name!r} but torch sees {count} CUDA device(s): cuda:0..cuda:{count - 1}"
        )
    return f"cuda:{index}"


def default_memory_cap_mb(device: str) -> float:
    """The per-chunk memory budget (MiB) of ``memory_cap_mb = None``: :data:`CPU_MEMORY_CAP_MB` on the CPU,
    :data:`CUDA_MEMORY_SHARE` of the CUDA device's free memory now (at least the CPU's budget)."""
    if device == "cpu":
        return CPU_MEMORY_CAP_MB
    import torch

    free, _total = torch.cuda.mem_get_info(torch.device(device))
    return max(CPU_MEMORY_CAP_MB, CUDA_MEMORY_SHARE * free / 2**20)


def use_deterministic_cuda() -> None:
    """Ask torch for deterministic CUDA kernels where it has them (docs/performance.md, "Devices"):
    cuDNN's deterministic algorithms without benchmarking, cuBLAS's fixed workspace
    (``CUBLAS_WORKSPACE_CONFIG=:4096:8`` unless set) and ``torch.use_deterministic_algorithms(True,
    warn_only=True)`` — an operation without a deterministic CUDA kernel warns instead of failing. Global
    torch settings: called once when an engine starts on a CUDA device."""
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)


def on_device(tensor: torch.Tensor, device: str) -> torch.Tensor:
    """``tensor`` on ``device``: itself when it is there already, else one resident copy per host tensor
    (made on first use and again only if the host tensor changed in place), so a run's data crosses to the
    device once."""
    if str(tensor.device) == device:
        return tensor
    key = (id(tensor), device)
    held = _RESIDENT.get(key)
    if held is not None and held[0]() is tensor and held[1] == tensor._version:
        return held[2]
    for stale in [k for k, (ref, _, _) in _RESIDENT.items() if ref() is None or k == key]:
        del _RESIDENT[stale]  # host tensor gone (an earlier run's data) or changed: free its copy
    copy = tensor.to(device)
    while len(_RESIDENT) >= _MAX_RESIDENT:
        _RESIDENT.pop(next(iter(_RESIDENT)))
    _RESIDENT[key] = (weakref.ref(tensor), tensor._version, copy)
    return copy


def model_on(model: FunctionalModel, device: str) -> FunctionalModel:
    """``model`` with its module (parameters and buffers) copied to ``device`` (cached per model and device;
    ``model`` itself on the CPU). The engine passes the parameters as flat vectors, so only the buffers and
    the structure of the copy matter; ``model``'s module is not changed."""
    if device == "cpu":
        return model
    import copy

    twins = _TWINS.setdefault(model, {})
    if device not in twins:
        twin = copy.copy(model)  # spec, input_shape, activation_numel: the same
        twin.module = copy.deepcopy(model.module).to(device)
        twins[device] = twin
    return twins[device]


def hook_at(
    hook: Callable[[int, np.ndarray, torch.Tensor], torch.Tensor], home: torch.device, device: str
) -> Callable[[int, np.ndarray, torch.Tensor], torch.Tensor]:
    """An engine gradient hook called with the gradients on ``home`` (where its own tensors, masks and noise
    live) and its result moved back to ``device``: the same numbers as on ``home``, two copies of ``[k, d]``
    per local step."""

    def moved(step: int, ids: np.ndarray, grads: torch.Tensor) -> torch.Tensor:
        return hook(step, ids, grads.to(home)).to(device)

    return moved


#: glibc's largest M_MMAP_THRESHOLD (HEAP_MAX_SIZE / 2 on 64-bit): blocks up to this size come from the heap.
MMAP_THRESHOLD_MAX = 32 * 2**20
_HEAP_KEPT: list[int] = []  # the trim threshold set (bytes), once per process


def keep_freed_heap(trim_mb: float) -> bool:
    """Lets glibc's ``malloc`` reuse freed memory instead of mapping fresh pages each step (Linux only).

    A vectorised step allocates its activations and gradients anew, tens of MB at large K. By default glibc
    serves a block above its (dynamic) mmap threshold by ``mmap`` and returns it by ``munmap``, and trims
    the heap's free top: the next step's block is fresh memory, zeroed by the kernel page by page (MLP(64),
    K = 10⁴: 20 000–70 000 minor page faults per round, 20–30 % of its CPU time, docs/performance.md).
    ``mallopt(M_MMAP_THRESHOLD, 32 MiB)`` and ``mallopt(M_TRIM_THRESHOLD, trim_mb)`` keep blocks up to
    32 MiB in the heap and up to ``trim_mb`` of freed memory mapped: the same peak memory, about 500 faults
    per round. Where the environment already tunes glibc (``MALLOC_MMAP_THRESHOLD_`` /
    ``MALLOC_TRIM_THRESHOLD_``), or ``AMPFL_KEEP_HEAP=0``, nothing is changed. The placement of blocks
    does not change any number (torch aligns every block to 64 bytes either way). Returns whether set."""
    if _HEAP_KEPT:
        return True
    env = os.environ
    if env.get("AMPFL_KEEP_HEAP") == "0" or any(f"MALLOC_{n}_THRESHOLD_" in env for n in ("MMAP", "TRIM")):
        return False
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        trim = int(max(trim_mb, 64.0) * 2**20)
        ok = libc.mallopt(-3, MMAP_THRESHOLD_MAX) == 1 and libc.mallopt(-1, min(trim, 2**31 - 1)) == 1
    except (OSError, AttributeError):  # not glibc
        return False
    if ok:
        _HEAP_KEPT.append(trim)
    return bool(ok)
