"""``python -m ampfl``: the same command line as ``ampfl``."""

from ampfl.cli import _console_entry

if __name__ == "__main__":
    _console_entry()
