"""pi0 / pi0.5 as tensor-only sub-engines with fixed shapes, and the pipeline that composes them.

The interface the backends, the artifact and the planner code against (keep it stable):

    PiEngineShape(batch, views, prompt_slots, num_steps)         frozen; one compiled shape
    build_pi_subengines(model, shape, dtype) -> {name: SubEngine}
    SubEngine(name, module, example_inputs, input_names, output_names, constants)
    PiPipeline(cfg, shape, runners, constants, signatures).sample(obs, noise[, timer]) -> actions

Sub-engines (all inputs and outputs are tensors; shapes fixed by `PiEngineShape`; P = views * tokens per
view + prompt_slots, S = the suffix length, N = num_steps, D = head_dim, "dtype" the engine's dtype):

    vision        images (B, V, 3, H, W) f32                                     -> image_tokens (B, V*T, W) dtype
    prefix        image_tokens dtype, lang_embeds (B, L, W) f32, prefix_mask (B, 1, P, P) f32,
                  prefix_cos, prefix_sin (B, P, D) f32                          -> k, v (depth, B, KV, P, D) dtype
    denoise_step  x_t (B, chunk, A) f32, k, v, suffix_mask (B, 1, S, P+S) f32, suffix_cos,
                  suffix_sin (B, S, D) f32, time_cond (...) f32[, state (B, max_state_dim) f32 (pi0)]
                                                                                 -> velocity (B, chunk, A) f32
    denoise_loop  noise (B, chunk, A) f32, k, v, suffix_mask, suffix_cos, suffix_sin,
                  time_table (N, ...) f32[, state]                               -> actions (B, chunk, A) f32

Where each input comes from (the names are the contract):
- images, state: the observation;
- lang_embeds: the rows of the constant `token_embedding` (V, W) for the observation's lang_tokens (cut to
  the engine's prompt_slots), gathered outside the graph (`lookup_rows`): the table is a quarter of
  pi0.5's weights and a prompt reads 200 of its 257,152 rows, so a loaded artifact maps it from its own
  file instead of holding it inside the prefix graph (`hotloop.compile.lookup_tables`);
- prefix_* and suffix_*: `compile.precompute.observation_tables`, float32, computed per observation
  outside any graph (RoPE and masks in float32: bf16 sine/cosine inside a compiled graph is wrong);
- time_table / time_cond: a build-time constant, `SubEngine.constants["time_table"]` (N, ...) float32;
  `denoise_step` gets row k at step k, `denoise_loop` the whole table. Its meaning belongs to the engine
  (pi0.5: adaRMS modulations per norm; pi0: the time embedding, or a folded time bias after
  `compile.precompute`/`compile.fuse` transforms), which is why the constants travel with the engine;
- image_tokens, k, v: outputs of the earlier sub-engines; x_t / noise: the flow state.

`PiPipeline` runs `vision`, `prefix`, then `denoise_loop` when a runner for it is given, else
`denoise_step` N times with the Euler update x <- x + dt * v in float32, exactly as `sampling.sample_actions`.
A runner is any callable taking the sub-engine's inputs positionally (in `input_names` order) and
returning a tensor or a tuple of tensors (in `output_names` order): an eager module, a compiled one, an
ONNX Runtime session wrapper...
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hotloop.errors import ConfigError
from hotloop.families.buckets import check_views_and_prompt
from hotloop.families.examples import model_in, run_examples
from hotloop.families.flow import VLM_FLOW_STAGES, EulerLoop, FlowStepEngine
from hotloop.families.lookup import lookup_rows
from hotloop.families.pi.blocks import (
    BlockNorm,
    DecoderBlock,
    blocks_from_stack,
    norm_from_model,
    split_outputs,
)
from hotloop.families.pi.precompute import observation_tables, time_table
from hotloop.families.pi.sampling import PiObservation
from hotloop.families.pipeline import StagePipeline
from hotloop.families.protocol import PositiveShape, Runner, Signature, SubEngine, as_tuple, constants_of
from hotloop.measure.stages import StageTimer, null_timer
from hotloop.models.configs import PiConfig
from hotloop.models.pi0 import PiModel, fit_views
from hotloop.models.siglip import SiglipAttention, SiglipLayer

SUBENGINE_NAMES = ("vision", "prefix", "denoise_step", "denoise_loop")
TOKEN_EMBEDDING = "token_embedding"  # the prefix's constant: the VLM's token-embedding table (V, W)
OBSERVATION_TABLES = ("prefix_mask", "prefix_cos", "prefix_sin", "suffix_mask", "suffix_cos", "suffix_sin")


@dataclass(frozen=True)
class PiEngineShape(PositiveShape):
    """The fixed shape a set of sub-engines is built for. prompt_slots <= the config's max_token_len."""

    batch: int
    views: int
    prompt_slots: int
    num_steps: int

    @classmethod
    def of(cls, cfg: PiConfig, batch: int = 1) -> PiEngineShape:
        """The config's own full shape (all prompt slots, the config's views and steps)."""
        return cls(batch=batch, views=cfg.views, prompt_slots=cfg.max_token_len, num_steps=cfg.num_steps)

    def prefix_len(self, cfg: PiConfig) -> int:
        return self.views * cfg.vision.tokens_per_view + self.prompt_slots


