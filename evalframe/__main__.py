"""`python -m evalframe ...`: the Hydra entry point. Kept light so `--help` and `--cfg job` start
fast: the pipeline (and litellm, mlflow, torch) is imported only when a job really runs."""

import hydra
from omegaconf import DictConfig

from evalframe.paths import CONF_DIR


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def _task(cfg: DictConfig) -> None:
    from evalframe.run import main as run_main

    run_main(cfg)


def main() -> None:
    _task()


if __name__ == "__main__":
    main()
