"""Compose conf/ into the experiment's params.yaml, the file DVC and every stage read.

    python -m trinity.stages.params experiment=smoke [hydra overrides ...]

The default experiment's params.yaml is the checkout's own; every other experiment gets a folder,
``experiments/<name>/`` (params.yaml, a dvc.yaml made from the root one, then its dvc.lock and outputs),
so that no experiment overwrites another's. `dvc repro` never recomposes (only `dvc exp run` does,
with hydra.enabled), so `make repro` runs this first: an edit in conf/ then reaches params.yaml, and
DVC reruns exactly the stages whose parameters changed.
"""

from __future__ import annotations

import sys

from trinity.errors import TrinityError
from trinity.stages.config import PARAMS_FILE, compose, write_experiment


def main(argv: list[str] | None = None) -> int:
    overrides = sys.argv[1:] if argv is None else argv
    try:
        folder = write_experiment(compose(overrides))
    except TrinityError as exc:
        print(f"trinity params: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {folder / PARAMS_FILE} ({' '.join(overrides) or 'defaults'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
