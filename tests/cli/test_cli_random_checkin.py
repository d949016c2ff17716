"""CLI contract of ``ampfl account|calibrate random-checkin`` (paper 004; issue 10 parts 3-5)."""

import pytest

from ampfl.accounting import random_checkin as rc
from ampfl.accounting.accountants import PLDAccountant, RDPAccountant
from ampfl.accounting.events import RandomCheckInEvent
from ampfl.commands import random_checkin as command

MECH = {"participation": 0.1, "sampling_rate": 0.1, "local_dataset_size": 10}
ACCOUNT = ["account", "random-checkin", "--p", "0.1", "--q", "0.1", "--d", "10", "--noise-multiplier", "1"]
CALIBRATE = ["calibrate", "random-checkin", "--p", "0.001", "--q", "0.1", "--d", "30"]
TOP_KEYS = ["epsilon", "delta", "analysis", "accountant", "noise_multiplier", "analyses"]


def _check_shape(out):
    """The common report (issue 10 part 5): top-level keys first, wcs on top, the others labelled."""
    keys = [key for key in out if key != "noise_std"]  # noise_std (with --clip) follows noise_multiplier
    assert keys[: len(TOP_KEYS)] == TOP_KEYS
    assert out["analysis"] == rc.RECOMMENDED_ANALYSIS == "wcs"
    # the recommended one is the top level; "hidden-participation" is what a run accounts (issue 11)
    assert set(out["analyses"]) == set(rc.ANALYSES) - {"wcs"} | {command.HIDDEN}
    for name, entry in out["analyses"].items():
        assert set(entry) == {"epsilon", "delta", "sound", "note"}
        assert entry["sound"] is rc.SOUND.get(name, True)
    assert out["analyses"]["paper"]["sound"] is False and "refuted" in out["analyses"]["paper"]["note"]
    assert out["analyses"]["cs"]["sound"] is False and "lower bound" in out["analyses"]["cs"]["note"]


def test_cli_mirrors_the_library_constant():
    assert command._RECOMMENDED == rc.RECOMMENDED_ANALYSIS


def test_account_per_iteration_closed_forms(cli_json):
    out = cli_json([*ACCOUNT, "--epsilon", "1"])
    _check_shape(out)
    assert out["accountant"] == "closed-form" and out["noise_multiplier"] == 1.0 and out["epsilon"] == 1.0
    assert "noise_std" not in out
    rows = {**out["analyses"], "wcs": {"epsilon": out["epsilon"], "delta": out["delta"]}}
    for name in rc.ANALYSES:
        expected = rc.delta_per_iteration(analysis=name, **MECH, noise_multiplier=1.0, epsilon=1.0)
        assert rows[name]["delta"] == pytest.approx(expected, rel=1e-12)
        assert rows[name]["epsilon"] == 1.0


def test_account_clip_adds_noise_std_only(cli_json):
    base = cli_json([*ACCOUNT, "--epsilon", "1"])
    out = cli_json([*ACCOUNT, "--epsilon", "1", "--clip", "2.5"])
    _check_shape(out)
    assert out["noise_std"] == pytest.approx(2.5) and out["delta"] == base["delta"]


@pytest.mark.parametrize(("accountant", "cls"), [("pld", PLDAccountant), ("rdp", RDPAccountant)])
def test_account_composed_is_the_accountant_on_random_checkin_events(accountant, cls, cli_json):
    out = cli_json([*ACCOUNT, "--iterations", "5", "--delta", "1e-5", "--accountant", accountant])
    _check_shape(out)
    assert out["accountant"] == accountant and out["iterations"] == 5 and out["delta"] == 1e-5
    event = RandomCheckInEvent(
        participation=0.1,
        sampling_rate=0.1,
        noise_multiplier=1.0,
        local_dataset_size=10,
        participation_hidden=False,
    )
    acc = cls().compose(event, 5)
    assert out["epsilon"] == acc.get_epsilon(1e-5)
    hidden = PLDAccountant().compose(RandomCheckInEvent(**MECH, noise_multiplier=1.0), 5).get_epsilon(1e-5)
    assert out["analyses"][command.HIDDEN]["epsilon"] == hidden  # the run's pair: PLD, participation hidden
    assert hidden <= PLDAccountant().compose(event, 5).get_epsilon(1e-5)  # never above wcs
    rows = {**out["analyses"], "wcs": {"epsilon": out["epsilon"], "delta": out["delta"]}}
    for name in rc.ANALYSES:
        expected = rc.epsilon_composed(
            analysis=name, **MECH, noise_multiplier=1.0, iterations=5, delta=1e-5, accountant=accountant
        )
        assert rows[name]["epsilon"] == pytest.approx(expected, rel=1e-9)