# ---- the modules -------------------------------------------------------------------------------------


class VisionBlock(nn.Module):
    """One SigLIP layer as the model computes it, with its q/k/v a list (`compile.fuse` fuses them)."""

    def __init__(self, layer: SiglipLayer) -> None:
        super().__init__()
        attn = cast(SiglipAttention, layer.self_attn)
        self.num_heads, self.head_dim = attn.num_heads, attn.head_dim
        self.layer_norm1, self.layer_norm2, self.mlp = layer.layer_norm1, layer.layer_norm2, layer.mlp
        self.qkv = nn.ModuleList([attn.q_proj, attn.k_proj, attn.v_proj])
        self.out_proj = attn.out_proj

    def forward(self, x: Tensor) -> Tensor:
        b, n, w = x.shape
        h = self.layer_norm1(x)
        q, k, v = (
            t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
            for t in split_outputs(self.qkv, [w, w, w], h)
        )
        out = F.scaled_dot_product_attention(q, k, v)
        x = x + self.out_proj(out.transpose(1, 2).reshape(b, n, -1))
        return x + cast(Tensor, self.mlp(self.layer_norm2(x)))


class VisionEngine(nn.Module):
    """images (B, V, 3, H, W) -> image tokens (B, V*T, vlm width): the model's own vision path."""

    def __init__(self, model: PiModel) -> None:
        super().__init__()
        tower = model.vision_tower
        self.cfg = model.cfg
        self.patch_embedding = tower.patch_embedding
        self.position_embedding = tower.position_embedding
        self.blocks = nn.ModuleList(VisionBlock(cast(SiglipLayer, layer)) for layer in tower.layers)
        self.post_layernorm = tower.post_layernorm
        self.projector = model.projector

    def forward(self, images: Tensor) -> Tensor:
        b, nv = images.shape[:2]
        views = fit_views(images.flatten(0, 1), self.cfg)  # a `vision-res` tower: resized in the graph
        x = self.patch_embedding(views.to(self.patch_embedding.weight.dtype))
        x = x.flatten(2).transpose(1, 2) + self.position_embedding.weight
        for block in self.blocks:
            x = block(x)
        feats = self.post_layernorm(x)
        return cast(Tensor, self.projector(feats)).reshape(b, nv * feats.shape[1], -1)


class PrefixEngine(nn.Module):
    """[image tokens, prompt] through the VLM -> per-layer keys (after RoPE) and values.

    The prompt comes in as its token-embedding rows (`lang_embeds`, gathered outside the graph), cast to
    the engine dtype before the sqrt(width) scale: the same numbers the model's own embedding gives."""

    def __init__(self, model: PiModel) -> None:
        super().__init__()
        dtype = model.embed_tokens.weight.dtype
        # The sqrt(width) factor is a float32 constant rounded to the model dtype, as in the model.
        self.embed_scale: Tensor
        self.register_buffer(
            "embed_scale", torch.tensor(model.cfg.vlm.width**0.5, dtype=torch.float32).to(dtype)
        )
        self.blocks = blocks_from_stack(model.vlm.layers)

    def forward(
        self,
        image_tokens: Tensor,
        lang_embeds: Tensor,
        prefix_mask: Tensor,
        prefix_cos: Tensor,
        prefix_sin: Tensor,
    ) -> tuple[Tensor, Tensor]:
        dtype = self.embed_scale.dtype
        x = torch.cat((image_tokens.to(dtype), lang_embeds.to(dtype) * self.embed_scale), dim=1)
        mask, cos, sin = prefix_mask.to(dtype), prefix_cos.to(dtype), prefix_sin.to(dtype)
        ks, vs = [], []
        blocks = cast(list[DecoderBlock], list(self.blocks))
        for block in blocks[:-1]:
            x, k, v = block(x, cos, sin, mask)
            ks.append(k)
            vs.append(v)
        k, v = blocks[-1].kv(x, cos, sin)
        return torch.stack(ks + [k]), torch.stack(vs + [v])


