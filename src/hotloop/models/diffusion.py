"""LeRobot's Diffusion Policy (policies/diffusion, commit 7427f318) in plain PyTorch, as two sub-engines.

    encode(images (B, n_obs, n_cam, 3, H, W), state (B, n_obs, S)[, env_state]) -> global_cond (B, cond)
    unet(x (B, horizon, A), timestep (B,) int64, global_cond)                    -> model output (B, horizon, A)

`sample_actions` runs the scheduler loop over them (hotloop.models.noise_schedulers: diffusers' DDPM / DDIM
numerics, per-step noise passed in); `TableSampler` is the same loop unrolled over a `step_table`, one
traceable graph. Parameter names are LeRobot's state-dict keys without the leading "diffusion.", so a
checkpoint loads strictly; the ResNet trunk is `hotloop.models.resnet` laid out as LeRobot's
`nn.Sequential(*resnet.children()[:-2])` (index names: backbone.0 = conv1, backbone.4 = layer1, ...).
Every op mirrors LeRobot's, in LeRobot's order and memory layout (the einops rearranges are the same
permute / reshape), so float32 results agree with the fixtures to rounding.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import Tensor, nn

from hotloop.errors import CheckpointError, ConfigError
from hotloop.finite import assign_finite
from hotloop.models.diffusion_config import DiffusionConfig, read_diffusion_config, read_shapes
from hotloop.models.noise_schedulers import DDIMScheduler, DDPMScheduler, Scheduler, table_row, table_step
from hotloop.models.resnet import ResNetTrunk

PREFIX = "diffusion."  # LeRobot's DiffusionPolicy keeps the model under `self.diffusion`
LOAD_DTYPES = (torch.float32, torch.float64, torch.bfloat16)


class SpatialSoftmax(nn.Module):
    """1x1 conv to K maps, softmax over the h*w positions, expected (x, y): (N, C, h, w) -> (N, K, 2)."""

    def __init__(self, channels: int, h: int, w: int, num_kp: int) -> None:
        super().__init__()
        self.h, self.w, self.num_kp = h, w, num_kp
        self.nets = nn.Conv2d(channels, num_kp, kernel_size=1)
        # numpy's linspace, as LeRobot (torch.linspace rounds differently); the checkpoint's copy replaces it.
        pos_x, pos_y = np.meshgrid(np.linspace(-1.0, 1.0, w), np.linspace(-1.0, 1.0, h))
        grid = np.concatenate([pos_x.reshape(h * w, 1), pos_y.reshape(h * w, 1)], axis=1)
        self.register_buffer("pos_grid", torch.from_numpy(grid).float())

    def forward(self, features: Tensor) -> Tensor:
        features = self.nets(features).reshape(-1, self.h * self.w)
        expected_xy = F.softmax(features, dim=-1) @ cast(Tensor, self.pos_grid)
        return expected_xy.view(-1, self.num_kp, 2)


# Sequential index after which a backbone stage ends -> its tap name (the fixtures' rgb_<name>_cam{i}).
_STAGE_TAPS = {3: "backbone_stem", 4: "backbone_layer1", 5: "backbone_layer2", 6: "backbone_layer3"}


class RgbEncoder(nn.Module):
    """LeRobot's DiffusionRgbEncoder: [resize] -> crop -> ResNet trunk -> SpatialSoftmax -> Linear -> ReLU."""

    def __init__(self, cfg: DiffusionConfig) -> None:
        super().__init__()
        assert cfg.feature_map is not None and cfg.image_shape is not None
        self.cfg = cfg
        trunk = ResNetTrunk(cfg.resnet, dict(cfg.backbone_shapes), "rgb_encoder.backbone")
        parts = [trunk.conv1, trunk.bn1, trunk.relu, trunk.maxpool]
        self.backbone = nn.Sequential(*parts, *(getattr(trunk, f"layer{i}") for i in range(1, 5)))
        c, h, w = cfg.feature_map
        self.pool = SpatialSoftmax(c, h, w, cfg.spatial_softmax_num_keypoints)
        self.out = nn.Linear(cfg.image_feature_dim, cfg.image_feature_dim)
        self.relu = nn.ReLU()

    def preprocess(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """torchvision's Resize (bilinear, antialias, skipped at the same size) then the crop: the centre
        crop in eval; in training a random one (one offset per batch, drawn as torchvision's RandomCrop
        draws it) when crop_is_random, from `generator` only: hotloop never uses torch's global RNG."""
        cfg = self.cfg
        if cfg.resize_shape is not None and tuple(x.shape[-2:]) != cfg.resize_shape:
            x = F.interpolate(
                x, size=list(cfg.resize_shape), mode="bilinear", align_corners=False, antialias=True
            )
        if cfg.crop_shape is None:
            return x
        height, width = int(x.shape[-2]), int(x.shape[-1])
        ch, cw = cfg.crop_shape
        if self.training and cfg.crop_is_random:
            if generator is None:
                raise ValueError(
                    "a training-mode random crop needs an explicit torch.Generator (generator=...)"
                )
            if (height, width) == (ch, cw):
                return x
            top = int(torch.randint(0, height - ch + 1, size=(1,), generator=generator).item())
            left = int(torch.randint(0, width - cw + 1, size=(1,), generator=generator).item())
        else:  # torchvision's center_crop: Python round (half to even)
            top, left = int(round((height - ch) / 2.0)), int(round((width - cw) / 2.0))
        return x[..., top : top + ch, left : left + cw]

    def forward(
        self, x: Tensor, generator: torch.Generator | None = None, taps: dict[str, Tensor] | None = None
    ) -> Tensor:
        """(N, 3, H, W) normalised images -> (N, 2K) features; `taps` collects every stage's output."""
        x = self.preprocess(x, generator)
        if taps is None:
            x = self.backbone(x)
        else:
            taps["backbone_in"] = x
            for i, module in enumerate(self.backbone):
                x = module(x)
                if i in _STAGE_TAPS:
                    taps[_STAGE_TAPS[i]] = x
            taps["feature_map"] = x
        keypoints = self.pool(x)
        features = self.relu(self.out(torch.flatten(keypoints, start_dim=1)))
        if taps is not None:
            taps["keypoints"], taps["features"] = keypoints, features
        return cast(Tensor, features)


class SinusoidalPosEmb(nn.Module):
    """Integer timesteps (B,) -> [sin(t f), cos(t f)] (B, dim), f_j = exp(-j ln(1e4) / (dim/2 - 1))."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        half_dim = self.dim // 2
        emb = math.log(10000) / (half_dim - 1)
        emb_t = torch.exp(torch.arange(half_dim, device=x.device) * -emb)
        emb_t = x.unsqueeze(-1) * emb_t.unsqueeze(0)
        return torch.cat((emb_t.sin(), emb_t.cos()), dim=-1)


class Conv1dBlock(nn.Module):
    """Conv1d (padding k // 2) -> GroupNorm -> Mish."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int, n_groups: int = 8) -> None:
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv1d(in_ch, out_ch, kernel_size, padding=kernel_size // 2),
            nn.GroupNorm(n_groups, out_ch),
            nn.Mish(),
        )

    def forward(self, x: Tensor) -> Tensor:
        return cast(Tensor, self.block(x))


class ResidualBlock1d(nn.Module):
    """conv block, FiLM from Linear(Mish(cond)) (scale then bias, or bias only), conv block, + residual."""

    def __init__(self, in_ch: int, out_ch: int, cfg: DiffusionConfig) -> None:
        super().__init__()
        self.film_scale = cfg.use_film_scale_modulation
        self.out_channels = out_ch
        self.conv1 = Conv1dBlock(in_ch, out_ch, cfg.kernel_size, cfg.n_groups)
        self.cond_encoder = nn.Sequential(
            nn.Mish(), nn.Linear(cfg.cond_dim, out_ch * (2 if self.film_scale else 1))
        )
        self.conv2 = Conv1dBlock(out_ch, out_ch, cfg.kernel_size, cfg.n_groups)
        self.residual_conv: nn.Module = nn.Conv1d(in_ch, out_ch, 1) if in_ch != out_ch else nn.Identity()

    def forward(self, x: Tensor, cond: Tensor) -> Tensor:
        out = self.conv1(x)
        cond_embed = self.cond_encoder(cond).unsqueeze(-1)
        if self.film_scale:
            out = cond_embed[:, : self.out_channels] * out + cond_embed[:, self.out_channels :]
        else:
            out = out + cond_embed
        return cast(Tensor, self.conv2(out) + self.residual_conv(x))


class ConditionalUnet1d(nn.Module):
    """LeRobot's DiffusionConditionalUnet1d: (B, horizon, A), t (B,), global_cond -> (B, horizon, A)."""

    def __init__(self, cfg: DiffusionConfig) -> None:
        super().__init__()
        embed, dims = cfg.diffusion_step_embed_dim, cfg.down_dims
        self.diffusion_step_encoder = nn.Sequential(
            SinusoidalPosEmb(embed), nn.Linear(embed, embed * 4), nn.Mish(), nn.Linear(embed * 4, embed)
        )
        in_out = [(cfg.action_dim, dims[0]), *zip(dims[:-1], dims[1:], strict=True)]
        self.down_modules = nn.ModuleList()
        for ind, (dim_in, dim_out) in enumerate(in_out):
            is_last = ind >= len(in_out) - 1
            down: nn.Module = nn.Conv1d(dim_out, dim_out, 3, 2, 1) if not is_last else nn.Identity()
            self.down_modules.append(
                nn.ModuleList(
                    [ResidualBlock1d(dim_in, dim_out, cfg), ResidualBlock1d(dim_out, dim_out, cfg), down]
                )
            )
        self.mid_modules = nn.ModuleList([ResidualBlock1d(dims[-1], dims[-1], cfg) for _ in range(2)])
        self.up_modules = nn.ModuleList()
        for ind, (dim_out, dim_in) in enumerate(reversed(in_out[1:])):
            # LeRobot's test compares with len(in_out) - 1, which `ind` never reaches: every stage upsamples.
            is_last = ind >= len(in_out) - 1
            up: nn.Module = nn.ConvTranspose1d(dim_out, dim_out, 4, 2, 1) if not is_last else nn.Identity()
            self.up_modules.append(
                nn.ModuleList(
                    [ResidualBlock1d(dim_in * 2, dim_out, cfg), ResidualBlock1d(dim_out, dim_out, cfg), up]
                )
            )
        # The final block's GroupNorm keeps Conv1dBlock's default 8 groups, whatever n_groups says.
        self.final_conv = nn.Sequential(
            Conv1dBlock(dims[0], dims[0], cfg.kernel_size), nn.Conv1d(dims[0], cfg.action_dim, 1)
        )

    def forward(
        self, x: Tensor, timestep: Tensor, global_cond: Tensor, taps: dict[str, Tensor] | None = None
    ) -> Tensor:
        x = x.permute(0, 2, 1)  # einops "b t d -> b d t"
        encoder = self.diffusion_step_encoder
        sinusoid = encoder[0](timestep.to(x.device)).to(
            cast(nn.Linear, encoder[1]).weight.dtype
        )  # no-op in fp32
        time_embed = encoder[3](encoder[2](encoder[1](sinusoid)))
        cond = torch.cat([time_embed, global_cond], dim=-1)
        skips: list[Tensor] = []
        for i, stage in enumerate(self.down_modules):
            res1, res2, down = cast(nn.ModuleList, stage)
            x = res2(res1(x, cond), cond)
            skips.append(x)
            x = down(x)
            if taps is not None:
                taps[f"down{i}_skip"], taps[f"down{i}_out"] = skips[-1], x
        for mid in self.mid_modules:
            x = mid(x, cond)
        if taps is not None:
            taps["mid_out"] = x
        for i, stage in enumerate(self.up_modules):
            res1, res2, up = cast(nn.ModuleList, stage)
            x = res2(res1(torch.cat((x, skips.pop()), dim=1), cond), cond)
            if taps is not None:
                taps[f"up{i}_res_out"] = x
            x = up(x)
            if taps is not None:
                taps[f"up{i}_out"] = x
        out = self.final_conv(x).permute(0, 2, 1)  # "b d t -> b t d"
        if taps is not None:
            taps["time_embed"], taps["out"] = time_embed, out
        return cast(Tensor, out)


class DiffusionModel(nn.Module):
    """The network of LeRobot's DiffusionModel (without its scheduler object): encoders and the U-Net."""

    def __init__(self, cfg: DiffusionConfig) -> None:
        super().__init__()
        self.cfg = cfg
        if cfg.n_cameras:
            if cfg.use_separate_rgb_encoder_per_camera:
                self.rgb_encoder: nn.Module = nn.ModuleList([RgbEncoder(cfg) for _ in cfg.camera_keys])
            else:
                self.rgb_encoder = RgbEncoder(cfg)
        self.unet = ConditionalUnet1d(cfg)

    def _check(self, name: str, tensor: Tensor, shape: tuple[int, ...]) -> None:
        if torch.jit.is_tracing():  # the traced graph is specialised to the example's shapes anyway
            return
        if tensor.dim() != len(shape) or any(
            e >= 0 and int(g) != e for g, e in zip(tensor.shape, shape, strict=True)
        ):
            want = tuple("B" if e < 0 else e for e in shape)
            raise ValueError(f"{name}: expected shape {want}, got {tuple(tensor.shape)}")

    def encode(
        self,
        images: Tensor | None,
        state: Tensor,
        env_state: Tensor | None = None,
        generator: torch.Generator | None = None,
        taps: dict[str, Tensor] | None = None,
    ) -> Tensor:
        """LeRobot's `_prepare_global_conditioning`: per observation step [state, each camera's features in
        config order, env state], the steps (oldest first) flattened -> (B, global_cond_dim).

        images (B, n_obs, n_cam, C, H, W) and state (B, n_obs, S) are normalised (model space). `taps`
        collects per camera `rgb_<stage>_cam{i}` in (b s) order, as the fixtures name them.
        """
        cfg = self.cfg
        batch, n_obs = state.shape[0], cfg.n_obs_steps
        self._check("state", state, (-1, n_obs, cfg.state_dim))
        feats = [state]
        if cfg.n_cameras:
            if images is None or cfg.image_shape is None:
                raise ValueError(f"this checkpoint encodes cameras {list(cfg.camera_keys)}: pass images")
            self._check("images", images, (batch, n_obs, cfg.n_cameras, *cfg.image_shape))
            n = cfg.n_cameras
            cam_taps: list[dict[str, Tensor]] | None = None if taps is None else [{} for _ in range(n)]
            if cfg.use_separate_rgb_encoder_per_camera:
                # einops "b s n ... -> n (b s) ...", one encoder per camera, "(n b s) d -> b s (n d)"
                per_camera = images.permute(2, 0, 1, 3, 4, 5).reshape(n, batch * n_obs, *images.shape[3:])
                encoders = cast(nn.ModuleList, self.rgb_encoder)
                outs = [
                    enc(x, generator, None if cam_taps is None else cam_taps[i])
                    for i, (enc, x) in enumerate(zip(encoders, per_camera, strict=True))
                ]
                img = (
                    torch.cat(outs).reshape(n, batch, n_obs, -1).permute(1, 2, 0, 3).reshape(batch, n_obs, -1)
                )
            else:
                shared: dict[str, Tensor] | None = None if taps is None else {}
                flat = images.reshape(batch * n_obs * n, *images.shape[3:])  # "b s n ... -> (b s n) ..."
                img = self.rgb_encoder(flat, generator, shared).reshape(batch, n_obs, -1)
                if cam_taps is not None and shared is not None:
                    for i in range(n):
                        cam_taps[i] = {k: v[i::n] for k, v in shared.items()}
            feats.append(img)
            if taps is not None and cam_taps is not None:
                for i, tapped in enumerate(cam_taps):
                    taps.update({f"rgb_{k}_cam{i}": v for k, v in tapped.items()})
        if cfg.env_state_dim is not None:
            if env_state is None:
                raise ValueError(
                    "this checkpoint conditions on observation.environment_state: pass env_state"
                )
            self._check("env_state", env_state, (batch, n_obs, cfg.env_state_dim))
            feats.append(env_state)
        return torch.cat(feats, dim=-1).flatten(start_dim=1)

    def forward(self, x: Tensor, timestep: Tensor, global_cond: Tensor) -> Tensor:
        """The denoiser alone (= `model.unet(x, timestep, global_cond)`)."""
        return cast(Tensor, self.unet(x, timestep, global_cond))


class Encoder(nn.Module):
    """`model.encode` as a module (for torch.jit.trace / torch.onnx.export): (images, state[, env]) -> cond."""

    def __init__(self, model: DiffusionModel) -> None:
        super().__init__()
        self.model = model
        self.train(model.training)  # a fresh wrapper is in training mode; export would flip the model too

    def forward(self, images: Tensor, state: Tensor, env_state: Tensor | None = None) -> Tensor:
        return self.model.encode(images, state, env_state)


def needs_step_noise(scheduler: Scheduler) -> bool:
    """DDPM draws variance noise at every t > 0; DDIM only with eta > 0 (LeRobot: never)."""
    return isinstance(scheduler, DDPMScheduler) or (
        isinstance(scheduler, DDIMScheduler) and scheduler.eta > 0
    )


def _prepare(
    model: DiffusionModel,
    scheduler: Scheduler,
    noise: Tensor,
    num_inference_steps: int | None,
    step_noise: Tensor | None,
) -> Tensor:
    cfg = model.cfg
    steps = num_inference_steps or cfg.num_inference_steps
    if scheduler.num_train_timesteps != cfg.num_train_timesteps:
        raise ConfigError(
            f"scheduler has num_train_timesteps {scheduler.num_train_timesteps}, the checkpoint "
            f"{cfg.num_train_timesteps}; build it with cfg.make_scheduler()"
        )
    timesteps = scheduler.set_timesteps(steps)
    model._check("noise", noise, (-1, cfg.horizon, cfg.action_dim))
    if step_noise is None and needs_step_noise(scheduler):
        raise ValueError(
            f"{scheduler.kind} adds noise at every step: pass step_noise ({steps}, B, {cfg.horizon}, "
            f"{cfg.action_dim}) (hotloop never draws from torch's global RNG)"
        )
    if step_noise is not None:
        model._check("step_noise", step_noise, (steps, int(noise.shape[0]), cfg.horizon, cfg.action_dim))
    return timesteps


def sample_actions(
    model: DiffusionModel,
    scheduler: Scheduler,
    global_cond: Tensor,
    noise: Tensor,
    num_inference_steps: int | None = None,
    step_noise: Tensor | None = None,
) -> Tensor:
    """LeRobot's `conditional_sample`: from x_T = noise (B, horizon, A), one U-Net call and one scheduler
    step per timestep -> the denoised (B, horizon, A). step_noise[k] is the variance noise of step k
    (DDPM: required; its last row, t = 0, is unused)."""
    timesteps = _prepare(model, scheduler, noise, num_inference_steps, step_noise)
    sample = noise
    for k, t in enumerate(timesteps):
        t_batch = torch.full(sample.shape[:1], int(t), dtype=torch.long, device=sample.device)
        model_output = model.unet(sample, t_batch, global_cond)
        sample = scheduler.step(model_output, t, sample, None if step_noise is None else step_noise[k])
    return sample


class TableSampler(nn.Module):
    """The denoising loop unrolled over a `step_table`: (global_cond, noise[, step_noise]) -> sample, with
    no Python control flow on tensor values, so it traces / exports as one graph."""

    def __init__(
        self, model: DiffusionModel, scheduler: Scheduler, num_inference_steps: int | None = None
    ) -> None:
        super().__init__()
        self.unet = model.unet
        self.stochastic = needs_step_noise(scheduler)
        table = scheduler.step_table(num_inference_steps or model.cfg.num_inference_steps)
        self.steps = int(table["timestep"].shape[0])
        self.keys = [k for k in table if k != "timestep"]
        for key, value in table.items():
            self.register_buffer(f"table_{key}", value, persistent=False)

    def forward(self, global_cond: Tensor, noise: Tensor, step_noise: Tensor | None = None) -> Tensor:
        if self.stochastic and step_noise is None:
            raise ValueError(
                "this scheduler adds noise at every step: pass step_noise (steps, B, horizon, A)"
            )
        timesteps = cast(Tensor, self.table_timestep)
        table = {key: cast(Tensor, getattr(self, f"table_{key}")) for key in self.keys}
        sample = noise
        for k in range(self.steps):
            t_batch = timesteps[k].expand(sample.shape[0])
            model_output = self.unet(sample, t_batch, global_cond)
            row = table_row(table, k)
            sample = table_step(row, model_output, sample, None if step_noise is None else step_noise[k])
        return sample


def select_action_chunk(actions: Tensor, cfg: DiffusionConfig) -> Tensor:
    """The n_action_steps LeRobot returns from the full horizon: from the current (last observed) step."""
    start = cfg.n_obs_steps - 1
    return actions[:, start : start + cfg.n_action_steps]


def diffusion_intermediates(
    model: DiffusionModel,
    scheduler: Scheduler,
    images: Tensor | None,
    state: Tensor,
    noise: Tensor,
    step_noise: Tensor | None,
    env_state: Tensor | None = None,
    num_inference_steps: int | None = None,
) -> dict[str, Tensor]:
    """Every stage of one `predict_action_chunk`, keyed as the fixtures' intermediates.npz."""
    out: dict[str, Tensor] = {}
    global_cond = model.encode(images, state, env_state, taps=out)
    out["global_cond"] = global_cond
    timesteps = _prepare(model, scheduler, noise, num_inference_steps, step_noise)
    records: dict[str, list[Tensor]] = {"x_t": [], "model_output": [], "pred_x0": [], "x_prev": []}
    sample = noise
    for k, t in enumerate(timesteps):
        t_batch = torch.full(sample.shape[:1], int(t), dtype=torch.long, device=sample.device)
        taps: dict[str, Tensor] | None = {} if k == 0 else None
        model_output = model.unet.forward(sample, t_batch, global_cond, taps)
        if taps is not None:
            out.update({f"unet_step0_{name}": value for name, value in taps.items()})
        step = scheduler.step_output(model_output, t, sample, None if step_noise is None else step_noise[k])
        for name, value in zip(
            records, (sample, model_output, step.pred_original_sample, step.prev_sample), strict=True
        ):
            records[name].append(value)
        sample = step.prev_sample
    out["timesteps"] = timesteps
    out["alphas_cumprod"] = scheduler.alphas_cumprod
    for name, values in records.items():
        out[f"{name}_per_step"] = torch.stack(values)
    out["denoised_sample"] = sample
    out["actions"] = select_action_chunk(sample, model.cfg)
    drawn = timesteps > 0 if needs_step_noise(scheduler) else torch.zeros_like(timesteps, dtype=torch.bool)
    out["step_noise_drawn"] = drawn
    return out


def load_diffusion(
    folder: str | Path, dtype: torch.dtype = torch.float32
) -> tuple[DiffusionConfig, DiffusionModel]:
    """Build the model a LeRobot Diffusion checkpoint folder describes (on meta) and load it strictly.

    Every missing or unexpected key and every shape mismatch is one line of the CheckpointError.
    """
    if dtype not in LOAD_DTYPES:
        raise ConfigError(f"dtype {dtype} is not supported; use one of {', '.join(map(str, LOAD_DTYPES))}")
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint directory {folder} does not exist")
    weights = folder / "model.safetensors"
    shapes = read_shapes(weights)
    cfg = read_diffusion_config(folder, shapes)
    with torch.device("meta"):
        model = DiffusionModel(cfg)
    expected = {PREFIX + k: tuple(v.shape) for k, v in model.state_dict().items()}
    problems = [f"missing key {k!r} (expected shape {s})" for k, s in expected.items() if k not in shapes]
    problems += [f"unexpected key {k!r} (shape {s})" for k, s in shapes.items() if k not in expected]
    problems += [
        f"key {k!r}: found shape {shapes[k]}, expected {s}"
        for k, s in expected.items()
        if k in shapes and tuple(shapes[k]) != s
    ]
    if problems:
        raise CheckpointError(
            f"{weights} does not match {folder / 'config.json'}:\n  " + "\n  ".join(problems)
        )
    state: dict[str, Tensor] = {}
    with safe_open(str(weights), framework="pt") as handle:
        for key in expected:
            tensor = handle.get_tensor(key)
            state[key[len(PREFIX) :]] = tensor.to(dtype) if tensor.is_floating_point() else tensor
    return cfg, assign_finite(model, state, weights, PREFIX)


__all__ = [
    "ConditionalUnet1d",
    "DiffusionConfig",
    "DiffusionModel",
    "Encoder",
    "RgbEncoder",
    "SpatialSoftmax",
    "TableSampler",
    "diffusion_intermediates",
    "load_diffusion",
    "needs_step_noise",
    "read_diffusion_config",
    "sample_actions",
    "select_action_chunk",
]
