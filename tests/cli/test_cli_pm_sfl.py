"""``ampfl account pm-sfl-smashed`` (paper 003 Thm 2) after issue 10 part 7b: the recommended ε."""

from __future__ import annotations

import math

import pytest

from ampfl.accounting.audit.pm_sfl import audit_smashed_counterexample, audit_smashed_pair
from ampfl.accounting.pm_sfl import amplified_epsilon_smashed, smashed_epsilon_proof_corrected

ARGV = ["account", "pm-sfl-smashed", "--epsilon", "1", "--c", "0.1", "--dim", "1"]


def test_counterexample_exact_epsilon_is_the_unamplified_one():
    # Issue 10 7b: w = 1, x = 10, x' = 10.1, theta = 0.9, Lap(0.1/1): the u -> ±inf tails give eps = 1.
    audit = audit_smashed_counterexample()
    assert audit.exact == pytest.approx(1.0, abs=1e-6)
    assert audit.printed == pytest.approx(0.935, abs=5e-4) and audit.printed_violated
    assert audit.proof_corrected == pytest.approx(0.975, abs=5e-4) and audit.corrected_violated


def test_zero_input_in_the_domain_makes_d1_tight():
    # With the zero input in the domain (x' = 0, sensitivity |w x|), the printed value is exact for d = 1.
    audit = audit_smashed_pair(
        weight=1.0, x=1.0, x_prime=0.0, keep_probability=0.9, epsilon=1.0, sensitivity=1.0
    )
    assert audit.exact == pytest.approx(audit.printed, rel=1e-9)
    assert not audit.corrected_violated


def test_default_recommends_the_unamplified_epsilon(cli_json):
    out = cli_json(ARGV)
    assert (out["epsilon"], out["delta"], out["analysis"], out["accountant"]) == (
        1.0,
        0.0,
        "no-amplification",
        "closed-form",
    )
    assert set(out["analyses"]) == {"proof-corrected", "theorem-2-as-printed"}
    assert out["analyses"]["theorem-2-as-printed"]["sound"] is False
    assert out["analyses"]["proof-corrected"]["sound"] is False
    # the printed and corrected values are still reported, labelled
    assert out["analyses"]["theorem-2-as-printed"]["epsilon"] == pytest.approx(0.9347016640011663)
    assert out["epsilon_amplified"] == pytest.approx(math.log(0.9 * math.e + 0.1))  # Eq. 33 by hand, d = 1


def test_domain_flag_recommends_the_proof_corrected_bound(cli_json):
    out = cli_json([*ARGV, "--domain-includes-zero"])
    assert out["analysis"] == "proof-corrected" and out["domain_includes_zero"] is True
    assert out["epsilon"] == pytest.approx(smashed_epsilon_proof_corrected(epsilon=1.0, c=0.1, dim=1))
    assert out["analyses"]["no-amplification"]["epsilon"] == 1.0
    assert out["epsilon"] >= amplified_epsilon_smashed(epsilon=1.0, c=0.1, dim=1)
