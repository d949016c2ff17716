"""The CLI contract of issues 2-5 and 10, table-driven: every command, flag and JSON key named there exists.

Issue 10 (privacy spine) fixed one output shape for every ``account`` and ``calibrate`` command
(:data:`COMMON`: ``epsilon``, ``delta``, ``analysis``, ``accountant``, ``analyses``, plus ``noise_multiplier``
where noise exists) and one unit convention (``--noise-multiplier``; ``--sigma`` is gone).

Other tools parse these names, so each row runs a command of an issue's "CLI contract" section with cheap
parameters and checks that stdout is exactly one JSON object holding the required keys (extra keys are
allowed). A second table feeds bad values to every parameter and checks the error rules: one
``ampfl: error:`` line on stderr naming the flag, exit code 2, nothing on stdout, no traceback.
"""

from __future__ import annotations

import json
import math

import pytest

from ampfl.cli import main
from ampfl.commands import rename_parameters

# Cheap valid invocations (a few Renyi orders, a small audit grid) of every contract command.
RC = "account random-checkin --p 0.1 --q 0.01 --d 100 --noise-multiplier 1 --epsilon 0.5".split()
RC_T = [*RC[:-2], "--iterations", "10", "--delta", "1e-5"]
CAL_RC = "calibrate random-checkin --p 0.1 --q 0.01 --d 100 --epsilon 0.5 --delta 1e-5".split()
AUDIT = "audit random-checkin --p 0.1 --q 0.1 --d 10 --noise-multiplier 1 --epsilon 0.5 --grid 5".split()
AUDIT.append("--no-refine")
MS = (
    "account ms-pafl --p 0.3 --eps-local 1 --delta-local 1e-4 --clients 100 --beta 0.25 --local-steps 5 "
    "--batch 5 --dataset-size 300 --sampling wor"
).split()
MS_T = [*MS, "--rounds", "10", "--delta-tilde", "1e-5"]
PM = "account pm-sfl-smashed --epsilon 1 --c 0.1 --dim 10".split()
SPLIT = "account model-split --submodels 3 --noise-multiplier 1 --steps 10 --delta 1e-5 --orders 2,4".split()
BIS = "account bis --iterations 10 --k 1 --noise-multiplier 1 --delta 1e-5 --orders 2,4".split()
POISSON = "account poisson --rate 0.01 --noise-multiplier 1 --steps 100 --delta 1e-5 --orders 2,4".split()
DROPOUT = "account dropout --noise-multiplier 1 --steps 10 --delta 1e-5 --orders 2,4".split()
CAL_SPLIT = (
    "calibrate model-split --epsilon 1 --delta 1e-5 --submodels 3 --steps 10 --orders 2,4,8,16,32".split()
)
CAL_BIS = "calibrate bis --epsilon 1 --delta 1e-5 --iterations 10 --k 1 --orders 2,4,8,16,32".split()
CAL_POISSON = (
    "calibrate poisson --epsilon 1 --delta 1e-5 --rate 0.01 --steps 100 --orders 2,4,8,16,32".split()
)
GROUPS = (
    "plan groups --budgets 1,2 --sizes 10,10 --participation 0.2 --rounds 5 --delta 1e-5 --dim 10".split()
)

RDP_KEYS = {"epsilon", "order", "orders", "rdp"}
#: Issue 10 part 5: the one shape of every account/calibrate report.
COMMON = {"epsilon", "delta", "analysis", "accountant", "analyses"}
NOISY = COMMON | {"noise_multiplier"}

