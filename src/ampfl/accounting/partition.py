"""Privacy amplification by model and data partitioning: paper 002 (Dong, Chen, Özgür), Sections 3.2–3.3.

Every mechanism reduces to Theorem 3.1 (:mod:`ampfl.accounting.mixture_rdp`): the RDP between a uniform
mixture of N(c·v, σ²I) over binary v with k ones among d and N(0, σ²I), bounded by the maximum of a forward
term (exact Lemma 3.12, Eq. (2), or efficient Eq. (5), Eq. (3)) and the reverse term R_α with the (d − 1)
prefactor (RECOVERED_MATH.md §1.3, §1.10). Mechanisms here (all per-order RDP arrays, integer α ≥ 2):

- :func:`rdp_model_split` — Theorems 3.4 / 3.5 (disjoint model splitting, also a random mixture of disjoint
  partitionings): d = number of sub-models, k = 1, per iteration, composed additively over ``steps`` [D].
- :func:`rdp_partial_split` — §3.2.2: split part (its own clip norm and noise) by Thm 3.4, non-split part by
  the plain Gaussian mechanism; the RDPs add [D].
- :func:`rdp_dropout` — Theorem 3.7: dropout with rate exactly 1/2 on the split part, d = 2, k = 1
  (Remark 3.6: no other rate is covered); optional non-split part as in §3.2.2 [D].
- :func:`rdp_bis` — Theorem 3.8, Balanced Iteration Subsampling: one bound for a whole run of T iterations
  in which every sample takes part in exactly k (d = T); Remark 3.10: E runs (epochs) compose, E·ε(α) [D].

Noise is given as a noise multiplier z = σ/C (σ the noise standard deviation, C the clipping norm).
``bound="auto"`` picks the exact forward term where it is affordable and Eq. (5) otherwise; both are
upper bounds on the true divergence.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ampfl.accounting._checks import check_choice, check_delta, check_int, check_orders, check_positive
from ampfl.accounting.calibrate import calibrate_decreasing
from ampfl.accounting.mixture_rdp import exact_forward_affordable, theorem_3_1_rdp
from ampfl.accounting.rdp import DEFAULT_ORDERS, epsilon_from_rdp, rdp_gaussian

BOUND_CHOICES: tuple[str, ...] = ("auto", "exact", "efficient")


def resolve_bound(bound: str, *, d: int, k: int, max_order: int) -> str:
    """``"exact"`` or ``"efficient"``; ``"auto"`` is exact where :func:`exact_forward_affordable` allows."""
    which = check_choice("bound", bound, BOUND_CHOICES)
    if which != "auto":
        return which
    return "exact" if exact_forward_affordable(d=d, k=k, max_order=max_order) else "efficient"


def rdp_model_split(
    *,
    orders: Iterable[object] = DEFAULT_ORDERS,
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
    orders: Iterable[object] = DEFAULT_ORDERS,
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
    orders: Iterable[object] = DEFAULT_ORDERS,
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
    orders: Iterable[object] = DEFAULT_ORDERS,
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


@dataclass(frozen=True)
class BalancedIterationSubsamplingEvent:
    """Balanced Iteration Subsampling (paper 002, Thm 3.8) as an event (composable in a Ledger).

    Each unit (record or client) takes part in exactly ``num_selected`` (k) of ``num_slots`` (T) iterations,
    chosen uniformly at random and kept secret, independently across units; ``event`` runs in every
    iteration. The event covers the WHOLE run of T iterations: compose it once per run, not once per
    iteration. Neighbouring relation: add/remove one unit (the bound covers both directions, Thm 3.1).
    No dp-accounting equivalent exists. Emitted by ``ampfl.fl.sampling.BalancedIterationSampler.event``.

    Attributes:
        num_slots: T, iterations per run.
        num_selected: k, iterations each unit joins.
        event: the per-iteration mechanism; :meth:`rdp` supports ``dp_accounting.GaussianDpEvent``
            (noise multiplier σ / C with sensitivity C).
    """

    num_slots: int
    num_selected: int
    event: Any

    def rdp(self, orders: Iterable[object]) -> np.ndarray:
        """Whole-run RDP at integer ``orders`` (002 Thm 3.8 via :func:`rdp_bis`, exact where affordable)."""
        from dp_accounting import GaussianDpEvent

        if not isinstance(self.event, GaussianDpEvent):
            raise ValueError(
                "event must be a dp_accounting GaussianDpEvent for Balanced Iteration Subsampling. "
                f"Found {type(self.event).__name__}."
            )
        return rdp_bis(
            orders=orders,
            iterations=self.num_slots,
            participations=self.num_selected,
            noise_multiplier=float(self.event.noise_multiplier),
        )


# ---------------------------------------------------------------------------------------------------------
# calibration
# ---------------------------------------------------------------------------------------------------------


def _calibrate(
    rdp_of: Callable[[float], np.ndarray], alphas: np.ndarray, epsilon: float, delta: float
) -> float:
    eps = check_positive("epsilon", epsilon)
    dlt = check_delta("delta", delta)

    def loss(z: float) -> float:
        return epsilon_from_rdp(orders=alphas, rdp=rdp_of(z), delta=dlt).epsilon

    return calibrate_decreasing(loss, eps, name="noise_multiplier", lower_limit=1e-3, upper_limit=1e5)


def calibrate_model_split(
    *,
    epsilon: float,
    delta: float,
    num_submodels: int,
    steps: int,
    orders: Iterable[object] = DEFAULT_ORDERS,
    bound: str = "exact",
) -> float:
    """Smallest noise multiplier z = σ/C making Theorem 3.4 model splitting over ``steps`` (ε, δ)-DP."""
    alphas = check_orders("orders", orders)
    d = check_int("num_submodels", num_submodels, minimum=1)
    t = check_int("steps", steps, minimum=1)
    which = resolve_bound(bound, d=d, k=1, max_order=int(alphas.max()))
    return _calibrate(
        lambda z: rdp_model_split(orders=alphas, num_submodels=d, noise_multiplier=z, steps=t, bound=which),
        alphas,
        epsilon,
        delta,
    )


def calibrate_dropout(
    *,
    epsilon: float,
    delta: float,
    steps: int,
    orders: Iterable[object] = DEFAULT_ORDERS,
    bound: str = "exact",
) -> float:
    """Smallest noise multiplier for Theorem 3.7 (dropout rate 1/2, split part only) over ``steps``."""
    return calibrate_model_split(
        epsilon=epsilon, delta=delta, num_submodels=2, steps=steps, orders=orders, bound=bound
    )


def calibrate_bis(
    *,
    epsilon: float,
    delta: float,
    iterations: int,
    participations: int,
    epochs: int = 1,
    orders: Iterable[object] = DEFAULT_ORDERS,
    bound: str = "auto",
) -> float:
    """Smallest noise multiplier making Balanced Iteration Subsampling (Thm 3.8, E epochs) (ε, δ)-DP."""
    alphas = check_orders("orders", orders)
    t = check_int("iterations", iterations, minimum=1)
    k = check_int("participations", participations, minimum=1, maximum=t)
    e = check_int("epochs", epochs, minimum=1)
    which = resolve_bound(bound, d=t, k=k, max_order=int(alphas.max()))
    return _calibrate(
        lambda z: rdp_bis(
            orders=alphas, iterations=t, participations=k, noise_multiplier=z, epochs=e, bound=which
        ),
        alphas,
        epsilon,
        delta,
    )
