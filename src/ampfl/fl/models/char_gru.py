"""A small character GRU for next-character prediction (Shakespeare, paper 001), vmap-friendly.

Paper 001 trains "an LSTM" on Shakespeare (LEAF's is 2 × 256 LSTM units with an 8-dimensional embedding).
``torch.nn.LSTM``/``GRU`` have no ``vmap`` batching rule on CPU, so this GRU cell is written with linear
layers and a Python loop over the sequence: the engine then runs every client's local steps vectorised.
Default size (ampfl's choice, for CPU runs): embedding 8, one GRU layer of 64 units, a linear read-out of the
last state. Inputs are character indices stored as float ``[batch, seq_len]``.
"""

from __future__ import annotations

import torch
from torch import nn

from ampfl.fl.models.base import FLModel


class CharGRU(FLModel):
    """Embedding → GRU (one layer) → linear over the vocabulary (= ``num_classes``) from the last state.

    Args:
        input_shape: ``(seq_len,)``.
        num_classes: vocabulary size (the labels are next characters).
        embed: embedding size (default 8, as LEAF).
        hidden: GRU units (default 64).
    """

    def __init__(
        self, *, input_shape: tuple[int, ...], num_classes: int, embed: int = 8, hidden: int = 64
    ) -> None:
        super().__init__()
        if len(input_shape) != 1:
            raise ValueError(f"input_shape must be (seq_len,) for char_gru. Found {input_shape}.")
        if int(embed) < 1 or int(hidden) < 1:
            raise ValueError(f"embed and hidden must be >= 1. Found {embed}, {hidden}.")
        self.num_classes = num_classes
        self.hidden = int(hidden)
        self.embed = nn.Embedding(num_classes, int(embed))
        self.input_gates = nn.Linear(int(embed), 3 * self.hidden)
        self.state_gates = nn.Linear(self.hidden, 3 * self.hidden)
        self.out = nn.Linear(self.hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h_size = self.hidden
        gx = self.input_gates(self.embed(x.long()))  # [b, L, 3H]
        h = gx.new_zeros(gx.shape[0], h_size)
        for t in range(gx.shape[1]):
            gh = self.state_gates(h)
            r = torch.sigmoid(gx[:, t, :h_size] + gh[:, :h_size])
            z = torch.sigmoid(gx[:, t, h_size : 2 * h_size] + gh[:, h_size : 2 * h_size])
            n = torch.tanh(gx[:, t, 2 * h_size :] + r * gh[:, 2 * h_size :])
            h = (1.0 - z) * n + z * h
        out: torch.Tensor = self.out(h)
        return out
