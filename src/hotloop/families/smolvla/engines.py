"""SmolVLA as tensor-only sub-engines with fixed shapes (the interface backends and the planner see).

    SmolVLAEngineShape(batch, views, prompt_slots, num_steps)            frozen; one compiled shape
    build_smolvla_subengines(model, shape, dtype) -> {name: SubEngine}

Sub-engines (P = views * tokens per view + prompt_slots + 1 (or prefix_length), S = chunk, D = head_dim,
Ls / Lc = expert layers that self- / cross-attend, "dtype" the engine's dtype):

    vision        images (B, V, 3, H, W) f32                                   -> image_tokens (B, V*T, W) dtype
    prefix        image_tokens, lang_tokens (B, L) i64, state (B, max_state_dim) f32, prefix_mask (B, P, P),
                  prefix_cos, prefix_sin (B, P, 1, D/2) f32
                                        -> self_k, self_v (Ls, B, P, KV, D) and cross_k, cross_v (Lc, B, P, KV, D)
    denoise_step  x_t (B, S, A) f32, the K/V, suffix_mask (B, S, P+S), suffix_cos, suffix_sin (B, S, 1, D/2),
                  time_cond (B, S, expert width) f32                        -> velocity (B, S, A) f32
    denoise_loop  noise, the K/V, suffix tables, time_table (N, B, S, expert width) -> actions (B, S, A) f32

Only the K/V the expert reads leave the prefix: a self-attention layer's cached VLM keys (after RoPE) and
values; for a cross-attention layer, the cached VLM keys / values already projected by that expert layer's
own k_proj / v_proj. LeRobot projects them again at every denoising step; they do not depend on the flow
state, so projecting them once per observation gives the same numbers and saves that work per step. VLM
layers past the last one the expert reads are not run. A config without self (or cross) layers has no
self_* (cross_*) tensors at all: the signatures are built from the layer plan.

Masks, RoPE angles and the time embedding come from `hotloop.families.smolvla.tables` (float32, outside
the graph); every operation inside is the model's own (`hotloop.models.smolvla`), so the fp32 engines
reproduce `sample_actions` bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hotloop.errors import ConfigError
from hotloop.families.examples import model_in, run_examples
from hotloop.families.flow import EulerLoop, FlowStepEngine
from hotloop.families.protocol import PositiveShape, Signature, SubEngine
from hotloop.families.smolvla.observation import example_observation
from hotloop.families.smolvla.tables import observation_tables, time_rows
from hotloop.models.smolvla import SmolVLAModel
from hotloop.models.smolvla_config import SmolVLAConfig
from hotloop.models.smolvlm import LlamaLayer, apply_rope, eager_attention, rope_tables

SUBENGINE_NAMES = ("vision", "prefix", "denoise_step", "denoise_loop")


@dataclass(frozen=True)
class SmolVLAEngineShape(PositiveShape):
    """The fixed shape a set of sub-engines is built for. prompt_slots <= the tokenizer's max_length."""

    batch: int
    views: int
    prompt_slots: int
    num_steps: int

    @classmethod
    def of(cls, cfg: SmolVLAConfig, batch: int = 1) -> SmolVLAEngineShape:
        """The config's own full shape: every prompt slot the tokenizer can fill, its views and steps."""
        return cls(batch, cfg.views, cfg.tokenizer.max_length, cfg.num_steps)


def kv_plan(cfg: SmolVLAConfig) -> tuple[list[tuple[int, int, bool, int]], int, int]:
    """([(VLM layer, expert layer, cross, index in its stack)] in layer order, #self, #cross)."""
    plan, n_self, n_cross = [], 0, 0
    for i, layer in enumerate(cfg.layers):
        if layer.expert is None:  # no expert layer here: the chunk passes through unchanged
            continue
        if layer.cross:
            plan.append((i, layer.expert, True, n_cross))
            n_cross += 1
        else:
            plan.append((i, layer.expert, False, n_self))
            n_self += 1
    return plan, n_self, n_cross


def kv_names(cfg: SmolVLAConfig) -> tuple[str, ...]:
    _, n_self, n_cross = kv_plan(cfg)
    return (("self_k", "self_v") if n_self else ()) + (("cross_k", "cross_v") if n_cross else ())


