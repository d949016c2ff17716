"""Paper 002 mechanisms (Dong, Chen, Özgür, §3.2–3.3) as per-order RDP.

- :func:`rdp_model_split` — Theorems 3.4 / 3.5 (disjoint model splitting, also a random mixture of disjoint
  partitionings): d = number of sub-models, k = 1, per iteration, composed additively over ``steps`` [D].
- :func:`rdp_partial_split` — §3.2.2: split part (its own clip norm and noise) by Thm 3.4, non-split part by
  the plain Gaussian mechanism; the RDPs add [D].
- :func:`rdp_dropout` — Theorem 3.7: dropout with rate exactly 1/2 on the split part, d = 2, k = 1
  (Remark 3.6: no other rate is covered); optional non-split part as in §3.2.2 [D].
- :func:`rdp_bis` — Theorem 3.8, Balanced Iteration Subsampling: one bound for a whole run of T iterations
  in which every sample takes part in exactly k (d = T); Remark 3.10: E runs (epochs) compose, E·ε(α) [D].

Their calibration (the one :func:`ampfl.accounting.calibrate.calibrate` over the matching events) is in
:mod:`ampfl.accounting.partition.calibration`, above the accountants; this module is math only (the mechanism
registry's RDP bounds call it).

Noise is a noise multiplier z = σ/C. ``bound="auto"`` picks the exact forward term of Theorem 3.1 where it
is affordable and Eq. (5) otherwise; both are upper bounds on the true divergence.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from ampfl.accounting._checks import check_choice, check_int, check_orders, check_positive
from ampfl.accounting.mixture_rdp import exact_forward_affordable, theorem_3_1_rdp
from ampfl.accounting.orders import CHEAP_ORDERS
from ampfl.accounting.rdp import rdp_gaussian

#: Default orders of the Theorem 3.1 kernels: the orders ≤ 256 of the one grid (their cost grows like α²;
#: the RDP accountant evaluates these events on the same orders and treats larger ones as unbounded).
PARTITION_ORDERS: tuple[int, ...] = CHEAP_ORDERS

BOUND_CHOICES: tuple[str, ...] = ("auto", "exact", "efficient")


def resolve_bound(bound: str, *, d: int, k: int, max_order: int) -> str:
    """``"exact"`` or ``"efficient"``; ``"auto"`` is exact where :func:`exact_forward_affordable` allows."""
    which = check_choice("bound", bound, BOUND_CHOICES)
    if which != "auto":
        return which
    return "exact" if exact_forward_affordable(d=d, k=k, max_order=max_order) else "efficient"


def rdp_model_split(
    *,
    orders: Iterable[object] = PARTITION_ORDERS,
    num_submodels: int,
    noise_multiplier: float,
    steps: int = 1,
    bound: str = "exact",
) -> np.ndarray:
    """002 Theorems 3.4/3.5: disjoint model splitting into ``num_submodels`` sub-models, composed over steps.

    Each client (or sample) is assigned one of d sub-models uniformly at random and in secret; its clipped
    gradient (norm ≤ C) is non-zero only on that block; N(0, σ²I) is added to the sum. Per iteration the
    mechanism is (α, ε(α))-RDP with ε from Theorem 3.1 at d = ``num_submodels``, k = 1, c = C.

    Args:
        orders: integer orders α ≥ 2.
        num_submodels: d ≥ 1 (d = 1 is no splitting: the plain Gaussian mechanism).
        noise_multiplier: z = σ / C > 0.
        steps: iterations T ≥ 1 (RDP composes additively).
        bound: ``"exact"`` (Eq. (2)), ``"efficient"`` (Eq. (3)) or ``"auto"``.
    """
    alphas = check_orders("orders", orders)
    d = check_int("num_submodels", num_submodels, minimum=1)
    z = check_positive("noise_multiplier", noise_multiplier)
    t = check_int("steps", steps, minimum=1)
    which = resolve_bound(bound, d=d, k=1, max_order=int(alphas.max()))
    return t * theorem_3_1_rdp(orders=alphas, d=d, k=1, noise_multiplier=z, bound=which)


def rdp_partial_split(
    *,
    orders: Iterable[object] = PARTITION_ORDERS,
    num_submodels: int,
    split_noise_multiplier: float,
    nonsplit_noise_multiplier: float | None,
    steps: int = 1,
    bound: str = "exact",
) -> np.ndarray:
    """002 §3.2.2 partial model splitting: split part by Thm 3.4 + non-split part by the Gaussian mechanism.

    The two parts are clipped separately (norms C_s and C_ns) and get independent noise (σ_s, σ_ns); their
    RDPs add (composition). ``nonsplit_noise_multiplier=None`` means there is no non-split part.

    Args:
        orders: integer orders α ≥ 2.
        num_submodels: d ≥ 1 for the split part.
        split_noise_multiplier: σ_s / C_s.
        nonsplit_noise_multiplier: σ_ns / C_ns, or None.
        steps: iterations (both parts run every iteration).
        bound: forward term of Theorem 3.1 for the split part.
    """
    alphas = check_orders("orders", orders)
    out = rdp_model_split(
        orders=alphas,
        num_submodels=num_submodels,
        noise_multiplier=split_noise_multiplier,
        steps=steps,
        bound=bound,
    )
    if nonsplit_noise_multiplier is not None:
        out = out + rdp_gaussian(orders=alphas, noise_multiplier=nonsplit_noise_multiplier, steps=steps)
    return out


def rdp_dropout(
    *,
    orders: Iterable[object] = PARTITION_ORDERS,
    noise_multiplier: float,
    steps: int = 1,
    nonsplit_noise_multiplier: float | None = None,
    bound: str = "exact",
) -> np.ndarray:
    """002 Theorem 3.7: dropout with rate 1/2 (Algorithm 2) — Theorem 3.1 with d = 2, k = 1 on the split part.

    Only rate exactly 1/2 is covered (Remark 3.6): a mask and its complement are equally likely and form a
    2-block disjoint partition (Thm 3.5). The split part (weights entering and leaving the dropout layers) is
    clipped to its own norm; ``nonsplit_noise_multiplier`` adds the rest of the model as a Gaussian mechanism.
    """
    return rdp_partial_split(
        orders=orders,
        num_submodels=2,
        split_noise_multiplier=noise_multiplier,
        nonsplit_noise_multiplier=nonsplit_noise_multiplier,
        steps=steps,
        bound=bound,
    )


def rdp_bis(
    *,
    orders: Iterable[object] = PARTITION_ORDERS,
    iterations: int,
    participations: int,
    noise_multiplier: float,
    epochs: int = 1,
    bound: str = "auto",
) -> np.ndarray:
    """002 Theorem 3.8: Balanced Iteration Subsampling, whole-run RDP; Remark 3.10 composition over epochs.

    Each sample joins exactly ``participations`` (k) of the ``iterations`` (T) iterations of a run, chosen
    uniformly and in secret, independently across samples; each iteration is a Gaussian mechanism with
    sensitivity C. One run is (α, ε(α))-RDP with ε from Theorem 3.1 at d = T, k, c = C; ``epochs`` (E)
    independent runs compose to E·ε(α).

    Args:
        orders: integer orders α ≥ 2.
        iterations: T ≥ 1 per run.
        participations: k, 1 ≤ k ≤ T.
        noise_multiplier: z = σ / C.
        epochs: E ≥ 1 runs.
        bound: ``"auto"`` (exact where affordable: always for k = 1), ``"exact"`` or ``"efficient"``.
    """
    alphas = check_orders("orders", orders)
    t = check_int("iterations", iterations, minimum=1)
    k = check_int("participations", participations, minimum=1, maximum=t)
    z = check_positive("noise_multiplier", noise_multiplier)
    e = check_int("epochs", epochs, minimum=1)
    which = resolve_bound(bound, d=t, k=k, max_order=int(alphas.max()))
    return e * theorem_3_1_rdp(orders=alphas, d=t, k=k, noise_multiplier=z, bound=which)


def unsplit_noise_multiplier(
    noise_multiplier: float, nonsplit_noise_multiplier: float | None = None
) -> float:
    """The noise multiplier of the plain Gaussian mechanism that dominates a (partial) split step.

    Ignoring the secret block choice (joint convexity of the Rényi divergence over the data-independent
    choice), one step is a Gaussian mechanism whose split part has sensitivity C_s and noise z_s C_s and whose
    non-split part has C_ns and z_ns C_ns: together 1/z² = 1/z_s² + 1/z_ns² (002 §3.2.2 without the credit).
    """
    z = check_positive("noise_multiplier", noise_multiplier)
    if nonsplit_noise_multiplier is None:
        return z
    z_ns = check_positive("nonsplit_noise_multiplier", nonsplit_noise_multiplier)
    return 1.0 / math.sqrt(1.0 / (z * z) + 1.0 / (z_ns * z_ns))
