"""Stage `measure` (and `measure_dp`): a pipeline plan, or a data-parallel method, trained for real on local processes.

DVC runs it on params.yaml (see dvc.yaml); by hand: `python pipeline/measure.py job.model=transformer_lm12 job.cluster=local4h job.method=pipedream`.
"""

import os
import sys

# Python puts this folder first on the path, where pipeline/profile.py would shadow the standard library's.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from trinity.stages import main  # noqa: E402


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def measure(cfg: DictConfig) -> None:
    main("measure", cfg)


if __name__ == "__main__":
    measure()
