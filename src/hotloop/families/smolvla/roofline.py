"""The analytic work of one SmolVLA inference per stage (the roofline's numerator), as hotloop's sub-engines
run it: FLOPs over matmuls and attention (2 per multiply-add) and the weight bytes each stage reads.

The prefix runs the VLM layers up to the last one the expert reads (that one for its keys and values
only) and projects the cross-attention layers' K/V once; each denoising step runs the expert's layers
(cross layers without k/v projections) and the action / time projections.
"""

from __future__ import annotations

from hotloop.families.smolvla.engines import kv_plan
from hotloop.measure.roofline import BYTES, StageWork, linear_flops
from hotloop.models.smolvla_config import SmolVLAConfig


def smolvla_stage_work(
    cfg: SmolVLAConfig,
    precisions: dict[str, str],
    batch: int = 1,
    prompt_slots: int | None = None,
    num_steps: int | None = None,
) -> dict[str, StageWork]:
    """FLOPs and weight bytes of vision, prefix and denoise (all N steps) at each stage's precision.

    `prompt_slots`: what the prefix runs over (a bucket, or every slot: padding costs as much as a token).
    """
    vis, txt, ex = cfg.vlm.vision, cfg.vlm.text, cfg.expert
    slots = prompt_slots if prompt_slots is not None else cfg.tokenizer.max_length
    steps = num_steps if num_steps is not None else cfg.num_steps
    h, w = cfg.image_size
    n = (h // vis.patch_size) * (w // vis.patch_size)
    t = cfg.image_tokens_per_view
    patch_in = vis.num_channels * vis.patch_size**2
    connector_in = vis.width * cfg.vlm.scale_factor**2
    vision_layer = (
        linear_flops(n, vis.width, 4 * vis.width)
        + 2 * 2.0 * n * n * vis.width
        + linear_flops(n, vis.width, 2 * vis.mlp_dim)
    )
    vision_flops = cfg.views * (
        linear_flops(n, patch_in, vis.width)
        + vis.depth * vision_layer
        + linear_flops(t, connector_in, txt.width)
    )
    vision_params = (
        patch_in * vis.width
        + vis.depth * (4 * vis.width**2 + 2 * vis.width * vis.mlp_dim)
        + connector_in * txt.width
    )

    plan, _, n_cross = kv_plan(cfg)
    p = cfg.prefix_len(slots)
    q_width, kv = txt.num_heads * txt.head_dim, txt.kv_width
    layer_params = txt.width * (q_width + 2 * kv) + q_width * txt.width + 3 * txt.width * txt.mlp_dim
    layer_flops = 2.0 * p * layer_params + 2 * 2.0 * p * p * q_width
    depth = max(i for i, _, _, _ in plan) + 1  # VLM layers run; the last one for its keys and values
    prefix_flops = (depth - 1) * layer_flops + linear_flops(p, txt.width, 2 * kv)
    prefix_flops += n_cross * linear_flops(p, kv, 2 * kv) + linear_flops(1, cfg.max_state_dim, txt.width)
    prefix_params = (depth - 1) * layer_params + txt.width * 2 * kv + n_cross * kv * 2 * kv
    prefix_params += cfg.max_state_dim * txt.width

    s = cfg.chunk_size
    eq = ex.num_heads * ex.head_dim
    step_params = 2 * cfg.max_action_dim * ex.width + 3 * ex.width**2  # action in / out, time MLP
    step_flops = 2.0 * s * step_params
    for _, _, cross, _ in plan:
        kv_params = 0 if cross else 2 * ex.width * ex.kv_width
        params = ex.width * eq + eq * ex.width + kv_params + 3 * ex.width * ex.mlp_dim
        keys = p if cross else p + s
        step_params += params
        step_flops += 2.0 * s * params + 2 * 2.0 * s * keys * eq

    def work(stage: str, flops: float, params: int, reads: int = 1) -> StageWork:
        precision = precisions.get(stage, "float32")
        return StageWork(batch * flops, reads * params * BYTES[precision], precision)

    return {
        "vision": work("vision", vision_flops, vision_params),
        "prefix": work("prefix", prefix_flops, prefix_params),
        "denoise": work("denoise", steps * step_flops, step_params, steps),
    }