def test_account_composed_defaults_to_pld(cli_json):
    out = cli_json([*ACCOUNT, "--iterations", "5", "--delta", "1e-5"])
    assert out["accountant"] == "pld"


def test_account_per_iteration_on_an_accountant(cli_json):
    # --accountant without --iterations: one iteration composed on that accountant (paper stays closed form).
    out = cli_json([*ACCOUNT, "--epsilon", "1", "--accountant", "pld"])
    assert out["accountant"] == "pld" and out["iterations"] == 1
    closed = rc.delta_per_iteration(analysis="wcs", **MECH, noise_multiplier=1.0, epsilon=1.0)
    assert out["delta"] == pytest.approx(closed, rel=1e-2)  # the PLD of the exact profile


def test_calibrate_section6_closed_form(cli_json):
    # 004 Section 6.1: WCS σ = 7.65 printed (7.6651 exactly); the other analyses at that noise multiplier.
    out = cli_json([*CALIBRATE, "--epsilon", "0.015", "--delta", "1e-6", "--clip", "2"])
    _check_shape(out)
    assert out["accountant"] == "closed-form"
    assert out["noise_multiplier"] == pytest.approx(7.6651, rel=1e-4)
    assert out["noise_std"] == pytest.approx(2 * out["noise_multiplier"])
    assert out["epsilon"] <= 0.015 and out["target_epsilon"] == 0.015 and out["target_delta"] == 1e-6
    assert out["analyses"]["ols"]["epsilon"] > 0.015  # OLS needs more noise (22.5) for the same target


def test_calibrate_composed_is_sound(cli_json):
    argv = ["calibrate", "random-checkin", "--p", "0.2", "--q", "0.1", "--d", "10", "--epsilon", "0.3"]
    out = cli_json([*argv, "--delta", "1e-5", "--iterations", "5", "--accountant", "rdp"])
    _check_shape(out)
    assert out["accountant"] == "rdp" and out["iterations"] == 5
    acc = RDPAccountant().compose(
        RandomCheckInEvent(participation=0.2, sampling_rate=0.1, noise_multiplier=out["noise_multiplier"]), 5
    )
    assert acc.get_epsilon(1e-5) == pytest.approx(out["epsilon"]) and out["epsilon"] <= 0.3


def test_calibrate_without_noise_when_delta_covers_use(cli_json):
    argv = ["calibrate", "random-checkin", "--p", "0.1", "--q", "0.01", "--d", "3", "--epsilon", "0.5"]
    out = cli_json([*argv, "--delta", "0.005"])  # δ ≥ pq = 1e-3: no noise needed for wcs; ols needs some
    assert out["noise_multiplier"] == 0.0 and out["epsilon"] == 0.0
    assert out["analyses"]["ols"]["epsilon"] is None and "unbounded" in out["analyses"]["ols"]["note"]


@pytest.mark.parametrize("extra", [[], ["--iterations", "10"], ["--iterations", "10", "--accountant", "rdp"]])
def test_calibrate_unreachable_exits_1(extra, run_cli):
    argv = ["calibrate", "random-checkin", "--p", "0.1", "--q", "0.01", "--d", "10", "--epsilon", "1e-9"]
    code, out, err = run_cli([*argv, "--delta", "1e-12", *extra, "--json"])
    assert code == 1 and out == ""
    assert "unreachable" in err and err.count("\n") == 1


