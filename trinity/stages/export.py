"""Stage `export`: a model's training step as an OpGraph (TensorFlow exports also write their GraphDef),
a graph file imported as it is (``models.<name>.source``), or a generated one (``models.<name>.synthetic``:
keyword arguments of `trinity.graph.synthetic.layered_dag`)."""

from __future__ import annotations

import time

from omegaconf import DictConfig, OmegaConf

from trinity.graph import load_graph, save_graph
from trinity.stages import config


def run(cfg: DictConfig, job: config.Job, tracker) -> None:
    from trinity.export import export_model

    spec, out = cfg.models[job.model], config.graph_file(cfg, job.model)
    t0 = time.perf_counter()
    if spec.source:
        graph = load_graph(spec.source)
        save_graph(graph, out)
    elif spec.get("synthetic"):
        from trinity.graph.synthetic import layered_dag

        graph = layered_dag(**OmegaConf.to_container(spec.synthetic))
        save_graph(graph, out)
    else:
        graph = export_model(spec.name, out, spec.batch, **OmegaConf.to_container(spec.options))
    seconds = time.perf_counter() - t0
    tracker.log_metrics({"export/ops": graph.n_ops, "export/edges": graph.n_edges, "export/seconds": seconds},
                        step=0)
    print(f"export {job.model}: {graph.n_ops} ops, {graph.n_edges} edges in {seconds:.1f} s -> {out}")
