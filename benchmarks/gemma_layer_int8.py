"""Gemma-2B decoder layers (pi0.5's prefix) over T tokens: eager bf16 against OpenVINO's int8 options.

Why the pi05:full prefix needed static int8 (docs/compile.md, "Static int8 at full size"): times each way of
running the same layers at 2 threads, in one process, and the output cosine against fp32 torch:
eager bf16; OpenVINO bf16; int8 weights with dynamic activations (groups of 32, as the `int8-dynamic`
precision; per row; f32 or bf16 float parts); NNCF static int8; hotloop's lean static int8
(`hotloop.compile.backends.lean_int8`). Random weights (std 0.02) and random calibration inputs: a speed
and memory probe, not an accuracy figure. Needs a quiet machine (`uptime` first).
Usage: PYTHONPATH=src .venv/bin/python benchmarks/gemma_layer_int8.py [--tokens 968] [--layers 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import warnings
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from hotloop.compile.backends.lean_int8 import lean_static_int8
from hotloop.compile.planner import time_calls

WIDTH, HEADS, HEAD_DIM, MLP = 2048, 8, 256, 16384  # PaliGemma's Gemma 2B


class Layer(nn.Module):
    """One Gemma decoder layer (RMS norms, 8 query heads over 1 key/value head, GeGLU MLP)."""

    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(WIDTH, eps=1e-6), nn.RMSNorm(WIDTH, eps=1e-6)
        self.q = nn.Linear(WIDTH, HEADS * HEAD_DIM, bias=False)
        self.k = nn.Linear(WIDTH, HEAD_DIM, bias=False)
        self.v = nn.Linear(WIDTH, HEAD_DIM, bias=False)
        self.o = nn.Linear(HEADS * HEAD_DIM, WIDTH, bias=False)
        self.gate = nn.Linear(WIDTH, MLP, bias=False)
        self.up = nn.Linear(WIDTH, MLP, bias=False)
        self.down = nn.Linear(MLP, WIDTH, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, n, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k(h).view(b, n, 1, HEAD_DIM).transpose(1, 2).expand(b, HEADS, n, HEAD_DIM)
        v = self.v(h).view(b, n, 1, HEAD_DIM).transpose(1, 2).expand(b, HEADS, n, HEAD_DIM)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.o(a.transpose(1, 2).reshape(b, n, HEADS * HEAD_DIM))
        h = self.n2(x)
        return x + self.down(F.gelu(self.gate(h), approximate="tanh") * self.up(h))


class Stack(nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, mask)
        return x


def _time(fn: Any, iters: int = 6, warmup: int = 2) -> tuple[float, float]:
    stats = time_calls(fn, warmup, iters)  # the planner's own timing loop
    return stats.p50, stats.max


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=968, help="sequence length (pi05:full, 3 views: 968)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import nncf
    import openvino as ov

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = Stack(args.layers).eval()
    for p in model.parameters():
        nn.init.normal_(p, std=0.02)
    x, mask = torch.randn(1, args.tokens, WIDTH), torch.zeros(1, 1, args.tokens, args.tokens)
    calibration = [(torch.randn(1, args.tokens, WIDTH), mask) for _ in range(4)]
    with torch.no_grad():
        ref = model(x, mask)
        half = Stack(args.layers).eval()
        half.load_state_dict(model.state_dict())
        half = half.bfloat16()
        xb, mb = x.bfloat16(), mask.bfloat16()
        rows: dict[str, tuple[float, ...]] = {"eager bf16": _time(lambda: half(xb, mb))}
        converted = ov.convert_model(model, example_input=(x, mask))
    core = ov.Core()

    def run(graph: Any, config: dict[str, Any], name: str) -> None:
        compiled = core.compile_model(graph, "CPU", {"INFERENCE_NUM_THREADS": args.threads, **config})
        request = compiled.create_infer_request()
        out = torch.from_numpy(request.infer([x.numpy(), mask.numpy()])[0].copy())
        cos = F.cosine_similarity(out.flatten(), ref.flatten(), dim=0).item()
        rows[name] = (*_time(lambda: request.infer([x.numpy(), mask.numpy()])), cos)

    run(converted, {"INFERENCE_PRECISION_HINT": "bf16"}, "OpenVINO bf16")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        weights = nncf.compress_weights(converted.clone(), mode=nncf.CompressWeightsMode.INT8_SYM)
        from nncf.quantization.advanced_parameters import (
            AdvancedQuantizationParameters,
            AdvancedSmoothQuantParameters,
        )

        static = nncf.quantize(
            converted.clone(),
            nncf.Dataset([tuple(t.numpy() for t in c) for c in calibration]),
            model_type=nncf.ModelType.TRANSFORMER,
            subset_size=len(calibration),
            advanced_parameters=AdvancedQuantizationParameters(
                smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=-1)
            ),
        )
    per_row = 2**32 - 1  # a group as long as the row: one range per token
    for hint in ("f32", "bf16"):
        for group, label in ((32, "groups of 32"), (per_row, "per row")):
            config = {"INFERENCE_PRECISION_HINT": hint, "DYNAMIC_QUANTIZATION_GROUP_SIZE": group}
            run(weights, config, f"int8 weights, dynamic {label}, {hint}")
    for hint in ("f32", "bf16"):
        run(static, {"INFERENCE_PRECISION_HINT": hint}, f"NNCF static int8, {hint}")
    lean = lean_static_int8(converted.clone(), model, calibration)
    for hint in ("f32", "bf16"):
        run(lean, {"INFERENCE_PRECISION_HINT": hint}, f"lean static int8, {hint}")
    base = rows["eager bf16"][0]
    print(f"{args.layers} Gemma-2B layers x {args.tokens} tokens, {args.threads} threads")
    for name, (p50, worst, *cos) in rows.items():
        extra = f"  cos {cos[0]:.5f}" if cos else ""
        print(f"{name:40s} p50 {p50:8.1f} ms  max {worst:8.1f} ms  {base / p50:5.2f}x eager bf16{extra}")


if __name__ == "__main__":
    main()