def signatures(cfg: SmolVLAConfig) -> dict[str, Signature]:
    kv = kv_names(cfg)
    suffix = ("suffix_mask", "suffix_cos", "suffix_sin")
    return {
        "vision": Signature(("images",), ("image_tokens",)),
        "prefix": Signature(
            ("image_tokens", "lang_tokens", "state", "prefix_mask", "prefix_cos", "prefix_sin"), kv
        ),
        "denoise_step": Signature(("x_t", *kv, *suffix, "time_cond"), ("velocity",)),
        "denoise_loop": Signature(("noise", *kv, *suffix, "time_table"), ("actions",)),
    }


# ---- the modules -------------------------------------------------------------------------------------


class VisionEngine(nn.Module):
    """images (B, V, 3, H, W) in [-1, 1] -> image tokens (B, V*T, text width): `SmolVLAModel.vision` over the
    vision tower and connector alone (so the engine holds only their weights)."""

    def __init__(self, model: SmolVLAModel) -> None:
        super().__init__()
        vlm = model.vlm_with_expert.vlm.model
        self.vision_model = vlm.vision_model
        self.connector = vlm.connector
        self.width = model.cfg.vlm.text.width

    def forward(self, images: Tensor) -> Tensor:
        b, nv = images.shape[:2]
        tokens = self.connector(self.vision_model(images.flatten(0, 1)))
        # LeRobot scales by a tensor of the tokens' dtype, not a Python float.
        scale = torch.tensor(self.width**0.5, dtype=tokens.dtype, device=tokens.device)
        return cast(Tensor, (tokens * scale).reshape(b, nv * tokens.shape[1], -1))


