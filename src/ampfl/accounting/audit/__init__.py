"""Numerical auditors: exact (integrated) privacy loss of explicit worst-case datasets.

An auditor computes the true hockey-stick divergence of a mechanism on explicit neighbouring datasets and
compares it with what an analysis claims. Its numbers are *lower* bounds on the mechanism's δ(ε) (the
dataset family searched is only a subset of all datasets), so an analysis whose claimed δ lies below an
audited δ (minus the integration-error bound) is wrong for that mechanism.
"""

from ampfl.accounting.audit.random_checkin import (
    DIRECTIONS,
    AnalysisCheck,
    AuditResult,
    DeltaEstimate,
    audit_random_checkin,
    true_delta,
    true_delta_estimate,
)

__all__ = [
    "DIRECTIONS",
    "AnalysisCheck",
    "AuditResult",
    "DeltaEstimate",
    "audit_random_checkin",
    "true_delta",
    "true_delta_estimate",
]
