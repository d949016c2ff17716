"""Random check-in (004): the dominating pair the PLD accountant composes for one round.

Mechanism (:class:`~ampfl.accounting.events.RandomCheckInEvent`, C = 1, std z): the released sum is
X = B·(S + b′·x′) + N(0, z² I), B ~ Bern(p) the participation of client 1 (the holder of x′), S the sum of the
gradients of its sampled other records (M ~ Bin(d, q) of them, each of norm ≤ 1), b′ ~ Bern(q) the sampling
coin of x′; the other clients add a term independent of x′ (post-processing). Neighbouring: with or without
x′.

**Participation revealed** (``participation_hidden=False``): the worst-case-sampling pair of 004 Thm 5.2,
p·PLD_q + (1 − p)·identity (``event.dominating()``), where PLD_r is the r-subsampled Gaussian with std z.

**Participation hidden** (the default; the observer sees X only): the **empty-sample refinement**
(:func:`refined_pld`). Publish each round W = 1[B = 1, M ≥ 1] and, when W = 1, S. (W, S) has the same law
with and without x′ (it does not involve b′), so X is a post-processing of a public-selector mixture: given
W = 1, x′ is included with probability q (PLD_q); given W = 0, S = 0 and x′ is included with probability
r = P(B = 1 | W = 0)·q = p(1 − q)^d q / π₀, π₀ = P(W = 0) = 1 − p + p(1 − q)^d (PLD_r). The pair
π₁·PLD_q + π₀·PLD_r (π₁ = 1 − π₀, mixed by dp-accounting's ``compute_mixture``, pessimistic) dominates a
round in both directions; W being fresh and public each round, its T-fold composition dominates T adaptive
rounds. It is a garbling of the Thm 5.2 pair (given W = 0, forget B ~ Bern(r/q) of the pair
(r/q)·PLD_q + (1 − r/q)·identity; π₁ + π₀·r/q = p), so it is never looser, for any composition.
d = 0 gives the pq-subsampled Gaussian (exact: then participation is visible only through x′); d → ∞ gives
the Thm 5.2 pair. Any d at least the true number of other records is sound: a client with fewer records is
the same mechanism as one with d records, the missing ones having gradient 0 (norm ≤ C), which the pair
covers.

**When participation is not hidden.** The refinement needs that an observer cannot tell a participant with
an empty local sample from a non-participant. ampfl's DP-DSGD-RP releases the models w_t only; a joined
client with an empty sample adds the zero vector to the sum, exactly like a client that did not join, and
the update's scale 1/(p N q d) does not depend on who joined (004 §3.1's threat model: trusted server,
secure channels). The accounted release does not cover the run's logged metrics (participant count, sample
count, train loss: un-noised functions of the data) nor what the server sees (it sums the clear g_i).

**A second pair** (:func:`count_split_alternative`): the per-count noise split
(:mod:`~ampfl.accounting.random_checkin.count_split`) is also a dominating pair of the hidden round, tighter
than the refinement where participation is nearly hidden by the noise (z ≳ 2, small d·q: one round up to 4×
smaller ε) but not at every ε (its tails are heavier), so neither pair is below the other after every
composition. The PLD accountant composes the history with each (every random check-in round on the split pair,
the other events unchanged) and reports the smaller ε (or δ): two upper bounds, so their minimum is one.

**Monotone in p** (so p = max_i p_i bounds every client, :class:`~ampfl.fl.sampling.RandomCheckInSampler`).
Both pairs, and the split pair for any fixed choice of splits, are public mixtures whose selector value v
has probability P_v and includes x′ with probability q·A_v/P_v, where (A_v, P_v) is affine in p (e.g. the
pooled group: A = p·Bin(0; d, q), P = Bin(0; d, q) + (1 − p)·Σ Bin(m; d, q) over revealing counts). Their δ at
any ε, either direction, is Σ_v P_v·h(q·A_v/P_v) with h the (convex, h(0) = 0) δ of the subsampled
Gaussian in its rate: a sum of perspectives of h, convex in p and 0 at p = 0, hence nondecreasing in p.

Provenance: [C] (our derivation; docs/pld_random_checkin.md).
"""

