"""The analytic work of one pi0 / pi0.5 inference per stage (the roofline's numerator): FLOPs counted
over matmuls and attention (2 per multiply-add) and the weight bytes each stage reads."""

from __future__ import annotations

from hotloop.measure.roofline import BYTES, StageWork, decoder_flops, linear_flops
from hotloop.models.configs import PiConfig


def pi_stage_work(
    cfg: PiConfig,
    precision: str,
    batch: int = 1,
    views: int | None = None,
    prompt_slots: int | None = None,
    num_steps: int | None = None,
    time_conditioning: bool = True,
    last_layer_query: bool = True,
) -> dict[str, StageWork]:
    """FLOPs and weight bytes of vision, prefix and denoise (all N steps) for one pi0 / pi0.5 inference.

    `prompt_slots` is what the prefix runs over (the bucket, or all slots: padding costs as much as real
    tokens). `time_conditioning=False` leaves out pi0.5's per-step time MLP and adaRMS projections and
    pi0's time half of the action-time MLP, which precomputed engines no longer run;
    `last_layer_query=False` the VLM's last-layer queries, which the model computes and discards
    (`compile.fuse.drop_unused_query` removes them).
    """
    v, vl, ex = cfg.vision, cfg.vlm, cfg.expert
    views = views if views is not None else cfg.views
    slots = prompt_slots if prompt_slots is not None else cfg.max_token_len
    steps = num_steps if num_steps is not None else cfg.num_steps
    nbytes = BYTES[precision]
    t = v.tokens_per_view
    vision_layer = (
        linear_flops(t, v.width, 4 * v.width)
        + 2 * 2.0 * t * t * v.width
        + linear_flops(t, v.width, 2 * v.mlp_dim)
    )
    vision_flops = views * (
        linear_flops(t, 3 * v.patch_size**2, v.width)
        + v.depth * vision_layer
        + linear_flops(t, v.width, vl.width)
    )
    vision_params = (
        3 * v.patch_size**2 * v.width
        + v.depth * (4 * v.width**2 + 2 * v.width * v.mlp_dim)
        + v.width * vl.width
    )
    p = views * t + slots
    qkv = (vl.num_heads + 2 * vl.num_kv_heads) * vl.head_dim
    vlm_layer_params = vl.width * qkv + vl.num_heads * vl.head_dim * vl.width + 3 * vl.width * vl.mlp_dim
    prefix_flops = (vl.depth - 1) * decoder_flops(
        p, p, vl.width, vl.num_heads, vl.num_kv_heads, vl.head_dim, vl.mlp_dim
    )
    # The last layer feeds the expert only its keys and values; the model computes its queries too.
    last_out = qkv if last_layer_query else 2 * vl.num_kv_heads * vl.head_dim
    prefix_flops += linear_flops(p, vl.width, last_out)
    prefix_params = (vl.depth - 1) * vlm_layer_params + vl.width * last_out
    s = cfg.suffix_len
    ex_qkv = (ex.num_heads + 2 * ex.num_kv_heads) * ex.head_dim
    ex_layer_params = ex.width * ex_qkv + ex.num_heads * ex.head_dim * ex.width + 3 * ex.width * ex.mlp_dim
    step_flops = ex.depth * decoder_flops(
        s, p + s, ex.width, ex.num_heads, ex.num_kv_heads, ex.head_dim, ex.mlp_dim
    )
    step_flops += linear_flops(cfg.chunk_size, cfg.max_action_dim, ex.width) * 2  # action in / out
    step_params = ex.depth * ex_layer_params + 2 * cfg.max_action_dim * ex.width
    if cfg.pi05:
        time_params = 2 * ex.width**2 + (2 * ex.depth + 1) * ex.width * 3 * ex.width
        time_flops = 2.0 * time_params  # one row: the time is shared by the whole chunk
    else:
        # state token, then the action-time MLP: its time half (W x W on one row per step) is the part
        # precomputed engines fold into a per-step bias.
        step_flops += linear_flops(1, cfg.max_state_dim, ex.width) + 2 * linear_flops(
            cfg.chunk_size, ex.width, ex.width
        )
        step_params += cfg.max_state_dim * ex.width + 2 * ex.width**2
        time_params = ex.width**2
        time_flops = linear_flops(cfg.chunk_size, ex.width, ex.width)  # on line it runs on every chunk row
    if time_conditioning:
        step_flops += time_flops
        step_params += time_params
    return {
        "vision": StageWork(batch * vision_flops, vision_params * nbytes, precision),
        "prefix": StageWork(batch * prefix_flops, prefix_params * nbytes, precision),
        "denoise": StageWork(batch * steps * step_flops, steps * step_params * nbytes, precision),
    }
