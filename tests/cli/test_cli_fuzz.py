"""Property-based fuzz of every accounting subcommand's numeric flags (issue 32, part 5).

For each ``account``/``calibrate``/``audit random-checkin``/``plan groups`` command a cheap valid invocation
is taken, one numeric flag is set to an extreme value (finite extremes, subnormals, huge integers, ±inf, nan,
zero, negatives) and the command run in-process. Whatever the value, the command either answers (exit 0, one
JSON object) or refuses with exactly one line naming the flag (exit 2) — or, for a calibration whose target
no noise level reaches, one "unreachable" line (exit 1, the documented contract) — and never raises.
The flags are found by walking the real parser, so a new flag is fuzzed without editing this file.
"""

from __future__ import annotations

import argparse
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ampfl.cli import build_parser, main
from ampfl.numeric_ranges import RANGES

# One cheap valid invocation per subcommand (a few Rényi orders, a small audit grid).
BASES: dict[tuple[str, str], str] = {
    ("account", "random-checkin"): "--p 0.1 --q 0.01 --d 100 --noise-multiplier 1 --epsilon 0.5",
    ("calibrate", "random-checkin"): "--p 0.1 --q 0.01 --d 100 --epsilon 0.5 --delta 1e-5",
    (
        "audit",
        "random-checkin",
    ): "--p 0.1 --q 0.1 --d 10 --noise-multiplier 1 --epsilon 0.5 --grid 5 --no-refine",
    ("account", "ms-pafl"): (
        "--p 0.3 --eps-local 1 --delta-local 1e-4 --clients 100 --beta 0.25 --local-steps 5 --batch 5 "
        "--dataset-size 300 --sampling wor"
    ),
    ("account", "pm-sfl-smashed"): "--epsilon 1 --c 0.1 --dim 10",
    ("account", "model-split"): "--submodels 3 --noise-multiplier 1 --steps 10 --delta 1e-5 --orders 2,4",
    ("account", "bis"): "--iterations 10 --k 1 --noise-multiplier 1 --delta 1e-5 --orders 2,4",
    ("account", "poisson"): "--rate 0.01 --noise-multiplier 1 --steps 100 --delta 1e-5 --orders 2,4",
    ("account", "dropout"): "--noise-multiplier 1 --steps 10 --delta 1e-5 --orders 2,4",
    ("calibrate", "model-split"): "--epsilon 1 --delta 1e-5 --submodels 3 --steps 10 --orders 2,4,8,16,32",
    ("calibrate", "bis"): "--epsilon 1 --delta 1e-5 --iterations 10 --k 1 --orders 2,4,8,16,32",
    ("calibrate", "poisson"): "--epsilon 1 --delta 1e-5 --rate 0.01 --steps 100 --orders 2,4,8,16,32",
    ("plan", "groups"): "--budgets 1,2 --sizes 10,10 --participation 0.2 --rounds 5 --delta 1e-5 --dim 10",
}

EXTREMES = [
    "0", "-0.0", "-1", "1e-320", "5e-324", "1e-300", "2.2e-308", "1e300", "1e308", "-1e308", "inf", "-inf",
    "nan", "99999999999999999999", "9223372036854775807", "9007199254740993", "-9223372036854775808",
    "1e-16", "1.5",
]  # fmt: skip


def _subparser(verb: str, name: str) -> argparse.ArgumentParser:
    def sub(parser: argparse.ArgumentParser, key: str) -> argparse.ArgumentParser:
        actions = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return actions.choices[key]  # type: ignore[no-any-return]

    return sub(sub(build_parser(), verb), name)


def _numeric_flags() -> list[tuple[str, str, str, str]]:
    """(verb, name, flag, dest) of every int/float option of the fuzzed subcommands."""
    rows = []
    for verb, name in BASES:
        for action in _subparser(verb, name)._actions:
            if action.option_strings and getattr(action.type, "__name__", "") in ("int", "float"):
                rows.append((verb, name, max(action.option_strings, key=len), action.dest))
    return rows


FLAGS = _numeric_flags()


