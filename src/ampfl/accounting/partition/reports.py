"""Reports of paper 002's mechanisms: what ``ampfl account|calibrate model-split|dropout`` print (``bis``,
``poisson``: :mod:`ampfl.accounting.partition.sampling_reports`, built from the parts here).

Each function returns the common report (:func:`ampfl.accounting.report.privacy_report`): the recommended,
sound analysis at the top level, every other analysis under ``analyses`` (the RDP bound of Theorem 3.1 next
to the PLD, the baselines that ignore the amplification). The accountant is given resolved (``"rdp"`` or
``"pld"``): choosing one for ``auto`` is the caller's policy (the CLI's, :mod:`ampfl.commands.partition`).

- PLD: exact up to its discretisation for d ≤ 2 sub-models (:mod:`ampfl.accounting.partition.pld`), a
  pessimistic log-sum PLD for d ≥ 3 and for Balanced Iteration Subsampling (k > 1 through k = 1 blocks;
  :mod:`ampfl.accounting.partition.allocation_pld`); with ``sampling_rate`` the pair is Poisson-subsampled
  (:mod:`ampfl.accounting.partition.subsampled_pld`).
- RDP: Theorem 3.1 (:mod:`ampfl.accounting.partition.mechanisms`); with ``sampling_rate`` the analyses of
  :mod:`ampfl.accounting.partition.subsampled`, the smallest sound one recommended. RDP reports add
  ``order`` (the minimising Rényi order), ``orders`` and ``rdp`` (whole-run RDP at each order).

Parameters keep the one name of each quantity (docs/units.md); errors name them (the CLI renames them to its
flags).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ampfl.accounting._checks import check_delta, check_int, check_positive, check_probability
from ampfl.accounting.accountants import RDPAccountant, epsilon_after
from ampfl.accounting.accountants.rdp_conversion import epsilon_from_rdp
from ampfl.accounting.report import analysis_entry, privacy_report

#: ``analysis`` of the PLD report with a sampling rate (the exact pair, Poisson-subsampled).
SUBSAMPLED_PLD = "subsampled-split-pld"
#: Baselines that ignore the amplification (sound, looser): name -> note.
_BASELINES = {
    "no-split": "the split credit ignored: the plain Gaussian mechanism",
    "no-amplification": "each sample's k participations per epoch as plain Gaussian steps",
}


# ---------------------------------------------------- parts shared with :mod:`.sampling_reports`


def orders_or(orders: Sequence[int] | None, default: Sequence[int]) -> tuple[int, ...]:
    from ampfl.accounting._checks import check_orders

    return tuple(default) if orders is None else tuple(int(a) for a in check_orders("orders", orders))


def partition_orders(orders: Sequence[int] | None) -> tuple[int, ...]:
    from ampfl.accounting.partition import PARTITION_ORDERS

    return orders_or(orders, PARTITION_ORDERS)


def positive_or_none(value: float | None, name: str) -> float | None:
    return None if value is None else check_positive(name, value)


def rdp_report(orders: tuple[int, ...], rdp: Any, delta: float) -> tuple[float, dict[str, Any]]:
    """ε of an RDP curve (the one conversion) and the ``order``/``orders``/``rdp`` keys."""
    values = [float(r) for r in rdp]
    eps, order = epsilon_from_rdp(orders=orders, rdp=values, delta=delta)
    return eps, {"order": order, "orders": list(orders), "rdp": values}


def rdp_curve(event: Any, count: int, orders: tuple[int, ...]) -> Any:
    """Per-order RDP of ``count`` × ``event`` in a fresh RDP accountant."""
    return RDPAccountant(orders=orders).compose(event, count).rdp


def rdp_epsilon(event: Any, count: int, delta: float, orders: tuple[int, ...]) -> float:
    return rdp_report(orders, rdp_curve(event, count, orders), delta)[0]


def entry(name: str, eps: float, delta: float, z: Any = None) -> dict[str, Any]:
    """An ``analyses`` entry; ``z`` is a calibrated noise multiplier or the UnreachableTarget it raised."""
    from ampfl.accounting.partition import SUBSAMPLED_ANALYSES

    sound, note = SUBSAMPLED_ANALYSES.get(name, (True, _BASELINES.get(name, "")))
    if z is not None and not isinstance(z, float):  # an UnreachableTarget
        eps, note = z.smallest_epsilon, note + "; target unreachable: epsilon is the smallest it certifies"
    out = analysis_entry(epsilon=eps, delta=delta, sound=sound, note=note)
    if isinstance(z, float):
        out["noise_multiplier"] = z
    return out


def gaussian(z: float) -> Any:
    from ampfl.accounting.events import GaussianEvent

    return GaussianEvent(noise_multiplier=z)


def poisson(rate: float, z: float) -> Any:
    from ampfl.accounting.events import PoissonSampledEvent

    return PoissonSampledEvent(sampling_rate=rate, event=gaussian(z))


def _sampled(event: Any, rate: float | None) -> Any:
    """``event`` Poisson-subsampled at ``rate``, or ``event`` itself without a rate."""
    from ampfl.accounting.events import PoissonSampledEvent

    return event if rate is None else PoissonSampledEvent(sampling_rate=rate, event=event)


def calibrated(
    make_event: Callable[[float], Any], target: float, delta: float, count: int, **kw: Any
) -> float:
    from ampfl.accounting.calibrate import calibrate

    return calibrate(make_event, target_epsilon=target, target_delta=delta, count=count, **kw)


def resolved(accountant: str) -> str:
    if accountant not in ("rdp", "pld"):
        raise ValueError(f"accountant must be rdp or pld (resolved). Found {accountant!r}.")
    return accountant


def _rate(sampling_rate: float | None) -> tuple[float | None, dict[str, Any]]:
    """(the checked rate or None, the report keys it adds)."""
    if sampling_rate is None:
        return None, {}
    q = check_probability("sampling_rate", sampling_rate)
    return q, {"sampling_rate": q}


def _pld_analyses(
    rdp_event: Any, plain: Any, steps: int, delta: float, z_rdp: Any = None, z_plain: Any = None
) -> dict[str, Any]:
    """``analyses`` of a PLD split report: the RDP bound (Thm 3.1) and the no-split baseline."""
    rdp = entry("rdp", epsilon_after(rdp_event, steps, delta, "rdp"), delta, z_rdp)
    sampled = "Zhu-Wang subsampling of " if hasattr(rdp_event, "sampling_rate") else ""
    rdp["note"] = f"{sampled}002 Thm 3.1 RDP bound of the same mechanism (sound, looser)" + (
        "" if z_rdp is None or isinstance(z_rdp, float) else "; target unreachable"
    )
    return {
        "rdp": rdp,
        "no-split": entry("no-split", epsilon_after(plain, steps, delta, "pld"), delta, z_plain),
    }


# ------------------------------------------------------------------------------------- model split, dropout


def account_split(
    *,
    num_submodels: int,
    noise_multiplier: float,
    steps: int,
    delta: float,
    accountant: str,
    nonsplit_noise_multiplier: float | None = None,
    nonsplit_clip: float | None = None,
    sampling_rate: float | None = None,
    clip: float | None = None,
    orders: Sequence[int] | None = None,
    bound: str = "exact",
    theorem: str = "theorem-3.4",
) -> dict[str, Any]:
    """ε of ``steps`` model-split steps (002 Thm 3.4; dropout: d = 2 and ``theorem="theorem-3.7"``), with a
    non-split part (§3.2.2) and Poisson subsampling at ``sampling_rate`` (002 Table 1 setting)."""
    from ampfl.accounting import partition
    from ampfl.accounting.events import ModelSplitEvent

    d = check_int("num_submodels", num_submodels, minimum=1)
    delta = check_delta("delta", delta)
    steps = check_int("steps", steps, minimum=1)
    z = check_positive("noise_multiplier", noise_multiplier)
    z_ns = positive_or_none(nonsplit_noise_multiplier, "nonsplit_noise_multiplier")
    extra: dict[str, Any] = {} if z_ns is None else {"nonsplit_noise_multiplier": z_ns}
    clip_ns = positive_or_none(nonsplit_clip, "nonsplit_clip")
    if z_ns is not None and clip_ns is not None:
        extra["nonsplit_noise_std"] = z_ns * clip_ns
    clip = positive_or_none(clip, "clip")
    q, rate_keys = _rate(sampling_rate)
    if resolved(accountant) == "pld":
        split = ModelSplitEvent(num_submodels=d, noise_multiplier=z, nonsplit_noise_multiplier=z_ns)
        plain = gaussian(partition.unsplit_noise_multiplier(z, z_ns))
        split, plain = _sampled(split, q), _sampled(plain, q)
        return privacy_report(
            epsilon=epsilon_after(split, steps, delta, "pld"),
            delta=delta,
            analysis=theorem if q is None else SUBSAMPLED_PLD,
            accountant="pld",
            noise_multiplier=z,
            clip=clip,
            analyses=_pld_analyses(split, plain, steps, delta),
            **extra,
            **rate_keys,
            steps=steps,
        )
    grid = partition_orders(orders)
    common: dict[str, Any] = {"noise_multiplier": z, "clip": clip, "accountant": "rdp"}
    if q is None:
        rdp = partition.rdp_partial_split(
            orders=grid,
            num_submodels=d,
            split_noise_multiplier=z,
            nonsplit_noise_multiplier=z_ns,
            steps=steps,
            bound=bound,
        )
        eps, keys = rdp_report(grid, rdp, delta)
        plain_eps = rdp_epsilon(gaussian(partition.unsplit_noise_multiplier(z, z_ns)), steps, delta, grid)
        analyses = {"no-split": entry("no-split", plain_eps, delta)}
        return privacy_report(
            epsilon=eps,
            delta=delta,
            analysis=theorem,
            analyses=analyses,
            **common,
            **extra,
            bound=bound,
            **keys,
        )
    curves = partition.subsampled_split_curves(
        orders=grid,
        num_submodels=d,
        noise_multiplier=z,
        sampling_rate=q,
        steps=steps,
        nonsplit_noise_multiplier=z_ns,
        bound=bound,
    )
    results = {name: rdp_report(grid, rdp, delta) for name, rdp in curves.items()}
    best = min(partition.SUBSAMPLED_RECOMMENDED, key=lambda n: results[n][0])
    analyses = {n: entry(n, results[n][0], delta) for n in results if n != best}
    return privacy_report(
        epsilon=results[best][0],
        delta=delta,
        analysis=best,
        analyses=analyses,
        **common,
        **extra,
        sampling_rate=q,
        bound=bound,
        **results[best][1],
    )


def calibrate_split(
    *,
    target_epsilon: float,
    delta: float,
    num_submodels: int,
    steps: int,
    accountant: str,
    sampling_rate: float | None = None,
    clip: float | None = None,
    orders: Sequence[int] | None = None,
) -> dict[str, Any]:
    """The smallest noise multiplier of ``steps`` model-split steps at (``target_epsilon``, ``delta``); the
    other analyses' noise alongside (an unreachable one is reported in its entry)."""
    from ampfl.accounting import partition
    from ampfl.accounting.calibrate import UnreachableTarget, calibrate
    from ampfl.accounting.events import ModelSplitEvent

    target = check_positive("target_epsilon", target_epsilon)
    delta = check_delta("delta", delta)
    d = check_int("num_submodels", num_submodels, minimum=1)
    steps = check_int("steps", steps, minimum=1)
    clip = positive_or_none(clip, "clip")
    q, rate_keys = _rate(sampling_rate)
    if resolved(accountant) == "pld":

        def split_at(x: float) -> Any:
            return _sampled(ModelSplitEvent(num_submodels=d, noise_multiplier=x), q)

        def plain_at(x: float) -> Any:
            return _sampled(gaussian(x), q)

        kw: dict[str, Any] = {"target_epsilon": target, "target_delta": delta, "count": steps}
        z = calibrate(split_at, accountant="pld", **kw)
        found: dict[str, Any] = {}
        for name, make in (("rdp", split_at), ("plain", plain_at)):
            try:
                found[name] = calibrate(make, accountant="rdp" if name == "rdp" else "pld", **kw)
            except UnreachableTarget as exc:  # reported in its entry, not fatal: the PLD answer stands
                found[name] = exc
        z_rdp, z_plain = found["rdp"], found["plain"]
        rdp_event = split_at(z_rdp if isinstance(z_rdp, float) else z)
        plain = plain_at(z_plain if isinstance(z_plain, float) else z)
        return privacy_report(
            epsilon=epsilon_after(split_at(z), steps, delta, "pld"),
            delta=delta,
            analysis="theorem-3.4" if q is None else SUBSAMPLED_PLD,
            accountant="pld",
            noise_multiplier=z,
            clip=clip,
            analyses=_pld_analyses(rdp_event, plain, steps, delta, z_rdp, z_plain),
            target_epsilon=target,
            steps=steps,
            **rate_keys,
        )
    grid = partition_orders(orders)
    common: dict[str, Any] = {"accountant": "rdp", "clip": clip}
    if q is None:
        z = partition.calibrate_model_split(
            target_epsilon=target, target_delta=delta, num_submodels=d, steps=steps, orders=grid
        )
        eps = rdp_epsilon(ModelSplitEvent(num_submodels=d, noise_multiplier=z), steps, delta, grid)
        z_plain = calibrated(gaussian, target, delta, steps, accountant_kwargs={"orders": grid})
        plain_eps = rdp_epsilon(gaussian(z_plain), steps, delta, grid)
        analyses = {"no-split": entry("no-split", plain_eps, delta, z_plain)}
        return privacy_report(
            epsilon=eps,
            delta=delta,
            analysis="theorem-3.4",
            noise_multiplier=z,
            analyses=analyses,
            **common,
            target_epsilon=target,
        )
    split: dict[str, Any] = {"num_submodels": d, "sampling_rate": q, "steps": steps, "orders": grid}
    zs = partition.calibrate_subsampled_split_analyses(target_epsilon=target, target_delta=delta, **split)

    def eps_at(name: str, z: Any) -> float:
        if not isinstance(z, float):
            return math.inf
        curve = partition.subsampled_split_curves(noise_multiplier=z, names=[name], **split)[name]
        return rdp_report(grid, curve, delta)[0]

    z_num = {n: (z if isinstance(z, float) else math.inf) for n, z in zs.items()}
    best = min(partition.SUBSAMPLED_RECOMMENDED, key=z_num.__getitem__)
    z_best = zs[best]
    if not isinstance(z_best, float):
        raise z_best
    analyses = {n: entry(n, eps_at(n, z), delta, z) for n, z in zs.items() if n != best}
    return privacy_report(
        epsilon=eps_at(best, z_best),
        delta=delta,
        analysis=best,
        noise_multiplier=z_best,
        analyses=analyses,
        **common,
        target_epsilon=target,
        sampling_rate=q,
    )