class PrefixEngine(nn.Module):
    """[image tokens (+ special tokens), prompt, state] through the VLM once: the K/V the expert reads."""

    def __init__(self, model: SmolVLAModel) -> None:
        super().__init__()
        cfg = model.cfg
        self.cfg = cfg
        vlm = model.vlm_with_expert.vlm.model
        self.embed_tokens = vlm.text_model.embed_tokens
        self.state_proj = model.state_proj
        self.plan, self.n_self, self.n_cross = kv_plan(cfg)
        last = max(i for i, _, _, _ in self.plan)
        self.layers = nn.ModuleList(list(vlm.text_model.layers)[: last + 1])
        expert = cast(list[LlamaLayer], list(model.vlm_with_expert.lm_expert.layers))
        # The expert's cross-attention k/v projections, applied once here instead of at every step.
        self.cross_k = nn.ModuleDict(
            {str(i): expert[e].self_attn.k_proj for i, e, cross, _ in self.plan if cross}
        )
        self.cross_v = nn.ModuleDict(
            {str(i): expert[e].self_attn.v_proj for i, e, cross, _ in self.plan if cross}
        )
        self.start_ids: Tensor
        self.end_ids: Tensor
        self.register_buffer(
            "start_ids", torch.tensor(cfg.image_start_ids, dtype=torch.int64), persistent=False
        )
        self.register_buffer("end_ids", torch.tensor(cfg.image_end_ids, dtype=torch.int64), persistent=False)

    def embed(self, image_tokens: Tensor, lang_tokens: Tensor, state: Tensor) -> Tensor:
        """LeRobot's embed_prefix embeddings (its `hotloop.models.smolvla.SmolVLAModel.embed_prefix`)."""
        cfg = self.cfg
        b, t = image_tokens.shape[0], cfg.image_tokens_per_view
        weight = self.embed_tokens.weight
        embs: list[Tensor] = []
        for view in range(cfg.views):
            if cfg.image_start_ids:  # raw embeddings: LeRobot does not scale the image special tokens
                embs.append(weight[self.start_ids][None].expand(b, -1, -1))
            embs.append(image_tokens[:, view * t : (view + 1) * t].to(weight.dtype))
            if cfg.image_end_ids:
                embs.append(weight[self.end_ids][None].expand(b, -1, -1))
        embs.append(self.embed_tokens(lang_tokens) * math.sqrt(cfg.vlm.text.width))
        state_emb = self.state_proj(state.to(self.state_proj.weight.dtype))
        embs.append(state_emb[:, None, :].to(weight.dtype))
        x = torch.cat(embs, dim=1)
        natural = x.shape[1]
        if natural < cfg.prefix_length:
            x = F.pad(x, (0, 0, 0, cfg.prefix_length - natural))
        return x

    def forward(
        self,
        image_tokens: Tensor,
        lang_tokens: Tensor,
        state: Tensor,
        prefix_mask: Tensor,
        prefix_cos: Tensor,
        prefix_sin: Tensor,
    ) -> tuple[Tensor, ...]:
        x = self.embed(image_tokens, lang_tokens, state)
        b, p = x.shape[:2]
        allowed = prefix_mask > 0.5
        head_dim = self.cfg.expert.head_dim
        weight_dtype = self.embed_tokens.weight.dtype
        needed = {i: cross for i, _, cross, _ in self.plan}
        self_k: list[Tensor] = []
        self_v: list[Tensor] = []
        cross_k: list[Tensor] = []
        cross_v: list[Tensor] = []
        layers = cast(list[LlamaLayer], list(self.layers))
        for i, layer in enumerate(layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            k = apply_rope(attn.heads(attn.k_proj, h), prefix_cos, prefix_sin)
            v = attn.heads(attn.v_proj, h)
            if i in needed and needed[i]:
                # LlamaAttention.heads of the expert layer's own projections, on the cached K/V.
                ck = cast(nn.Linear, self.cross_k[str(i)])(k.reshape(b, p, -1).to(weight_dtype))
                cv = cast(nn.Linear, self.cross_v[str(i)])(v.reshape(b, p, -1).to(weight_dtype))
                cross_k.append(ck.view(b, p, -1, head_dim))
                cross_v.append(cv.view(b, p, -1, head_dim))
            elif i in needed:
                self_k.append(k)
                self_v.append(v)
            if i < len(layers) - 1:
                q = apply_rope(attn.heads(attn.q_proj, h), prefix_cos, prefix_sin)
                x = layer.finish(x, eager_attention(q, k, v, allowed, self.cfg.vlm.text.head_dim))
        out: list[Tensor] = []
        if self.n_self:
            out += [torch.stack(self_k), torch.stack(self_v)]
        if self.n_cross:
            out += [torch.stack(cross_k), torch.stack(cross_v)]
        return tuple(out)


class DenoiseStepEngine(FlowStepEngine):
    """One velocity evaluation v(x_t, t) over the prefix K/V; the time enters as its embedding."""

    def __init__(self, model: SmolVLAModel) -> None:
        super().__init__()
        cfg = model.cfg
        self.cfg = cfg
        self.plan, self.n_self, self.n_cross = kv_plan(cfg)
        expert = model.vlm_with_expert.lm_expert
        self.expert_layers = nn.ModuleList(expert.layers[e] for _, e, _, _ in self.plan)
        self.norm = expert.norm
        self.action_in_proj = model.action_in_proj
        self.action_time_mlp_in = model.action_time_mlp_in
        self.action_time_mlp_out = model.action_time_mlp_out
        self.action_out_proj = model.action_out_proj
        # Cross-attention queries are rotated from position 0 ("positions - min(positions)"): a constant.
        cos0, sin0 = rope_tables(torch.arange(cfg.chunk_size)[None], cfg.expert.head_dim)
        self.cross_cos: Tensor
        self.cross_sin: Tensor
        self.register_buffer("cross_cos", cos0, persistent=False)
        self.register_buffer("cross_sin", sin0, persistent=False)

    def run(
        self,
        x_t: Tensor,
        kv: tuple[Tensor, ...],
        allowed: Tensor,
        cos: Tensor,
        sin: Tensor,
        time_cond: Tensor,
    ) -> Tensor:
        """The step with its masks already boolean (the loop converts them once)."""
        cfg, head_dim = self.cfg, self.cfg.expert.head_dim
        self_k, self_v = (kv[0], kv[1]) if self.n_self else (None, None)
        cross_k, cross_v = (kv[-2], kv[-1]) if self.n_cross else (None, None)
        action = self.action_in_proj(x_t.to(self.action_in_proj.weight.dtype))
        joint = torch.cat((action, time_cond.to(action.dtype)), dim=2)
        x = self.action_time_mlp_out(F.silu(self.action_time_mlp_in(joint)))
        p = allowed.shape[2] - cfg.chunk_size
        prefix_allowed = allowed[:, :, :p]
        layers = cast(list[LlamaLayer], list(self.expert_layers))
        for layer, (_, _, cross, j) in zip(layers, self.plan, strict=True):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            if cross:
                assert cross_k is not None and cross_v is not None
                q = apply_rope(attn.heads(attn.q_proj, h), self.cross_cos, self.cross_sin)
                att = eager_attention(q, cross_k[j], cross_v[j], prefix_allowed, head_dim)
            else:
                assert self_k is not None and self_v is not None
                q = apply_rope(attn.heads(attn.q_proj, h), cos, sin)
                keys = torch.cat((self_k[j], apply_rope(attn.heads(attn.k_proj, h), cos, sin)), dim=1)
                values = torch.cat((self_v[j], attn.heads(attn.v_proj, h)), dim=1)
                att = eager_attention(q, keys, values, allowed, head_dim)
            x = layer.finish(x, att)
        out = self.norm(x)[:, -cfg.chunk_size :].to(self.action_out_proj.weight.dtype)
        return cast(Tensor, self.action_out_proj(out)).float()

    def forward(self, x_t: Tensor, *args: Tensor) -> Tensor:
        """x_t, the K/V (as `kv_names`), suffix_mask, suffix_cos, suffix_sin, time_cond."""
        *kv, mask, cos, sin, time_cond = args
        return self.run(x_t, tuple(kv), mask > 0.5, cos, sin, time_cond)


class DenoiseLoopEngine(EulerLoop):
    """All N Euler steps unrolled: noise -> actions, x <- x + dt * v in float32 after every step."""

    step: DenoiseStepEngine

    def __init__(self, step: DenoiseStepEngine, num_steps: int) -> None:
        super().__init__(step, num_steps, persistent=False)

    def forward(self, noise: Tensor, *args: Tensor) -> Tensor:
        """noise, the K/V, suffix_mask, suffix_cos, suffix_sin, time_table (N, B, S, width)."""
        *kv, mask, cos, sin, time_table = args
        allowed = mask > 0.5
        x = noise.float()
        for i in range(self.num_steps):
            x = x + self.dt * self.step.run(x, tuple(kv), allowed, cos, sin, time_table[i])
        return x


# ---- building ----------------------------------------------------------------------------------------


@torch.no_grad()
def build_smolvla_subengines(
    model: SmolVLAModel, shape: SmolVLAEngineShape, dtype: torch.dtype
) -> dict[str, SubEngine]:
    """The four sub-engines of `model` for `shape`, in `dtype` (the model is copied if its dtype differs).

    The modules share the (copied) model's weights; example inputs come from a deterministic observation
    run through the eager engines, so they carry realistic values.
    """
    cfg = model.cfg
    check_shape(cfg, shape)
    model = cast(SmolVLAModel, model_in(model, dtype))
    step = DenoiseStepEngine(model).eval()
    modules: dict[str, nn.Module] = {
        "vision": VisionEngine(model).eval(),
        "prefix": PrefixEngine(model).eval(),
        "denoise_step": step,
        "denoise_loop": DenoiseLoopEngine(step, shape.num_steps).eval(),
    }
    return with_examples(cfg, shape, modules, time_rows(cfg, shape.num_steps, shape.batch))


def check_shape(cfg: SmolVLAConfig, shape: SmolVLAEngineShape) -> None:
    if shape.prompt_slots > cfg.tokenizer.max_length:
        raise ConfigError(
            f"prompt_slots {shape.prompt_slots} exceeds the tokenizer's max_length {cfg.tokenizer.max_length}"
        )
    if shape.views != cfg.views:
        raise ConfigError(
            f"views {shape.views}: this SmolVLA takes exactly {cfg.views} (cameras + empty slots)"
        )


def with_examples(
    cfg: SmolVLAConfig, shape: SmolVLAEngineShape, modules: Mapping[str, nn.Module], table: Tensor
) -> dict[str, SubEngine]:
    """SubEngines of `modules` with example inputs of `shape`, from a synthetic observation run through them."""
    obs = example_observation(cfg, shape.batch, shape.prompt_slots)
    values: dict[str, Tensor] = {"images": obs.images, "lang_tokens": obs.lang_tokens, "state": obs.state}
    values.update(observation_tables(cfg, obs.image_masks, obs.lang_masks))
    values["time_table"], values["time_cond"] = table, table[0]
    noise = torch.randn(
        shape.batch, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(1)
    )
    values["noise"] = values["x_t"] = noise
    constants = {"denoise_step": {"time_table": table}, "denoise_loop": {"time_table": table}}
    return run_examples(modules, signatures(cfg), values, constants)


def reshape_subengines(
    cfg: SmolVLAConfig, engines: Mapping[str, SubEngine], prompt_slots: int
) -> dict[str, SubEngine]:
    """The same modules (weights shared) with example inputs for another prompt length (a bucket)."""
    table = engines["denoise_step"].constants["time_table"]
    shape = SmolVLAEngineShape(
        batch=int(engines["denoise_step"].example_inputs[0].shape[0]),
        views=int(engines["vision"].example_inputs[0].shape[1]),
        prompt_slots=prompt_slots,
        num_steps=int(table.shape[0]),
    )
    check_shape(cfg, shape)
    return with_examples(cfg, shape, {n: e.module for n, e in engines.items()}, table)
