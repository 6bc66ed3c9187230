import numpy as np
import pytest

from trinity.cluster import cluster_from_dict, load_cluster, preset_names
from trinity.errors import ClusterError


def test_presets():
    assert {"p100x2", "p100x4", "p100x8", "hetero4", "cpu2", "cpu4"} <= set(preset_names())
    c = load_cluster("p100x4")
    assert c.n_devices == 4 and c.memory[0] == 11 * 10**9
    # Baechi's measured link: 0.0001754 us/B + 134 us
    assert c.transfer_us(0, 1, 1_000_000) == pytest.approx(0.0001754 * 1e6 + 134, rel=1e-4)
    assert c.transfer_us(2, 2, 1e9) == 0.0
    h = load_cluster("hetero4")
    assert h.transfer_us(0, 1, 25_000) == pytest.approx(11.0)
    assert sorted({d.speed for d in h.devices}) == [0.5, 1.0, 2.0]


def test_round_trip_through_dict():
    c = load_cluster("hetero4")
    d = cluster_from_dict(c.to_dict())
    np.testing.assert_allclose(d.bandwidth, c.bandwidth)
    np.testing.assert_allclose(d.latency, c.latency)
    assert d.devices == c.devices


def test_yaml_file(tmp_path):
    p = tmp_path / "mine.yaml"
    p.write_text("devices:\n  - {name: a, memory_GB: 1}\n  - {name: b, memory_GB: 2}\n"
                 "links:\n  - {src: a, dst: b, bandwidth_GBps: 1, latency_us: 5}\n")
    c = load_cluster(p)
    assert c.name == "mine" and c.transfer_us(1, 0, 1000) == 6.0


@pytest.mark.parametrize("doc, message", [
    ({"devices": [{"name": "a", "memory_GB": 1}], "links": [{"src": "a", "dst": "zz", "bandwidth_GBps": 1,
                                                            "latency_us": 0}]},
     r"links\[0\].dst: unknown device 'zz'"),
    ({"devices": [{"name": "a", "memory_GB": 1}, {"name": "b", "memory_GB": 1}],
      "default_link": {"bandwidth_GBps": 0, "latency_us": 1}}, r"default_link.bandwidth_GBps: must be > 0"),
    ({"devices": [{"name": "a", "memory_GB": 1}, {"name": "b", "memory_GB": 1}]}, r"no link from 'a' to 'b'"),
    ({"devices": [{"name": "a", "memory_GB": 1}, {"name": "a", "memory_GB": 1}]}, r"duplicate device name"),
    ({"devices": [{"name": "a", "memory_GB": -1}]}, r"devices\[0\].memory_GB: must be > 0"),
    ({"devices": []}, r"devices: must be a non-empty list"),
])
def test_bad_clusters(doc, message):
    with pytest.raises(ClusterError, match=message):
        cluster_from_dict(doc, "c.yaml")


def test_unknown_preset_lists_presets():
    with pytest.raises(ClusterError, match=r"unknown cluster 'p100x3'.*p100x4"):
        load_cluster("p100x3")


def test_subset_keeps_the_chosen_devices_and_their_links():
    from trinity.cluster import cluster_from_dict

    c = cluster_from_dict({"devices": [{"name": n, "memory_GB": 1} for n in "abc"],
                           "default_link": {"bandwidth_GBps": 1, "latency_us": 5},
                           "links": [{"src": "c", "dst": "a", "bandwidth_GBps": 2, "latency_us": 1}]})
    sub = c.subset([2, 0])
    assert sub.device_names == ["c", "a"]
    assert sub.bandwidth[0, 1] == 2000.0 and sub.latency[1, 0] == 1.0


def test_interchangeable_devices():
    import numpy as np

    from trinity.cluster import cluster_from_dict

    assert load_cluster("p100x4").interchangeable().tolist() == [0, 0, 0, 0]
    # two nodes of two devices each: a fast link within a node, a slow one between nodes. Swapping two devices
    # of one node keeps every link; swapping across nodes does not (the swapped pair's links to their
    # node-mates change), and a device of another speed is a class of its own.
    fast, slow = {"bandwidth_GBps": 10.0, "latency_us": 1.0}, {"bandwidth_GBps": 1.0, "latency_us": 10.0}
    names = ["a0", "a1", "b0", "b1", "c"]
    links = [{"src": s, "dst": t, **(fast if s[0] == t[0] else slow)} for s in names for t in names if s < t]
    c = cluster_from_dict({"name": "two-nodes", "links": links,
                           "devices": [{"name": n, "memory_GB": 16, "speed": 2.0 if n == "c" else 1.0} for n in names]})
    assert c.interchangeable().tolist() == [0, 0, 2, 2, 4]
    assert np.array_equal(c.subset([0, 1]).interchangeable(), [0, 0])
