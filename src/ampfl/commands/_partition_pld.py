"""The PLD path of ``ampfl account model-split|dropout|bis`` and ``calibrate model-split|bis`` (issue 11).

The PLD accountant is the default: exact up to its discretisation for d ≤ 2 sub-models
(:mod:`ampfl.accounting.partition.pld`), a pessimistic log-sum PLD for d ≥ 3 and for Balanced Iteration
Subsampling (k > 1 through k = 1 blocks; :mod:`ampfl.accounting.partition.allocation_pld`); with
``--rate`` the pair is Poisson-subsampled (:mod:`ampfl.accounting.partition.subsampled_pld`). The RDP
bound (Theorem 3.1, with ``--rate`` Zhu–Wang's subsampling of it) is reported next to it under
``analyses["rdp"]``. ``--accountant rdp`` (or ``--orders``, ``--bound``) keeps the RDP report;
``--accountant pld`` with an RDP setting is a one-line error.
"""

from __future__ import annotations

import argparse
from typing import Any

from ampfl.commands._report import privacy_report

ACCOUNTANT_HELP = (
    "accountant: pld (pessimistic PLD: any --submodels, with or without --rate; bis with any --k) or rdp "
    "(002 Thm 3.1); "
    "default: pld where it applies, else rdp"
)


#: ``analysis`` of the PLD report with ``--rate`` (the exact pair, Poisson-subsampled).
SUBSAMPLED_PLD = "subsampled-split-pld"


def add_accountant(p: argparse.ArgumentParser) -> None:
    # auto (the default): pld where it applies, else rdp; the report names the resolved one (issue 11)
    p.add_argument(
        "--accountant", choices=("auto", "rdp", "pld"), default=None, help=f"{ACCOUNTANT_HELP} (auto)"
    )


#: Most self-compositions the CLI's PLD path takes: beyond, dp-accounting's composed grid outgrows memory
#: (10^9 steps of a Poisson-subsampled Gaussian ask 3 TiB) while RDP composes any count by a product;
#: ``--accountant auto`` then resolves to RDP, and an explicit ``pld`` is refused naming the flag.
PLD_MAX_COMPOSITIONS = 10**7


def composition_blockers(flag: str, count: int | None) -> list[str]:
    """``[reason]`` if ``count`` compositions (set by ``flag``) are too many for the PLD path, else ``[]``."""
    if count is None or count <= PLD_MAX_COMPOSITIONS:
        return []
    return [f"{flag} above {PLD_MAX_COMPOSITIONS:.0e} (the composed PLD would not fit in memory)"]


def wants_pld(args: argparse.Namespace) -> bool:
    """Whether this command takes the PLD path (``args.accountant`` is set to the resolved name).

    Every number of sub-models has a PLD, Poisson-subsampled or not; only RDP settings (``--orders``) and
    more than :data:`PLD_MAX_COMPOSITIONS` steps opt out.
    """
    return _resolve(args, composition_blockers("--steps", getattr(args, "steps", None)))


def wants_bis_pld(args: argparse.Namespace, k: int) -> bool:
    """Whether ``account|calibrate bis`` takes the PLD path (random allocation of k of T): no RDP settings."""
    blockers = composition_blockers("--epochs", getattr(args, "epochs", None))
    if getattr(args, "bound", None) is not None:
        blockers.append("--bound (an RDP setting)")
    return _resolve(args, blockers)


def _resolve(args: argparse.Namespace, blockers: list[str]) -> bool:
    if args.orders is not None:
        blockers.append("--orders (an RDP setting)")
    if args.accountant == "pld" and blockers:
        raise ValueError(f"--accountant pld does not apply with {'; '.join(blockers)}: use --accountant rdp.")
    if args.accountant in (None, "auto"):  # the tightest sound one that applies
        args.accountant = "rdp" if blockers else "pld"
    return bool(args.accountant == "pld")


