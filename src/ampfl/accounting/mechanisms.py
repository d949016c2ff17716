"""The mechanism registry: for each event type, the bounds the papers provide (docs/architecture.md).

The accountants (:mod:`ampfl.accounting.accountants`) and the no-amplification mapping
(:mod:`ampfl.accounting.unamplified`) know no paper: they look an event up here and call what its entry names.
An entry (:class:`Mechanism`) says, for one event type,

- ``rdp(event, orders, relation[, recurse])``: its Rényi DP curve at integer orders (``inf`` where no bound is
  computed), valid under the relations in ``rdp_relations`` (or as ``rdp_support`` says);
- ``pld(event, interval[, recurse])``: its pessimistic privacy-loss distribution, add/remove-one, both
  directions (a dp-accounting ``PrivacyLossDistribution``);
- ``dense_pld(event, interval)``: the same PMFs without importing dp-accounting, where one exists (``None``
  from the function: use ``pld``);
- ``poisson_rdp`` / ``poisson_pld``: the bound of the event Poisson-subsampled
  (:class:`~ampfl.accounting.events.PoissonSampledEvent` asks its inner event's entry), ``swor_rdp`` likewise
  for sampling without replacement;
- ``dominating(event)``: an event accounted in its place where the entry has no bound of its own (a paper's
  dominating pair: random check-in, MS-PAFL and group rounds);
- ``unamplified(event[, recurse])``: the event with every amplification removed (``None``: it has no
  guarantee without its randomness);
- ``alternatives``: named second pairs, each an upper bound on its own (the PLD accountant composes them too
  and reports the smaller ε: random check-in's count split).

Every :class:`Bound` names its function as ``"module:function"`` (imported on first use, so this module
imports no paper and ``ampfl account …`` loads only what it calls), cites its source, and says whether it is
sound; the accountants call sound bounds only (``tests/accounting/test_mechanisms.py`` checks every entry).
``recursive`` bounds receive the accountant's own dispatcher as ``recurse`` (composition, sampling and
mixtures of other events).

Adding a mechanism (docs/architecture.md has a worked example): define its event in
:mod:`~ampfl.accounting.events`, its math in its paper's module, and add one entry to :data:`REGISTRY`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from types import MappingProxyType
from typing import Any

from ampfl.accounting import events as ev

__all__ = ["REGISTRY", "Alternative", "Bound", "Mechanism", "lookup", "outside_relations", "resolve"]

#: The neighbouring relations, by the names of :class:`~ampfl.accounting.accountants.NeighboringRelation`.
ADD_REMOVE = frozenset({"ADD_OR_REMOVE_ONE"})
EVERY_RELATION = frozenset({"ADD_OR_REMOVE_ONE", "REPLACE_ONE", "REPLACE_SPECIAL"})


@cache
def resolve(ref: str) -> Callable[..., Any]:
    """The function named by ``"package.module:function"`` (imported on first use, then cached)."""
    module, _, name = ref.partition(":")
    fn = getattr(importlib.import_module(module), name)
    if not callable(fn):
        raise TypeError(f"{ref} is not callable.")
    return fn  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Bound:
    """One bound of one mechanism: the function (``"module:function"``), its source, whether it is sound and
    whether it takes the dispatcher as ``recurse``."""

    ref: str
    source: str
    sound: bool = True
    recursive: bool = False

    def __call__(self, *args: Any, recurse: Callable[..., Any] | None = None) -> Any:
        if not self.sound:
            raise ValueError(
                f"{self.ref} ({self.source}) is not a sound bound: the accountants do not use it."
            )
        fn = resolve(self.ref)
        return fn(*args, recurse) if self.recursive else fn(*args)


@dataclass(frozen=True)
class Alternative:
    """A second dominating pair: ``applies(event)`` (truthy when the event has it) and ``pld(event, h)``."""

    applies: Bound
    pld: Bound


@dataclass(frozen=True)
class Mechanism:
    """What the accountants may use for one event type (module docstring)."""

    rdp: Bound | None = None
    rdp_relations: frozenset[str] = ADD_REMOVE
    rdp_support: Bound | None = None
    pld: Bound | None = None
    dense_pld: Bound | None = None
    poisson_rdp: Bound | None = None
    poisson_pld: Bound | None = None
    swor_rdp: Bound | None = None
    dominating: Bound | None = None
    unamplified: Bound | None = None
    alternatives: Mapping[str, Alternative] = field(default_factory=lambda: MappingProxyType({}))


def _b(ref: str, source: str, *, recursive: bool = False, sound: bool = True) -> Bound:
    module = ref.split(":", 1)[0]
    return Bound(
        f"ampfl.accounting.{module}:{ref.split(':', 1)[1]}", source, sound=sound, recursive=recursive
    )


_CORE = "core_bounds"
_SPLIT = "partition.event_bounds"
_DOMINATING = _b(f"{_CORE}:dominating", "the paper's dominating pair (event.dominating())")
_SAME_NOISE = _b(f"{_CORE}:gaussian_of_noise", "the Gaussian at the event's noise multiplier")


def _composition(kind: str, support: str, convolution: str) -> Mechanism:
    """The entry of a composition event: the core bounds ``{kind}_rdp`` (RDPs add), ``{kind}_support``,
    ``{kind}_pld`` (PLDs convolve) and ``{kind}_unamplified``, all given the dispatcher for the parts."""
    return Mechanism(
        rdp=_b(f"{_CORE}:{kind}_rdp", "RDP composition (sum)", recursive=True),
        rdp_support=_b(f"{_CORE}:{kind}_support", support, recursive=True),
        pld=_b(f"{_CORE}:{kind}_pld", f"PLD composition ({convolution})", recursive=True),
        unamplified=_b(f"{_CORE}:{kind}_unamplified", "composition", recursive=True),
    )


#: Event type -> its mechanism. One entry per event type of :mod:`ampfl.accounting.events`.
REGISTRY: Mapping[type[ev.PrivacyEvent], Mechanism] = MappingProxyType(
    {
        # --- the Gaussian and Laplace mechanisms, composition and sampling (no paper)
        ev.GaussianEvent: Mechanism(
            rdp=_b(f"{_CORE}:gaussian_rdp", "Mironov 2017, Prop. 7: alpha / (2 z^2)"),
            rdp_relations=EVERY_RELATION,
            pld=_b(f"{_CORE}:gaussian_pld", "dp-accounting from_gaussian_mechanism (connect-the-dots)"),
            dense_pld=_b(f"{_CORE}:gaussian_dense_pld", "the same PMFs, numpy only"),
            poisson_rdp=_b(f"{_CORE}:poisson_gaussian_rdp", "Mironov, Talwar & Zhang 2019, Sec. 3.3"),
            poisson_pld=_b(f"{_CORE}:poisson_gaussian_pld", "dp-accounting from_gaussian_mechanism"),
            swor_rdp=_b(f"{_CORE}:swor_gaussian_rdp", "Wang, Balle & Kasiviswanathan 2019, Thm 27 (rdp_wor)"),
            unamplified=_b(f"{_CORE}:itself", "no amplification to remove"),
        ),
        ev.LaplaceEvent: Mechanism(
            rdp=_b(f"{_CORE}:dp_accounting_rdp", "dp-accounting's RDP accountant"),
            rdp_relations=EVERY_RELATION,
            pld=_b(f"{_CORE}:laplace_pld", "dp-accounting from_laplace_mechanism"),
            poisson_pld=_b(f"{_CORE}:laplace_pld", "dp-accounting from_laplace_mechanism"),
            unamplified=_b(f"{_CORE}:itself", "no amplification to remove"),
        ),
        ev.PoissonSampledEvent: Mechanism(
            rdp=_b(f"{_CORE}:poisson_rdp", "the inner entry's, else Zhu & Wang 2019", recursive=True),
            rdp_support=_b(f"{_CORE}:poisson_rdp_support", "add/remove-one", recursive=True),
            pld=_b(f"{_CORE}:poisson_pld", "the inner entry's poisson_pld", recursive=True),
            dense_pld=_b(f"{_CORE}:poisson_dense_pld", "the Gaussian's PMFs, numpy only"),
            unamplified=_b(f"{_CORE}:inner_unamplified", "the record is always sampled", recursive=True),
        ),
        ev.SampledWithoutReplacementEvent: Mechanism(
            rdp=_b(f"{_CORE}:swor_rdp", "the inner entry's, else dp-accounting (replace-one)"),
            rdp_support=_b(f"{_CORE}:swor_rdp_support", "replace-one only"),
            unamplified=_b(f"{_CORE}:inner_unamplified", "the record is always sampled", recursive=True),
        ),
        ev.PublicParticipationEvent: Mechanism(
            rdp=_b(f"{_CORE}:public_participation_rdp", "disjoint supports: mixture of MGFs", recursive=True),
            rdp_support=_b(f"{_CORE}:public_participation_support", "the inner event's", recursive=True),
            pld=_b(f"{_CORE}:public_participation_pld", "p PLD + (1 - p) identity", recursive=True),
            unamplified=_b(f"{_CORE}:inner_unamplified", "the unit always runs", recursive=True),
        ),
        ev.SelfComposedEvent: _composition("self_composed", "the inner event's", "convolution power"),
        ev.ComposedEvent: _composition("composed", "every part's", "convolution"),
        # --- 004: random check-in (hidden participation: a tighter pair and a second one)
        ev.RandomCheckInEvent: Mechanism(
            pld=_b("random_checkin.pld_pairs:random_checkin_pld", "004 Thm 5.2 / count split"),
            dominating=_DOMINATING,
            unamplified=_SAME_NOISE,
            alternatives=MappingProxyType(
                {
                    "count-split": Alternative(
                        applies=_b(
                            "random_checkin.pld_pairs:count_split_alternative", "docs/pld_random_checkin.md"
                        ),
                        pld=_b(
                            "random_checkin.pld_pairs:count_split_random_checkin_pld",
                            "docs/pld_random_checkin.md",
                        ),
                    )
                }
            ),
        ),
        # --- 000: MS-PAFL rounds; 001: GDPFed group rounds (their dominating pairs)
        ev.MSPAFLRoundEvent: Mechanism(dominating=_DOMINATING, unamplified=_SAME_NOISE),
        ev.GroupRoundEvent: Mechanism(dominating=_DOMINATING, unamplified=_SAME_NOISE),
        # --- 002: model splitting, dropout, Balanced Iteration Subsampling
        ev.ModelSplitEvent: Mechanism(
            rdp=_b(f"{_SPLIT}:partition_rdp", "002 Thms 3.4/3.5 and Sec. 3.2.2"),
            pld=_b(
                f"{_SPLIT}:partition_pld", "exact product form (d <= 2) / log-sum mixture", recursive=True
            ),
            poisson_pld=_b(f"{_SPLIT}:subsampled_partition_pld", "002, Poisson-subsampled", recursive=True),
            unamplified=_b(f"{_SPLIT}:split_unamplified", "block and shared part, each its Gaussian"),
        ),
        ev.DropoutEvent: Mechanism(
            rdp=_b(f"{_SPLIT}:partition_rdp", "002 Thm 3.7 (Thm 3.1 at d = 2)"),
            pld=_b(f"{_SPLIT}:partition_pld", "exact product form (d = 2)", recursive=True),
            poisson_pld=_b(f"{_SPLIT}:subsampled_partition_pld", "002, Poisson-subsampled", recursive=True),
            unamplified=_b(f"{_SPLIT}:split_unamplified", "block and shared part, each its Gaussian"),
        ),
        ev.BalancedIterationSubsamplingEvent: Mechanism(
            rdp=_b(f"{_SPLIT}:bis_rdp", "002 Thm 3.8"),
            pld=_b(f"{_SPLIT}:bis_pld", "random allocation, k > 1 by k = 1 blocks (docs/pld.md)"),
            unamplified=_b(f"{_SPLIT}:bis_unamplified", "a Gaussian in each of the k steps"),
        ),
        # --- 003: PM-SFL's Bernoulli masks (no guarantee without their randomness)
        ev.BernoulliMaskEvent: Mechanism(
            rdp=_b("pm_sfl:bernoulli_mask_event_rdp", "003 Thm 2 (intended form)"),
            rdp_relations=EVERY_RELATION,
        ),
    }
)

_EMPTY = Mechanism()


def outside_relations(event: ev.PrivacyEvent, relations: frozenset[str], relation: Any) -> str | None:
    """Why ``event``'s bound does not hold under ``relation`` (``None``: it is one of ``relations``)."""
    if relation.name in relations:
        return None
    return f"{type(event).__name__} is accounted under add/remove-one only; found {relation.name}."


def lookup(event: ev.PrivacyEvent | type[ev.PrivacyEvent]) -> Mechanism:
    """The entry of ``event``'s type (an empty one, with no bound, for a type that has none)."""
    kind = event if isinstance(event, type) else type(event)
    return REGISTRY.get(kind, _EMPTY)
