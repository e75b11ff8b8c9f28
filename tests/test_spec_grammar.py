"""One settings grammar (issue 27, item 4): a setting is written one way (prismatic_tr.vla.spec) and labelled one way,
whether it comes from the API, a fine-tuning config, a benchmark or an evaluation."""

from __future__ import annotations

import pytest
import torch
from test_vla_sites import make_inputs, tiny

from prismatic_tr.training.config import TokenReductionConfig
from prismatic_tr.vla import (
    TokenReductionSettings,
    apply_token_reduction_spec,
    current_token_reduction,
    get_token_reduction,
    parse_setting,
    remove_token_reduction,
    setting_of,
)

# spec -> the settings it names (site, method, keep, depth, positions)
CASES = [
    ("diverse:0.25", ("projector", "diverse", 0.25, None, "original")),
    ("spatial_pool:2x2", ("projector", "spatial_pool", 0.25, None, "original")),
    ("random:0.5:compact", ("projector", "random", 0.5, None, "compact")),
    ("vision:diverse:0.1@0.25", ("vision", "diverse", 0.1, 0.25, "original")),
    ("vision:norm:0.25@0.3:compact", ("vision", "norm", 0.25, 0.3, "compact")),
    ("llm:attention:0.5@0.25", ("llm", "attention", 0.5, 0.25, "original")),
]


@pytest.mark.parametrize("spec, want", CASES)
def test_one_label_for_a_setting(spec: str, want: tuple) -> None:
    [settings] = parse_setting(spec).reductions()
    assert (settings.site, settings.method, settings.reduction_ratio, settings.depth_fraction,
            settings.positions) == want
    assert settings.label == spec == parse_setting(spec).label  # the settings' label is the spec
    assert setting_of([settings]).label == spec  # and back
    assert parse_setting(settings.label).reductions() == [settings]


def test_a_combination_labels_each_part_the_same_way() -> None:
    combo = parse_setting("vision:diverse:0.5@0.25+llm:attention:0.5@0.25")
    assert "+".join(s.label for s in combo.reductions()) == combo.label


def test_the_api_takes_the_spec() -> None:
    vla = tiny()
    inp = make_inputs(vla, batch=1)
    with torch.no_grad():
        plain = vla(**inp).logits
    apply_token_reduction_spec(vla, "vision:diverse:0.25@0.5+llm:attention:0.5@0.5")
    try:
        assert [s.label for s in current_token_reduction(vla)] == ["vision:diverse:0.25@0.5", "llm:attention:0.5@0.5"]
        apply_token_reduction_spec(vla, "none")
        assert get_token_reduction(vla) is None and get_token_reduction(vla, site="llm") is None
        with torch.no_grad():
            assert torch.equal(vla(**inp).logits, plain)
        apply_token_reduction_spec(vla, "diverse:0.25")
        with pytest.raises(ValueError, match="not a number"):
            apply_token_reduction_spec(vla, "vision:diverse:lots@0.25")
        assert get_token_reduction(vla).settings.label == "diverse:0.25"  # a bad spec changes nothing
    finally:
        remove_token_reduction(vla)


def test_fine_tuning_takes_the_spec() -> None:
    cfg = TokenReductionConfig(spec="vision:diverse:0.1@0.25")
    assert cfg.settings() == TokenReductionSettings.for_site("vision", "diverse", reduction_ratio=0.1,
                                                             depth_fraction=0.25)
    assert TokenReductionConfig(spec="none").settings() is None
    with pytest.raises(ValueError, match="fine-tuning attaches one"):
        TokenReductionConfig(spec="vision:diverse:0.5@0.25+llm:attention:0.5@0.25")
