"""Pre-train the learned list scheduler's committed zero-shot policy: `make learned-list-policy`.

Training set (TRAINING_SET): the project's own synthetic graphs, two families, three sizes, on 2 and
4 P100s: Inception-style training steps (trinity.graph.synthetic.training_graph: 1k, 2k, 3k ops,
seeds 1-3) and layered DAGs (layered_dag: 1k and 2k ops, seeds 1-2). The graphs
`benchmarks/learned_list_generalise.py` holds out are none of these (other seeds and sizes, and
the exported InceptionV3). Writes trinity/rl/pretrained/learned-list.pt (or --out).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from trinity.cluster import load_cluster  # noqa: E402
from trinity.graph.synthetic import layered_dag, training_graph  # noqa: E402
from trinity.rl.learned_list import DEFAULT_POLICY, LearnedListOptions  # noqa: E402
from trinity.rl.list_pretrain import PretrainConfig, pretrain  # noqa: E402

#: (name, graph factory): the graphs the committed policy trained on
TRAINING_SET = (
    ("training_graph(1000, batch=8, seed=1)", lambda: training_graph(1000, batch=8, seed=1)),
    ("training_graph(2000, batch=8, seed=2)", lambda: training_graph(2000, batch=8, seed=2)),
    ("training_graph(3000, batch=8, seed=3)", lambda: training_graph(3000, batch=8, seed=3)),
    ("layered_dag(1000, 1500, seed=1)", lambda: layered_dag(1000, 1500, seed=1)),
    ("layered_dag(2000, 3000, seed=2)", lambda: layered_dag(2000, 3000, seed=2)),
)
CLUSTERS = ("p100x2", "p100x4")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=str(DEFAULT_POLICY))
    parser.add_argument("--imitation-steps", type=int, default=PretrainConfig.imitation_steps)
    parser.add_argument("--rounds", type=int, default=PretrainConfig.rounds)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cases = [(name, make(), load_cluster(c)) for name, make in TRAINING_SET for c in CLUSTERS]
    pretrain(cases, LearnedListOptions(), PretrainConfig(imitation_steps=args.imitation_steps, rounds=args.rounds,
                                                         seed=args.seed), args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
