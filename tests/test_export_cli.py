"""`trinity export` and `trinity profile` end to end on a small PyTorch model."""

import pytest

from trinity.cli import main
from trinity.graph import load_graph


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_export_profile_place(tmp_path, capsys):
    raw, costed = tmp_path / "rn.json.gz", tmp_path / "rn_profiled.json.gz"
    code, out, _ = run(capsys, "export", "resnet_small", "--batch", "2", "--option", "widths=[4, 8]",
                       "--option", "blocks_per_stage=1", "--out", raw)
    assert code == 0 and "ops" in out
    g = load_graph(raw)
    assert g.meta["framework"] == "torch" and g.meta["batch_size"] == 2
    assert all(op.compute_us is None for op in g.ops)  # export measures nothing

    code, out, _ = run(capsys, "profile", raw, "--out", costed, "--steps", "2", "--warmup", "1",
                       "--kind-speedup", "p100=10")
    assert code == 0
    p = load_graph(costed)
    assert all(op.compute_us is not None and op.compute_us >= 0 for op in p.ops)
    assert p.meta["profile"]["cost_model"]["ops"] == p.meta["profile"]["ops_timed"]  # placeholders are not fitted
    # Measured ops keep their measured time for the kind they ran on; other kinds get the fitted
    # model's prediction, here 10x faster than the model's CPU prediction.
    from trinity.profile.cost_model import LinearCostModel

    cpu_model, p100_model = (LinearCostModel(m["kind"], {t: tuple(c) for t, c in m["coefficients"].items()})
                             for m in p.meta["cost_models"])
    timed = [i for i, op in enumerate(p.ops) if op.compute_us > 0]
    assert timed and all(p.ops[i].compute_us_by_kind["cpu"] == p.ops[i].compute_us for i in timed)
    predicted = cpu_model.predict(p)
    assert all(p.ops[i].compute_us_by_kind["p100"] == pytest.approx(max(predicted[i], 0.0) / 10) for i in timed)
    assert run(capsys, "place", costed, "--cluster", "cpu2", "--placer", "m-etf")[0] == 0


def test_unknown_model_lists_known(capsys):
    code, _, err = run(capsys, "export", "resnet9000")
    assert code == 2 and "known models:" in err and "inception_v3" in err


def test_profile_refuses_graphs_it_cannot_run(tmp_path, capsys, reference_gnmt_path):
    code, _, err = run(capsys, "profile", reference_gnmt_path, "--out", tmp_path / "x.json")
    assert code == 2 and "only graphs made by `trinity export` can be run" in err
    assert not (tmp_path / "x.json").exists()


def test_bad_option(capsys):
    code, _, err = run(capsys, "export", "resnet_small", "--option", "widths")
    assert code == 2 and "expected key=value" in err