from __future__ import annotations

import math
from functools import lru_cache

from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import stats

from ampfl.accounting._checks import check_int, check_positive, check_probability
from ampfl.accounting._numerics import epsilon_from_delta_curve
from ampfl.accounting.events import RandomCheckInEvent
from ampfl.accounting.pld_grid import mixture

__all__ = [
    "COUNT_SPLIT_REFERENCE_DELTA",
    "best_hidden_epsilon",
    "count_split_alternative",
    "count_split_random_checkin_pld",
    "hidden_components",
    "random_checkin_pld",
    "refined_pld",
    "refined_weights",
]

#: δ at which the PLD accountant's second pair for hidden participation chooses its per-count splits: at the
#: refinement's one-round ε(δ) (:func:`count_split_alternative`).
COUNT_SPLIT_REFERENCE_DELTA = 1e-5
#: The second pair is composed only if its one-round ε there is this much (relatively) below the refinement's.
COUNT_SPLIT_MIN_GAIN = 0.01
#: Largest one-round ε the closed forms of δ(ε) evaluate (they use e^ε, which overflows above ≈ 709.78).
_EPSILON_LIMIT = 709.0


def refined_weights(
    participation: float, sampling_rate: float, local_dataset_size: int
) -> tuple[float, float]:
    """(π₀, r): P(W = 0) and the inclusion probability of x′ given W = 0 (module docstring)."""
    p = check_probability("participation", participation)
    q = check_probability("sampling_rate", sampling_rate)
    d = check_int("local_dataset_size", local_dataset_size, minimum=0)
    empty = math.exp(d * math.log1p(-q)) if q < 1.0 else (1.0 if d == 0 else 0.0)
    pi0 = (1.0 - p) + p * empty
    r = p * empty * q / pi0 if pi0 > 0.0 else 0.0
    return pi0, min(1.0, r)


def _subsampled(z: float, rate: float, h: float) -> pld_lib.PrivacyLossDistribution:
    """Pessimistic PLD of the ``rate``-subsampled Gaussian with std ``z`` (sensitivity 1)."""
    if rate <= 0.0 or math.isinf(z):
        return pld_lib.identity(h)
    return pld_lib.from_gaussian_mechanism(
        standard_deviation=z,
        sensitivity=1.0,
        sampling_prob=min(1.0, rate),
        pessimistic_estimate=True,
        value_discretization_interval=h,
    )


def refined_pld(
    *,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    value_discretization_interval: float = 1e-4,
) -> pld_lib.PrivacyLossDistribution:
    """Pessimistic PLD of one round under the empty-sample refinement of WCS (sound; module docstring)."""
    q = check_probability("sampling_rate", sampling_rate)
    z = float(noise_multiplier)
    if not math.isinf(z):
        z = check_positive("noise_multiplier", noise_multiplier)
    h = check_positive("value_discretization_interval", value_discretization_interval)
    pi0, r = refined_weights(participation, q, local_dataset_size)
    if pi0 >= 1.0:
        return _subsampled(z, r, h)
    if pi0 <= 0.0:
        return _subsampled(z, q, h)
    w = 1.0 - pi0
    return mixture([(w, _subsampled(z, q, h)), (1.0 - w, _subsampled(z, r, h))])