class SuffixEmbed(nn.Module):
    """The expert's input tokens from x_t (and pi0's state and time embedding)."""

    def __init__(self, model: PiModel) -> None:
        super().__init__()
        self.pi05 = model.cfg.pi05
        self.action_in_proj = model.action_in_proj
        if not self.pi05:
            self.state_proj = model.state_proj
            self.action_time_mlp_in = model.action_time_mlp_in
            self.action_time_mlp_out = model.action_time_mlp_out

    def forward(self, x_t: Tensor, time_cond: Tensor, state: Tensor | None) -> Tensor:
        dtype = self.action_in_proj.weight.dtype
        action_emb = self.action_in_proj(x_t.to(dtype))
        if self.pi05:
            return cast(Tensor, action_emb)
        assert state is not None
        temb = time_cond.to(dtype).expand(action_emb.shape[0], action_emb.shape[1], -1)
        joint = torch.cat((action_emb, temb), dim=2)
        action_time = self.action_time_mlp_out(F.silu(self.action_time_mlp_in(joint)))
        return torch.cat((self.state_proj(state.to(dtype))[:, None, :], action_time), dim=1)


class DenoiseStepEngine(FlowStepEngine):
    """One velocity evaluation v(x_t, t) reading the prefix cache; the time enters as `time_cond`."""

    def __init__(self, model: PiModel) -> None:
        super().__init__()
        self.pi05 = model.cfg.pi05
        self.chunk_size = model.cfg.chunk_size
        self.embed = SuffixEmbed(model)
        self.blocks = blocks_from_stack(model.expert.layers)
        self.final_norm: BlockNorm = norm_from_model(model.expert.norm)
        self.action_out_proj = model.action_out_proj

    def run(
        self,
        x_t: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor,
        cos: Tensor,
        sin: Tensor,
        time_cond: Tensor,
        state: Tensor | None,
    ) -> Tensor:
        """The step on tables already cast to the engine dtype (the loop casts them once)."""
        x = self.embed(x_t, time_cond, state)
        for i, block in enumerate(self.blocks):
            mods = time_cond[2 * i : 2 * i + 2] if self.pi05 else None
            x, _, _ = block(x, cos, sin, mask, mods, k[i], v[i])
        out, _ = self.final_norm(x, time_cond[-1] if self.pi05 else None)
        return cast(Tensor, self.action_out_proj(out[:, -self.chunk_size :])).float()

    def forward(
        self,
        x_t: Tensor,
        k: Tensor,
        v: Tensor,
        suffix_mask: Tensor,
        suffix_cos: Tensor,
        suffix_sin: Tensor,
        time_cond: Tensor,
        state: Tensor | None = None,
    ) -> Tensor:
        d = self.dtype
        return self.run(x_t, k, v, suffix_mask.to(d), suffix_cos.to(d), suffix_sin.to(d), time_cond, state)


class DenoiseLoopEngine(EulerLoop):
    """All N Euler steps unrolled: noise -> actions, x <- x + dt * v in float32 after every step."""

    step: DenoiseStepEngine

    def forward(
        self,
        noise: Tensor,
        k: Tensor,
        v: Tensor,
        suffix_mask: Tensor,
        suffix_cos: Tensor,
        suffix_sin: Tensor,
        time_table: Tensor,
        state: Tensor | None = None,
    ) -> Tensor:
        d = self.step.dtype
        mask, cos, sin = suffix_mask.to(d), suffix_cos.to(d), suffix_sin.to(d)
        x = noise.float()
        for i in range(self.num_steps):
            x = x + self.dt * self.step.run(x, k, v, mask, cos, sin, time_table[i], state)
        return x