_BASE = ["account", "random-checkin", "--p", "0.1", "--q", "0.1", "--d", "10", "--noise-multiplier", "1"]
_CAL = ["calibrate", "random-checkin", "--p", "0.1", "--q", "0.1", "--d", "3"]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (_BASE, "--epsilon"),  # neither --epsilon nor --iterations
        ([*_BASE, "--iterations", "5"], "--delta"),
        ([*_BASE, "--iterations", "5", "--delta", "1e-5", "--epsilon", "1"], "--epsilon"),
        ([*_BASE, "--epsilon", "1", "--delta", "1e-5"], "--delta"),
        ([*_BASE, "--epsilon", "1", "--accountant", "bogus"], "--accountant"),
        ([*_BASE, "--epsilon", "1", "--sigma", "1"], "--sigma"),  # removed: unrecognized
        ([*_BASE, "--epsilon", "1", "--analysis", "ols"], "--analysis"),  # removed: all analyses are reported
        ([*_BASE[:3], "1.5", *_BASE[4:], "--epsilon", "1"], "--p must be in (0, 1]"),
        ([*_BASE[:5], "0", *_BASE[6:], "--epsilon", "1"], "--q must be in (0, 1]"),
        ([*_BASE[:7], "-1", *_BASE[8:], "--epsilon", "1"], "--d must be an integer"),
        ([*_BASE[:9], "0", "--epsilon", "1"], "--noise-multiplier must be in (0, inf)"),
        ([*_BASE, "--epsilon", "1", "--clip", "0"], "--clip must be in (0, inf)"),
        ([*_BASE, "--iterations", "0", "--delta", "1e-5"], "--iterations must be an integer"),
        ([*_BASE, "--iterations", "3", "--delta", "1.0"], "--delta must be in (0, 1)"),
        ([*_CAL, "--epsilon", "1", "--delta", "0"], "--delta must be in (0, 1)"),
        ([*_CAL, "--epsilon", "0", "--delta", "1e-5"], "--epsilon must be in (0, inf)"),
        (
            [*_CAL, "--epsilon", "1", "--delta", "1e-5", "--iterations", "0"],
            "--iterations must be an integer",
        ),
        (
            ["calibrate", "random-checkin", "--p", "0.1", "--q", "0.1", "--epsilon", "1", "--delta", "1e-5"],
            "--d",
        ),
    ],
)
def test_usage_errors_are_one_line_exit_2(argv, needle, run_cli):
    code, out, err = run_cli([*argv, "--json"])
    assert code == 2
    assert out == ""
    assert err.startswith("ampfl: error:")
    assert err.count("\n") == 1
    assert needle in err


_ISSUE_32 = "account random-checkin --p 0.2 --q 0.9 --d 2 --noise-multiplier 0.6 --iterations 30 --delta 1e-5"


def test_printed_thm_4_1_composed_where_its_bound_is_large(cli_json):
    # issue 32: composing the printed Thm 4.1 bound took log1p(-e^x) at x >= 0 ("math domain error", exit 2)
    out = cli_json([*_ISSUE_32.split(), "--json"])
    paper = out["analyses"]["paper"]
    assert paper["sound"] is False and paper["epsilon"] is not None and paper["epsilon"] > out["epsilon"]


def test_a_listed_analysis_that_fails_is_a_note_not_a_failed_command(monkeypatch, cli_json):
    real = rc.epsilon_composed

    def broken(*, analysis, **kwargs):
        if analysis == "paper":
            raise ValueError("math domain error")
        return real(analysis=analysis, **kwargs)

    monkeypatch.setattr(rc, "epsilon_composed", broken)
    out = cli_json([*_ISSUE_32.split(), "--json"])
    assert out["analyses"]["paper"]["epsilon"] is None
    assert "not computed: math domain error" in out["analyses"]["paper"]["note"]
    assert out["epsilon"] > 0  # the recommended analysis is unaffected