# (id, argv, keys the issue requires). Optional flags of the contract appear in at least one row each.
CONTRACT = [
    ("rc-account-wcs", RC, NOISY),
    ("rc-account-clip", [*RC, "--clip", "2"], NOISY | {"noise_std"}),
    ("rc-calibrate", CAL_RC, NOISY),
    ("rc-calibrate-rdp", [*CAL_RC, "--iterations", "10", "--accountant", "rdp"], NOISY),
    ("rc-composed-wcs", RC_T, NOISY),
    ("rc-composed-rdp", [*RC_T, "--accountant", "rdp", "--clip", "1"], NOISY | {"noise_std"}),
    ("rc-audit", AUDIT, {"max_delta", "worst_a", "direction", "analyses"}),
    ("ms-pafl", MS, NOISY | {"q", "epsilon_round", "delta_round"}),
    (
        "ms-pafl-rounds",
        [*MS_T, "--sampling", "wr", "--clip", "1"],
        NOISY | {"q", "epsilon_round", "delta_round", "noise_std"},
    ),
    ("pm-sfl-smashed", PM, COMMON),
    ("pm-sfl-smashed-domain", [*PM, "--domain-includes-zero"], COMMON),
    ("model-split", SPLIT, NOISY | RDP_KEYS),
    ("model-split-opts", [*SPLIT, "--clip", "2", "--bound", "efficient"], NOISY | RDP_KEYS | {"noise_std"}),
    ("bis", BIS, NOISY | RDP_KEYS),
    ("bis-opts", [*BIS, "--k", "2", "--epochs", "3", "--bound", "efficient"], NOISY | RDP_KEYS),
    ("poisson", POISSON, NOISY | RDP_KEYS),
    ("poisson-pld", [*POISSON[:-2], "--accountant", "pld"], NOISY),
    ("dropout", DROPOUT, NOISY | RDP_KEYS),
    ("calibrate-model-split", CAL_SPLIT, NOISY),
    ("calibrate-bis", CAL_BIS, NOISY),
    ("calibrate-poisson", CAL_POISSON, NOISY),
    ("plan-groups", GROUPS, {"groups", "system_epsilon", "objective", "baseline"}),
    (
        "plan-groups-opts",
        [*GROUPS, "--clip", "2", "--sparsify", "auto", "--analysis", "paper", "--min-rate", "0.05"],
        {"groups", "system_epsilon", "objective", "baseline"},
    ),
    (
        "plan-groups-kappa",
        [*GROUPS, "--kappa", "0.5,1"],
        {"groups", "system_epsilon", "objective", "baseline"},
    ),
]


def _run_json(argv, capsys):
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)  # raises on anything but exactly one JSON value


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)


@pytest.mark.parametrize(("argv", "keys"), [row[1:] for row in CONTRACT], ids=[row[0] for row in CONTRACT])
def test_contract_keys(argv, keys, capsys):
    # Execute
    result = _run_json(argv, capsys)
    # Assert: one object holding the required keys; numbers are numbers (never NaN).
    assert isinstance(result, dict)
    assert keys <= set(result), keys - set(result)
    for key in keys & {"epsilon", "delta", "q", "max_delta", "system_epsilon"}:
        assert _is_number(result[key]) and result[key] >= 0, (key, result[key])
    if RDP_KEYS <= keys:
        assert len(result["orders"]) == len(result["rdp"]) and result["order"] in result["orders"]
        assert result["orders"] == sorted(result["orders"]) and all(r >= 0 for r in result["rdp"])
    if COMMON <= keys:
        assert result["accountant"] in ("rdp", "pld", "closed-form")
        for name, entry in result["analyses"].items():
            assert name != result["analysis"]  # the recommended analysis is the top level, not listed again
            assert {"epsilon", "delta", "sound", "note"} <= set(entry) and isinstance(entry["sound"], bool)
    if "noise_multiplier" in keys:
        assert _is_number(result["noise_multiplier"]) and result["noise_multiplier"] > 0
    if "noise_std" in keys:
        clip = float(argv[argv.index("--clip") + 1])  # noise_multiplier is std / clip everywhere (issue 28)
        assert result["noise_std"] == pytest.approx(result["noise_multiplier"] * clip)
    if argv[:2] == ["account", "random-checkin"]:
        assert result["analysis"] == "wcs"


def test_audit_analyses_object(capsys):
    result = _run_json(AUDIT, capsys)
    assert set(result["analyses"]) == {"paper", "wcs", "ols", "cs"}
    for check in result["analyses"].values():
        assert {"delta", "violated"} <= set(check) and isinstance(check["violated"], bool)
    assert -1 <= result["worst_a"] <= 1 and result["max_delta"] >= 0
    assert not result["analyses"]["wcs"]["violated"]  # the recommended analysis survives its own audit


def test_plan_groups_nested_keys(capsys):
    result = _run_json(GROUPS, capsys)
    assert len(result["groups"]) == 2
    for group in result["groups"]:
        assert {"epsilon", "size", "q", "sigma", "kappa", "expected_noise"} <= set(group)
    assert [g["size"] for g in result["groups"]] == [10, 10]
    # The planner's constraint sum_g q_g N_g = q N (issue 4).
    assert sum(g["q"] * g["size"] for g in result["groups"]) == pytest.approx(0.2 * 20, rel=1e-6)
    assert {"sigma", "expected_noise", "objective"} <= set(result["baseline"])


