"""One settings grammar (issue 27, item 4): a setting is written one way (prismatic_tr.vla.spec) and labelled one way,
whether it comes from the API, a fine-tuning config, a benchmark or an evaluation."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from helpers.tiny_vla import make_inputs, tiny

from prismatic_tr.training.config import TokenReductionConfig
from prismatic_tr.vla import (
    Setting,
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
    assert (settings.site, settings.method, settings.keep_ratio, settings.depth_fraction,
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
    assert cfg.settings() == Setting.for_site("vision", "diverse", keep_ratio=0.1, depth_fraction=0.25)
    assert TokenReductionConfig(spec="none").settings() is None
    with pytest.raises(ValueError, match="fine-tuning attaches one"):
        TokenReductionConfig(spec="vision:diverse:0.5@0.25+llm:attention:0.5@0.25")


ASSETS = Path(__file__).resolve().parents[2] / "prismatic_tr" / "assets"


def test_one_setting_type_frozen_validated_once_and_reading_the_shipped_files() -> None:
    """A spec, the API's settings, a checkpoint's stored dict and fine-tuning's config are one immutable type; the
    shipped adapters' files (written with v0.3's key ``reduction_ratio`` or today's ``keep_ratio``) read unchanged."""
    assert TokenReductionSettings is Setting and isinstance(TokenReductionConfig(spec="diverse:0.1").settings(), Setting)
    setting = parse_setting("vision:diverse:0.1@0.25")
    with pytest.raises(dataclasses.FrozenInstanceError):
        setting.keep_ratio = 0.5  # type: ignore[misc]
    with pytest.raises(ValueError, match=r"keep_ratio=1.5 is not allowed; .* in \(0, 1\]"):
        Setting("diverse", 1.5)
    with pytest.raises(ValueError, match="cannot be combined"):
        Setting("diverse", 0.5, also=(Setting(site="vision", method="diverse"),))
    assert Setting.from_dict(setting.to_dict()) == setting.reductions()[0]
    shipped = {"projector-diverse-0.1": "diverse:0.1", "vision-diverse-0.1-0.25": "vision:diverse:0.1@0.25",
               "oft-vision-diverse-0.1-0.05": "vision:diverse:0.1@0.05"}
    for name, label in shipped.items():
        stored = json.loads((ASSETS / "adapters" / name / "token_reduction.json").read_text())
        read = Setting.from_dict(stored)
        keep = stored.get("keep_ratio", stored.get("reduction_ratio"))
        assert keep is not None and read.keep_ratio == keep and setting_of([read]).label == read.label == label
    v03 = {"method": "diverse", "reduction_ratio": 0.1, "site": "vision", "depth_fraction": 0.25}  # v0.3's key
    assert Setting.from_dict(v03) == parse_setting("vision:diverse:0.1@0.25").reductions()[0]
    with pytest.raises(ValueError, match=r"unknown token_reduction keys \['ratio'\]"):
        Setting.from_dict({"ratio": 0.5})
    # one default per field: the spec, the API and fine-tuning agree (spatial_pool's window, the fraction kept)
    assert parse_setting("diverse:0.5") == Setting("diverse", 0.5) == TokenReductionConfig(method="diverse").settings()
    assert parse_setting("none") == Setting("none", 1.0) and Setting("none").spatial_merge_size == 1