# ---- building ----------------------------------------------------------------------------------------


def example_observation(cfg: PiConfig, shape: PiEngineShape, device: torch.device) -> PiObservation:
    """A deterministic observation of `shape`: every view present, every prompt slot filled."""
    g = torch.Generator(device=device).manual_seed(0)
    size = cfg.image_side
    b, slots = shape.batch, shape.prompt_slots
    return PiObservation(
        images=torch.rand(b, shape.views, 3, size, size, generator=g, device=device) * 2 - 1,
        image_masks=torch.ones(b, shape.views, dtype=torch.bool, device=device),
        lang_tokens=torch.randint(0, cfg.vocab_size, (b, slots), generator=g, device=device),
        lang_masks=torch.ones(b, slots, dtype=torch.bool, device=device),
        state=torch.randn(b, cfg.max_state_dim, generator=g, device=device),
    )


def engine_signatures(cfg: PiConfig) -> dict[str, Signature]:
    tables = ("suffix_mask", "suffix_cos", "suffix_sin")
    state = () if cfg.pi05 else ("state",)
    return {
        "vision": Signature(("images",), ("image_tokens",)),
        "prefix": Signature(
            ("image_tokens", "lang_embeds", "prefix_mask", "prefix_cos", "prefix_sin"), ("k", "v")
        ),
        "denoise_step": Signature(("x_t", "k", "v", *tables, "time_cond", *state), ("velocity",)),
        "denoise_loop": Signature(("noise", "k", "v", *tables, "time_table", *state), ("actions",)),
    }


@torch.no_grad()
def build_pi_subengines(model: PiModel, shape: PiEngineShape, dtype: torch.dtype) -> dict[str, SubEngine]:
    """The four sub-engines of `model` for `shape`, in `dtype` (the model is copied if its dtype differs).

    The modules share the (copied) model's weights. Example inputs come from a deterministic synthetic
    observation run through the eager engines, so they carry realistic values.
    """
    cfg = model.cfg
    if shape.prompt_slots > cfg.max_token_len:
        raise ConfigError(
            f"prompt_slots {shape.prompt_slots} exceeds the model's {cfg.max_token_len} prompt slots"
        )
    model = cast(PiModel, model_in(model, dtype))
    step = DenoiseStepEngine(model)
    modules: dict[str, nn.Module] = {
        "vision": VisionEngine(model).eval(),
        "prefix": PrefixEngine(model).eval(),
        "denoise_step": step.eval(),
        "denoise_loop": DenoiseLoopEngine(step, shape.num_steps).eval(),
    }
    table = time_table(model, shape.num_steps, shape.batch)
    return _with_examples(cfg, shape, modules, table, model.embed_tokens.weight.detach())


def _with_examples(
    cfg: PiConfig,
    shape: PiEngineShape,
    modules: Mapping[str, nn.Module],
    table: Tensor,
    token_embedding: Tensor,
) -> dict[str, SubEngine]:
    """SubEngines of `modules` with example inputs of `shape`, from a synthetic observation run through them."""
    device = table.device
    obs = example_observation(cfg, shape, device)
    values: dict[str, Tensor] = {
        "images": obs.images,
        "lang_embeds": lookup_rows(token_embedding, obs.lang_tokens),
    }
    values.update(observation_tables(cfg, obs.image_masks, obs.lang_masks))
    if obs.state is not None and not cfg.pi05:
        values["state"] = obs.state
    values["time_table"] = table
    values["time_cond"] = table[0]
    noise = torch.randn(
        shape.batch, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(1)
    ).to(device)
    values["noise"] = values["x_t"] = noise
    constants = {
        "prefix": {TOKEN_EMBEDDING: token_embedding},
        "denoise_step": {"time_table": table},
        "denoise_loop": {"time_table": table},
    }
    return run_examples(modules, engine_signatures(cfg), values, constants)