def _events(d: int, z: float, z_ns: float | None) -> tuple[Any, Any]:
    """The split step and its no-split twin (the same noise on the whole, sensitivity of both parts)."""
    from ampfl.accounting.events import GaussianEvent, ModelSplitEvent
    from ampfl.accounting.partition import unsplit_noise_multiplier

    split = ModelSplitEvent(num_submodels=d, noise_multiplier=z, nonsplit_noise_multiplier=z_ns)
    return split, GaussianEvent(noise_multiplier=unsplit_noise_multiplier(z, z_ns))


def _sampled(event: Any, rate: float | None) -> Any:
    """``event`` Poisson-subsampled at ``rate`` (``--rate``), or ``event`` itself without it."""
    from ampfl.accounting.events import PoissonSampledEvent

    return event if rate is None else PoissonSampledEvent(sampling_rate=rate, event=event)


def _rate(args: argparse.Namespace) -> tuple[float | None, dict[str, Any]]:
    """(``--rate`` checked or None, the report keys it adds)."""
    from ampfl.accounting._checks import check_probability

    if getattr(args, "rate", None) is None:
        return None, {}
    q = check_probability("--rate", args.rate)
    return q, {"sampling_rate": q}


def _epsilon(accountant: str, event: Any, steps: int, delta: float) -> float:
    from ampfl.accounting.accountants import make_accountant

    return float(make_accountant(accountant).compose(event, steps).get_epsilon(delta))


def _analyses(
    rdp_event: Any, plain: Any, steps: int, delta: float, z_rdp: Any = None, z_plain: Any = None
) -> Any:
    """``analyses``: the RDP bound (Thm 3.1) and the no-split baseline; ``z_*`` are calibrated noise."""
    from ampfl.commands.partition import _entry

    rdp = _entry("rdp", _epsilon("rdp", rdp_event, steps, delta), delta, z_rdp)
    sampled = "Zhu-Wang subsampling of " if hasattr(rdp_event, "sampling_rate") else ""
    rdp["note"] = f"{sampled}002 Thm 3.1 RDP bound of the same mechanism (sound, looser)" + (
        "" if z_rdp is None or isinstance(z_rdp, float) else "; target unreachable"
    )
    return {"rdp": rdp, "no-split": _entry("no-split", _epsilon("pld", plain, steps, delta), delta, z_plain)}


def split_report(args: argparse.Namespace, *, d: int, theorem: str) -> dict[str, Any]:
    """``account model-split|dropout`` with the PLD accountant."""
    from ampfl.commands.partition import _positive, split_inputs

    delta, steps, z, z_ns, extra = split_inputs(args)
    q, keys = _rate(args)
    split, plain = (_sampled(e, q) for e in _events(d, z, z_ns))
    return privacy_report(
        epsilon=_epsilon("pld", split, steps, delta),
        delta=delta,
        analysis=theorem if q is None else SUBSAMPLED_PLD,
        accountant="pld",
        noise_multiplier=z,
        clip=_positive(args.clip, "--clip"),
        analyses=_analyses(split, plain, steps, delta),
        **extra,
        **keys,
        steps=steps,
    )


def calibrate_split(
    args: argparse.Namespace, *, d: int, target: float, delta: float, steps: int
) -> dict[str, Any]:
    """``calibrate model-split`` with the PLD accountant (the RDP and no-split noise reported alongside)."""
    from ampfl.accounting.calibrate import UnreachableTarget, calibrate
    from ampfl.accounting.events import GaussianEvent, ModelSplitEvent
    from ampfl.commands.partition import _positive

    q, keys = _rate(args)

    def split_at(x: float) -> Any:
        return _sampled(ModelSplitEvent(num_submodels=d, noise_multiplier=x), q)

    def plain_at(x: float) -> Any:
        return _sampled(GaussianEvent(noise_multiplier=x), q)

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
        epsilon=_epsilon("pld", split_at(z), steps, delta),
        delta=delta,
        analysis="theorem-3.4" if q is None else SUBSAMPLED_PLD,
        accountant="pld",
        noise_multiplier=z,
        clip=_positive(args.clip, "--clip"),
        analyses=_analyses(rdp_event, plain, steps, delta, z_rdp, z_plain),
        target_epsilon=target,
        steps=steps,
        **keys,
    )


