"""A prediction (not a measurement) of OpenVLA-OFT-7B's control step on an H100 at batch 1, from the CPU's
measured phase ratios and published GPU figures.

Per setting of a measured ``cpu-bench-oft`` run (``benchmarks/results/oft/<dtype>/results.json``):

* towers: OpenVLA-7B's fused DINOv2 + SigLIP towers take ~0.6 ms per 224 px image at batch 1 on an H100 (the
  published roofline figure this project's issue tracker quotes for OpenVLA-7B), times the images, times the fraction of
  the unreduced towers' time the setting's towers took on the CPU (the CPU's measured ratio stands in for the
  share of tower work left);
* the one language-model pass over the setting's sequence (the measured ``seq_len``; a cut inside the pass keeps
  the measured share of visual tokens after its layer): Llama-2-7B's matmul FLOPs (2 x parameters per position,
  plus attention over the sequence) at an assumed fraction of the H100's dense bf16 peak, and never below reading
  the 7B weights once from HBM;
* a fixed per-pass cost (kernel launches, the L1 head, host work), assumed.

Every figure that is not measured here is a named constant with its source or marked as an assumption.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Published / vendor figures (not measured here).
H100_BF16_DENSE_TFLOPS = 989.0  # NVIDIA H100 SXM datasheet, dense bf16 tensor-core peak
H100_HBM_TBPS = 3.35  # NVIDIA H100 SXM datasheet, HBM3 bandwidth
TOWERS_MS_PER_IMAGE = 0.6  # OpenVLA-7B's towers per image, batch 1, H100 (published roofline, docs/results/gpu.md)
# Assumptions (stated with the prediction).
MATMUL_EFFICIENCY = 0.5  # fraction of the dense peak a batch-1 pass of ~100-600 positions reaches
BANDWIDTH_EFFICIENCY = 0.8  # fraction of the HBM bandwidth a weight-streaming pass reaches
FIXED_MS = 1.0  # launches, the L1 head and host work per step


@dataclass(frozen=True)
class LlamaSize:
    """The language model whose pass is predicted (default Llama-2-7B, OpenVLA's)."""

    hidden: int = 4096
    intermediate: int = 11008
    layers: int = 32
    vocab: int = 32064

    @property
    def matmul_params(self) -> int:
        """Parameters every position multiplies (attention and MLP weights; the LM head is not run on the pass)."""
        return self.layers * (4 * self.hidden**2 + 3 * self.hidden * self.intermediate)

    @property
    def weight_bytes(self) -> int:
        """bf16 bytes read once per pass: the layers and the embedding table's rows (counted in full)."""
        return 2 * (self.matmul_params + self.vocab * self.hidden)


def llm_pass_ms(positions: float, size: LlamaSize = LlamaSize()) -> float:
    """Predicted ms of one pass over ``positions`` tokens: max(compute, weight read)."""
    flops = positions * (2 * size.matmul_params + 4 * size.layers * size.hidden * positions)
    compute = flops / (H100_BF16_DENSE_TFLOPS * 1e12 * MATMUL_EFFICIENCY) * 1e3
    memory = size.weight_bytes / (H100_HBM_TBPS * 1e12 * BANDWIDTH_EFFICIENCY) * 1e3
    return max(compute, memory)


def predict_step(rec: dict[str, Any], base: dict[str, Any], images: int = 2) -> dict[str, float]:
    """The predicted H100 step of one measured CPU record against its run's unreduced record."""
    towers = TOWERS_MS_PER_IMAGE * images * rec["vision_ms"] / base["vision_ms"]
    visual_in, visual_kept = rec["num_patches"], rec["llm_visual_tokens"]
    positions = rec["seq_len"]
    if visual_kept < visual_in:  # a cut inside the pass: the share of layers after it runs on fewer positions
        depth = rec.get("depth_fraction") or 0.0
        positions = depth * positions + (1 - depth) * (positions - (visual_in - visual_kept))
    llm = llm_pass_ms(positions)
    total = towers + llm + FIXED_MS
    return {"towers_ms": towers, "llm_ms": llm, "positions": positions, "total_ms": total}


def predict_run(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One predicted row per record of a ``cpu-bench-oft`` results file (``{"meta", "records"}``), baseline first,
    with the predicted speedup and the CPU's measured one beside it."""
    records = results["records"]
    base = records[0]
    if base["setting"] != "none":
        raise ValueError("the results file's first record is not the unreduced baseline ('none')")
    unreduced = predict_step(base, base)["total_ms"]
    rows = []
    for rec in records:
        step = predict_step(rec, base)
        rows.append({"setting": rec["setting"], **{k: round(v, 2) for k, v in step.items()},
                     "predicted_speedup": round(unreduced / step["total_ms"], 2),
                     "cpu_measured_speedup": round(rec["predict_action_speedup"], 2)})
    return rows


def assumptions() -> str:
    return (f"H100 SXM {H100_BF16_DENSE_TFLOPS:g} TFLOP/s dense bf16 at {MATMUL_EFFICIENCY:.0%}, "
            f"{H100_HBM_TBPS:g} TB/s at {BANDWIDTH_EFFICIENCY:.0%}; towers {TOWERS_MS_PER_IMAGE} ms per image "
            f"unreduced, scaled by the CPU's measured tower-time ratio; {FIXED_MS:g} ms fixed per step; "
            "Llama-2-7B sizes")