def reshape_subengines(
    cfg: PiConfig, engines: Mapping[str, SubEngine], prompt_slots: int
) -> dict[str, SubEngine]:
    """The same modules (weights shared, transforms kept) with example inputs for another prompt length.

    Every module is shape-agnostic in eager PyTorch; a backend then prepares one engine per shape. The time
    table does not depend on the prompt, so it is kept.
    """
    table = engines["denoise_step"].constants["time_table"]
    token_embedding = engines["prefix"].constants[TOKEN_EMBEDDING]
    step_x = engines["denoise_step"].example_inputs[0]
    views = engines["vision"].example_inputs[0].shape[1]
    if prompt_slots > cfg.max_token_len:
        raise ConfigError(f"prompt_slots {prompt_slots} exceeds the model's {cfg.max_token_len} prompt slots")
    shape = PiEngineShape(
        batch=int(step_x.shape[0]), views=int(views), prompt_slots=prompt_slots, num_steps=int(table.shape[0])
    )
    return _with_examples(cfg, shape, {n: e.module for n, e in engines.items()}, table, token_embedding)


# ---- the pipeline ------------------------------------------------------------------------------------


class PiPipeline(StagePipeline):
    """vision -> prefix -> denoise (loop engine, or step engine N times) over per-sub-engine runners."""

    family = "pi"
    stages = VLM_FLOW_STAGES
    cfg: PiConfig
    shape: PiEngineShape

    @classmethod
    def eager(
        cls, cfg: PiConfig, shape: PiEngineShape, engines: Mapping[str, SubEngine], loop: bool = False
    ) -> PiPipeline:
        """The engines' own modules as runners; `loop` picks the unrolled loop over the step engine."""
        names = ["vision", "prefix", "denoise_loop" if loop else "denoise_step"]
        runners = {n: cast(Runner, engines[n].module) for n in names}
        return cls(cfg, shape, runners, constants_of(engines), {n: e.signature for n, e in engines.items()})

    def _run(self, name: str, values: dict[str, Tensor]) -> None:
        sig = self.signatures[name]
        out = as_tuple(self.runners[name](*(values[n] for n in sig.input_names)))
        values.update(zip(sig.output_names, out, strict=True))

    def check(self, obs: PiObservation, noise: Tensor) -> None:
        """Raise ConfigError when `obs` or `noise` does not fit this pipeline's fixed shape."""
        s, cfg = self.shape, self.cfg
        check_views_and_prompt(obs, s)
        if not cfg.pi05 and obs.state is None:
            raise ConfigError("pi0 needs the observation's state (B, max_state_dim) for its state token")
        if tuple(noise.shape) != (s.batch, cfg.chunk_size, cfg.max_action_dim):
            raise ConfigError(
                f"noise has shape {tuple(noise.shape)}; expected {(s.batch, cfg.chunk_size, cfg.max_action_dim)}"
            )

    @torch.no_grad()
    def sample(self, obs: PiObservation, noise: Tensor, timer: StageTimer | None = None) -> Tensor:
        """Actions (B, chunk, max_action_dim) float32 from noise at t = 1, as `sampling.sample_actions`."""
        self.check(obs, noise)
        timer = timer if timer is not None else null_timer()
        slots = self.shape.prompt_slots
        values: dict[str, Tensor] = {"images": obs.images}
        with timer.stage("vision"):
            self._run("vision", values)
        with timer.stage("prefix"):
            values["lang_embeds"] = lookup_rows(self.constants[TOKEN_EMBEDDING], obs.lang_tokens[:, :slots])
            values.update(observation_tables(self.cfg, obs.image_masks, obs.lang_masks[:, :slots]))
            self._run("prefix", values)
        if obs.state is not None:
            values["state"] = obs.state
        table = self.constants["time_table"]
        with timer.stage("denoise"):
            if self.runs["denoise"] == "denoise_loop":
                values["noise"] = noise.float()
                values["time_table"] = table
                self._run("denoise_loop", values)
                return values["actions"]
            steps = self.shape.num_steps
            dt = torch.tensor(-1.0 / steps, dtype=torch.float32, device=noise.device)
            x = noise.to(torch.float32)
            for k in range(steps):
                values["x_t"], values["time_cond"] = x, table[k]
                self._run("denoise_step", values)
                x = x + dt * values["velocity"]
            return x
