"""How many clients one vectorised call of the engine holds (its chunk), from the model's shape, the
examples per client and the memory budget; measured on this project's CPU in docs/performance.md."""

from __future__ import annotations

import math

from ampfl.fl.engine.functional_model import FunctionalModel

#: Most clients per chunk on the CPU (when ``chunk_size`` is not given): enough for the vectorised calls to
#: be wide, few enough that a chunk's per-step tensors stay well below glibc's largest heap block (32 MiB,
#: :func:`ampfl.fl.engine.device.keep_freed_heap`); measured against 2 048, 128 and 32 in
#: docs/performance.md. Every client's result is independent of the chunking (bit for bit on the CPU); an
#: average sums chunk by chunk.
CPU_MAX_CHUNK = 512

#: On the CPU, the most memory (MiB) one local step of a chunk may touch on the autograd-free path of a
#: model's ``stacked_loss_and_grads``: that path streams each ``[chunk, b, width]`` tensor through products
#: of inner size b and elementwise passes, so it runs at the cache's speed (chunk sizes measured against the
#: MLP's round time in docs/performance.md: MLP(64), MLP(256), MLP(1024) get 512, 180 and 45 clients).
CPU_STEP_WORKING_SET_MB = 16

__all__ = ["CPU_MAX_CHUNK", "CPU_STEP_WORKING_SET_MB", "clients_per_chunk"]


def clients_per_chunk(
    model: FunctionalModel,
    examples_per_client: int,
    *,
    memory_cap_mb: float,
    on_cpu: bool,
    per_sample: bool = False,
    low_rank: bool = False,
    step_examples: int = 0,
) -> int:
    """The clients that fit into ``memory_cap_mb`` at about 8 copies of the model's d parameters each
    (``low_rank``: 2, the path of :func:`ampfl.fl.engine.low_rank.low_rank_local_sgd`) plus their examples'
    inputs and activations (``per_sample``: and 3 copies of d per example); on the CPU at most
    :data:`CPU_MAX_CHUNK`, and with ``step_examples`` (the b examples of one step on the model's
    autograd-free path) at most what keeps one step's tensors within :data:`CPU_STEP_WORKING_SET_MB`
    (at least 16)."""
    d, inp, act = model.dim, math.prod(model.input_shape), model.activation_numel
    copies = 2 if low_rank else 8
    per_client = 4 * (copies * d + examples_per_client * (inp + 4 * act + (3 * d if per_sample else 0)))
    size = max(1, int(memory_cap_mb * 2**20 // per_client))
    if not on_cpu:
        return size
    if step_examples and not (per_sample or low_rank):
        per_step = 4 * (2 * d + step_examples * (inp + 3 * act))
        size = min(size, max(16, int(CPU_STEP_WORKING_SET_MB * 2**20 // per_step)))
    return min(size, CPU_MAX_CHUNK)
