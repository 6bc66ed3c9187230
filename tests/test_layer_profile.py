"""Per-layer profiles of the PyTorch models (trinity.profile.layers) and their layer sequences."""

import json

import pytest
import torch

from trinity.errors import FormatError
from trinity.export.torch_graph import build_torch_model
from trinity.models.torch_models import layer_sequence
from trinity.profile.layers import Layer, LayerProfile, profile_layers

TINY_LM = {"seq_len": 8, "vocab_size": 50, "d_model": 16, "n_heads": 2, "d_ff": 32, "n_layers": 2}


@pytest.mark.parametrize("name, options, n", [("transformer_lm", TINY_LM, 4),
                                              ("resnet_small", {"widths": (4, 8), "blocks_per_stage": 1}, 4),
                                              ("transformer_lm12", {"d_model": 16, "d_ff": 32}, 14)])
def test_layer_sequence_is_the_model(name, options, n):
    model, _, _ = build_torch_model(name, 2, **options)
    layers = layer_sequence(model.module)
    assert len(layers) == n
    x = model.example_inputs[0]
    for _, layer in layers:
        x = layer(x)
    assert torch.equal(x, model.module(*model.example_inputs))
    ids = {id(p) for _, l in layers for p in l.parameters()}
    assert ids == {id(p) for p in model.module.parameters()}  # every weight in exactly the sequence


def test_profile_measures_every_layer():
    prof = profile_layers("transformer_lm", 4, steps=2, warmup=0, **TINY_LM)
    assert [l.name for l in prof.layers] == ["embedding", "block0", "block1", "head"]
    assert all(l.forward_us > 0 and l.backward_us > 0 for l in prof.layers)
    model, _, _ = build_torch_model("transformer_lm", 4, **TINY_LM)
    assert prof.param_bytes == sum(p.numel() * 4 for p in model.module.parameters())
    assert prof.layers[1].output_bytes == 4 * 8 * 16 * 4  # batch x seq x d_model floats
    assert prof.layers[-1].output_bytes == 4 * 8 * 50 * 4  # logits
    assert prof.input_bytes == 4 * 8 * 8  # int64 tokens
    # a block keeps at least its two LayerNorm inputs and the attention probabilities for backward
    assert prof.layers[1].saved_bytes >= 2 * 4 * 8 * 16 * 4 + 4 * 2 * 8 * 8 * 4
    assert prof.layers[0].saved_bytes < prof.layers[1].saved_bytes


def test_profile_round_trip_and_bad_files(tmp_path):
    prof = LayerProfile("m", 4, (Layer("a", 1.5, 3.0, 100, 200, 300, 0.5), Layer("b", 2.0, 4.0, 10, 20, 30)),
                        input_bytes=8, options={"k": 1}, threads=1, steps=3)
    path = tmp_path / "p.json"
    prof.save(path)
    assert LayerProfile.load(path) == prof
    doc = prof.to_dict()
    doc["layers"][1]["forward_us"] = -1
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(FormatError, match=r"bad.json: layers\[1\].forward_us: must be a finite number >= 0"):
        LayerProfile.load(tmp_path / "bad.json")
    del doc["layers"][0]["saved_bytes"]
    with pytest.raises(FormatError, match=r"layers\[0\].saved_bytes: missing"):
        LayerProfile.from_dict(doc, "x")
    with pytest.raises(FormatError, match="format"):
        LayerProfile.from_dict({"format": "trinity-graph/1"}, "x")
    (tmp_path / "cut.json").write_text(json.dumps(prof.to_dict())[:40])
    with pytest.raises(FormatError, match="cut.json"):
        LayerProfile.load(tmp_path / "cut.json")
