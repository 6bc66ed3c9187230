"""Malformed inputs: every reader either succeeds or raises a one-line TrinityError naming the file.

Hypothesis mutates valid files of each kind (native graph, reference graph,
node-link JSON, cluster YAML, strategy JSON): wrong types, missing and extra
fields, NaN and infinities, huge numbers, truncated or corrupt bytes and gzip.
Any exception other than TrinityError is a bug in the reader. The CLI tests
check the same at the command line: exit status 2 and one line on stderr.
"""

import copy
import gzip
import json
import math
from pathlib import Path

import networkx as nx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import tiny
from trinity.cli import build_parser, main
from trinity.cluster import load_cluster
from trinity.errors import TrinityError
from trinity.graph import Edge, load_graph, save_graph
from trinity.placement import Strategy

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# ------------------------------------------------------------- valid inputs (tiny() from conftest)
def native_doc(tmp_path: Path) -> dict:
    path = tmp_path / "valid.json"
    save_graph(tiny(), path)
    return json.loads(path.read_text())


REFERENCE = {
    "format": "trinity-reference-graph/1", "source": "hand-made", "units": {"compute_us": "microseconds"},
    "nodes": [
        {"name": "emb", "op": "VariableV2", "compute_us": 3, "output_bytes": [4000], "temporary_bytes": 0,
         "persistent_bytes": 4000, "colocate_with": []},
        {"name": "emb/read", "op": "Identity", "compute_us": None, "output_bytes": None, "temporary_bytes": None,
         "persistent_bytes": None, "colocate_with": ["emb"]},
        {"name": "lstm", "op": "LSTMBlockCell", "compute_us": 120, "output_bytes": [512, 512],
         "temporary_bytes": 64, "persistent_bytes": 0, "colocate_with": []},
    ],
    "edges": [{"src": "emb", "src_output": 0, "dst": "emb/read", "control": False},
              {"src": "emb/read", "src_output": 0, "dst": "lstm", "control": False},
              {"src": "emb", "src_output": 0, "dst": "lstm", "control": True}],
}


def node_link_doc() -> dict:
    g = nx.DiGraph(name="nl")
    g.add_node("a", type="MatMul", compute_us=3.0, output_bytes=[100])
    g.add_node("b", compute_us=1.0)
    g.add_node("c", compute_us=2.0, colocation_group="g")
    g.add_edge("a", "b", src_output=0)
    g.add_edge("b", "c", bytes=64)
    g.add_edge("a", "c", control=True)
    return nx.node_link_data(g, edges="links")


CLUSTER = {
    "name": "fuzz", "send_cpu_share": 0.1,
    "devices": [{"name": "gpu0", "kind": "p100", "speed": 1.0, "memory_GB": 1},
                {"name": "gpu1", "kind": "p100", "speed": 2.0, "memory_GB": 1, "flops_per_s": 9e12}],
    "default_link": {"bandwidth_GBps": 5.7, "latency_us": 134},
    "links": [{"src": "gpu0", "dst": "gpu1", "bandwidth_GBps": 20, "latency_us": 10, "symmetric": True}],
}


def strategy_doc(tmp_path: Path) -> dict:
    from trinity.cluster import cluster_from_dict

    path = tmp_path / "valid-strategy.json"
    Strategy.from_array(tiny(), cluster_from_dict(CLUSTER), [0, 1, 1, 0, 1], placer="hand").save(path)
    return json.loads(path.read_text())


# ---------------------------------------------------------------- mutations
NASTY = st.one_of(
    st.sampled_from([None, True, False, 0, -1, 1.5, -1e300, 1e300, 2**63, 2**64, 10**30, 10**400,
                     math.nan, math.inf, -math.inf, "", "x", "gpu0", "emb", [], [[]], [1, 2, 3], ["a"], {},
                     {"a": 1}, "a" * 5000]),
    st.integers(), st.floats(), st.text(max_size=4),
    st.recursive(st.none() | st.integers() | st.text(max_size=3),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                 max_leaves=5),
)


