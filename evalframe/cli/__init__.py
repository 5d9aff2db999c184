"""The command line: `evalframe [run|rescore|log-run|compare|ui] ...` as `main(argv) -> int`."""

from evalframe.cli.main import entry, main

__all__ = ["entry", "main"]