def _epsilon_at(components: list[tuple[float, float, float]], delta: float) -> float:
    """One-round ε(δ) of a public mixture of subsampled Gaussians (closed forms, bisection; no grid).

    The bracket starts at [0, 64] and expands up to :data:`_EPSILON_LIMIT`
    (:func:`~ampfl.accounting._numerics.epsilon_from_delta_curve`); the upper end is returned, so
    δ(ε) ≤ ``delta`` holds there (never under-reports ε). A root above the limit raises
    :class:`~ampfl.accounting._checks.NumericalError` (the closed forms overflow there).
    """
    from ampfl.accounting.random_checkin.count_split import mixture_delta

    return epsilon_from_delta_curve(
        lambda e: mixture_delta(components, e),
        delta,
        start=64.0,
        max_epsilon=_EPSILON_LIMIT,
        rtol=1e-12,
        name="one-round epsilon of the random check-in pair (closed forms overflow above the limit)",
    )


def hidden_components(
    participation: float, sampling_rate: float, local_dataset_size: int, noise_multiplier: float
) -> list[tuple[float, float, float]]:
    """(weight, rate, std) of the event's pair for hidden participation: the empty-sample refinement.

    The per-count noise split (:mod:`ampfl.accounting.random_checkin.count_split`) is tighter in some
    settings but not at every ε (so not as the event's one pair): :func:`best_hidden_epsilon` composes
    both."""
    pi0, r = refined_weights(participation, sampling_rate, local_dataset_size)
    z = noise_multiplier
    return [(w, rate, z) for w, rate in ((1.0 - pi0, sampling_rate), (pi0, r)) if w > 0.0]


def best_hidden_epsilon(
    *,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    iterations: int,
    delta: float,
    value_discretization_interval: float = 1e-4,
) -> tuple[float, str]:
    """The smallest ε(δ) over candidate pairs for hidden participation, each composed ``iterations`` times
    (each is an upper bound, so their minimum is one): the refinement (the event's pair) and the per-count
    noise split chosen at two reference ε (the refinement's one-round ε(δ) and ε_T(δ)/T). One round is
    answered from the closed forms (no loss grid), more by the PLDs on a grid of
    ``value_discretization_interval``. Returns (ε, name).
    """
    from ampfl.accounting.random_checkin.count_split import count_split_components, count_splits, mixture_pld

    p = check_probability("participation", participation)
    q = check_probability("sampling_rate", sampling_rate)
    d = check_int("local_dataset_size", local_dataset_size, minimum=0)
    z = check_positive("noise_multiplier", noise_multiplier)
    t = check_int("iterations", iterations, minimum=1)
    h = check_positive("value_discretization_interval", value_discretization_interval)

    def composed(comps: list[tuple[float, float, float]]) -> float:
        if t == 1:  # closed forms, no loss grid
            return _epsilon_at(comps, delta)
        return max(0.0, float(mixture_pld(comps, h).self_compose(t).get_epsilon_for_delta(delta)))

    refined = hidden_components(p, q, d, z)
    best, name = composed(refined), "refined"
    if d == 0 or p >= 1.0 or q >= 1.0:
        return best, name
    for ref in sorted({_epsilon_at(refined, delta), best / t}):
        splits = count_splits(p, q, d, z, max(ref, 1e-6))
        if any(s > 0.0 for s in splits.values()):
            eps = composed(count_split_components(p, q, d, z, splits))
            if eps < best:
                best, name = eps, f"count-split (reference epsilon {ref:.3g})"
    return best, name


