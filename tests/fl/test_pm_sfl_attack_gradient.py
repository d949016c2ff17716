"""The gradient-matching term of the DLG-style attack (003 Sec. 2.2): the bottom's gradient observation."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from ampfl.fl.config import parse_config
from ampfl.fl.models.split_cnn import bottom_forward
from ampfl.fl.run.experiment import build_algorithm, build_task
from ampfl.fl.split.attack import attack_client, bottom_gradient, reconstruct, returned_gradient
from ampfl.fl.split.common import unflatten


def _config(name: str):
    return parse_config(
        {
            "seed": 0,
            "rounds": 1,
            "dataset": {"name": "digits"},
            "partition": {"scheme": "iid", "num_clients": 4},
            "model": {"name": "split_cnn", "options": {"channels": [4, 8], "groups": 2, "split_layer": 1}},
            "algorithm": {"name": name, "client_fraction": 0.5, "num_local_steps": 1, "batch_size": 4},
        }
    )


def _alg(name: str):
    config = _config(name)
    return build_algorithm(config, build_task(config))


def test_bottom_gradient_is_the_chain_rule_through_the_cut():
    alg = _alg("splitfed")
    w = [t.clone() for t in unflatten(alg.bottom, alg.shapes)]
    x, y = alg.x_train[:5], alg.y_train[:5]
    leaves = [t.clone().requires_grad_(True) for t in w]
    loss = F.cross_entropy(alg.top(bottom_forward(leaves, x, alg.spec.groups)), y)  # composed model
    direct = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, leaves)])
    with torch.no_grad():
        q = bottom_forward(w, x, alg.spec.groups)
    r = returned_gradient(alg.top, q, y)
    assert r.shape == q.shape
    assert torch.allclose(bottom_gradient(w, x, r, alg.spec.groups), direct, atol=1e-6, rtol=1e-5)


def test_gradient_term_is_differentiable_and_zero_at_the_truth():
    alg = _alg("splitfed")
    w = unflatten(alg.bottom, alg.shapes)
    x, y = alg.x_train[:3], alg.y_train[:3]
    with torch.no_grad():
        q = bottom_forward(w, x, alg.spec.groups)
    r = returned_gradient(alg.top, q, y)
    target = bottom_gradient(w, x, r, alg.spec.groups)
    dummy = torch.rand_like(x).requires_grad_(True)
    mismatch = ((bottom_gradient(w, dummy, r, alg.spec.groups) - target) ** 2).sum()
    (grad,) = torch.autograd.grad(mismatch, dummy)  # second order: the term moves the dummy inputs
    assert float(grad.abs().sum()) > 0.0
    assert float(((bottom_gradient(w, x, r, alg.spec.groups) - target) ** 2).sum()) == 0.0
    # gradient matching alone (no smashed term) lowers the gradient mismatch from the same start
    start = torch.Generator().manual_seed(1)
    before = torch.rand((3, *x.shape[1:]), generator=start)
    fn = lambda z: bottom_gradient(w, z, r, alg.spec.groups)  # noqa: E731
    nothing = q.flatten(1)[:, :0]  # an empty smashed term
    out = reconstruct(
        lambda z: z.flatten(1)[:, :0],
        nothing,
        x.shape[1:],
        steps=30,
        learning_rate=0.02,
        generator=torch.Generator().manual_seed(1),
        gradient=fn,
        target_gradient=target,
        grad_weight=1.0,
    )
    assert float(((fn(out) - target) ** 2).sum()) < float(((fn(before) - target) ** 2).sum())


def test_attack_client_flags_where_the_gradient_is_used():
    pm = _alg("pm_sfl")
    pm.run_round(0)
    _, found = attack_client(pm, 0, images=2, steps=3, grad_weight=10.0)
    assert {c: r["gradient_matching"] for c, r in found.items()} == {"masked": False, "oracle": True}
    _, plain = attack_client(pm, 0, images=2, steps=3)
    assert torch.equal(plain["masked"]["reconstruction"], found["masked"]["reconstruction"])
    assert not torch.equal(plain["oracle"]["reconstruction"], found["oracle"]["reconstruction"])
    sf = _alg("splitfed")
    _, exact = attack_client(sf, 1, images=2, steps=3, grad_weight=1.0)
    assert exact["exact"]["gradient_matching"] and exact["exact"]["psnr"] > 0.0
    with pytest.raises(ValueError, match="grad-weight must be >= 0"):
        attack_client(sf, 0, grad_weight=-1.0)


def test_attack_cli_grad_weight(tmp_path, capsys):
    import json

    from ampfl.cli import main
    from ampfl.fl.run.experiment import run_experiment

    config = _config("splitfed")
    run_experiment(config, tmp_path / "run", plots=False, progress=False)
    args = ["attack", "dlg", str(tmp_path / "run"), "--steps", "2", "--images", "2", "--json"]
    assert main([*args, "--grad-weight", "1"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["grad_weight"] == 1.0 and result["results"][0]["gradient_matching"] is True
    assert main([*args, "--grad-weight", "-1"]) == 2
    assert "--grad-weight must be >= 0" in capsys.readouterr().err
