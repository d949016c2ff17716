"""What a run releases, what it keeps apart, and whom its ε protects against (docs/threat_model.md).

The guarantee is about what leaves the trusted side, so the release is the mechanism:

- **released** (``metrics.jsonl``, ``summary.json``, the models, the plots ``accuracy.png``/``epsilon.png``):
  values derived from released models on held-out data (each algorithm's :attr:`released_metrics`, by
  default the global model's test ``accuracy``), ε, δ, the threat model and public configuration;
- **diagnostics** (``diagnostics.jsonl``): statistics computed on private training data without noise —
  participants, examples, train loss, clipped fraction, accuracy weighted by clients' own data, realised noise
  energy. They are *not* differentially private: keep them on the trusted side (never publish them next to
  ε). The file's first line says so.
- **timing** (``timing.json``, and the ``wall_seconds`` of each diagnostics line): wall-clock time depends on
  how many clients took part and how much data they used, so for a run with a guarantee it is kept apart too;
  ``summary.json`` then holds ``null`` for its timing keys (:data:`TIMING_KEYS`). A run without a guarantee
  reports them in its summary as well.

:func:`split_line` divides one round's line between the two; :func:`threat_model` states, next to every ε,
which parties it protects against and from whom participation is hidden.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

#: The diagnostics file of a run folder (not differentially private).
DIAGNOSTICS = "diagnostics.jsonl"

#: The first line of ``diagnostics.jsonl``.
DIAGNOSTICS_HEADER: dict[str, Any] = {
    "diagnostics": "NOT differentially private",
    "note": (
        "statistics of the private training data without noise (participants, examples, train loss, clipped "
        "fraction, accuracy on clients' own data, noise energy); the run's epsilon does not cover them: keep "
        "this file on the trusted side, never publish it with the release (docs/threat_model.md)"
    ),
}

#: Keys of a metrics line that are released whatever the algorithm: the round and privacy (not the wall-clock
#: time: it reveals how much work the round's participants did).
RELEASE_KEYS = frozenset(
    {
        "round",
        "epsilon",
        "epsilon_upper_bound",
        "delta",
        "epsilon_by_group",
        "budget_by_group",
    }
)

#: The timing file of a run folder (kept apart for a private run: module docstring).
TIMING = "timing.json"
#: The summary's timing keys: ``null`` in the summary of a run with a guarantee; values in ``timing.json``.
TIMING_KEYS = (
    "wall_seconds",
    "round_seconds_mean",
    "discovery_seconds",
    "bring_up_seconds",
    "teardown_seconds",
    "deploy_seconds",
)


def released_timing(summary: Mapping[str, Any], private: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(summary as released, timing)``: the timing keys of ``summary`` moved out (set to ``None``) when the
    run is private; ``timing`` holds their values either way."""
    timing = {key: summary.get(key) for key in TIMING_KEYS}
    if not private:
        return dict(summary), timing
    return {**summary, **dict.fromkeys(TIMING_KEYS)}, timing

#: The parties a guarantee can protect against (``protects_against``, ``participation_hidden_from``).
MODEL_CONSUMERS = "model consumers"
SERVER = "server"

#: ``privacy_randomness`` in a summary.
SECRET_RANDOMNESS = "secret: a per-run key from the operating system, kept in the private checkpoint"
SEEDED_RANDOMNESS = "seeded: a simulation, not a release"
NO_GUARANTEE_RANDOMNESS = "seeded: no privacy guarantee (epsilon = inf), so every draw follows seed"


def split_line(line: Mapping[str, Any], released: Collection[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Divide a metrics line into ``(release, diagnostics)``.

    Args:
        line: the round's line (``round``, training metrics, evaluation metrics, privacy fields).
        released: the evaluation keys computed from released models on held-out data only (the algorithm's
            :attr:`~ampfl.fl.algorithms.base.Algorithm.released_metrics`).

    Returns:
        The released part (the keys of :data:`RELEASE_KEYS` and ``released``) and the diagnostics (``round``
        and every other key).
    """
    keep = RELEASE_KEYS | frozenset(released)
    release = {key: value for key, value in line.items() if key in keep}
    diagnostics = {key: value for key, value in line.items() if key not in keep or key == "round"}
    return release, diagnostics


def threat_model(
    *, private: bool, server_sees_only_noised_sum: bool = False, participation_hidden: bool = True
) -> dict[str, list[str]]:
    """``protects_against`` and ``participation_hidden_from`` of a run.

    Args:
        private: whether the run has a guarantee (ε < ∞).
        server_sees_only_noised_sum: whether ε also holds against the server: it receives only values that
            are already noised with the accounted noise (clients add their noise shares before secure
            aggregation, or noise their own uploads) and, where the analysis needs participation hidden,
            nothing that tells who took part. False on the simulator for server-side noise (one trusted
            process plays the server: 004 §3.1's trusted server) and on Flower without SecAgg+ (the server
            sees every update).
        participation_hidden: whether the run's analysis needs participation hidden from the parties it
            protects against (amplification by sampling or hidden check-in). False for an analysis that
            holds with participation public (MS-PAFL's, SplitFed-DP's).

    Returns:
        ``{"protects_against": [...], "participation_hidden_from": [...]}``: empty lists without a guarantee;
        the model consumers always when private, the server too when ``server_sees_only_noised_sum``;
        participation is hidden from exactly the parties protected against when the analysis needs it (the
        run releases no count of participants: they are diagnostics), from nobody otherwise.
    """
    if not private:
        return {"protects_against": [], "participation_hidden_from": []}
    parties = [MODEL_CONSUMERS, SERVER] if server_sees_only_noised_sum else [MODEL_CONSUMERS]
    return {
        "protects_against": list(parties),
        "participation_hidden_from": list(parties) if participation_hidden else [],
    }


def privacy_randomness(reproducible: bool, private: bool = True) -> str:
    """The summary's ``privacy_randomness``: secret by default, seeded under ``[privacy] reproducible`` and
    for a run without a guarantee (nothing to keep secret: its seed reproduces it)."""
    if not private:
        return NO_GUARANTEE_RANDOMNESS
    return SEEDED_RANDOMNESS if reproducible else SECRET_RANDOMNESS
