"""Errors the user can fix, each with the exit code a CI pipeline can branch on."""

EXIT_OK = 0
EXIT_GATE_FAILED = 1  # a gate.min_score / max_score / min_pass_rate check failed
EXIT_USAGE = 2  # bad command line, config, data or prompts, or a missing key: found before any model call
# The run finished and is on disk, but could not be logged to MLflow; or the store a command reads
# (compare, ui) does not answer or cannot be written.
EXIT_TRACKING = 3
EXIT_UNSCORED = 4  # more items unscored than max_unscored_rate allows: the scores cannot be trusted
EXIT_STORAGE = 5  # the run directory cannot be written (disk full, read-only): finished items are kept
EXIT_INTERRUPTED = 130  # Ctrl-C: finished items are on disk; resume=true continues


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


class TrackingError(EvalframeError):
    """The MLflow store does not answer or cannot be written: the URI is right, the store is not."""

    exit_code = EXIT_TRACKING


class StorageError(EvalframeError):
    """The run's directory cannot be written (a full disk, a read-only folder): what is finished is
    kept, and the message says how to continue once there is room."""

    exit_code = EXIT_STORAGE