def test_every_numeric_flag_is_fuzzed_and_has_a_range():
    assert len(FLAGS) >= 60  # the walk found the parser's flags (75 when written)
    assert {dest for *_, dest in FLAGS} >= {"noise_multiplier", "p", "q", "iterations", "d", "steps"}
    assert {"noise_multiplier", "p", "q", "iterations", "d", "steps"} <= set(RANGES)


def _argv(verb: str, name: str, flag: str, value: str) -> list[str]:
    argv = BASES[(verb, name)].split()
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    return [verb, name, *argv, "--json"]


def _check(argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(argv)  # raises, failing the test, if anything escapes the CLI's handlers
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if not line.startswith("ampfl: warning:")]
    if code == 0:
        assert not errors, captured.err
        json.loads(captured.out)
        return
    assert len(errors) == 1 and captured.out == "", (argv, captured.err)
    if code == 1 and argv[0] in ("calibrate", "plan"):
        assert "unreachable" in errors[0], (argv, errors)  # the documented calibration contract
        return
    assert code == 2, (argv, captured.err)
    assert flag in errors[0] or flag.replace("--", "").replace("-", "_") in errors[0], (argv, errors)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    row=st.sampled_from(FLAGS),
    value=st.one_of(
        st.sampled_from(EXTREMES),
        st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: abs(x) > 1e100 or abs(x) < 1e-100),
        st.integers(min_value=10**10, max_value=2**70),
    ),
)
def test_extreme_numeric_flags_answer_or_refuse_in_one_line(row, value, capsys):
    verb, name, flag, _ = row
    _check(_argv(verb, name, flag, str(value)), flag, capsys)


_RC = "account random-checkin --p 0.1 --q 0.1 --d 10 --noise-multiplier 1 --epsilon 1"


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        # the sharp edges of issue 32, as a new user typed them
        (
            "account bis --iterations 99999999999999999999 --k 1 --noise-multiplier 1 --delta 1e-5",
            "--iterations",
        ),
        (_RC.replace("--p 0.1", "--p 1e-320"), "--p"),
        (_RC.replace("--q 0.1", "--q 1e-320"), "--q"),
        (_RC.replace("--noise-multiplier 1", "--noise-multiplier 1e-320"), "--noise-multiplier"),
        ("account poisson --rate 0.1 --noise-multiplier 1e300 --steps 10 --delta 1e-5", "--noise-multiplier"),
        (_RC.replace("--d 10", "--d 99999999999999999999"), "--d"),
        (
            "account model-split --submodels 99999999999999999999 --noise-multiplier 1 --steps 9 --delta 0.1",
            "--submodels",
        ),
        ("account dropout --steps 1000000000 --noise-multiplier 1 --delta 1e-5 --accountant pld", "--steps"),
    ],
)
def test_issue_32_sharp_edges_name_the_flag(argv, flag, capsys):
    code = main([*argv.split(), "--json"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and flag in err, err


def test_auto_accountant_falls_back_to_rdp_beyond_the_pld_composition_limit(capsys):
    # 10^9 steps: the composed PLD would need terabytes; auto resolves to RDP, which composes any count.
    code = main("account dropout --steps 1000000000 --noise-multiplier 1 --delta 1e-5 --json".split())
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["accountant"] == "rdp"


@pytest.mark.parametrize("value", ["1e300", "1e-320", "nan", "inf"])
def test_run_config_out_of_range_number_is_one_line_naming_the_key(value, tmp_path, capsys):
    # issue 32: `noise_multiplier = 1e300` said "too small"; 1e-320 raised ZeroDivisionError
    config = tmp_path / "run.toml"
    config.write_text(
        'seed = 1\nrounds = 2\n[dataset]\nname = "synthetic"\n[partition]\nnum_clients = 10\n'
        f'[algorithm]\nname = "dp_fedavg"\ncohort_size = 5\nnoise_multiplier = {value}\n',
        encoding="utf-8",
    )
    code = main(["run", str(config), "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "algorithm.noise_multiplier" in err, err
    assert not (tmp_path / "out").exists()