def random_checkin_pld(event: RandomCheckInEvent, h: float) -> pld_lib.PrivacyLossDistribution:
    """The PLD accountant's pair for one round of ``event`` (module docstring): Thm 5.2's pair when
    participation is revealed or d is unknown (``None``), else the empty-sample refinement
    (:func:`hidden_components`; never looser), built by
    :func:`~ampfl.accounting.random_checkin.count_split.mixture_pld`. Thm 5.2's pair
    p·PLD_q + (1 − p)·identity is the q-subsampled Gaussian's PLD
    (:func:`~ampfl.accounting.accountants.pld_fast.gaussian_pld`, as the PLD accountant builds it) mixed with
    the identity (:func:`~ampfl.accounting.pld_grid.mixture`)."""
    from ampfl.accounting.pld_grid import check_pld_size, dp_accounting_guard
    from ampfl.accounting.random_checkin.count_split import mixture_pld

    z, p, q = event.noise_multiplier, event.participation, event.sampling_rate
    if math.isinf(z):
        return pld_lib.identity(h)
    if not event.participation_hidden or event.local_dataset_size is None:  # revealed, or d unknown (d → ∞)
        from ampfl.accounting.accountants.pld_fast import gaussian_pld

        if p == 0.0 or q == 0.0:
            return pld_lib.identity(h)
        check_pld_size(z, h)
        with dp_accounting_guard("Gaussian PLD"):
            inner = gaussian_pld(z, q, h)  # connect-the-dots, vectorised
        if p == 1.0:
            return inner
        with dp_accounting_guard("PLD mixture"):
            return mixture([(p, inner), (1.0 - p, pld_lib.identity(h))])
    check_pld_size(z, h)
    comps = hidden_components(p, q, event.local_dataset_size, z)
    with dp_accounting_guard("random check-in PLD"):
        return mixture_pld(comps, h)


@lru_cache(maxsize=64)
def count_split_alternative(event: RandomCheckInEvent) -> tuple[tuple[float, float, float], ...] | None:
    """The components (weight, rate, std) of the per-count noise split that the PLD accountant composes as a
    second pair for ``event`` (module docstring), or ``None`` when there is none: participation revealed,
    d unknown or 0, p = 1, q = 1, z = 0 or ∞, P(M ≤ 4z) < 1/2 (splits cannot hide B at most counts), or a
    one-round gain below :data:`COUNT_SPLIT_MIN_GAIN`. The
    splits are chosen at the refinement's one-round ε(:data:`COUNT_SPLIT_REFERENCE_DELTA`) (a choice fixed
    by the event alone: any choice is sound). In a sweep of 240 settings (p, q, d, z, T ≤ 1000, δ ∈ {1e-5,
    1e-8}) no setting gained 1 % composed without gaining 1 % in one round."""
    from ampfl.accounting.random_checkin.count_split import count_split_components, count_splits

    p, q, d, z = event.participation, event.sampling_rate, event.local_dataset_size, event.noise_multiplier
    if not event.participation_hidden or d is None or d == 0 or p >= 1.0 or q >= 1.0:
        return None
    if z <= 0.0 or math.isinf(z):
        return None
    if float(stats.binom.cdf(4.0 * z, d, q)) < 0.5:  # most counts reveal B through any split: skip the search
        return None  # (of 192 settings, every one that gained had P(M ≤ 4z) ≥ 0.97; d = 1e5 took 0.9 s)
    reference = _epsilon_at(hidden_components(p, q, d, z), COUNT_SPLIT_REFERENCE_DELTA)
    splits = count_splits(p, q, d, z, max(reference, 1e-6))
    if not any(s > 0.0 for s in splits.values()):
        return None
    comps = tuple(count_split_components(p, q, d, z, splits))
    if _epsilon_at(list(comps), COUNT_SPLIT_REFERENCE_DELTA) > (1.0 - COUNT_SPLIT_MIN_GAIN) * reference:
        return None  # no gain worth a second composition (nor did one show composed, bench sweep)
    return comps


def count_split_random_checkin_pld(event: RandomCheckInEvent, h: float) -> pld_lib.PrivacyLossDistribution:
    """The PLD of :func:`count_split_alternative`'s pair on a grid of ``h`` (it must exist)."""
    from ampfl.accounting.pld_grid import check_pld_size, dp_accounting_guard
    from ampfl.accounting.random_checkin.count_split import mixture_pld

    comps = count_split_alternative(event)
    if comps is None:
        raise ValueError("this random check-in event has no count-split pair.")
    check_pld_size(min(c[2] for c in comps), h)
    with dp_accounting_guard("random check-in PLD"):
        return mixture_pld(list(comps), h)
