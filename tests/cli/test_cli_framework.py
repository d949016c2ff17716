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
