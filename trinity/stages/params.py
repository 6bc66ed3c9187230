"""Compose conf/ into params.yaml, the file DVC and every stage read.

    python -m trinity.stages.params experiment=smoke [hydra overrides ...]

`dvc repro` never recomposes (only `dvc exp run` does, with hydra.enabled), so
`make repro` runs this first: an edit in conf/ then reaches params.yaml, and DVC
reruns exactly the stages whose parameters changed.
"""

from __future__ import annotations

import sys

from trinity.errors import TrinityError
from trinity.stages.config import PARAMS_FILE, compose, write_params


def main(argv: list[str] | None = None) -> int:
    overrides = sys.argv[1:] if argv is None else argv
    try:
        write_params(compose(overrides))
    except TrinityError as exc:
        print(f"trinity params: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {PARAMS_FILE} ({' '.join(overrides) or 'defaults'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