def paths(doc, prefix=()):
    """Every place in a JSON document, as key/index tuples (the root is ``()``)."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from paths(v, prefix + (i,))


def get(doc, path):
    for key in path:
        doc = doc[key]
    return doc


def nasty(draw):
    return copy.deepcopy(draw(NASTY))  # a copy: later mutations must not change NASTY's own lists


@st.composite
def mutated(draw, base: dict) -> dict:
    """``base`` with one to three fields replaced, deleted, duplicated or added."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(paths(doc))))
        how = draw(st.sampled_from(["replace", "delete", "extra", "duplicate"]))
        if not path:
            if how == "replace":
                return nasty(draw)
            continue
        parent, key = get(doc, path[:-1]), path[-1]
        if how == "replace":
            parent[key] = nasty(draw)
        elif how == "delete":
            del parent[key]
        elif how == "extra" and isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = nasty(draw)
        elif how == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
        else:
            parent[key] = nasty(draw)
    return doc


@st.composite
def damaged_bytes(draw, data: bytes) -> bytes:
    """``data`` truncated, with bytes overwritten, emptied, or wrapped in broken gzip."""
    how = draw(st.sampled_from(["truncate", "overwrite", "empty", "gzip-truncated", "gzip-garbage",
                                "gzip-of-garbage", "random"]))
    if how == "truncate":
        return data[:draw(st.integers(0, len(data)))]
    if how == "overwrite":
        i = draw(st.integers(0, len(data) - 1))
        patch = draw(st.binary(min_size=1, max_size=8))
        return data[:i] + patch + data[i + len(patch):]
    if how == "empty":
        return b""
    if how == "gzip-truncated":
        z = gzip.compress(data)
        return z[:draw(st.integers(0, len(z) - 1))]
    if how == "gzip-garbage":
        return b"\x1f\x8b" + draw(st.binary(max_size=64))
    if how == "gzip-of-garbage":
        return gzip.compress(draw(st.binary(max_size=64)))
    return draw(st.binary(max_size=256))


def to_json(doc) -> bytes:
    return json.dumps(doc).encode()  # NaN and Infinity written as Python writes them


def to_yaml(doc) -> bytes:
    return yaml.safe_dump(doc).encode()


# ------------------------------------------------------------------ checks
def reads_or_names_file(load, path: Path):
    """``load(path)``; a TrinityError must name the file on one line; anything else fails the test."""
    try:
        return load(path)
    except TrinityError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc), str(exc)
        return None


def load_and_use_graph(path):
    g = load_graph(path)
    g.summary(), g.static_memory(), g.digest()  # the arrays every command builds next
    return g


def load_and_use_cluster(path):
    c = load_cluster(path)
    c.memory, c.transfer_us(0, c.n_devices - 1, 1000.0)
    return c


def load_and_apply_strategy(path):
    from trinity.cluster import cluster_from_dict

    return Strategy.load(path).to_array(tiny(), cluster_from_dict(CLUSTER), source=str(path))


# ------------------------------------------------------- property-based tests
@FUZZ
@given(data=st.data())
def test_native_graph_fields(tmp_path, data):
    path = tmp_path / "g.json"
    path.write_bytes(to_json(data.draw(mutated(native_doc(tmp_path)))))
    reads_or_names_file(load_and_use_graph, path)


@FUZZ
@given(data=st.data())
def test_native_graph_bytes(tmp_path, data):
    path = tmp_path / "g.json.gz"
    path.write_bytes(data.draw(damaged_bytes(to_json(native_doc(tmp_path)))))
    reads_or_names_file(load_and_use_graph, path)


@FUZZ
@given(doc=mutated(REFERENCE))
def test_reference_graph_fields(tmp_path, doc):
    path = tmp_path / "ref.json"
    path.write_bytes(to_json(doc))
    reads_or_names_file(load_and_use_graph, path)


@FUZZ
@given(doc=mutated(node_link_doc()))
def test_node_link_fields(tmp_path, doc):
    path = tmp_path / "nl.json"
    path.write_bytes(to_json(doc))
    reads_or_names_file(load_and_use_graph, path)


@FUZZ
@given(doc=mutated(CLUSTER))
def test_cluster_fields(tmp_path, doc):
    path = tmp_path / "c.yaml"
    path.write_bytes(to_yaml(doc))
    reads_or_names_file(load_and_use_cluster, path)


@FUZZ
@given(raw=damaged_bytes(to_yaml(CLUSTER)))
def test_cluster_bytes(tmp_path, raw):
    path = tmp_path / "c.yaml"
    path.write_bytes(raw)
    reads_or_names_file(load_and_use_cluster, path)


