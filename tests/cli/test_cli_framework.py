"""The CLI framework: one-line errors with exit code 2, --version, --json output."""

import pytest

from ampfl.cli import main


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert "ampfl" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [[], ["account"], ["no-such-command"], ["account", "no-such-mechanism"]])
def test_usage_errors_are_one_line_exit_2(argv, capsys):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("ampfl: error:")
    assert err.count("\n") == 1
    assert "Traceback" not in err


def test_ampfl_warnings_become_one_stderr_line(monkeypatch, capsys):
    # Prepare: make an accounting function emit a warning attributed to an ampfl module.
    import warnings

    import ampfl.accounting.pm_sfl as pm_sfl

    original = pm_sfl.amplified_epsilon_smashed

    def noisy(**kwargs):
        warnings.warn_explicit("a published bound\nwas refuted", UserWarning, pm_sfl.__file__, 1)
        warnings.warn_explicit("third-party chatter", DeprecationWarning, "/elsewhere/lib.py", 1)
        return original(**kwargs)

    monkeypatch.setattr(pm_sfl, "amplified_epsilon_smashed", noisy)
    # Execute
    code = main(["account", "pm-sfl-smashed", "--epsilon", "1", "--c", "0.1", "--dim", "2", "--json"])
    # Assert: ampfl's warning is one line; other packages' warnings are not shown.
    err = capsys.readouterr().err
    assert code == 0
    assert err == "ampfl: warning: a published bound was refuted\n"


def test_numerical_error_is_one_line_exit_1(monkeypatch, capsys):
    # Prepare: the CLI names NumericalError lazily (its module pulls numpy); it must still map to exit 1.
    import ampfl.accounting.pm_sfl as pm_sfl
    from ampfl.accounting._checks import NumericalError

    def failing(**kwargs):
        raise NumericalError("the integral did not\nconverge")

    monkeypatch.setattr(pm_sfl, "amplified_epsilon_smashed", failing)
    # Execute
    code = main(["account", "pm-sfl-smashed", "--epsilon", "1", "--c", "0.1", "--dim", "2"])
    # Assert
    err = capsys.readouterr().err
    assert code == 1
    assert err == "ampfl: numerical error: the integral did not converge\n"


def test_other_arithmetic_errors_are_one_line_exit_1(monkeypatch, capsys):
    import ampfl.accounting.pm_sfl as pm_sfl

    def failing(**kwargs):
        raise OverflowError("math range error")

    monkeypatch.setattr(pm_sfl, "amplified_epsilon_smashed", failing)
    code = main(["account", "pm-sfl-smashed", "--epsilon", "1", "--c", "0.1", "--dim", "2"])
    err = capsys.readouterr().err
    assert code == 1
    assert err == "ampfl: numerical error: OverflowError: math range error\n"


def test_plain_output_has_one_row_per_scalar_and_no_json_in_cells(capsys):
    # issue 32: nested results (analyses, long order lists) were JSON blobs inside table cells
    argv = "account random-checkin --p 0.2 --q 0.9 --d 2 --noise-multiplier 0.6 --iterations 30 --delta 1e-5"
    assert main(argv.split()) == 0
    table = capsys.readouterr().out
    assert "analyses.paper.epsilon" in table and "analyses.hidden-participation.sound" in table
    assert "{" not in table and '"epsilon"' not in table
    argv = "account poisson --noise-multiplier 1 --rate 0.01 --steps 10 --delta 1e-5 --accountant rdp"
    assert main(argv.split()) == 0
    table = capsys.readouterr().out
    assert "116 values: 2, 3, 4, …, 10000" in table and "[" not in table


def test_a_closed_stdout_is_not_a_traceback():
    # `ampfl ... | head` whose reader has gone: one quiet exit (141), no BrokenPipeError traceback
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # nobody will read: the command's first write fails with EPIPE
    argv = "account poisson --noise-multiplier 1 --rate 0.01 --steps 10 --delta 1e-5 --accountant rdp --json"
    done = subprocess.run(
        [sys.executable, "-m", "ampfl.cli", *argv.split()], stdout=write, stderr=subprocess.PIPE, check=False
    )
    os.close(write)
    assert done.returncode == 141 and b"Traceback" not in done.stderr, done.stderr.decode()
