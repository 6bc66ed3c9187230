"""Export a registered model to an OpGraph file, and profile one for real.

A TensorFlow export writes two files: the OpGraph (``OUT``) and, beside it,
the training GraphDef (``OUT`` with ``.graphdef.pb`` in place of its
extension), which profiling and real-cluster validation run. A PyTorch export
writes only the OpGraph: profiling re-traces the model from the name, batch
size and options recorded in its meta (tracing is deterministic).

Profiling fits the linear cost model on the ops it measured (kind ``cpu``;
ops the runtime pruned or fused away keep 0 us and stay out of the fit),
predicts every op's time for the other device kinds asked for, and records
the fit and the profile report in the graph's meta.
"""

from __future__ import annotations

import os
from pathlib import Path

from trinity.errors import TrinityError
from trinity.fileio import atomic_write_bytes
from trinity.graph import OpGraph, load_graph, save_graph
from trinity.models import model_spec

LOCAL_KIND = "cpu"


def graphdef_path(graph_path: str | os.PathLike) -> Path:
    """Where the GraphDef of a TensorFlow export lives: beside the OpGraph file."""
    p = Path(graph_path)
    stem = p.name.split(".")[0]
    return p.with_name(f"{stem}.graphdef.pb")


def read_graph_def(path: str | os.PathLike, graph: OpGraph) -> bytes:
    """The serialized GraphDef that `trinity export` wrote beside the OpGraph at ``path``."""
    pb = Path(path).with_name(graph.meta.get("graphdef") or "")
    if graph.meta.get("framework") != "tensorflow" or not graph.meta.get("graphdef") or not pb.exists():
        raise TrinityError(f"the TensorFlow GraphDef {pb.name!r} written by `trinity export` is missing: only "
                           "TensorFlow exports can run", source=str(path), field="meta.graphdef")
    return pb.read_bytes()


def load_exported(path: str | os.PathLike, field: str = "graph") -> tuple[OpGraph, bytes]:
    """A TensorFlow export's OpGraph and GraphDef, what real workers run; a missing file is refused in one
    line naming ``field`` and the stage that writes it."""
    if not Path(path).is_file():
        raise TrinityError("not found (the export stage writes it: `dvc repro export@<model>`)", source=str(path),
                           field=field)
    graph = load_graph(path)
    return graph, read_graph_def(path, graph)


def export_model(name: str, out: str | os.PathLike, batch_size: int | None = None, **options) -> OpGraph:
    spec = model_spec(name)
    if spec.framework == "tensorflow":
        from trinity.export.tf_graph import export_tf

        graph, graph_def = export_tf(name, batch_size, **options)
        pb = graphdef_path(out)
        graph = _with_meta(graph, graphdef=pb.name)
        atomic_write_bytes(pb, graph_def)
    else:
        from trinity.export.torch_graph import export_torch_model

        graph = export_torch_model(name, batch_size, **options)
    save_graph(graph, out)
    return graph


def profile_graph(path: str | os.PathLike, out: str | os.PathLike, *, steps: int = 10, warmup: int = 3,
                  threads: int = 2, progress: bool = True,
                  kind_speedups: dict[str, float] | None = None,
                  speed_models: list[str] | None = None) -> tuple[OpGraph, dict]:
    """Measure every op of an exported graph on this machine; write the costed graph to ``out``.

    Times on other device kinds go into each op's ``compute_us_by_kind``: ``speed_models``
    names kinds costed by their roofline (`trinity.profile.speed_model`), ``kind_speedups``
    maps kinds to how many times faster than this machine they run the fitted model (a
    cruder model; where both name a kind, the speedup wins).
    """
    from trinity.profile.cost_model import apply_cost_models, fit_cost_model, fit_report
    from trinity.profile.speed_model import apply_speed_models

    graph = load_graph(path)
    framework = graph.meta.get("framework")
    if framework == "tensorflow":
        from trinity.profile.tf_profile import profile_tf

        graph_def = read_graph_def(path, graph)
        profiled, report = profile_tf(graph, graph_def, steps=steps, warmup=warmup, threads=threads,
                                      progress=progress)
        if Path(out).resolve() != Path(path).resolve():
            atomic_write_bytes(graphdef_path(out), graph_def)
            profiled = _with_meta(profiled, graphdef=graphdef_path(out).name)
    elif framework == "torch":
        from trinity.profile.torch_profile import profile_torch

        profiled, report = profile_torch(graph, steps=steps, warmup=warmup, threads=threads, progress=progress)
    else:
        raise TrinityError(f"cannot profile a graph from {framework or 'no framework'}: only graphs made by "
                           "`trinity export` can be run", source=str(path), field="meta.framework")
    observed = [set(report.pop("observed_ops"))]
    model = fit_cost_model([profiled], LOCAL_KIND, observed=observed)
    report = {**report, "cost_model": fit_report(model, [profiled], observed)}
    others = [model.scaled(kind, speedup) for kind, speedup in (kind_speedups or {}).items()]
    costed = apply_cost_models(profiled, [model] + others, measured=observed[0])
    costed = apply_speed_models(costed, list(speed_models or []))
    costed = _with_meta(costed, profile=report, profiled_on=LOCAL_KIND)
    save_graph(costed, out)
    return costed, report


def _with_meta(graph: OpGraph, **meta) -> OpGraph:
    return OpGraph(graph.ops, graph.edges, name=graph.name, meta={**graph.meta, **meta}, source=graph.source)
