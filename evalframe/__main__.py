"""`python -m evalframe ...`: the command line (evalframe.cli)."""

from evalframe.cli.app import main

if __name__ == "__main__":
    main()
