"""DLG-style data reconstruction from smashed data (003 Sec. 2.2–3), with PSNR and SSIM.

The honest-but-curious server receives a client's smashed data q = f_{w_b ⊙ M}(x) and knows the bottom it
believes the client used. Following DLG [59] (dummy inputs optimised until their observations match), it
draws a dummy batch x̂ and minimises ‖f_{ŵ}(x̂) − q‖² over x̂ with Adam, projecting x̂ onto the data range
after each step. For SplitFed ŵ is the client's exact bottom (the global bottom the client starts the round
from; its first smashed batch). For PM-SFL the client's mask M ~ Bern(θ_k) is never sent: the server knows the
global θ and uses its most likely mask ŵ = w ⊙ 1[θ > 0.5] (``attacker_mask = "map"``) or the expected
weights w ⊙ θ (``"expected"``). Labels are not needed (the smashed data alone is matched).

Gradient matching (``grad_weight`` λ > 0; 003 Sec. 2.2: "both gradients and model outputs can be jointly
exploited"): the server also knows the gradient it returned for the batch, r_i = ∂ℓ/∂q_i (it computed it from
q and the client's labels), and a client that uploads trained weights after a local SGD step on the batch
reveals the bottom's gradient g = ∂/∂w Σ_i ⟨f_w(x_i), r_i⟩ (Δw = −η g). The attack then minimises
‖f_ŵ(x̂) − q‖²/n + λ ‖ĝ(x̂) − g‖² / ‖g‖² with ĝ(x̂) = ∂/∂w Σ_i ⟨f_ŵ(x̂_i), r_i⟩ (a second-order gradient;
still no labels needed, r carries them). The term needs the weights the gradient is taken at: it is used for
trained weights (``exact``) and the mask oracle (``oracle``, an upper bound: PM-SFL uploads a binary mask,
which carries no per-example gradient); the ``masked`` case has no gradient observation.

Scores: PSNR = 10 log₁₀(L² / MSE) and SSIM (Wang et al. 2004: 11×11 Gaussian window, σ = 1.5, K₁ = 0.01,
K₂ = 0.03, 'valid' windows, population moments), per image, data range L.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

__all__ = [
    "attack_client",
    "bottom_gradient",
    "finite_mean",
    "psnr",
    "reconstruct",
    "returned_gradient",
    "ssim",
]


def psnr(x: torch.Tensor, y: torch.Tensor, data_range: float = 1.0) -> torch.Tensor:
    """Peak signal-to-noise ratio in dB per image (``[n, ...]`` inputs); ∞ for identical images."""
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape. Found {tuple(x.shape)} and {tuple(y.shape)}.")
    mse = ((x.double() - y.double()) ** 2).flatten(1).mean(1)
    return 10.0 * torch.log10(data_range**2 / mse)


def _gaussian_window(size: int, sigma: float) -> torch.Tensor:
    coords = torch.arange(size, dtype=torch.float64) - (size - 1) / 2.0
    g = torch.exp(-(coords**2) / (2.0 * sigma**2))
    g = g / g.sum()
    return torch.outer(g, g)


def ssim(
    x: torch.Tensor,
    y: torch.Tensor,
    data_range: float = 1.0,
    *,
    window: int = 11,
    sigma: float = 1.5,
    k1: float = 0.01,
    k2: float = 0.03,
) -> torch.Tensor:
    """Mean structural similarity per image of ``[n, C, H, W]`` batches (channels averaged)."""
    if x.shape != y.shape or x.dim() != 4:
        raise ValueError(
            f"x and y must be equal [n, C, H, W] batches. Found {tuple(x.shape)}, {tuple(y.shape)}."
        )
    size = min(window, x.shape[2], x.shape[3])
    w = _gaussian_window(size, sigma)[None, None]
    n, c = x.shape[:2]
    a = x.double().reshape(n * c, 1, *x.shape[2:])
    b = y.double().reshape(n * c, 1, *y.shape[2:])
    mu_a, mu_b = F.conv2d(a, w), F.conv2d(b, w)
    var_a = F.conv2d(a * a, w) - mu_a**2
    var_b = F.conv2d(b * b, w) - mu_b**2
    cov = F.conv2d(a * b, w) - mu_a * mu_b
    c1, c2 = (k1 * data_range) ** 2, (k2 * data_range) ** 2
    num = (2 * mu_a * mu_b + c1) * (2 * cov + c2)
    den = (mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2)
    return (num / den).reshape(n, c, -1).mean(dim=(1, 2))


def reconstruct(
    forward: Callable[[torch.Tensor], torch.Tensor],
    smashed: torch.Tensor,
    shape: Sequence[int],
    *,
    steps: int = 300,
    learning_rate: float = 0.05,
    generator: torch.Generator | None = None,
    bounds: tuple[float, float] = (0.0, 1.0),
    tv_weight: float = 0.0,
    gradient: Callable[[torch.Tensor], torch.Tensor] | None = None,
    target_gradient: torch.Tensor | None = None,
    grad_weight: float = 0.0,
) -> torch.Tensor:
    """Dummy inputs ``[n, *shape]`` optimised so that ``forward(x̂)`` matches ``smashed`` (squared error per
    example), plus ``tv_weight`` × the anisotropic total variation of x̂ (an image prior, as in inverting-
    gradients attacks; 0 = plain DLG), plus ``grad_weight`` × ‖gradient(x̂) − target_gradient‖² /
    ‖target_gradient‖² (``gradient`` must build a graph differentiable in x̂, see :func:`bottom_gradient`)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1. Found {steps}.")
    low, high = bounds
    target = smashed.detach()
    dummy = (torch.rand((target.shape[0], *shape), generator=generator) * (high - low) + low).requires_grad_(
        True
    )
    opt = torch.optim.Adam([dummy], lr=learning_rate)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = ((forward(dummy) - target) ** 2).sum() / target.shape[0]
        if tv_weight > 0.0:
            tv = (dummy[..., 1:, :] - dummy[..., :-1, :]).abs().sum() + (
                dummy[..., 1:] - dummy[..., :-1]
            ).abs().sum()
            loss = loss + tv_weight * tv / target.shape[0]
        if grad_weight > 0.0 and gradient is not None and target_gradient is not None:
            g = target_gradient.detach()
            loss = loss + grad_weight * ((gradient(dummy) - g) ** 2).sum() / (g**2).sum().clamp(min=1e-30)
        torch.autograd.backward(loss)
        opt.step()
        with torch.no_grad():
            dummy.clamp_(low, high)
    return dummy.detach()