def test_contract_figures_exist():
    from ampfl.reproduce import figure_names

    named = {f"hasircioglu-fig{i}" for i in (1, 2, 3, 5, 6, 7)} | {f"ms-pafl-fig{i}" for i in range(2, 7)}
    named |= {"dong-fig1", "dong-fig2", "dong-fig3", "gdpfed-fig1"}
    assert named <= set(figure_names())


def test_run_and_demo_flags_exist(capsys):
    # --help exits 0 and lists the contract's flags (running them is tested in test_cli_run.py).
    for argv, flags in [
        (["run", "--help"], ("--out", "--resume", "--json")),
        (["demo", "--help"], ("--out",)),
    ]:
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 0
        out = capsys.readouterr().out
        assert all(flag in out for flag in flags)


def _with(base, flag, value):
    """``base`` with ``flag`` set to ``value`` (added if absent), or removed when ``value`` is None."""
    argv = list(base)
    if flag in argv:
        i = argv.index(flag)
        if value is None:
            del argv[i : i + 2]
        else:
            argv[i + 1] = value
    elif value is not None:
        argv += [flag, value]
    return argv


def _bad(base, flag, values, named=None):
    return [
        pytest.param(_with(base, flag, v), named or flag, id=f"{base[0]}-{base[1]}{flag}={v}") for v in values
    ]


# (argv, the flag the one-line error must name). None = the flag is left out.
BAD = [
    *[
        row
        for base in (RC, CAL_RC, AUDIT)
        for row in (
            _bad(base, "--p", [None, "0", "1.5", "nan", "x"])
            + _bad(base, "--q", [None, "0", "1.5"])
            + _bad(base, "--d", [None, "-1", "1.5"])
        )
    ],
    *_bad(RC, "--noise-multiplier", [None, "0", "-1", "nan", "x"]),
    *_bad(AUDIT, "--noise-multiplier", ["0"]),
    *_bad(RC_T, "--noise-multiplier", ["-1"]),
    *_bad(RC_T, "--accountant", ["moments"]),
    *[row for base in (RC, RC_T) for row in _bad(base, "--clip", ["0", "-1", "inf"])],
    *_bad(RC, "--epsilon", ["-1", "nan"]),
    *_bad(AUDIT, "--epsilon", [None, "-1"]),
    *_bad(AUDIT, "--grid", ["0"]),
    *_bad(CAL_RC, "--epsilon", [None, "0"]),
    *_bad(CAL_RC, "--delta", [None, "0", "1", "1.5"]),
    *_bad(RC_T, "--delta", [None, "0", "1"]),
    *_bad(RC_T, "--iterations", ["0", "-3", "x"]),
    pytest.param([*RC, "--delta", "1e-5"], "--delta", id="rc-delta-without-iterations"),
    pytest.param([*RC_T, "--epsilon", "1"], "--epsilon", id="rc-epsilon-with-iterations"),
    pytest.param(_with(RC, "--epsilon", None), "--epsilon", id="rc-no-epsilon-no-iterations"),
    *_bad(MS, "--p", [None, "0", "1.5"]),
    *_bad(MS, "--eps-local", [None, "0", "1.5", "x"]),
    *_bad(MS, "--delta-local", [None, "0", "1"]),
    *_bad(MS, "--clients", [None, "0", "1.5"]),
    *_bad(MS, "--beta", [None, "0", "-1", "1e-9"]),
    *_bad(MS, "--local-steps", [None, "0"]),
    *_bad(MS, "--batch", [None, "0", "301"]),
    *_bad(MS, "--dataset-size", [None, "0"]),
    *_bad(MS, "--sampling", [None, "foo"]),
    *_bad(MS, "--clip", ["0"]),
    pytest.param([*MS, "--rounds", "10"], "--delta-tilde", id="ms-rounds-without-delta-tilde"),
    pytest.param([*MS, "--delta-tilde", "1e-5"], "--rounds", id="ms-delta-tilde-without-rounds"),
    *_bad(MS_T, "--rounds", ["0", "-3"]),
    *_bad(MS_T, "--delta-tilde", ["0", "1"]),
    *_bad(PM, "--epsilon", [None, "0", "-1", "nan"]),
    *_bad(PM, "--c", [None, "0", "0.5", "1", "x"]),
    *_bad(PM, "--dim", [None, "0", "1.5"]),
    *[
        row
        for base in (SPLIT, BIS, POISSON, DROPOUT)
        for row in (
            _bad(base, "--noise-multiplier", [None, "0", "nan"])
            + _bad(base, "--delta", [None, "0", "1"])
            + _bad(base, "--orders", ["1,2", "", "2.5"])
        )
    ],
    *[row for base in (SPLIT, POISSON, DROPOUT) for row in _bad(base, "--steps", [None, "0", "-1"])],
    *_bad(SPLIT, "--submodels", [None, "0"]),
    *_bad(SPLIT, "--clip", ["0"]),
    *_bad(SPLIT, "--bound", ["foo"]),
    *_bad(SPLIT, "--nonsplit-noise-multiplier", ["0"]),
    *_bad(BIS, "--iterations", [None, "0"]),
    *_bad(BIS, "--k", [None, "0", "11"]),
    *_bad(BIS, "--epochs", ["0"]),
    *_bad(POISSON, "--rate", [None, "0", "1.5"]),
    *[
        row
        for base in (CAL_SPLIT, CAL_BIS, CAL_POISSON)
        for row in _bad(base, "--epsilon", [None, "0", "nan"]) + _bad(base, "--delta", [None, "0", "1"])
    ],
    *_bad(CAL_SPLIT, "--submodels", ["0"]),
    *_bad(CAL_SPLIT, "--steps", ["0"]),
    *_bad(CAL_BIS, "--k", ["11"]),
    *_bad(CAL_POISSON, "--rate", ["0", "2"]),
    *_bad(GROUPS, "--budgets", [None, "", "1,x", "0,1", "nan,1", "1,2,3"]),
    *_bad(GROUPS, "--sizes", [None, "", "10,1.5", "0,10"]),
    *_bad(GROUPS, "--participation", [None, "0", "1.5"]),
    *_bad(GROUPS, "--rounds", [None, "0", "-1"]),
    *_bad(GROUPS, "--delta", [None, "0", "1"]),
    *_bad(GROUPS, "--dim", [None, "0"]),
    *_bad(GROUPS, "--clip", ["0"]),
    *_bad(GROUPS, "--kappa", ["0,1", "1", "2,1"]),
    *_bad(GROUPS, "--min-rate", ["0", "0.5"]),
    *_bad(GROUPS, "--analysis", ["foo"]),
    *_bad(GROUPS, "--sparsify", ["foo"]),
    pytest.param(
        [*GROUPS, "--sparsify", "auto", "--kappa", "1,1"], "--kappa", id="groups-sparsify-and-kappa"
    ),
    pytest.param(["reproduce", "NOPE"], "NAME", id="reproduce-unknown-figure"),
]


