"""Roofline: analytic work against PyTorch's own FLOP counter, peaks cache, shares, bench integration."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from hotloop.families.pi.roofline import pi_stage_work
from hotloop.families.pi.sampling import make_noise
from hotloop.families.pi.targets import build_model, build_pi05_bench, random_observation
from hotloop.measure.bench import BenchConfig, run_bench
from hotloop.measure.roofline import (
    MatmulPeaks,
    StageWork,
    cached_peaks,
    load_peaks,
    measure_matmul_peak,
    peak_key,
    roofline,
    save_peaks,
)
from hotloop.models.configs import get_pi_config
from hotloop.models.pi0 import PiModel
from hotloop.targets import TargetOptions


def _counted(fn) -> int:  # type: ignore[no-untyped-def]
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        fn()
    return int(counter.get_total_flops())


@pytest.mark.parametrize("name", ["pi05:tiny", "pi0:tiny"])
def test_pi_flops_equal_torch_flop_counter(name: str) -> None:
    torch.set_num_threads(1)
    cfg = get_pi_config(name)
    model = build_model(cfg, torch.float32, "cpu", 0).requires_grad_(False)
    obs = random_observation(cfg, 2, "cpu", 0)
    work = pi_stage_work(cfg, "float32", batch=2, num_steps=1)
    tokens = model.vision(obs.images)
    cache = model.prefix(tokens, obs.image_masks, obs.lang_tokens, obs.lang_masks)
    assert (
        _counted(lambda: model.prefix(tokens, obs.image_masks, obs.lang_tokens, obs.lang_masks))
        == work["prefix"].flops
    )
    noise = make_noise(model, 2)
    assert (
        _counted(lambda: model.denoise_step(cache, noise, torch.tensor(1.0), obs.state))
        == work["denoise"].flops
    )
    # The counter does not see SigLIP's CPU scaled_dot_product_attention: add its two matmuls by hand.
    v, t = cfg.vision, cfg.vision.tokens_per_view
    sdpa = 2 * v.depth * 2 * 2 * t * t * v.width
    assert _counted(lambda: model.vision(obs.images)) + sdpa == work["vision"].flops


def test_pi_weight_bytes_equal_the_models_matrices() -> None:
    cfg = get_pi_config("pi05:small")
    with torch.device("meta"):
        model = PiModel(cfg)

    def matrices(module: torch.nn.Module, skip: tuple[str, ...] = ()) -> int:
        return sum(
            p.numel()
            for n, p in module.named_parameters()
            if p.ndim >= 2 and not any(s in n for s in ("position_embedding", *skip))
        )

    work = pi_stage_work(cfg, "bfloat16", num_steps=3)
    assert work["vision"].weight_bytes == 2 * (matrices(model.vision_tower) + matrices(model.projector))
    last = f"layers.{cfg.vlm.depth - 1}."
    vlm = matrices(model.vlm, skip=(last + "self_attn.o_proj", last + "mlp"))
    assert work["prefix"].weight_bytes == 2 * vlm
    expert = sum(
        matrices(getattr(model, n))
        for n in ("expert", "action_in_proj", "action_out_proj", "time_mlp_in", "time_mlp_out")
    )
    assert work["denoise"].weight_bytes == 2 * 3 * expert
    # Fewer prompt slots, less prefix work; the precomputed engines skip the time conditioning.
    assert (
        pi_stage_work(cfg, "float32", prompt_slots=32)["prefix"].flops
        < pi_stage_work(cfg, "float32")["prefix"].flops
    )
    kv_only = pi_stage_work(cfg, "float32", last_layer_query=False)["prefix"]
    full = pi_stage_work(cfg, "float32")["prefix"]
    q_out = cfg.vlm.num_heads * cfg.vlm.head_dim
    assert full.flops - kv_only.flops == 2 * cfg.prefix_len * cfg.vlm.width * q_out
    assert (
        pi_stage_work(cfg, "float32", time_conditioning=False)["denoise"].flops
        < pi_stage_work(cfg, "float32")["denoise"].flops
    )


def test_roofline_shares() -> None:
    peaks = MatmulPeaks(gflops={"float32": 100.0, "bfloat16": None}, threads=2, key="k", sizes={})
    rows = roofline(
        {
            "a": StageWork(2e9, 1e6, "float32"),
            "b": StageWork(1e9, 0, "bfloat16"),
            "c": StageWork(1e9, 0, "float32"),
        },
        {"a": 40.0, "b": 10.0},
        peaks,
    )
    assert rows["a"]["achieved_gflops"] == pytest.approx(50.0) and rows["a"]["peak_share"] == pytest.approx(
        0.5
    )
    assert rows["a"]["gflop"] == 2.0 and rows["a"]["weight_mb"] == 1.0
    assert rows["b"]["achieved_gflops"] == pytest.approx(100.0) and rows["b"]["peak_share"] is None
    assert rows["c"]["achieved_gflops"] is None  # no timing for that stage
    assert roofline({"a": StageWork(1e9, 0, "float32")}, {"a": 1.0}, None)["a"]["peak_share"] is None


def test_peaks_cache_round_trip_and_keys(tmp_path) -> None:  # type: ignore[no-untyped-def]
    gflops, n, kernel = measure_matmul_peak("float32", budget_s=0.0, max_n=256)
    assert gflops > 0 and n == 256 and kernel in ("torch.mm", "F.linear")
    int8, _, _ = measure_matmul_peak("int8", budget_s=0.0, max_n=256)
    assert int8 > 0
    key = peak_key(1)
    assert key != peak_key(2)  # another thread count is another machine configuration
    peaks = MatmulPeaks(
        gflops={"float32": gflops, "bfloat16": None, "int8": 1.0}, threads=1, key=key, sizes={"float32": n}
    )
    save_peaks(tmp_path, peaks)
    assert load_peaks(tmp_path, key) == peaks
    assert load_peaks(tmp_path, peak_key(2)) is None
    (tmp_path / f"peaks-{key}.json").write_text("{truncated")
    assert load_peaks(tmp_path, key) is None  # a corrupt cache is re-measured, never trusted
    torch.set_num_threads(1)
    assert cached_peaks(tmp_path / "empty", measure=False) is None


def test_pi_bench_reports_a_roofline(tmp_path) -> None:  # type: ignore[no-untyped-def]
    torch.set_num_threads(1)
    key = peak_key(1)
    save_peaks(
        tmp_path,
        MatmulPeaks(gflops={"float32": 50.0, "bfloat16": 10.0, "int8": None}, threads=1, key=key, sizes={}),
    )
    case = build_pi05_bench("tiny", TargetOptions(num_steps=2, prompt_tokens=3, buckets=(4,)))
    result = run_bench(case, BenchConfig(warmup=0, iterations=2, progress=False, roofline_cache=tmp_path))
    assert result.roofline is not None
    stages = result.roofline["stages"]
    assert set(stages) == {"vision", "prefix", "denoise"}
    work = pi_stage_work(
        get_pi_config("pi05:tiny"), "float32", prompt_slots=4, num_steps=2, time_conditioning=False
    )
    assert stages["prefix"]["gflop"] == pytest.approx(work["prefix"].flops / 1e9)
    assert stages["denoise"]["peak_gflops"] == 50.0 and stages["denoise"]["peak_share"] > 0
    assert json.loads(json.dumps(result.to_dict()))["roofline"]["peaks"]["key"] == key
    off = run_bench(case, BenchConfig(warmup=0, iterations=1, progress=False, roofline=False))
    assert off.roofline is None and off.to_dict()["roofline"] is None