@FUZZ
@given(data=st.data())
def test_strategy_fields(tmp_path, data):
    path = tmp_path / "s.json"
    path.write_bytes(to_json(data.draw(mutated(strategy_doc(tmp_path)))))
    reads_or_names_file(load_and_apply_strategy, path)


@FUZZ
@given(data=st.data())
def test_strategy_bytes(tmp_path, data):
    path = tmp_path / "s.json"
    path.write_bytes(data.draw(damaged_bytes(to_json(strategy_doc(tmp_path)))))
    reads_or_names_file(load_and_apply_strategy, path)


# --------------------------------------- regressions: inputs that crashed
def _native(**change):
    return {"format": "trinity-opgraph/1", "ops": [{"name": "a", "type": "T", "output_bytes": [4]},
                                                   {"name": "b", "type": "T"}],
            "edges": [["a", "b", 0]], **change}


def _reference(**change):
    return {**REFERENCE, **change}


def _node_link(**change):
    return {**node_link_doc(), **change}


CRASHED = {  # name -> (file name, content); each once ended in a Python traceback (found by hand or fuzzing)
    "native output_bytes entry null": ("g.json", _native(ops=[{"name": "a", "type": "T", "output_bytes": [None]}],
                                                         edges=[])),
    "reference persistent_bytes 1e300": ("r.json", _reference(nodes=[{**REFERENCE["nodes"][0],
                                                                      "persistent_bytes": 1e300}], edges=[])),
    "reference colocate_with true": ("r.json", _reference(nodes=[{**REFERENCE["nodes"][0],
                                                                  "colocate_with": True}], edges=[])),
    "node-link nodes null": ("n.json", _node_link(nodes=None)),
    "cluster default_link true": ("c.yaml", {**CLUSTER, "default_link": True}),
    "cluster memory 2**63": ("c.yaml", {**CLUSTER, "devices": [{"name": "a", "memory_GB": 2**63}]}),
    "cluster speed of 80 digits": ("c.yaml", {**CLUSTER, "devices": [{"name": "a", "memory_GB": 1,
                                                                      "speed": 10**79}]}),
    "cluster gzip magic only": ("c.yaml", b"\x1f\x8b"),
    "strategy devices null": ("s.json", {"format": "trinity-strategy/1", "graph": "g", "graph_digest": "0",
                                         "cluster": "c", "devices": None, "placement": {}}),
    "reference edge not an object": ("r.json", _reference(edges=[5])),
    "reference edge endpoint a list": ("r.json", _reference(edges=[{"src": ["emb"], "dst": "lstm"}])),
    "reference src_output huge": ("r.json", _reference(edges=[{"src": "emb", "dst": "lstm",
                                                               "src_output": 10**12}])),
    "reference colocate_with a number": ("r.json", _reference(nodes=[{**REFERENCE["nodes"][0],
                                                                      "colocate_with": 5}], edges=[])),
    "reference colocate_with a list of lists": ("r.json", _reference(nodes=[{**REFERENCE["nodes"][0],
                                                                             "colocate_with": [[]]}], edges=[])),
    "reference nodes null": ("r.json", _reference(nodes=None)),
    "node-link graph not an object": ("n.json", _node_link(graph=5)),
    "node-link output_bytes a number": ("n.json", _node_link(nodes=[{"id": "a", "output_bytes": 5}, {"id": "b"}],
                                                             links=[{"source": "a", "target": "b", "bytes": 8}])),
    "node-link bytes NaN": ("n.json", _node_link(links=[{"source": "a", "target": "b", "bytes": math.nan}])),
    "node-link bytes infinite": ("n.json", _node_link(links=[{"source": "a", "target": "b", "bytes": math.inf}])),
    "native edge endpoint a list": ("g.json", _native(edges=[[["a"], "b", 0]])),
    "native edges null": ("g.json", _native(edges=None)),
    "native meta a number": ("g.json", _native(meta=5)),
    "native meta a string": ("g.json", _native(meta="ab")),
    "native output_bytes beyond int64": ("g.json", _native(ops=[{"name": "a", "type": "T",
                                                                 "output_bytes": [2**63]}], edges=[])),
    "native persistent_bytes of 400 digits": ("g.json", _native(ops=[{"name": "a", "type": "T",
                                                                      "persistent_bytes": 10**400}], edges=[])),
    "native nested too deeply": ("g.json", "[" * 100_000),
    "native integer of 5000 digits": ("g.json", '{"format": "trinity-opgraph/1", "ops": ' + "9" * 5000 + "}"),
    "strategy devices a number": ("s.json", {"format": "trinity-strategy/1", "graph": "g", "graph_digest": "0",
                                             "cluster": "c", "devices": 5, "placement": {}}),
    "strategy meta a string": ("s.json", {"format": "trinity-strategy/1", "graph": "g", "graph_digest": "0",
                                          "cluster": "c", "devices": [], "placement": {}, "meta": "ab"}),
    "cluster links a number": ("c.yaml", {**CLUSTER, "links": 5}),
    "cluster default_link a number": ("c.yaml", {**CLUSTER, "default_link": 5}),
    "cluster memory of 400 digits": ("c.yaml", {**CLUSTER, "devices": [{"name": "a", "memory_GB": 10**400}]}),
    "cluster memory 1e300": ("c.yaml", {**CLUSTER, "devices": [{"name": "a", "memory_GB": 1e300}]}),
    "cluster impossible date": ("c.yaml", "name: 2001-13-01\n"),
    "cluster not UTF-8": ("c.yaml", b"name: \xff\xfe\n"),
    "cluster a folder": ("c.yaml", None),
}