@pytest.mark.parametrize(("argv", "flag"), BAD)
def test_bad_input_is_one_line_naming_the_flag(argv, flag, capsys):
    # Execute
    code = main([*argv, "--json"])
    # Assert
    captured = capsys.readouterr()
    assert code == 2, captured
    assert captured.out == ""
    assert captured.err.startswith("ampfl: error:") and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err
    assert flag in captured.err, captured.err


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        # not the keyword noise_multiplier
        (_with(BIS, "--noise-multiplier", "-1"), "--noise-multiplier must be in (0, inf)"),
        (_with(POISSON, "--rate", "1.5"), "--rate must be in (0, 1]"),  # not sampling_rate
        (_with(GROUPS, "--budgets", "0,1"), "--budgets[0] must be in (0, inf)"),  # not epsilons[0]
        (_with(GROUPS, "--rounds", "0"), "--rounds must be an integer in [1, inf]"),  # not num_rounds
        (_with(MS, "--clients", "0"), "--clients must be an integer in [1, inf]"),  # not num_clients
        (_with(MS, "--batch", "301"), "--local-steps * --batch must be <= --dataset-size"),
        (_with(CAL_BIS, "--k", "0"), "--k must be an integer in [1, 10]"),
    ],
)
def test_errors_speak_flag_names_and_ranges(argv, fragment, capsys):
    assert main(argv) == 2
    assert fragment in capsys.readouterr().err


