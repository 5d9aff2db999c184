"""MLflow: logging runs, sweeps and comparisons, and reading them back. The only package that imports
mlflow."""
