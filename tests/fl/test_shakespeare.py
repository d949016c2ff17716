"""Shakespeare (paper 001): role parsing, windows and labels, the natural split, and the char GRU."""

from __future__ import annotations

import numpy as np
import torch

from ampfl.fl.data.shakespeare import ALPHABET, build_arrays, parse_roles
from ampfl.fl.engine.functional_model import FunctionalModel
from ampfl.fl.engine.vectorised import Engine
from ampfl.fl.models import build_model

PLAY = """THE TEMPEST

ACT I.

PROSPERO.
Twelve year since, Miranda, twelve year since,
Thy father was the Duke of Milan.

MIRANDA.
Sir, are not you my father?

PROSPERO.
Thy mother was a piece of virtue.
"""


def test_parse_roles_joins_each_speakers_lines() -> None:
    roles = parse_roles(PLAY)
    assert set(roles) == {"PROSPERO", "MIRANDA"}  # "ACT I." is not a speaker
    assert roles["MIRANDA"] == "Sir, are not you my father?"
    assert roles["PROSPERO"].startswith("Twelve year since, Miranda,")
    assert roles["PROSPERO"].endswith("Milan. Thy mother was a piece of virtue.")


def test_windows_labels_and_temporal_split() -> None:
    text = "ALICE.\n" + " ".join(f"word{i} and more {i * 7} here" for i in range(300)) + "\n"
    a = build_arrays({"p": text, "q": "BOB.\nshort\n"}, seq_len=20, stride=5, min_train=4)
    speech = parse_roles(text)["ALICE"]
    assert list(a["roles"]) == ["p:ALICE"]  # BOB has too little text
    n = a["x_train"].shape[0] + a["x_test"].shape[0]
    assert n == len(range(0, len(speech) - 20, 5))
    assert a["x_train"].shape[0] == round(0.8 * n)
    decode = "".join
    for i in (0, 3, a["x_train"].shape[0] - 1):
        s = 5 * i
        assert decode(ALPHABET[c] for c in a["x_train"][i]) == speech[s : s + 20]
        assert ALPHABET[a["y_train"][i]] == speech[s + 20]
    first_test = 5 * a["x_train"].shape[0]
    assert decode(ALPHABET[c] for c in a["x_test"][0]) == speech[first_test : first_test + 20]
    assert np.all(a["client_train"] == 0) and np.all(a["client_test"] == 0)


def test_char_gru_runs_vectorised_and_learns() -> None:
    torch.manual_seed(0)
    module = build_model("char_gru", input_shape=(12,), num_classes=len(ALPHABET), hidden=16)
    model = FunctionalModel(module, (12,))
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.integers(0, len(ALPHABET), size=(40, 12)).astype(np.float32))
    y = x[:, -1].long()  # learnable: the label is the last input character
    start = model.initial()
    batches = torch.arange(40).reshape(2, 1, 20).repeat(1, 30, 1)  # 2 clients, 30 full-batch steps
    result = Engine().local_sgd(model, start, x, y, batches, learning_rate=2.0)
    assert result.params.shape == (2, model.dim) and torch.isfinite(result.params).all()
    before = model.example_losses(start, x[:20], y[:20]).mean()
    after = model.example_losses(result.params[0], x[:20], y[:20]).mean()
    assert after < before