def test_rename_parameters_leaves_ordinary_words_alone():
    flags = {"p": "--p", "d": "--d", "noise_multiplier": "--noise-multiplier", "epsilons": "--budgets"}
    assert rename_parameters("p must be in (0, 1]. Found 0.0.", flags) == "--p must be in (0, 1]. Found 0.0."
    # Short names are rewritten only at the start; longer keywords wherever they stand as a word.
    assert rename_parameters("q must exceed p", flags) == "q must exceed p"
    assert rename_parameters("x and noise_multiplier", flags) == "x and --noise-multiplier"
    assert rename_parameters("epsilons[2] must be > 0", flags) == "--budgets[2] must be > 0"
    assert rename_parameters("p_i must be set", flags) == "p_i must be set"
    assert rename_parameters("--p must be in (0, 1]", flags) == "--p must be in (0, 1]"


def test_unreachable_calibration_is_a_numerical_error_exit_1(capsys):
    # At rate 1 a single order-2 RDP bound cannot reach epsilon = 1e-6 at delta = 1e-100 below the
    # calibration's noise ceiling, so the calibration reports that it is stuck (exit 1, one line).
    argv = "calibrate poisson --epsilon 1e-6 --delta 1e-100 --rate 1 --steps 1000000 --orders 2 --json"
    code = main(argv.split())
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    assert captured.err.startswith("ampfl: numerical error:") and captured.err.count("\n") == 1
    assert "unreachable" in captured.err


def test_overflow_in_the_api_is_one_line_exit_1(monkeypatch, capsys):
    # Prepare: an accounting function that overflows (as math.expm1 does for epsilon > ~709).
    import ampfl.accounting.pm_sfl as pm_sfl

    def overflow(**kwargs):
        raise OverflowError("math range error")

    monkeypatch.setattr(pm_sfl, "amplified_epsilon_smashed", overflow)
    # Execute
    code = main([*PM, "--json"])
    # Assert: exit 1, one line, no traceback, nothing on stdout.
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    assert captured.err == "ampfl: numerical error: OverflowError: math range error\n"


@pytest.mark.parametrize(
    ("calibrate_argv", "account_argv"),
    [
        # Issue 10 part 3: this target used to print noise 1000 and epsilon 0.01, while account gave 0.0195.
        (
            "calibrate poisson --epsilon 0.01 --delta 1e-5 --rate 0.001 --steps 100",
            "account poisson --delta 1e-5 --rate 0.001 --steps 100",
        ),
        (
            "calibrate poisson --epsilon 0.5 --delta 1e-6 --rate 0.01 --steps 300 --accountant pld",
            "account poisson --delta 1e-6 --rate 0.01 --steps 300 --accountant pld",
        ),
        (
            "calibrate model-split --epsilon 1 --delta 1e-5 --submodels 3 --steps 10",
            "account model-split --delta 1e-5 --submodels 3 --steps 10",
        ),
        (
            "calibrate bis --epsilon 1 --delta 1e-5 --iterations 10 --k 1",
            "account bis --delta 1e-5 --iterations 10 --k 1",
        ),
        (
            "calibrate random-checkin --p 0.1 --q 0.01 --d 100 --epsilon 0.5 --delta 1e-5 --iterations 10",
            "account random-checkin --p 0.1 --q 0.01 --d 100 --iterations 10 --delta 1e-5",
        ),
    ],
)
def test_calibrated_noise_is_accepted_by_the_accountant(calibrate_argv, account_argv, capsys):
    # A calibrator never prints a noise level its own accountant rejects, and stays within 0.5% of the least.
    cal = _run_json(calibrate_argv.split(), capsys)
    target = float(calibrate_argv.split()[calibrate_argv.split().index("--epsilon") + 1])
    z = cal["noise_multiplier"]
    assert cal["epsilon"] <= target
    spent = _run_json([*account_argv.split(), "--noise-multiplier", repr(z)], capsys)
    assert spent["epsilon"] <= target
    assert spent["epsilon"] == pytest.approx(cal["epsilon"], rel=1e-9)
    tighter = _run_json([*account_argv.split(), "--noise-multiplier", repr(z / 1.005)], capsys)
    assert tighter["epsilon"] > target


@pytest.mark.parametrize(
    "argv",
    [SPLIT, BIS, POISSON, DROPOUT, RC, AUDIT],
    ids=lambda a: "-".join(a[:2]),
)
def test_sigma_flag_is_gone(argv, capsys):
    bad = [*argv, "--sigma", "1"]
    assert main(bad) == 2
    assert "--sigma" in capsys.readouterr().err
