"""Poisson-subsampled model splitting (002 Table 1 setting): a sound bound and the paper's reading.

The paper's Table 1 trains with subsampling *and* splitting, but how the two were combined was not
recovered (RECOVERED_MATH.md §1.15). Two ways to bound it:

- ``"zhu-wang"``: Zhu & Wang's general subsampling bound (factor 3) over the Theorem 3.4 base, both
  neighbouring directions [I]; the RDP accountant computes the same for
  ``PoissonSampledEvent(ModelSplitEvent)``.
- ``"remove-only"``: the binomial expansion that reproduces Table 1 (2.72 / 2.49); an identity for the remove
  direction [D, derived here], **unproven for the add direction** (docs/partition.md). Reported as the
  analysis ``"dong-as-printed"`` with ``sound: false``; never the recommended one.

Moved here from ``reproduce/dong.py`` (the figure module keeps only figure code).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np

from ampfl.accounting._checks import (
    check_choice,
    check_delta,
    check_int,
    check_orders,
    check_positive,
    check_probability,
)
from ampfl.accounting._numerics import log1p_of_logsum, log_comb_row, log_expm1
from ampfl.accounting.calibrate import CALIBRATION_RTOL, UnreachableTarget, calibrate, calibrate_decreasing
from ampfl.accounting.events import GaussianEvent, ModelSplitEvent, PoissonSampledEvent
from ampfl.accounting.partition.mechanisms import (
    PARTITION_ORDERS,
    rdp_partial_split,
    resolve_bound,
    unsplit_noise_multiplier,
)
from ampfl.accounting.rdp import epsilon_from_rdp, rdp_poisson_subsampled_general

# ---------------------------------------------------------------------------------------------------------
# Poisson-subsampled splitting (002 Table 1 setting)
# ---------------------------------------------------------------------------------------------------------

#: ``"zhu-wang"``: Zhu & Wang's general bound (factor 3), both directions, sound [I]; ``"remove-only"``:
#: the binomial expansion that reproduces 002 Table 1, proven for the remove direction only.
EXPANSIONS: tuple[str, ...] = ("zhu-wang", "remove-only")


def _binomial_expansion(alphas: np.ndarray, rate: float, base: np.ndarray) -> np.ndarray:
    """1/(α−1) log Σ_ℓ C(α,ℓ)(1−γ)^{α−ℓ} γ^ℓ e^{(ℓ−1)ε(ℓ)} per order (``base[ℓ − 2]`` = ε(ℓ)), rounded up.

    The ℓ = 0, 1 terms have exponent 0 and the weights sum to 1, so the sum is 1 + Σ_{ℓ≥2} pmf(ℓ)·expm1(...):
    every term positive, evaluated as log1p of a log-sum (the precision of the exact Poisson-Gaussian kernel).
    """
    if rate == 0.0:
        return np.zeros(alphas.size)
    if rate == 1.0:
        return np.asarray(base[alphas - 2], dtype=np.float64)
    log_g, log_1mg = math.log(rate), math.log1p(-rate)
    out = np.empty(alphas.size)
    for idx, alpha in enumerate(alphas.tolist()):
        ell = np.arange(2, alpha + 1, dtype=np.float64)
        log_pmf = log_comb_row(alpha)[2:] + (alpha - ell) * log_1mg + ell * log_g
        terms = log_pmf + log_expm1((ell - 1.0) * base[: alpha - 1])
        out[idx] = max(float(log1p_of_logsum(terms)), 0.0) / (alpha - 1.0)
    return out


def rdp_subsampled_split(
    *,
    orders: Iterable[object] = PARTITION_ORDERS,
    num_submodels: int,
    noise_multiplier: float,
    sampling_rate: float,
    steps: int = 1,
    nonsplit_noise_multiplier: float | None = None,
    expansion: str = "zhu-wang",
    bound: str = "auto",
) -> np.ndarray:
    """RDP of ``steps`` Poisson-subsampled steps of a (partially) split Gaussian mechanism (002 Table 1).

    Per step the base mechanism is :func:`rdp_partial_split` (Thm 3.4 on the split part + the Gaussian
    mechanism on the non-split part) at every integer order ℓ = 2..max(orders); each unit is included with
    probability γ = ``sampling_rate``. Subsampling is then applied with

    - ``expansion="zhu-wang"``: Zhu & Wang's general bound for any mechanism (factor 3), which covers both
      neighbouring directions [I] (:func:`ampfl.accounting.rdp.rdp_poisson_subsampled_general`). Sound; the
      RDP accountant computes the same curve for ``PoissonSampledEvent(γ, ModelSplitEvent(...))``.
    - ``expansion="remove-only"``: the binomial expansion Σ_ℓ C(α,ℓ)(1−γ)^{α−ℓ} γ^ℓ e^{(ℓ−1)ε(ℓ)}. For the
      *remove* direction D_α((1−γ)Q + γP ‖ Q) this is an identity with ε(ℓ) = D_ℓ(P‖Q), hence an upper bound
      with ε(ℓ) ≥ D_ℓ(P‖Q) [D, derived here]. The *add* direction D_α(Q ‖ (1−γ)Q + γP) is NOT covered by a
      proof for the split mechanism (only for the plain Gaussian, Mironov et al. 2019); numerically it stayed
      below the remove direction in every case checked (docs/partition.md). This is the reading that
      reproduces 002 Table 1 (2.72 / 2.49); it is **not** a certified bound for add/remove neighbours.

    Args:
        orders: integer orders α ≥ 2.
        num_submodels: d ≥ 1 for the split part.
        noise_multiplier: z_s = σ_s / C_s of the split part.
        sampling_rate: γ in [0, 1].
        steps: iterations T ≥ 1 (RDP composes additively).
        nonsplit_noise_multiplier: z_ns = σ_ns / C_ns of the non-split part, or None.
        expansion: ``"zhu-wang"`` (sound) or ``"remove-only"`` (unproven add direction).
        bound: forward term of Theorem 3.1 for the split part (``"auto"``: exact where affordable).
    """
    alphas = check_orders("orders", orders)
    which = check_choice("expansion", expansion, EXPANSIONS)
    rate = check_probability("sampling_rate", sampling_rate, allow_zero=True)
    t = check_int("steps", steps, minimum=1)
    a_max = int(alphas.max())
    which_bound = resolve_bound(
        bound, d=check_int("num_submodels", num_submodels, minimum=1), k=1, max_order=a_max
    )
    base = rdp_partial_split(
        orders=range(2, a_max + 1),
        num_submodels=num_submodels,
        split_noise_multiplier=noise_multiplier,
        nonsplit_noise_multiplier=nonsplit_noise_multiplier,
        bound=which_bound,
    )
    if which == "zhu-wang":
        return rdp_poisson_subsampled_general(orders=alphas, sampling_rate=rate, base_rdp=base, steps=t)
    return np.asarray(t * _binomial_expansion(alphas, rate, base), dtype=np.float64)


def _orders(orders: Iterable[object]) -> tuple[int, ...]:
    return tuple(int(a) for a in check_orders("orders", orders))


def _shared_budget(z: float, share: float) -> tuple[float, float | None]:
    """(split, non-split) multipliers when the non-split part gets ``share``·C² of the clip budget."""
    if share == 0.0:
        return z, None
    return z / math.sqrt(1.0 - share), z / math.sqrt(share)


def calibrate_subsampled_split(
    *,
    target_epsilon: float,
    target_delta: float,
    num_submodels: int,
    sampling_rate: float,
    steps: int,
    nonsplit_share: float = 0.0,
    expansion: str = "zhu-wang",
    orders: Iterable[object] = PARTITION_ORDERS,
    rtol: float = CALIBRATION_RTOL,
) -> float:
    """Smallest noise multiplier z = σ/C for ``steps`` Poisson-subsampled split steps (002 Table 1 setting).

    The clip budget C² is shared: the non-split part gets ``nonsplit_share``·C², the split part the rest, both
    with noise std z·C (so the parts' multipliers are z/√share and z/√(1 − share)). ``expansion="zhu-wang"``
    is sound and goes through the RDP accountant (``PoissonSampledEvent(γ, ModelSplitEvent(...))``);
    ``"remove-only"`` calibrates against the binomial expansion of :func:`rdp_subsampled_split`, whose add
    direction is unproven — the number 002 Table 1 prints, **not** a certified noise level.
    """
    d = check_int("num_submodels", num_submodels, minimum=1)
    rate = check_probability("sampling_rate", sampling_rate)
    t = check_int("steps", steps, minimum=1)
    share = check_probability("nonsplit_share", nonsplit_share, allow_zero=True, allow_one=False)
    which = check_choice("expansion", expansion, EXPANSIONS)
    alphas = _orders(orders)
    if which == "zhu-wang":

        def event(z: float) -> PoissonSampledEvent:
            split, nonsplit = _shared_budget(z, share)
            inner = ModelSplitEvent(
                num_submodels=d, noise_multiplier=split, nonsplit_noise_multiplier=nonsplit
            )
            return PoissonSampledEvent(sampling_rate=rate, event=inner)

        return calibrate(
            event,
            target_epsilon=target_epsilon,
            target_delta=target_delta,
            count=t,
            rtol=rtol,
            accountant_kwargs={"orders": alphas},
        )
    eps = check_positive("target_epsilon", target_epsilon)
    dlt = check_delta("target_delta", target_delta)

    def loss(z: float) -> float:
        split, nonsplit = _shared_budget(z, share)
        rdp = rdp_subsampled_split(
            orders=alphas,
            num_submodels=d,
            noise_multiplier=split,
            sampling_rate=rate,
            steps=t,
            nonsplit_noise_multiplier=nonsplit,
            expansion="remove-only",
        )
        return epsilon_from_rdp(orders=alphas, rdp=rdp, delta=dlt).epsilon

    return calibrate_decreasing(loss, eps, lower_limit=1e-3, upper_limit=1e4, rtol=rtol)


def no_split_poisson_event(
    *, sampling_rate: float, noise_multiplier: float, nonsplit_noise_multiplier: float | None = None
) -> PoissonSampledEvent:
    """The Poisson-subsampled plain Gaussian that dominates a subsampled split step (split credit ignored)."""
    z = unsplit_noise_multiplier(noise_multiplier, nonsplit_noise_multiplier)
    return PoissonSampledEvent(sampling_rate=sampling_rate, event=GaussianEvent(noise_multiplier=z))


# ---------------------------------------------------------------------------------------------------------
# the analyses by name (the CLI's ``account|calibrate model-split --rate``)
# ---------------------------------------------------------------------------------------------------------

#: name -> (sound, note) of every analysis of a Poisson-subsampled split step.
SUBSAMPLED_ANALYSES: dict[str, tuple[bool, str]] = {
    "subsampled-split-zhu-wang": (
        True,
        "Poisson subsampling of Thm 3.4 by Zhu-Wang's general bound (factor 3), both directions [I]",
    ),
    "subsampled-no-split": (
        True,
        "Poisson-subsampled Gaussian with the split credit ignored (exact integer-order RDP)",
    ),
    "dong-as-printed": (
        False,
        "002 Table 1 reading: binomial expansion of the subsampled split; proven for the remove direction "
        "only, the add direction is unproven (docs/partition.md)",
    ),
}
#: The sound analyses; the recommended one is whichever certifies the smaller ε (needs the smaller noise).
SUBSAMPLED_RECOMMENDED: tuple[str, ...] = ("subsampled-split-zhu-wang", "subsampled-no-split")


def subsampled_split_curves(
    *,
    orders: Iterable[object] = PARTITION_ORDERS,
    num_submodels: int,
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
    nonsplit_noise_multiplier: float | None = None,
    bound: str = "auto",
    names: Iterable[str] | None = None,
) -> dict[str, np.ndarray]:
    """Whole-run RDP of ``steps`` Poisson-subsampled split steps under the analyses ``names`` (default:
    every analysis of :data:`SUBSAMPLED_ANALYSES`), all on the same ``orders``."""
    from ampfl.accounting.accountants import RDPAccountant

    alphas = _orders(orders)
    wanted = list(SUBSAMPLED_ANALYSES) if names is None else list(names)
    for name in wanted:
        check_choice("names", name, tuple(SUBSAMPLED_ANALYSES))

    def curve(expansion: str) -> np.ndarray:
        return rdp_subsampled_split(
            orders=alphas,
            num_submodels=num_submodels,
            noise_multiplier=noise_multiplier,
            sampling_rate=sampling_rate,
            steps=steps,
            nonsplit_noise_multiplier=nonsplit_noise_multiplier,
            expansion=expansion,
            bound=bound,
        )

    def plain() -> np.ndarray:
        event = no_split_poisson_event(
            sampling_rate=sampling_rate,
            noise_multiplier=noise_multiplier,
            nonsplit_noise_multiplier=nonsplit_noise_multiplier,
        )
        acc = RDPAccountant(orders=alphas)
        acc.compose(event, steps)
        return acc.rdp

    makers: dict[str, Callable[[], np.ndarray]] = {
        "subsampled-split-zhu-wang": lambda: curve("zhu-wang"),
        "subsampled-no-split": plain,
        "dong-as-printed": lambda: curve("remove-only"),
    }
    return {name: makers[name]() for name in wanted}


def calibrate_subsampled_split_analyses(
    *,
    target_epsilon: float,
    target_delta: float,
    num_submodels: int,
    sampling_rate: float,
    steps: int,
    nonsplit_share: float = 0.0,
    orders: Iterable[object] = PARTITION_ORDERS,
    rtol: float = CALIBRATION_RTOL,
) -> dict[str, float | UnreachableTarget]:
    """The noise multiplier z (σ/C, shared clip budget as in :func:`calibrate_subsampled_split`) under every
    analysis of :data:`SUBSAMPLED_ANALYSES`, or the :class:`UnreachableTarget` an analysis raised."""
    alphas = _orders(orders)
    out: dict[str, float | UnreachableTarget] = {}
    for name, expansion in (("subsampled-split-zhu-wang", "zhu-wang"), ("dong-as-printed", "remove-only")):
        try:
            out[name] = calibrate_subsampled_split(
                target_epsilon=target_epsilon,
                target_delta=target_delta,
                num_submodels=num_submodels,
                sampling_rate=sampling_rate,
                steps=steps,
                nonsplit_share=nonsplit_share,
                expansion=expansion,
                orders=alphas,
                rtol=rtol,
            )
        except UnreachableTarget as exc:
            out[name] = exc
    try:  # with a shared clip budget the unsplit step is a Gaussian with multiplier z
        out["subsampled-no-split"] = calibrate(
            lambda z: no_split_poisson_event(sampling_rate=sampling_rate, noise_multiplier=z),
            target_epsilon=target_epsilon,
            target_delta=target_delta,
            count=check_int("steps", steps, minimum=1),
            rtol=rtol,
            accountant_kwargs={"orders": alphas},
        )
    except UnreachableTarget as exc:
        out["subsampled-no-split"] = exc
    return out
