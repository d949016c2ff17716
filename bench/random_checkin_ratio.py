"""Random check-in (004), sound analyses against the worst explicit dataset, one round and composed.

For each setting (p, q, d, z, T, δ) it prints ε(δ) of
- ``wcs``: the recommended analysis, T × ``RandomCheckInEvent`` on the PLD accountant (pessimistic, 1e-4);
- ``refined``: the empty-sample refinement of the WCS pair (sound; :func:`ampfl.accounting.audit.
  random_checkin_pld.refined_pld`, pessimistic, 1e-4);
- ``split`` (``--split-only``: this column alone, per row): the noise-split bound (sound; :func:`ampfl.
  accounting.audit.random_checkin_pld.split_pld`), the smaller ε of the splits z₁/z ∈ {0.5, 0.7};
- ``explicit``: the largest ε(δ) over explicit datasets (:func:`ampfl.accounting.audit.random_checkin_pld.
  explicit_epsilon`: binned pair, optimistic rounding, T-fold composed, so a LOWER bound on the mechanism's
  ε). "before": the auditor's collinear family alone (other records at a·C·u); "after": with the tilted
  family (other records at full norm C, at an angle θ from x′);
and the ratios (≥ 1 always: the sound bounds are never below an explicit dataset).

- ``--hidden-only`` (this column pair alone, per row): ``event``, T × ``RandomCheckInEvent`` with hidden
  participation (the default) on the PLD accountant, i.e. the empty-sample refinement; ``best``: the smallest
  composed ε over the sound candidates (:func:`ampfl.accounting.random_checkin.pld_pairs.
  best_hidden_epsilon`: the refinement and the per-count noise split), and which one won.

- ``--verdict``: per row the explicit ε (one round: each dataset's binned pair's exact ε, no loss grid;
  composed: loss grid 1e-5), ``event`` (what a DP-DSGD-RP run's ledger reports), ``best`` (as above).

- ``--paths`` (one-round rows): the count-hidden path diagnostic (:func:`ampfl.accounting.audit.
  random_checkin_envelope.count_hidden_path_epsilon`, an estimate from below of a relaxation that is an upper
  bound), started from the best identical dataset.

- ``--gap`` (rows selectable by ``--rows A:B``, indices into the settings list): per row,
  ``explicit`` (identical records, as above), ``two-type``: the best dataset with two record types (k records
  at g₁, d − k at g₂; :func:`ampfl.accounting.audit.random_checkin_datasets.search_record_types`, its PLD
  optimistic: a LOWER bound), and for one round the DIAGNOSTIC columns of :func:`ampfl.accounting.audit.
  random_checkin_envelope.envelope_epsilon` (estimates, not bounds): ``M revealed`` (the best identical
  dataset with the count of sampled other records revealed) and ``envelope`` (per count the worst sum in the
  disk, M revealed), next to ``refined`` and ``best`` (sound).

    PYTHONPATH=src python bench/random_checkin_ratio.py [--quick] [--composed-only | --single-only]
    PYTHONPATH=src python bench/random_checkin_ratio.py --gap --rows 0:3 [--no-envelope]
    PYTHONPATH=src python bench/random_checkin_ratio.py --verdict [--single-only | --composed-only]
    PYTHONPATH=src python bench/random_checkin_ratio.py --paths --single-only
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import time
from typing import Any

from ampfl.accounting.accountants.pld import PLDAccountant
from ampfl.accounting.audit.random_checkin_datasets import (
    binned_delta,
    random_record_types,
    search_record_types,
    types_pair_pld,
)
from ampfl.accounting.audit.random_checkin_envelope import (
    count_hidden_path_epsilon,
    envelope_epsilon,
    per_count_pld,
)
from ampfl.accounting.audit.random_checkin_pld import ExplicitSearch, explicit_epsilon, refined_pld, split_pld
from ampfl.accounting.events import RandomCheckInEvent
from ampfl.accounting.random_checkin.pld_pairs import best_hidden_epsilon

A_SINGLE = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
A_COMPOSED = (0.0, 0.5, 1.0)
ANGLES_COMPOSED = (30.0, 60.0, 90.0)
SPLITS = (0.5, 0.7)
#: loss grid of the composed explicit PLDs (optimistic rounding lowers a T-fold ε by < T·h: 0.005 at T = 500)
EXPLICIT_COMPOSED_INTERVAL = 1e-5


def single_settings(quick: bool) -> list[tuple[float, float, int, float, int, float]]:
    if quick:
        return [(0.1, 0.1, 10, 1.0, 1, 1e-5), (0.5, 0.01, 100, 1.0, 1, 1e-5)]
    grid = itertools.product((0.1, 0.5), (0.01, 0.1), (10, 100), (1.0, 3.0), (1,), (1e-5,))
    extra = [(0.1, 0.1, 10, 1.0, 1, 1e-8), (0.5, 0.1, 100, 1.0, 1, 1e-8)]
    return [*grid, *extra]


def composed_settings(quick: bool) -> list[tuple[float, float, int, float, int, float]]:
    base = [(0.1, 0.1, 10, 1.0), (0.5, 0.01, 10, 1.0), (0.1, 0.1, 100, 3.0)]
    steps = (30,) if quick else (30, 100, 500)
    return [(p, q, d, z, t, 1e-5) for (p, q, d, z) in (base[:2] if quick else base) for t in steps]


def row(p: float, q: float, d: int, z: float, t: int, delta: float) -> tuple[float, float, ExplicitSearch]:
    wcs_event = RandomCheckInEvent(
        participation=p, sampling_rate=q, noise_multiplier=z, local_dataset_size=d, participation_hidden=False
    )
    wcs = PLDAccountant().compose(wcs_event, t).get_epsilon(delta)
    one = refined_pld(participation=p, sampling_rate=q, local_dataset_size=d, noise_multiplier=z)
    refined = float((one if t == 1 else one.self_compose(t)).get_epsilon_for_delta(delta))
    found = explicit_epsilon(
        participation=p,
        sampling_rate=q,
        local_dataset_size=d,
        noise_multiplier=z,
        delta=delta,
        iterations=t,
        a_values=A_SINGLE if t == 1 else A_COMPOSED,
        angles=(15.0, 30.0, 45.0, 60.0, 75.0, 90.0) if t == 1 else ANGLES_COMPOSED,
        refine=6 if t == 1 else 2,
        value_discretization_interval=EXPLICIT_COMPOSED_INTERVAL,
    )
    return wcs, max(0.0, refined), found


def split_epsilon(p: float, q: float, d: int, z: float, t: int, delta: float) -> float:
    best = float("inf")
    for frac in SPLITS:
        one = split_pld(
            participation=p, sampling_rate=q, local_dataset_size=d, noise_multiplier=z, split=frac
        )
        best = min(best, float((one if t == 1 else one.self_compose(t)).get_epsilon_for_delta(delta)))
    return max(0.0, best)


def hidden_columns(p: float, q: float, d: int, z: float, t: int, delta: float) -> tuple[float, float, str]:
    """(event ε, best candidate ε, its name) for hidden participation."""
    event = RandomCheckInEvent(participation=p, sampling_rate=q, noise_multiplier=z, local_dataset_size=d)
    eps = PLDAccountant().compose(event, t).get_epsilon(delta)
    best, name = best_hidden_epsilon(
        participation=p, sampling_rate=q, local_dataset_size=d, noise_multiplier=z, iterations=t, delta=delta
    )
    return eps, best, name


_SUMS: dict[tuple[float, float, int, float], dict[int, tuple[float, float]]] = {}


def composed_envelope(
    p: float, q: float, d: int, z: float, t: int, delta: float, best: float, g: tuple[float, float]
) -> tuple[str, str, str]:
    """DIAGNOSTIC for composed rows: the per-count mixture at the one-round envelope's maximising sums (one
    choice of sums, so an estimate of the composed envelope from below), composed t times: M revealed for
    every count, and the smallest over pooling thresholds k ∈ {1, 2, 3, 5, 8}; first, the explicit dataset
    g with M revealed, composed."""
    kw: dict[str, Any] = {
        "participation": p,
        "sampling_rate": q,
        "local_dataset_size": d,
        "noise_multiplier": z,
    }
    if (p, q, d, z) not in _SUMS:
        one = refined_pld(**kw).get_epsilon_for_delta(delta)
        _SUMS[(p, q, d, z)] = envelope_epsilon(**kw, delta=delta, eps_low=best / t, eps_high=one).sup_points
    sums = _SUMS[(p, q, d, z)]
    eps = {
        k: per_count_pld(**kw, sums=sums, pool_from=k).self_compose(t).get_epsilon_for_delta(delta)
        for k in (None, 1, 2, 3, 5, 8)
    }
    norm, angle = math.hypot(*g), math.degrees(math.atan2(g[1], g[0]))
    fixed = {m: (m * norm, angle) for m in range(1, d + 1)}
    revealed = per_count_pld(**kw, sums=fixed).self_compose(t).get_epsilon_for_delta(delta)
    return f"{revealed:.4g}", f"{eps[None]:.4g}", f"{min(eps.values()):.4g}"


def random_row(p: float, q: float, d: int, z: float, delta: float, samples: int) -> str:
    """``--gap --random-types N``: binned δ at the identical dataset's ε(δ), identical vs the best of N random
    three-type datasets (lower bounds both)."""
    _, _, found = row(p, q, d, z, 1, delta)
    kw: dict[str, Any] = {
        "participation": p,
        "sampling_rate": q,
        "noise_multiplier": z,
        "epsilon": found.epsilon,
    }
    ident = binned_delta([(d, (found.a, found.b))], **kw)
    types, val = random_record_types(**kw, local_dataset_size=d, samples=samples)
    desc = " + ".join(f"{n}×({g[0]:.2f}, {g[1]:.2f})" for n, g in types if n > 0)
    head = f"| {p:g} | {q:g} | {d} | {z:g} | {found.epsilon:.4g} "
    return head + f"| δ identical {ident:.5g} | δ random {val:.5g} [{desc}] |"


def gap_row(p: float, q: float, d: int, z: float, t: int, delta: float, envelope: bool) -> str:
    """One ``--gap`` table row (module docstring)."""
    t0 = time.perf_counter()
    _, refined, found = row(p, q, d, z, t, delta)
    best, _ = best_hidden_epsilon(
        participation=p, sampling_rate=q, local_dataset_size=d, noise_multiplier=z, iterations=t, delta=delta
    )
    kw: dict[str, Any] = {
        "participation": p,
        "sampling_rate": q,
        "local_dataset_size": d,
        "noise_multiplier": z,
    }
    if t == 1:
        types = search_record_types(**kw, start=(found.a, found.b), epsilon=found.epsilon).types
    else:  # composed: a coarser scan scored by the composed ε itself
        types = search_record_types(
            **kw,
            start=(found.a, found.b),
            delta=delta,
            iterations=t,
            fractions=(0.25, 0.5),
            norms=(0.5, 1.0),
            angles=tuple(range(0, 360, 60)),
            pattern_steps=1,
            seeds=1,
        ).types
    one = types_pair_pld(types, participation=p, sampling_rate=q, noise_multiplier=z)
    two = max(0.0, float((one if t == 1 else one.self_compose(t)).get_epsilon_for_delta(delta)))
    explicit = max(found.epsilon, two)
    desc = " + ".join(f"{n}×({g[0]:.2f}, {g[1]:.2f})" for n, g in types if n > 0)
    revealed = pure = env = "—"
    if envelope and t == 1:
        e = envelope_epsilon(
            **kw, delta=delta, eps_low=found.epsilon, eps_high=refined, direction=(found.a, found.b)
        )
        revealed, pure, env = f"{e.revealed_epsilon:.4g}", f"{e.pure_epsilon:.4g}", f"{e.epsilon:.4g}"
    elif envelope:
        revealed, pure, env = composed_envelope(p, q, d, z, t, delta, best, (found.a, found.b))
    return (
        f"| {p:g} | {q:g} | {d} | {z:g} | {t} | {delta:g} | {found.epsilon:.4g} ({found.a:.2f}, "
        f"{found.b:.2f}) | {two:.4g} [{desc}] | {two / found.epsilon:.3f} | {revealed} | {pure} | {env} "
        f"| {refined:.4g} | {best:.4g} | {best / explicit:.3f} | {time.perf_counter() - t0:.0f} |"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few settings")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--single-only", action="store_true")
    only.add_argument("--composed-only", action="store_true")
    parser.add_argument("--split-only", action="store_true", help="only the noise-split column, per row")
    parser.add_argument("--hidden-only", action="store_true", help="only the hidden-participation columns")
    parser.add_argument(
        "--verdict", action="store_true", help="explicit, the run's event and the best sound bound, per row"
    )
    parser.add_argument("--paths", action="store_true", help="one round: the count-hidden path diagnostic")
    parser.add_argument("--min-noise", type=float, default=0.0, help="only rows with z at least this")
    parser.add_argument("--gap", action="store_true", help="two-type datasets and the envelope diagnostic")
    parser.add_argument("--no-envelope", action="store_true", help="with --gap: skip the envelope columns")
    parser.add_argument("--rows", default=":", help="with --gap: rows A:B of the settings list")
    parser.add_argument(
        "--random-types",
        type=int,
        default=0,
        help="with --gap: N random three-type datasets per one-round row",
    )
    args = parser.parse_args(argv)
    settings = []
    if not args.composed_only:
        settings += single_settings(args.quick)
    if not args.single_only:
        settings += composed_settings(args.quick)
    settings = [row for row in settings if row[3] >= args.min_noise]
    print(f"load average {os.getloadavg()[0]:.1f}")
    if args.gap:
        lo, _, hi = args.rows.partition(":")
        print(
            "| p | q | d | z | T | δ | ε explicit identical (a, b) | ε two-type [types] "
            "| two-type ÷ identical | ε M revealed (diag.) | ε envelope pure (diag.) "
            "| ε envelope pooled (diag.) | ε refined | ε best | best ÷ explicit | s |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for p, q, d, z, t, delta in settings[int(lo or 0) : int(hi) if hi else None]:
            if args.random_types and t == 1:
                print(random_row(p, q, d, z, delta, args.random_types), flush=True)
            else:
                print(gap_row(p, q, d, z, t, delta, not args.no_envelope), flush=True)
        return
    if args.paths:
        print("| p | q | d | z | δ | ε identical (straight) | ε count-hidden path | path ÷ identical | s |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for p, q, d, z, t, delta in settings:
            if t != 1:
                continue
            t0 = time.perf_counter()
            _, _, found = row(p, q, d, z, t, delta)
            got = count_hidden_path_epsilon(
                participation=p,
                sampling_rate=q,
                local_dataset_size=d,
                noise_multiplier=z,
                delta=delta,
                reference_epsilon=found.epsilon,
                start=(found.a, found.b),
            )
            print(
                f"| {p:g} | {q:g} | {d} | {z:g} | {delta:g} | {got.start_epsilon:.5g} | {got.epsilon:.5g} "
                f"| {got.epsilon / got.start_epsilon:.3f} | {time.perf_counter() - t0:.0f} |",
                flush=True,
            )
        return
    if args.verdict:
        print(
            "| p | q | d | z | T | δ | ε explicit (a, b) | ε event (a run's ledger) | ε best sound "
            "| event ÷ explicit | best ÷ explicit | s |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for p, q, d, z, t, delta in settings:
            t0 = time.perf_counter()
            _, _, found = row(p, q, d, z, t, delta)
            eps, best, _ = hidden_columns(p, q, d, z, t, delta)
            print(
                f"| {p:g} | {q:g} | {d} | {z:g} | {t} | {delta:g} | {found.epsilon:.4g} ({found.a:.2f}, "
                f"{found.b:.2f}) | {eps:.4g} | {best:.4g} | {eps / found.epsilon:.3f} "
                f"| {best / found.epsilon:.3f} | {time.perf_counter() - t0:.0f} |",
                flush=True,
            )
        return
    if args.hidden_only:
        print("| p | q | d | z | T | δ | ε event (hidden) | ε best | best pair | s |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
        for p, q, d, z, t, delta in settings:
            t0 = time.perf_counter()
            eps, best, name = hidden_columns(p, q, d, z, t, delta)
            print(
                f"| {p:g} | {q:g} | {d} | {z:g} | {t} | {delta:g} | {eps:.4g} | {best:.4g} | {name} | "
                f"{time.perf_counter() - t0:.0f} |",
                flush=True,
            )
        return
    if args.split_only:
        print("| p | q | d | z | T | δ | ε split |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for p, q, d, z, t, delta in settings:
            eps = split_epsilon(p, q, d, z, t, delta)
            print(f"| {p:g} | {q:g} | {d} | {z:g} | {t} | {delta:g} | {eps:.4g} |", flush=True)
        return
    print(
        "| p | q | d | z | T | δ | ε wcs | ε refined | ε explicit before (a) | ε explicit after (a, b) "
        "| wcs ÷ before | wcs ÷ after | refined ÷ after |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    t0 = time.perf_counter()
    for p, q, d, z, t, delta in settings:
        wcs, refined, f = row(p, q, d, z, t, delta)

        def ratio(x: float, y: float) -> str:
            return f"{x / y:.3f}" if y > 0 else ("1" if x == 0 else "inf")

        print(
            f"| {p:g} | {q:g} | {d} | {z:g} | {t} | {delta:g} | {wcs:.4g} | {refined:.4g} | "
            f"{f.collinear_epsilon:.4g} ({f.collinear_a:.3g}) | {f.epsilon:.4g} ({f.a:.3g}, {f.b:.3g}) | "
            f"{ratio(wcs, f.collinear_epsilon)} | {ratio(wcs, f.epsilon)} | {ratio(refined, f.epsilon)} |",
            flush=True,
        )
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
