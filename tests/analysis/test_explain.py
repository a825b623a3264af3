"""`analyze` with the named-only analyses: Attention Flow and class relevance figures and numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from helpers import randomise_
from vitlab.analysis import (
    ANALYSES,
    analyze,
    attention_flow,
    class_relevance,
    output_token_map,
    parse_what,
)
from vitlab.model import create_untrained


def tiny(**overrides):
    options = {"image_size": 16, "depth": 2, "dim": 32, "num_heads": 2, "mlp_dim": 64, "num_classes": 5}
    options.update(overrides)
    return randomise_(create_untrained("Ti/4", **options)).eval()


@pytest.mark.unit
def test_all_keeps_the_paper_analyses_and_the_others_are_named():
    assert parse_what("all") == ANALYSES
    assert parse_what("all,flow") == (*ANALYSES, "flow")
    assert parse_what("relevance,rollout") == ("rollout", "relevance")


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("pool", ["token", "gap"])
def test_flow_and_relevance_figures_hold_the_functions_maps(tmp_path, pool):
    model = tiny(pool=pool)
    images = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    result = analyze(model, images, tmp_path, what="flow,relevance", show=2)
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["attention_flow.png", "class_relevance.png"]
    numbers = json.loads((tmp_path / "analysis.json").read_text())
    with torch.no_grad():
        _, attentions = model.forward_with_attention(images[:2])
    flow = output_token_map(attention_flow(attentions), (4, 4), model.config.num_prefix_tokens)
    np.testing.assert_allclose(numbers["attention_flow"]["maps"], flow.numpy(), atol=1e-5)
    relevance = class_relevance(model, images[:2])
    np.testing.assert_allclose(numbers["class_relevance"]["maps"], relevance.maps.numpy(), atol=1e-5)
    assert numbers["class_relevance"]["classes"] == relevance.target.tolist()
    assert len(result.figures) == 2


@pytest.mark.unit
@pytest.mark.fault("bad-input", kinds=1)
def test_flow_over_too_many_tokens_is_refused_in_one_line(tmp_path):
    model = tiny()
    with pytest.raises(ValueError, match="flow: 257 tokens is above attention flow's limit of 65"):
        analyze(model, torch.randn(1, 3, 64, 64), tmp_path, what="flow")
