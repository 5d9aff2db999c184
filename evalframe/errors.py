"""Errors the user can fix, each with the exit code a CI pipeline can branch on."""

EXIT_OK = 0
EXIT_GATE_FAILED = 1
EXIT_USAGE = 2


class EvalframeError(Exception):
    """A problem in the user's config, data, prompts or environment, found before money is spent.

    The message must say what to fix; the CLI prints it without a traceback.
    """

    exit_code = EXIT_USAGE


class ConfigError(EvalframeError):
    pass


class DataError(EvalframeError):
    pass


class PromptError(EvalframeError):
    pass