def write_input(folder: Path, name: str, content) -> Path:
    path = folder / name
    if content is None:
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_bytes(to_yaml(content) if name.endswith(".yaml") else to_json(content))
    return path


LOADERS = {".json": load_and_use_graph, ".yaml": load_and_use_cluster}


@pytest.mark.parametrize("case", sorted(CRASHED))
def test_inputs_that_crashed_are_one_line_errors(tmp_path, case):
    name, content = CRASHED[case]
    path = write_input(tmp_path, name, content)
    load = load_and_apply_strategy if name.startswith("s") else LOADERS[path.suffix]
    with pytest.raises(TrinityError) as exc:
        load(path)
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)


def test_reference_data_edge_without_output_index_reads_output_0(tmp_path):
    path = write_input(tmp_path, "r.json", _reference(edges=[{"src": "emb", "dst": "lstm", "src_output": None}]))
    assert load_graph(path).edges == (Edge("emb", "lstm", 0),)  # this once raised TypeError: int(None)


@pytest.mark.parametrize("name, doc", [
    ("g.json", _native(edges=[["a", "b", 0], ["b", "a", None]])),
    ("r.json", _reference(edges=[*REFERENCE["edges"], {"src": "lstm", "src_output": 0, "dst": "emb"}])),
    ("n.json", _node_link(links=[*node_link_doc()["links"], {"source": "c", "target": "a", "control": True}])),
])
def test_cycles_are_named(tmp_path, name, doc):
    path = write_input(tmp_path, name, doc)
    with pytest.raises(TrinityError, match=r"edges: graph has a cycle: "):
        load_graph(path)


# ------------------------------------------------------------ command line
def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, err


def assert_one_line_error(code, err, path):
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"trinity: error: {path}: "), err


@pytest.mark.parametrize("case", ["reference edge not an object", "node-link graph not an object",
                                  "native edge endpoint a list", "native nested too deeply",
                                  "native output_bytes beyond int64"])
def test_cli_bad_graph(tmp_path, capsys, case):
    path = write_input(tmp_path, *CRASHED[case])
    assert_one_line_error(*run(capsys, "info", path), path)


@pytest.mark.parametrize("case", ["cluster links a number", "cluster memory of 400 digits", "cluster not UTF-8"])
def test_cli_bad_cluster(tmp_path, capsys, case):
    graph = tmp_path / "g.json"
    save_graph(tiny(), graph)
    path = write_input(tmp_path, *CRASHED[case])
    assert_one_line_error(*run(capsys, "place", graph, "--cluster", path), path)


@pytest.mark.parametrize("content", [b"", b"\x1f\x8b\x08\x00garbage", gzip.compress(b'{"format": "trin', mtime=0),
                                     b'{"format": "trinity-strategy/1", "devices": 5'])
