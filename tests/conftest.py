import importlib.util
from pathlib import Path

import pytest

from trinity.cluster import cluster_from_dict
from trinity.graph import Edge, Op, OpGraph

SHARED = Path(__file__).resolve().parents[2] / "shared"
REFERENCE_GNMT = SHARED / "reference" / "gnmt-baechi" / "gnmt_forward.json.gz"
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def benchmark_script(name: str):
    """benchmarks/<name>.py as a module (the scripts are run as files, not a package)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", help="also run tests marked slow")


#: the file whose module fixture reproduces the smoke experiment (the suite's longest): collected first, so a
#: run on several workers (`make test`: a file to each, in this order) starts it at once, not after the others
LONGEST_FILE = "tests/test_pipeline.py"


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.nodeid.split("::")[0] != LONGEST_FILE)  # stable: the rest keep their order
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_tracking_uri_from_other_tests(monkeypatch):
    """mlflow.set_tracking_uri exports MLFLOW_TRACKING_URI to the process (and every subprocess):
    each test starts without it."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture
def reference_gnmt_path() -> Path:
    if not REFERENCE_GNMT.exists():
        pytest.skip(f"reference graph not found at {REFERENCE_GNMT}")
    return REFERENCE_GNMT


def make_cluster(n: int = 2, bandwidth_GBps: float = 1.0, latency_us: float = 2.0, memory_GB: float = 1.0,
                 speeds=None, name: str = "test"):
    """A small cluster: 1 GB/s = 1000 bytes per microsecond, so transfer times are exact."""
    speeds = speeds or [1.0] * n
    return cluster_from_dict({
        "name": name,
        "devices": [{"name": f"d{i}", "kind": "k", "speed": s, "memory_GB": memory_GB} for i, s in enumerate(speeds)],
        "default_link": {"bandwidth_GBps": bandwidth_GBps, "latency_us": latency_us},
    })


def tiny():
    """Five ops with a colocation group, a multi-output edge and a control edge (every field of the format)."""
    return OpGraph(
        [Op("x", "Placeholder", 0.0, output_bytes=(400,)),
         Op("w", "VariableV2", 1.0, output_bytes=(800,), persistent_bytes=800, colocation_group="w"),
         Op("read", "Identity", 0.5, output_bytes=(800,), colocation_group="w"),
         Op("mm", "MatMul", 10.0, flops=2e6, output_bytes=(200, 8), temporary_bytes=64),
         Op("loss", "Sum", 1.0, compute_us_by_kind={"p100": 0.25}, output_bytes=(4,))],
        [Edge("x", "mm", 0), Edge("w", "read", 0), Edge("read", "mm", 0), Edge("mm", "loss", 1),
         Edge("x", "loss", None)],
        name="tiny", meta={"note": "hand-built"})
