"""One question, one answer (issue 49): :func:`prismatic_tr.models.family.family_of` tells which model family a
model, a checkpoint directory or a benchmark run is, and every per-family table has a row for every family."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from torch import nn

from prismatic_tr.models import NativeOpenVLA, NativeOpenVLAOFT
from prismatic_tr.models.family import FAMILIES, family_of


def native(cls: type) -> nn.Module:
    """An instance of ``cls`` without building its weights: only the ``vision_backbone`` the unwrapping looks for."""
    model = cls.__new__(cls)
    nn.Module.__init__(model)
    model.vision_backbone = nn.Identity()
    return model


class RemoteOpenVLA(nn.Module):
    """OpenVLA's remote code, as far as the family goes: its ``predict_action``."""

    def __init__(self) -> None:
        super().__init__()
        self.vision_backbone = nn.Identity()

    def predict_action(self, input_ids: Any = None, unnorm_key: str | None = None, **kwargs: Any) -> Any: ...


class RemoteOFT(RemoteOpenVLA):
    """OpenVLA-OFT's own code: its ``predict_action`` takes the action head."""

    def predict_action(self, input_ids: Any = None, unnorm_key: str | None = None, proprio: Any = None,
                       proprio_projector: Any = None, action_head: Any = None, **kwargs: Any) -> Any: ...


class Wrapper(nn.Module):
    """A DDP- (``module``) or ``torch.compile``-like (``_orig_mod``) wrapper."""

    def __init__(self, attr: str, inner: nn.Module) -> None:
        super().__init__()
        setattr(self, attr, inner)


@pytest.mark.parametrize(("make", "name"), [
    (lambda: native(NativeOpenVLA), "openvla"),
    (lambda: native(NativeOpenVLAOFT), "openvla-oft"),
    (RemoteOpenVLA, "openvla-remote"),
    (RemoteOFT, "openvla-oft-remote"),
])
@pytest.mark.parametrize("wrap", [None, "module", "_orig_mod"])
def test_a_model_s_family_through_its_wrappers(make: Any, name: str, wrap: str | None) -> None:
    model = make()
    assert family_of(Wrapper(wrap, model) if wrap else model) is FAMILIES[name]


def test_the_families_say_what_they_are() -> None:
    assert [(f.name, f.native, f.chunked) for f in FAMILIES.values()] == [
        ("openvla", True, False), ("openvla-remote", False, False), ("openvla-oft", True, True),
        ("openvla-oft-remote", False, True)]


@pytest.mark.parametrize(("files", "config", "name"), [
    ({"config.json": {}}, None, "openvla"),
    ({"config.json": {"oft": {"num_actions_chunk": 8}}}, None, "openvla-oft"),
    ({"config.json": {}, "action_head--latest_checkpoint.pt": None}, None, "openvla-oft"),
    ({"config.json": {}, "noisy_action_projector--100_checkpoint.pt": None}, None, "openvla-oft"),
    ({"config.json": {}, "notes--latest_checkpoint.txt": None}, None, "openvla"),
    ({}, {"oft": {}}, "openvla-oft"),  # the config handed in, as load_vla does
    ({"action_head--latest_checkpoint.pt": None}, None, "openvla"),  # no config.json: not a checkpoint
])
def test_a_checkpoint_directory_s_family(tmp_path: Path, files: dict[str, Any], config: dict | None,
                                          name: str) -> None:
    for file, content in files.items():
        (tmp_path / file).write_text(json.dumps(content) if content is not None else "")
    assert family_of(tmp_path, config).name == name
    assert family_of(str(tmp_path), config).name == name


def test_a_hub_id_and_a_run_s_records() -> None:
    assert family_of("openvla/openvla-7b").name == "openvla"
    assert family_of([]).name == "openvla"
    assert family_of([{"model_kind": "openvla-oft"}, {"model_kind": "openvla-oft"}]).name == "openvla-oft"
    assert family_of([{"setting": "none"}]).name == "openvla"  # records written before OFT are OpenVLA's
    assert family_of({"model_kind": "openvla"}).name == "openvla"


def test_every_per_family_table_has_every_family() -> None:
    from prismatic_tr.bench.vla.benchmark import STEPS
    from prismatic_tr.policy.closed_loop import OBSERVATIONS
    from prismatic_tr.serve.policy import SERVED
    from prismatic_tr.training.loop import TASKS

    for table in (STEPS, OBSERVATIONS, SERVED):
        assert set(table) == set(FAMILIES)
    assert set(TASKS) == {"openvla", "openvla-oft"}  # the families a checkpoint directory can be
    assert OBSERVATIONS["openvla-oft"].third_person and not OBSERVATIONS["openvla"].third_person
    assert SERVED["openvla-oft"] == "chunk" and SERVED["openvla"] == "action"
