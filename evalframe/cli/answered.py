"""A command run as a plain function (compare, review, align): its exit code, a user error said in one line
on stderr, never a traceback, and the libraries' own log lines kept off the console."""

from __future__ import annotations

import sys
from collections.abc import Callable

from evalframe.errors import EvalframeError
from evalframe.report import console as report


def answered(run: Callable[[list[str]], int], argv: list[str]) -> int:
    report.quiet_libraries()
    try:
        return run(argv)
    except EvalframeError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