def bottom_gradient(
    weights: Sequence[torch.Tensor], x: torch.Tensor, returned: torch.Tensor, groups: int
) -> torch.Tensor:
    """g = ∂/∂w Σ_i ⟨f_w(x_i), r_i⟩ (flat) for bottom ``weights``, inputs ``x`` and the server's returned
    gradient ``returned`` = ∂ℓ/∂q; a graph differentiable in ``x`` (create_graph) when ``x`` requires it."""
    from ampfl.fl.models.split_cnn import bottom_forward

    leaves = [w.detach().requires_grad_(True) for w in weights]
    inner = (bottom_forward(leaves, x, groups) * returned.detach()).sum()
    grads = torch.autograd.grad(inner, leaves, create_graph=x.requires_grad)
    return torch.cat([g.reshape(-1) for g in grads])


def returned_gradient(top: torch.nn.Module, smashed: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """r = ∂ℓ/∂q of the batch-mean cross-entropy of ``top`` on ``smashed`` (what the server sends back)."""
    q = smashed.detach().requires_grad_(True)
    loss = F.cross_entropy(top(q), labels)
    (r,) = torch.autograd.grad(loss, q)
    return r


def finite_mean(values: torch.Tensor) -> float:
    """Mean of the finite entries (an exact reconstruction has PSNR = ∞); ∞ if none are finite."""
    finite = values[torch.isfinite(values)]
    return float(finite.mean()) if finite.numel() else math.inf


def attack_client(
    algorithm: Any,
    client: int,
    *,
    images: int = 6,
    steps: int = 400,
    learning_rate: float = 0.05,
    seed: int = 0,
    tv_weight: float = 0.0,
    grad_weight: float = 0.0,
) -> tuple[torch.Tensor, dict[str, dict[str, Any]]]:
    """Attack the smashed data of client ``client``'s first ``images`` training images under a trained split
    algorithm (``splitfed``, ``standalone``, ``pm_sfl``, ``splitfed_pm``, e.g. restored from a run's
    checkpoint). Returns the originals and, per case, ``psnr``/``ssim`` (means), per-image values and the
    reconstructions.

    Cases: trained weights (``splitfed``: the global bottom; ``standalone``: the client's own) are known
    exactly. Masks: the client's secret mask M ~ Bern(θ_client) (its personal θ included), the attacker's
    most likely mask 1[θ_global > 0.5] (``"masked"``) and an oracle that knows M (``"oracle"``).
    ``grad_weight`` > 0 adds the gradient-matching term (module docstring) to ``exact`` and ``oracle``;
    each case reports ``gradient_matching`` (whether it was used).
    """
    from ampfl.fl.models.split_cnn import bottom_forward
    from ampfl.fl.split.algorithms import PMSFL, SplitFed, Standalone
    from ampfl.fl.split.common import unflatten

    n = algorithm.task.num_clients
    if not 0 <= client < n:
        raise ValueError(f"client must be in [0, {n - 1}]. Found {client}.")
    if images < 1:
        raise ValueError(f"images must be >= 1. Found {images}.")
    if not tv_weight >= 0.0:
        raise ValueError(f"tv must be >= 0. Found {tv_weight}.")
    if not grad_weight >= 0.0:
        raise ValueError(f"grad-weight must be >= 0. Found {grad_weight}.")
    own = torch.from_numpy(algorithm.client_indices[client][:images])
    x = algorithm.x_train[own]
    labels = algorithm.y_train[own]
    shapes, groups = algorithm.shapes, algorithm.spec.groups
    gen = torch.Generator().manual_seed(seed)
    if isinstance(algorithm, PMSFL):
        theta = algorithm.start_theta(np.array([client]))[0]
        secret = unflatten(
            algorithm.weights * (torch.rand(theta.shape, generator=gen) < theta).float(), shapes
        )
        guess = unflatten(algorithm.weights * (algorithm.theta > 0.5).float(), shapes)
        cases = {"masked": (secret, guess), "oracle": (secret, secret)}
    elif isinstance(algorithm, Standalone):
        own_bottom = unflatten(algorithm.store[client], shapes)
        cases = {"exact": (own_bottom, own_bottom)}
    elif isinstance(algorithm, SplitFed):
        bottom = unflatten(algorithm.bottom, shapes)
        cases = {"exact": (bottom, bottom)}
    else:
        raise ValueError(f"algorithm must be a split algorithm. Found {type(algorithm).__name__}.")
    out: dict[str, dict[str, Any]] = {}
    for case, (victim, attacker) in cases.items():
        with torch.no_grad():
            smashed = bottom_forward(victim, x, groups)
        use_grad = grad_weight > 0.0 and case != "masked"
        grad_fn, target = None, None
        if use_grad:
            r = returned_gradient(algorithm.top, smashed, labels)
            target = bottom_gradient(victim, x, r, groups)
            grad_fn = lambda z, w=attacker, r=r: bottom_gradient(w, z, r, groups)  # noqa: E731
        recon = reconstruct(
            lambda z, w=attacker: bottom_forward(w, z, groups),  # type: ignore[misc]
            smashed,
            tuple(x.shape[1:]),
            steps=steps,
            learning_rate=learning_rate,
            generator=torch.Generator().manual_seed(seed + 1),
            tv_weight=tv_weight,
            gradient=grad_fn,
            target_gradient=target,
            grad_weight=grad_weight if use_grad else 0.0,
        )
        p, q = psnr(x, recon), ssim(x, recon)
        out[case] = {
            "gradient_matching": use_grad,
            "psnr": finite_mean(p),
            "ssim": float(q.mean()),
            "psnr_per_image": [float(v) for v in p],
            "ssim_per_image": [float(v) for v in q],
            "reconstruction": recon,
        }
    return x, out