def test_cli_bad_strategy_bytes(tmp_path, capsys, content):
    graph, cluster = tmp_path / "g.json", tmp_path / "c.yaml"
    save_graph(tiny(), graph)
    cluster.write_bytes(to_yaml(CLUSTER))
    path = write_input(tmp_path, "s.json", content)
    assert_one_line_error(*run(capsys, "simulate", graph, path, "--cluster", cluster), path)


# -------------------------------------------------------- command-line numbers
HUGE = str(10**12)
BAD_NUMBERS = [  # (command and positional arguments, option, values argparse must refuse)
    (["export", "tiny_cnn"], "--batch", ["0", "-1", HUGE]),
    (["search", "g.json"], "--batch", ["0", "-1", HUGE]),
    (["search", "g.json"], "--iterations", ["0", "-1", "1.5", "x"]),
    (["search", "g.json"], "--groups", ["0", "-1"]),
    (["search", "g.json"], "--sim-threads", ["0", "-1", HUGE]),
    (["search", "g.json"], "--threads", ["0", "-1", HUGE]),
    (["search", "g.json"], "--warm-start-steps", ["-1"]),
    (["search", "g.json"], "--checkpoint-every", ["0", "-1"]),
    (["search", "g.json"], "--lr", ["0", "-1", "nan", "inf"]),
    (["search", "g.json"], "--seed", ["-1", str(2**64)]),
    (["place", "g.json"], "--seed", ["-1"]),
    (["compare", "g.json"], "--seed", ["-1"]),
    (["profile", "g.json"], "--steps", ["0", "-1"]),
    (["profile", "g.json"], "--warmup", ["-1"]),
    (["profile", "g.json"], "--threads", ["0", "-1", HUGE]),
    (["calibrate", "g.json"], "--workers", ["0", "-1", HUGE]),
    (["calibrate", "g.json"], "--threads-per-worker", ["0", "-1", HUGE]),
    (["calibrate", "g.json"], "--profile-steps", ["0", "-1"]),
    (["validate", "g.json"], "--workers", ["0", "-1", HUGE]),
    (["validate", "g.json"], "--profile-steps", ["0", "-1"]),
    (["validate", "g.json"], "--rounds", ["0", "-1"]),
    (["validate", "g.json"], "--steps", ["0", "-1"]),
    (["validate", "g.json"], "--warmup", ["-1"]),
    (["validate", "g.json"], "--timeout", ["0", "-1", "nan", "inf"]),
    (["validate", "g.json"], "--search-samples", ["-1"]),
    (["validate", "g.json"], "--seed", ["-1"]),
]


@pytest.mark.parametrize("argv, option, value", [(a, o, v) for a, o, vs in BAD_NUMBERS for v in vs])
def test_bad_numbers_are_usage_errors(capsys, argv, option, value):
    with pytest.raises(SystemExit) as exc:
        main([*argv, f"{option}={value}"])  # the = form, so that "-1" is not taken for an option
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"trinity {argv[0]}: error: argument {option}: "), err


@pytest.mark.parametrize("argv", [
    ["search", "g.json", "--warm-start-steps", "0", "--batch", "4096", "--option", "policy.lstm_hidden=4096",
     "--iterations", "1"],
    ["validate", "g.json", "--warmup", "0", "--search-samples", "0", "--timeout", "0.5", "--workers", "256"],
    ["profile", "g.json", "--warmup", "0", "--steps", "1", "--threads", "1024"],
    ["export", "tiny_cnn", "--batch", "8192"],
])
def test_boundary_numbers_are_accepted(argv):
    build_parser().parse_args(argv)


def test_search_with_zero_iterations_writes_nothing(tmp_path, capsys):
    graph = tmp_path / "g.json"
    save_graph(tiny(), graph)
    with pytest.raises(SystemExit) as exc:
        main(["search", str(graph), "--iterations", "0", "--no-mlflow", "--out", str(tmp_path / "run")])
    assert exc.value.code == 2 and not (tmp_path / "run").exists()


@pytest.mark.parametrize("pair", ["gpu=abc", "gpu=0", "gpu=-2", "gpu=.inf", "gpu=[", "gpu", "gpu=1" + "0" * 400,
                                  "gpu=2001-13-01"])
def test_bad_kind_speedup_is_one_line(tmp_path, capsys, pair):
    graph = tmp_path / "g.json"
    save_graph(tiny(), graph)
    code, err = run(capsys, "profile", graph, "--kind-speedup", pair)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--kind-speedup" in err, err
