"""benchmarks/search_variety.py: the held-out table's runs, here on a graph file alone (``--files-only``)."""

import subprocess
import sys
from pathlib import Path

import pandas as pd

from trinity.graph.io import save_graph
from trinity.graph.synthetic import layered_dag

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "search_variety.py"


def run(*args, cwd):
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_files_only_runs_the_file_given_and_no_synthetic_graph(tmp_path):
    graph = layered_dag(24, 36, seed=3)
    save_graph(graph, tmp_path / "tiny.json.gz")
    out = run("--files-only", "--iterations", "4", "--batch", "4", "--seeds", "1", "--search", '{"racers": 1}',
              "--csv", "table.csv", str(tmp_path / "tiny.json.gz"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    table = pd.read_csv(tmp_path / "table.csv")
    cases = [f"{graph.name} ({graph.n_ops} ops) p100x2", f"{graph.name} ({graph.n_ops} ops) p100x4"]
    assert sorted(table["case"].unique()) == cases  # the file's two cases, nothing of the synthetic sets
    trinity = table[table["method"] == "trinity"]
    assert len(trinity) == 2 and (trinity["step_time_ms"] > 0).all()
    summary = pd.read_csv(tmp_path / "table_summary.csv")
    assert sorted(summary["case"].unique()) == cases


def test_files_only_without_a_file_is_refused_in_one_line(tmp_path):
    out = run("--files-only", cwd=tmp_path)
    assert out.returncode == 2
    assert "--files-only: no graph files given" in out.stderr and "Traceback" not in out.stderr
