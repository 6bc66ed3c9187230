"""Stage `embed`: every op's features (node2vec structure, op type, z-scored time and output size),
written once per model for every search to read."""

from __future__ import annotations

import time

from omegaconf import DictConfig

from trinity.features import op_features
from trinity.graph import load_graph
from trinity.stages import config


def run(cfg: DictConfig, job: config.Job, tracker) -> None:
    graph = load_graph(config.require(config.profiled_file(cfg, job.model), "profile", job.model))
    e, out = cfg.embedding, config.features_file(cfg, job.model)
    t0 = time.perf_counter()
    feats = op_features(graph, embedding_dim=e.dim, seed=e.seed, walk_length=e.walk_length, num_walks=e.num_walks,
                        window=e.window)
    feats.save(out, graph)
    seconds = time.perf_counter() - t0
    tracker.log_metrics({"embed/seconds": seconds, "embed/features": feats.numeric.shape[1]}, step=0)
    print(f"embed {job.model}: {feats.numeric.shape[1]} features per op in {seconds:.1f} s -> {out}")