def _bis_events(t: int, k: int) -> dict[str, tuple[str, Any, int]]:
    """name → (accountant, event family, events per epoch) of the BIS report's analyses."""
    from ampfl.accounting.events import BalancedIterationSubsamplingEvent, GaussianEvent, PoissonSampledEvent

    def bis(x: float) -> Any:
        return BalancedIterationSubsamplingEvent(iterations=t, participations=k, noise_multiplier=x)

    def poisson(x: float) -> Any:
        return PoissonSampledEvent(sampling_rate=k / t, event=GaussianEvent(noise_multiplier=x))

    return {
        "random-allocation-pld": ("pld", bis, 1),
        "rdp": ("rdp", bis, 1),
        "no-amplification": ("pld", lambda x: GaussianEvent(noise_multiplier=x), k),
        "poisson": ("pld", poisson, t),
    }


_BIS_NOTES = {
    "rdp": "002 Thm 3.8 RDP bound of the same mechanism (sound, looser)",
    "poisson": "another sampling scheme, for comparison: Poisson at rate k/T over the same T steps (PLD)",
}


def _bis(
    args: argparse.Namespace,
    t: int,
    k: int,
    epochs: int,
    delta: float,
    z: float,
    zs: Any = None,
    **extra: Any,
) -> dict[str, Any]:
    """The BIS PLD report at noise ``z``; ``zs`` (calibrate): name → calibrated z or its UnreachableTarget."""
    from ampfl.commands.partition import _entry, _positive

    entries = {}
    for name, (acc, make, per_epoch) in _bis_events(t, k).items():
        z_name = zs[name] if zs is not None and isinstance(zs[name], float) else z
        eps = _epsilon(acc, make(z_name), per_epoch * epochs, delta)
        entries[name] = _entry(name, eps, delta, None if zs is None else zs[name])
        entries[name]["note"] = _BIS_NOTES.get(name, "") + entries[name]["note"]
    return privacy_report(
        epsilon=entries["random-allocation-pld"]["epsilon"],
        delta=delta,
        analysis="random-allocation-pld",
        accountant="pld",
        noise_multiplier=z,
        clip=_positive(args.clip, "--clip"),
        analyses=entries,
        **extra,
        epochs=epochs,
    )


def bis_report(args: argparse.Namespace, *, delta: float, t: int, k: int, epochs: int) -> dict[str, Any]:
    """``account bis`` with the PLD accountant (random allocation of k of T steps per epoch)."""
    from ampfl.accounting._checks import check_positive

    z = check_positive("--noise-multiplier", args.noise_multiplier)
    return _bis(args, t, k, epochs, delta, z)


def calibrate_bis(
    args: argparse.Namespace, *, target: float, delta: float, t: int, k: int, epochs: int
) -> dict[str, Any]:
    """``calibrate bis`` with the PLD accountant; the RDP, no-amplification and Poisson noise alongside."""
    from ampfl.accounting.calibrate import UnreachableTarget, calibrate

    zs: dict[str, Any] = {}
    for name, (acc, make, per_epoch) in _bis_events(t, k).items():
        kw: dict[str, Any] = {"initial": zs.get("random-allocation-pld", 1.0), "count": per_epoch * epochs}
        try:
            zs[name] = calibrate(make, target_epsilon=target, target_delta=delta, accountant=acc, **kw)
        except UnreachableTarget as exc:  # reported in its entry, not fatal: the PLD answer stands
            if name == "random-allocation-pld":
                raise
            zs[name] = exc
    return _bis(args, t, k, epochs, delta, zs["random-allocation-pld"], zs, target_epsilon=target)
