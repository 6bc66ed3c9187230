"""The command line: results, and bad input as one clear line with a non-zero exit."""

import json

import pytest

from trinity.cli import main
from trinity.graph import Edge, Op, OpGraph, save_graph


@pytest.fixture
def graph_file(tmp_path):
    g = OpGraph([Op("v", "Var", 5.0, output_bytes=(4000,), colocation_group="v"),
                 Op("a", "A", 20.0, output_bytes=(4000,)), Op("b", "B", 20.0, output_bytes=(4000,)),
                 Op("upd", "Assign", 1.0, colocation_group="v")],
                [Edge("v", "a", 0), Edge("v", "b", 0), Edge("a", "upd", 0), Edge("b", "upd", 0)], name="g")
    path = tmp_path / "g.json"
    save_graph(g, path)
    return path


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_place_writes_a_strategy_that_simulates(tmp_path, graph_file, capsys):
    out_file = tmp_path / "s.json"
    code, out, _ = run(capsys, "place", graph_file, "--cluster", "p100x2", "--placer", "round-robin",
                       "--out", out_file)
    assert code == 0 and "step_time_ms" in out
    code, out, _ = run(capsys, "simulate", graph_file, out_file, "--cluster", "p100x2", "--trace",
                       tmp_path / "t.csv")
    assert code == 0 and (tmp_path / "t.csv").read_text().startswith("op,type,device,start_us,end_us")


def test_compare_prints_every_placer(graph_file, capsys, tmp_path):
    code, out, _ = run(capsys, "compare", graph_file, "--cluster", "p100x2", "p100x4", "--csv", tmp_path / "c.csv")
    assert code == 0
    for name in ("single", "round-robin", "random"):
        assert name in out
    assert len((tmp_path / "c.csv").read_text().splitlines()) > 6


def bad_strategy(tmp_path, graph_file, capsys, edit):
    out_file = tmp_path / "s.json"
    assert run(capsys, "place", graph_file, "--cluster", "p100x2", "--placer", "single", "--out", out_file)[0] == 0
    doc = json.loads(out_file.read_text())
    edit(doc)
    out_file.write_text(json.dumps(doc))
    return run(capsys, "simulate", graph_file, out_file, "--cluster", "p100x2")


def test_strategy_with_unknown_device(tmp_path, graph_file, capsys):
    code, _, err = bad_strategy(tmp_path, graph_file, capsys, lambda d: d["placement"].update(a="gpu7"))
    assert code == 2 and err.strip().endswith("placement.a: op 'a' names unknown device 'gpu7'; cluster 'p100x2' "
                                              "has ['gpu0', 'gpu1']")
    assert len(err.strip().splitlines()) == 1 and "s.json" in err


def test_strategy_splitting_a_group(tmp_path, graph_file, capsys):
    code, _, err = bad_strategy(tmp_path, graph_file, capsys, lambda d: d["placement"].update(upd="gpu1"))
    assert code == 2 and "splits colocation group 'v'" in err and "s.json" in err


@pytest.mark.parametrize("content, message", [
    ('{"format": "trinity-opgraph/1", "ops": [{"name": "a", "type": "T"}], "edges": [["a", "a", null]]}',
     "edges: graph has a cycle: a -> a"),
    ('{"format": "trinity-opgraph/1", "ops": [{"name": "a", "type": "T", "compute_us": -3}], "edges": []}',
     "ops[0].compute_us (a): must be >= 0, got -3"),
    ('{"format": "trinity-opgraph/1", "ops": [{"name": "a", "type": "T"}, {"name": "a", "type": "T"}], '
     '"edges": []}', "ops[1].name: duplicate op name 'a'"),
    ('{"format": "trinity-opgraph/1", "ops": [{"name": "a", "type": "T", "output_bytes": [1]}], '
     '"edges": [["a", "b", 0]]}', "edges[0].dst: unknown op 'b'"),
    ('{"format": "trinity-opgraph/2", "ops": [], "edges": []}', "format: version 2 is not supported"),
    ('{"format": "trinity-opgraph/1", "ops": [{"name": "a", "ty', "not valid JSON"),
])
def test_bad_graph_files(tmp_path, capsys, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    out_file = tmp_path / "out.json"
    code, out, err = run(capsys, "place", path, "--placer", "single", "--out", out_file)
    assert code == 2
    assert err.startswith(f"trinity: error: {path}: ") and message in err
    assert len(err.strip().splitlines()) == 1
    assert not out_file.exists() and list(tmp_path.iterdir()) == [path]  # nothing half-written


def test_bad_cluster_file(tmp_path, graph_file, capsys):
    bad = tmp_path / "c.yaml"
    bad.write_text("devices:\n  - {name: a, memory_GB: 1}\n  - {name: b, memory_GB: 1}\n"
                   "links:\n  - {src: a, dst: c, bandwidth_GBps: 1, latency_us: 1}\n")
    code, _, err = run(capsys, "place", graph_file, "--cluster", bad)
    assert code == 2 and f"{bad}: links[0].dst: unknown device 'c'" in err
    bad.write_text("devices:\n  - {name: a, memory_GB: 1}\n  - {name: b, memory_GB: 1}\n"
                   "default_link: {bandwidth_GBps: 0, latency_us: 1}\n")
    code, _, err = run(capsys, "place", graph_file, "--cluster", bad)
    assert code == 2 and "default_link.bandwidth_GBps: must be > 0, got 0" in err


def test_compare_on_reference_gnmt(reference_gnmt_path, capsys):
    code, out, _ = run(capsys, "compare", reference_gnmt_path, "--cluster", "p100x2", "p100x4")
    assert code == 0 and out.count("p100x4") >= 3


def test_a_reader_that_leaves_the_pipe_early_is_no_error(graph_file):
    """`trinity compare ... | head`: the reader is gone before the table is written; the command stops
    quietly (status 141, as for SIGPIPE), no traceback."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "trinity.cli", "compare", str(graph_file), "--cluster", "p100x2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # the reader leaves at once: every write to stdout fails with EPIPE
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141 and "Traceback" not in err and "BrokenPipe" not in err, err
