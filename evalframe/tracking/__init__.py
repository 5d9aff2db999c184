"""MLflow: logging runs, sweeps and comparisons, and reading them back. The only package that imports
mlflow, and it prints nothing: what went wrong on the way comes back as notes for the caller to print.

store: URIs, probing and reaping; log: one run; traces: its items' traces and assessments; sweeps: a
sweep's parent run and its jobs' names; comparison: a comparison as a run; read: runs read back;
trace_records: a trace as a plain record; trace_reader: an experiment's traces as a dataset's rows.

MLflow's settings for this process are made here, before any of the modules loads mlflow.
"""

import os

# MLflow retries an unreachable server 7 times with doubling waits (minutes); fail within seconds instead:
# the results are already on disk, and `evalframe log-run DIR` logs them later.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no bar for one small download
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # not "Creating initial MLflow database tables..."
# Not MLflow's two "View run ... / View experiment ..." lines per run on a tracking server: the run
# prints its own one `View:` line, and a sweep one line per job.
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
# MLflow's loggers are evalframe's to set (evalframe.report.library_log: their errors and tracebacks go to
# a file named on the console), not replaced by MLflow's own console handler when it is imported.
# `mlflow ui`, which `evalframe ui` becomes, logs as MLflow does unless the user set this themselves.
OWN_LOGGING = "MLFLOW_CONFIGURE_LOGGING" if "MLFLOW_CONFIGURE_LOGGING" not in os.environ else None
os.environ.setdefault("MLFLOW_CONFIGURE_LOGGING", "false")
