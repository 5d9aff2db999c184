"""`python -m evalframe ...`: the command line (evalframe.cli)."""

from evalframe.cli import entry

if __name__ == "__main__":
    entry()
