"""Privacy accounting for amplification in federated learning (pure numpy/scipy + dp-accounting).

The spine: an algorithm reports what ran as **events** (:mod:`ampfl.accounting.events`); an **accountant**
(:class:`RDPAccountant`, :class:`PLDAccountant`, dp-accounting's contract) composes them and answers ε(δ)
and δ(ε); :func:`calibrate` finds the smallest noise multiplier for a target with any accountant. Each paper's
analyses live in their own module (``random_checkin`` 004, ``ms_pafl`` 000, ``partition`` 002, ``groups``
001, ``pm_sfl`` 003), each published bound under its own name, the recommended one sound.

The names below are loaded on first use (PEP 562), so ``import ampfl.accounting`` stays cheap; this package
never imports torch, flwr or matplotlib.
"""

from __future__ import annotations

from ampfl.accounting._lazy import lazy_attributes

# ``calibrate`` is both a module and its main function: bind the function (a later ``import
# ampfl.accounting.calibrate`` finds the module already loaded and leaves this binding alone).
from ampfl.accounting.calibrate import calibrate as calibrate

#: Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    # events
    "PrivacyEvent": "events",
    "GaussianEvent": "events",
    "LaplaceEvent": "events",
    "PoissonSampledEvent": "events",
    "SampledWithoutReplacementEvent": "events",
    "PublicParticipationEvent": "events",
    "RandomCheckInEvent": "events",
    "ModelSplitEvent": "events",
    "DropoutEvent": "events",
    "BalancedIterationSubsamplingEvent": "events",
    "MSPAFLRoundEvent": "events",
    "GroupRoundEvent": "events",
    "BernoulliMaskEvent": "events",
    "SelfComposedEvent": "events",
    "ComposedEvent": "events",
    "event_from_dict": "events",
    # accountants
    "Accountant": "accountants",
    "RDPAccountant": "accountants",
    "PLDAccountant": "accountants",
    "NeighboringRelation": "accountants",
    "UnsupportedEventError": "accountants",
    "make_accountant": "accountants",
    # calibration and errors
    "UnreachableTarget": "calibrate",
    "NumericalError": "_checks",
    "DEFAULT_ORDERS": "orders",
}

#: The per-paper analysis modules, importable as attributes (``ampfl.accounting.random_checkin``).
_MODULES = ("random_checkin", "ms_pafl", "partition", "groups", "pm_sfl", "gaussian", "rdp", "audit")

__all__ = sorted([*_EXPORTS, *_MODULES, "calibrate"])


__getattr__, __dir__ = lazy_attributes(
    __name__, _EXPORTS, prefix=f"{__name__}.", modules=_MODULES, public=__all__
)
