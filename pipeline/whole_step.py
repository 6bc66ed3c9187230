"""Stage `whole_step`: a PyTorch model's whole training step timed at several sample counts (data
parallelism's computation term).

DVC runs it on params.yaml (see dvc.yaml); by hand: `python pipeline/whole_step.py job.model=transformer_lm12`.
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
def whole_step(cfg: DictConfig) -> None:
    main("whole_step", cfg)


if __name__ == "__main__":
    whole_step()
