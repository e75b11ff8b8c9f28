"""Policy-step benchmark: latency per phase, speedup against its Amdahl bound, MACs, memory and fidelity
of one OpenVLA (or OpenVLA-OFT) control step, unreduced and with each token-reduction setting.

    >>> records = benchmark_token_reduction(vla, processor(prompt, image, return_tensors="pt"),
    ...                                     methods=["topk_magnitude", "spatial_pool"], ratios=[0.5])
    >>> records[1]["speedup"], records[1]["ideal_speedup"], records[1]["action_token_agreement"]

Method of measurement (see :mod:`prismatic_tr.bench.vla.step` for what one OpenVLA step is; a native OpenVLA-OFT
model, :class:`~prismatic_tr.models.NativeOpenVLAOFT`, is timed as :mod:`prismatic_tr.bench.vla.oft_step` splits
its step: vision, reducer, projector, llm (the one parallel pass), head; ``model_kind`` says which):

* Passes: each setting first runs one untimed step that counts its MACs and measures its memory (which also
  warms its code paths), then ``warmup`` untimed ``predict_action`` calls, then ``num_runs`` timed rounds in
  which all settings run once each, the baseline among them, in alternating order (A B C, C B A, ...) so that
  drift of the machine cancels; a round times the step phase by phase and then the whole ``predict_action``.
  The setting's first ``predict_action`` is also its answer for the fidelity fields (OpenVLA adds one untimed
  ``generate`` for the logits): ``1 + warmup + 2 * num_runs`` passes per setting (+ 1 on OpenVLA).
* Timing: phases and ``predict_action`` as above. Phases are timed with :class:`prismatic_tr.bench.measure.timing.Timer` (CUDA
  events on a GPU, ``perf_counter`` on a CPU); ``*_ms`` is the median over runs, ``*_ms_p10`` / ``*_ms_p90`` the
  spread; ``total_ms`` is the median of the per-run totals.
* The vision phase runs ``vision_backbone.forward`` (unreduced features; reduced inside the towers for the vision
  site) and the reducer phase the live site's ``finish_forward`` on them (the projector site reduces there; both
  hand the kept tokens' positions on), so the two are timed apart; the reduction is attached with
  :func:`prismatic_tr.vla.apply_token_reduction_to_vla` for the whole of each setting's fidelity check.
* ``ideal_speedup`` (Amdahl): the baseline's measured phase medians rescaled by token counts - the
  projector by K / N, the prefill by (T + K) / (T + N) (T = text and BOS tokens, linear in sequence
  length), vision and decode unchanged (decode attends over a cache shorter by N - K entries; treated as
  zero, though on the cpu-bench preset decode measured 10-16% faster at K = 128 / 64 in the topk_magnitude
  rows of ``benchmarks/results/policy/results.json``, so the bound is conservative), and the reducer free.
  ``efficiency`` = speedup / ideal_speedup; ``prefill_efficiency`` likewise for the prefill alone. On OFT the
  one pass takes the prefill's part (``llm_speedup``, ``llm_ideal_speedup``, ``llm_efficiency``; T counts BOS,
  proprio, prompt, action slots and stop), the head the decode's, and the projector phase holds the proprio
  projector too (one token, scaled with the visual ones in the bound).
* MACs per phase (:func:`prismatic_tr.bench.measure.flops.count_macs`: matmul-like ops, one multiply-add
  = 1 MAC), reported in GMACs per step (the whole batch).
* Noise: ``vision_vs_baseline``, ``predict_action_spread`` (p90 / p10 of the whole ``predict_action``),
  ``total_spread`` (p90 / p10 of the phase sum) and ``noise_flag`` /
  ``noise_reason`` per row, by the rule of :mod:`prismatic_tr.bench.measure.noise` (the vision phase does the
  same work in every row, so it gauges the machine).
* ``peak_memory_mb``: ``torch.cuda.max_memory_allocated`` over one step (weights included); on a CPU the
  process's resident-set high-water mark over one step, reset before it (``measure.rss_peak_mb``; None where
  the kernel cannot reset it); ``peak_memory_source`` says which, ``step_memory_mb`` what the step added.
* Fidelity against the unreduced model on the same inputs, through the model's own ``generate`` and
  ``predict_action``: ``action_token_agreement`` (fraction of the B x A greedy action tokens equal),
  ``action_mae`` (mean |delta| of the un-normalised actions), ``first_token_kl`` (KL(base || reduced) of
  the first action token's distribution, nats). OFT has no action tokens: ``action_mae``, ``action_max_abs``
  over the chunk, and ``step_action_max_diff`` (the timed step against ``predict_action``).
* Every site runs on OFT: the llm site drops visual tokens inside the one pass (``models.oft.run_decoder``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from prismatic_tr.bench.measure.noise import add_noise_fields
from prismatic_tr.bench.measure.timing import Timer, summarize
from prismatic_tr.bench.vla.measure import (
    check_device,
    fidelity,
    model_answer,
    model_state,
    phase_macs,
    pick_unnorm_key,
    reseed,
    restore_model_state,
    step_peak_memory_mb,
)
from prismatic_tr.bench.vla.oft_step import OFTStep
from prismatic_tr.bench.vla.phases import OPENVLA_STEP, StepPhases
from prismatic_tr.bench.vla.step import PolicyStep, StepBase, StepInputs, prepare_inputs, timed_call
from prismatic_tr.models.family import family_of
from prismatic_tr.vla import reduction_cut, reductions_attached, remove_token_reduction, unwrap_vla
from prismatic_tr.vla.settings import DEFAULT_MERGE_SIZE, SWEEP_METHODS
from prismatic_tr.vla.spec import (
    BASELINE,
    POOL_METHOD,
    Setting,
    build_settings,
    parse_setting,
)


def _timed_rounds(
    vla: nn.Module, step: StepBase, settings: list[Setting], num_runs: int,
    warmup: int, device: torch.device, progress: bool, seed: int, unnorm_key: str,
    answer_of: Callable[[Any], Any], on_progress: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, list[float]]], list[list[float]], list[Any]]:
    """Warm-up, then ``num_runs`` interleaved rounds (A B C, C B A, ...). In every round each setting is attached
    (outside the timed region), its step is timed phase by phase, then the model's own ``predict_action`` on the
    same inputs is timed, and the setting is detached. A warm-up round runs ``predict_action`` alone (the phases
    ran untimed in the setting's MACs pass before). Each setting's first ``predict_action`` (warm-up, else the
    first timed round) is kept: ``answer_of(its result)``, called untimed with the setting still attached, is that
    setting's answer for the fidelity fields, so the answer costs no pass of its own. Returns ``[{phase: [ms]}]``,
    ``[[predict_action ms]]`` and the answers."""
    from tqdm.auto import tqdm

    timers = [Timer(device) for _ in settings]
    e2e = [Timer(device) for _ in settings]
    answers: list[Any] = [None] * len(settings)
    order = list(range(len(settings)))
    bar = tqdm(total=(warmup + num_runs) * len(settings), desc="policy benchmark",
               disable=not progress or on_progress is not None, leave=False)
    predict = lambda: step.predict_action(unnorm_key)  # noqa: E731

    for r in range(-warmup, num_runs):
        for i in order if r % 2 == 0 else order[::-1]:
            with reductions_attached(vla, settings[i].reductions(seed)):
                if r < 0:
                    reseed(vla)
                    predicted = predict()
                else:
                    timers[i].start()
                    step.run(timed_call(timers[i]))
                    timers[i].stop()
                    reseed(vla)  # a random reducer draws as in the answer's generate call
                    e2e[i].start()
                    with e2e[i].phase("predict_action"):
                        predicted = predict()
                    e2e[i].stop()
                if answers[i] is None:
                    answers[i] = answer_of(predicted)
            bar.update()
            if on_progress is not None:
                on_progress("round")
    bar.close()
    return [t.results() for t in timers], [t.results()["predict_action"] for t in e2e], answers


def _timing_fields(samples: dict[str, list[float]], phases: StepPhases) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in (*phases.names, "total"):
        stats = summarize(samples[name])
        out[f"{name}_ms"] = stats["median"]
        out[f"{name}_ms_p10"] = stats["p10"]
        out[f"{name}_ms_p90"] = stats["p90"]
    return out


def add_speedup_fields(records: list[dict], text_tokens: int, phases: StepPhases = OPENVLA_STEP) -> None:
    """Fill ``speedup``, ``{seq}_speedup``, ``{seq}_ideal_speedup``, ``{seq}_efficiency`` (seq: ``prefill`` on
    OpenVLA, ``llm`` on OFT, ``phases.sequence``), ``ideal_speedup``, ``efficiency`` and ``reducer_pct_of_vision``
    of every record in place, against the baseline ``records[0]`` (which needs the ``{phase}_ms`` medians,
    ``total_ms`` and ``num_patches``).

    Ideal (Amdahl) total for K visual tokens out of N, T text tokens, baseline medians V, P, F, D (vision,
    projector, prefill or the one pass, decode or head): ``V + P * K / N + F * (T + K) / (T + N) + D`` (reducer
    free); ``ideal_speedup`` = (V + P + F + D) / that. The bound models the projector site only; rows of other
    sites get None for the ideal fields.
    """
    base, seq = records[0], phases.sequence
    n_in = base["num_patches"]
    unchanged = sum(base[f"{p}_ms"] for p in phases.unchanged)
    base_sum = unchanged + base["projector_ms"] + base[f"{seq}_ms"]
    for rec in records:
        k = rec["num_patches"]
        seq_ideal = (text_tokens + n_in) / (text_tokens + k)
        ideal_total = unchanged + base["projector_ms"] * k / n_in + base[f"{seq}_ms"] / seq_ideal
        rec["speedup"] = base["total_ms"] / rec["total_ms"]
        rec[f"{seq}_speedup"] = base[f"{seq}_ms"] / rec[f"{seq}_ms"]
        rec["reducer_pct_of_vision"] = 100.0 * rec["reducer_ms"] / rec["vision_ms"]
        if rec.get("site", "projector") not in ("projector", BASELINE):
            rec.update({f"{seq}_ideal_speedup": None, f"{seq}_efficiency": None, "ideal_speedup": None,
                        "efficiency": None})
            continue
        rec[f"{seq}_ideal_speedup"] = seq_ideal
        rec[f"{seq}_efficiency"] = rec[f"{seq}_speedup"] / seq_ideal
        rec["ideal_speedup"] = base_sum / ideal_total
        rec["efficiency"] = rec["speedup"] / rec["ideal_speedup"]


# How each model family's control step is timed (prismatic_tr.models.family): OFT's phases for the native OpenVLA-OFT
# model, OpenVLA's for the others; (vla, inputs, action tokens) -> step, the class looked up at call time.
STEPS: dict[str, Callable[[nn.Module, StepInputs, int], StepBase]] = {
    "openvla": lambda vla, inputs, n: PolicyStep(vla, inputs, n),
    "openvla-remote": lambda vla, inputs, n: PolicyStep(vla, inputs, n),
    "openvla-oft": lambda vla, inputs, n: OFTStep(vla, inputs),
    "openvla-oft-remote": lambda vla, inputs, n: PolicyStep(vla, inputs, n),
}


def _make_step(vla: nn.Module, inputs: StepInputs, num_action_tokens: int) -> StepBase:
    """The step of ``vla``'s family (:data:`STEPS`)."""
    return STEPS[family_of(vla).name](vla, inputs, num_action_tokens)


def _answer_of(vla: nn.Module, step: StepBase) -> Callable[[Any], Any]:
    """What one ``predict_action`` result becomes as the model's answer (OFT: its actions; OpenVLA: its actions
    with ``generate``'s tokens and logits, one untimed call)."""
    if isinstance(step, OFTStep):
        return step.answer
    return lambda predicted: model_answer(vla, step, predicted)


def _fidelity(step: StepBase, base: Any, answer: Any, out: Any, unnorm_key: str) -> dict:
    if isinstance(step, OFTStep):
        return step.fidelity(base, answer, out, unnorm_key)
    return fidelity(base, answer, out.tokens)


def _setting_record(vla: nn.Module, step: StepBase, s: Setting) -> tuple[dict, Any]:
    """Untimed part of one setting's record (reduction attached): shapes, tokens, MACs and memory, from one
    step; returns the record and the step's output (its tokens or actions, for the fidelity fields)."""
    reseed(vla)
    (out, macs), memory = step_peak_memory_mb(step, lambda: phase_macs(step))
    n_in, k = step.num_patches, out.shapes["reduced_features_shape"][1]
    first = s.parts[0] if s.parts else s
    pool = first.method == POOL_METHOD
    rec: dict = {
        "method": s.family, "setting": s.label, "site": "+".join(p.site for p in s.parts) or BASELINE,
        "reduction_ratio": k / n_in if pool else first.keep_ratio, "depth_fraction": first.depth_fraction,
        "cut": reduction_cut(vla),
        "spatial_merge_size": first.spatial_merge_size if pool else None, "num_patches": k, "num_patches_in": n_in,
        "llm_visual_tokens": out.llm_visual_tokens, "tokens_kept": out.llm_visual_tokens / n_in,
        "seq_len": out.seq_len,
        "batch_size": out.shapes["pixel_values_shape"][0], "vision_reduced": any(p.site == "vision" for p in s.parts),
        "model_kind": "openvla-oft" if isinstance(step, OFTStep) else "openvla", **out.shapes, **macs, **memory,
    }
    return rec, out


def benchmark_token_reduction(
    vla: nn.Module,
    sample_inputs: dict[str, torch.Tensor],
    methods: Sequence[str] = SWEEP_METHODS,
    ratios: Sequence[float] = (0.75, 0.5, 0.25),
    spatial_merge_size: int | Sequence[int] = DEFAULT_MERGE_SIZE,
    num_runs: int = 10,
    warmup: int = 2,
    device: torch.device | str | None = None,
    progress: bool = True,
    unnorm_key: str | None = None,
    num_action_tokens: int | None = None,
    seed: int = 0,
    extra_settings: Sequence[str | Setting] = (),
    on_progress: Callable[[str], None] | None = None,
) -> list[dict]:
    """Benchmark one control step of ``vla`` unreduced and under each reduction setting.

    Args:
        vla: OpenVLA-style model (reference, HF remote code or wrapped) or a native OpenVLA-OFT model; left
            exactly as it was found (any reduction already attached is detached for the run and put back after).
        sample_inputs: processor outputs: ``input_ids`` (B, L), ``attention_mask`` (B, L),
            ``pixel_values`` (B, C, H, W; OFT: (B, n * C, H, W) for its n images) and, for OFT with a proprio
            projector, ``proprio`` (B, proprio_dim) normalised state.
        methods, ratios, spatial_merge_size: projector-site settings, see :func:`build_settings`.
        extra_settings: further settings (specs such as ``"vision:attention:0.25@0.3"`` or ``"llm:attention:0.5@0.25"``,
            combinations joined with ``+``; see :mod:`prismatic_tr.vla.spec`).
        num_runs: timed rounds (every setting once per round); warmup: untimed rounds first.
        device: where the model lives (default: its parameters' device); must match the model.
        unnorm_key: dataset key of ``vla.norm_stats`` for un-normalising actions (default: the first).
        num_action_tokens: action tokens decoded per step (default: the model's ``get_action_dim``, 7).
        seed: seed of the ``random`` strategy.
        on_progress: called with ``"record"`` after each setting's untimed measurements and ``"round"`` after each
            setting's warm-up or timed round (a caller's progress bar; the built-in one is then off).

    Returns:
        One dict per setting, baseline first; fields are described in the module docstring.
    """
    if isinstance(num_runs, bool) or not isinstance(num_runs, int) or num_runs < 1:
        raise ValueError(f"num_runs={num_runs!r} is not allowed; use an integer >= 1")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup={warmup!r} is not allowed; use an integer >= 0")
    settings = list(dict.fromkeys(build_settings(methods, ratios, spatial_merge_size)
                                  + [x if isinstance(x, Setting) else parse_setting(x) for x in extra_settings]))
    dev = check_device(vla, device)
    unnorm_key = pick_unnorm_key(vla, unnorm_key)
    if num_action_tokens is None:
        get_dim = getattr(unwrap_vla(vla), "get_action_dim", None)
        num_action_tokens = int(get_dim(unnorm_key)) if callable(get_dim) else 7
    saved = model_state(vla)
    try:
        remove_token_reduction(vla)
        with torch.no_grad():  # not inference_mode: FlopCounterMode counts nothing there on torch 2.2
            return _run(vla, settings, prepare_inputs(vla, sample_inputs, dev), dev, num_runs, warmup, progress,
                        unnorm_key, num_action_tokens, seed, on_progress)
    finally:
        restore_model_state(vla, saved)


def _run(vla: nn.Module, settings: list[Setting], inputs: StepInputs, dev: torch.device, num_runs: int,
         warmup: int, progress: bool, unnorm_key: str, num_action_tokens: int, seed: int,
         on_progress: Callable[[str], None] | None = None) -> list[dict]:
    step = _make_step(vla, inputs, num_action_tokens)
    records: list[dict] = []
    outs: list[Any] = []
    for s in settings:
        with reductions_attached(vla, s.reductions(seed)):
            rec, out = _setting_record(vla, step, s)
        records.append(rec)
        outs.append(out)
        if on_progress is not None:
            on_progress("record")
    samples, e2e, answers = _timed_rounds(vla, step, settings, num_runs, warmup, dev, progress, seed, unnorm_key,
                                          _answer_of(vla, step), on_progress)
    for rec, out, answer in zip(records, outs, answers, strict=True):
        rec.update(_fidelity(step, answers[0], answer, out, unnorm_key))
    for rec, smp, pa in zip(records, samples, e2e, strict=True):
        rec.update(_timing_fields(smp, step.phases))
        stats = summarize(pa)
        rec.update(predict_action_ms=stats["median"], predict_action_ms_p10=stats["p10"],
                   predict_action_ms_p90=stats["p90"], overhead_ms=stats["median"] - rec["total_ms"])
        rec.update(num_runs=num_runs, warmup=warmup, device=str(dev),
                   dtype=str(inputs.pixel_values.dtype).replace("torch.", ""))
    for rec in records:
        rec["predict_action_speedup"] = records[0]["predict_action_ms"] / rec["predict_action_ms"]
    add_speedup_fields(records, records[0]["seq_len"] - records[0]["num_patches"], step.phases)
    add_noise_fields(records)
    return records
