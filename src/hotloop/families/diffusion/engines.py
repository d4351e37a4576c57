"""Diffusion Policy as tensor-only sub-engines with fixed shapes, and the pipeline that chains them.

    DiffusionEngineShape(batch, num_steps)                                   frozen; one compiled shape
    build_diffusion_subengines(model, shape, dtype) -> {name: SubEngine}
    DiffusionPipeline(cfg, shape, runners, constants, signatures).sample(obs, noise[, timer]) -> (B, horizon, A)

Sub-engines (B = batch, O = n_obs_steps, C = cameras, N = num_steps, K = the scheduler's coefficients):

    encoder       [images (B, O, C, 3, H, W) f32,] state (B, O, S) f32[, env_state (B, O, E) f32]
                                                                    -> global_cond (B, global_cond_dim) f32
    denoise_step  x_t (B, horizon, A) f32, step_row (1 + K,) f32, global_cond f32
                  [, step_noise (B, horizon, A) f32 (schedulers that add noise: DDPM)]   -> x_prev f32
    denoise_loop  noise (B, 1 + N, horizon, A) f32, step_table (N, 1 + K) f32, global_cond f32
                                                                    -> actions (B, horizon, A) f32

The step engine is the whole per-step work: the U-Net AND the scheduler's update (`table_step`) in one
graph, so a compiled step leaves nothing to Python but the loop. `step_table` is the build-time constant
(`SubEngine.constants`): row k holds step k's timestep (column 0, as a float: the sinusoid multiplies it
by float32 frequencies, so an exact integer in float32 rounds like LeRobot's int64) and its scheduler
coefficients (`noise_schedulers.step_table`, in `DenoiseStepEngine.columns` order). Its meaning is the
scheduler's (DDPM or DDIM, from the config), which is why it travels with the engine.

`noise` is all the randomness of one sampling, batch first like every family's noise (the generic code
picks observation i's noise as `noise[i : i + 1]`): row 0 the starting sample x_T, row 1 + k the variance
noise of step k (zeros where the scheduler adds none: DDPM's last step at t = 0, every DDIM step at
LeRobot's eta 0). A longer draw is read by its first 1 + N rows: a plan of fewer steps is judged under
the reference's noise (the same x_T), and a shorter one is refused by name.

Under a bf16 graph the U-Net runs in bf16 and everything around it stays float32: the sample, the table,
the noise and the scheduler's arithmetic (x_t is cast down for the U-Net only), as pi keeps its Euler
update in float32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor, nn

from hotloop.errors import ConfigError
from hotloop.families.examples import model_in, run_examples
from hotloop.families.inputs import check_fields, check_finite, check_kind, to_tensor
from hotloop.families.pipeline import StagePipeline
from hotloop.families.protocol import PositiveShape, Signature, SubEngine, run_subengine
from hotloop.families.stages import loop_stage, one_engine
from hotloop.measure.stages import StageTimer, null_timer
from hotloop.models.diffusion import DiffusionModel, needs_step_noise
from hotloop.models.diffusion_config import DiffusionConfig
from hotloop.models.noise_schedulers import table_step

SUBENGINE_NAMES = ("encoder", "denoise_step", "denoise_loop")
OBSERVATION_FIELDS = ("state", "images", "env_state")


@dataclass(frozen=True)
class DiffusionEngineShape(PositiveShape):
    """The fixed shape a set of sub-engines is built for; the scheduler (DDPM / DDIM) is the config's."""

    batch: int
    num_steps: int

    @classmethod
    def of(cls, cfg: DiffusionConfig, batch: int = 1) -> DiffusionEngineShape:
        return cls(batch=batch, num_steps=cfg.num_inference_steps)


@dataclass
class DiffusionObservation:
    """Model-space inputs (after LeRobot's preprocessor), the n_obs_steps history oldest first:
    state (B, O, S), images (B, O, C, 3, H, W) in camera config order, env_state (B, O, E)."""

    state: Tensor
    images: Tensor | None = None
    env_state: Tensor | None = None

    @property
    def batch(self) -> int:
        return int(self.state.shape[0])


# ---- the step table ----------------------------------------------------------------------------------


def step_table(cfg: DiffusionConfig, num_steps: int) -> tuple[Tensor, tuple[str, ...]]:
    """(table (N, 1 + K) float32, coefficient names): the config's scheduler for `num_steps` steps, its
    timesteps in column 0 (ConfigError when the scheduler cannot take that many steps)."""
    table = cfg.make_scheduler().step_table(num_steps)
    columns = tuple(k for k in table if k != "timestep")
    packed = torch.stack([table["timestep"].to(torch.float32), *(table[k] for k in columns)], dim=1)
    return packed.contiguous(), columns


def drawn_rows(cfg: DiffusionConfig, num_steps: int) -> Tensor:
    """(N,) bool: the steps whose variance noise the scheduler adds (DDPM at t > 0; DDIM never at eta 0)."""
    scheduler = cfg.make_scheduler()
    timesteps = scheduler.step_table(num_steps)["timestep"]
    if not needs_step_noise(scheduler):
        return torch.zeros(num_steps, dtype=torch.bool)
    return timesteps > 0


# ---- the modules -------------------------------------------------------------------------------------


class EncoderEngine(nn.Module):
    """The observation history -> the U-Net's global conditioning (`DiffusionModel.encode`, eval crop).

    Only the camera encoders are its parameters (a state-only checkpoint's encoder has none): the model
    is held outside the module tree, so releasing or quantizing this engine never touches the U-Net."""

    def __init__(self, model: DiffusionModel) -> None:
        super().__init__()
        if model.cfg.n_cameras:
            self.rgb_encoder = model.rgb_encoder
        object.__setattr__(self, "_model", model)
        self.cameras = model.cfg.n_cameras > 0
        self.env = model.cfg.env_state_dim is not None

    @property
    def dtype(self) -> torch.dtype:
        return next(cast(DiffusionModel, self._model).unet.parameters()).dtype

    def forward(self, *inputs: Tensor) -> Tensor:
        d = self.dtype
        rest = list(inputs)
        images = rest.pop(0).to(d) if self.cameras else None
        state = rest.pop(0).to(d)
        env_state = rest.pop(0).to(d) if self.env else None
        return cast(DiffusionModel, self._model).encode(images, state, env_state).float()


class DenoiseStepEngine(nn.Module):
    """One denoising step x_t -> x_prev: the U-Net's output and the scheduler's update from a table row."""

    def __init__(self, model: DiffusionModel, columns: tuple[str, ...], stochastic: bool) -> None:
        super().__init__()
        self.unet = model.unet
        self.columns = columns
        self.stochastic = stochastic

    @property
    def dtype(self) -> torch.dtype:
        return next(self.unet.parameters()).dtype

    def forward(
        self, x_t: Tensor, step_row: Tensor, global_cond: Tensor, step_noise: Tensor | None = None
    ) -> Tensor:
        d = self.dtype
        timestep = step_row[0].expand(x_t.shape[0])
        model_output = self.unet(x_t.to(d), timestep, global_cond.to(d)).float()
        row = {name: step_row[i + 1] for i, name in enumerate(self.columns)}
        return table_step(row, model_output, x_t.float(), step_noise if self.stochastic else None)


class DenoiseLoopEngine(nn.Module):
    """All N steps unrolled over the table: noise (row 0 x_T, row 1 + k step k's variance noise) -> x_0.
    It calls its step engine as a module, so the calibration capture's hooks see every step."""

    def __init__(self, step: DenoiseStepEngine, num_steps: int) -> None:
        super().__init__()
        self.step = step
        self.num_steps = num_steps

    def forward(self, noise: Tensor, step_table: Tensor, global_cond: Tensor) -> Tensor:
        x = noise[:, 0].float()
        for k in range(self.num_steps):
            if self.step.stochastic:
                x = self.step(x, step_table[k], global_cond, noise[:, k + 1].float())
            else:
                x = self.step(x, step_table[k], global_cond)
        return cast(Tensor, x)


# ---- building ----------------------------------------------------------------------------------------


def signatures(cfg: DiffusionConfig) -> dict[str, Signature]:
    obs = (("images",) if cfg.n_cameras else ()) + ("state",) + (("env_state",) if cfg.env_state_dim else ())
    noise = ("step_noise",) if needs_step_noise(cfg.make_scheduler()) else ()
    return {
        "encoder": Signature(obs, ("global_cond",)),
        "denoise_step": Signature(("x_t", "step_row", "global_cond", *noise), ("x_prev",)),
        "denoise_loop": Signature(("noise", "step_table", "global_cond"), ("actions",)),
    }


def example_observation(
    cfg: DiffusionConfig, batch: int, seed: int = 0, device: torch.device | str = "cpu"
) -> DiffusionObservation:
    """A seeded observation in model space: images ~ N(0, 1) (MEAN_STD-normalised pixels), state and env
    state uniform in [-1, 1] (MIN_MAX-normalised), every history step present."""
    g = torch.Generator().manual_seed(seed)
    o = cfg.n_obs_steps
    images = None
    if cfg.n_cameras and cfg.image_shape is not None:
        images = torch.randn(batch, o, cfg.n_cameras, *cfg.image_shape, generator=g)
    state = torch.rand(batch, o, cfg.state_dim, generator=g) * 2 - 1
    env = None
    if cfg.env_state_dim is not None:
        env = torch.rand(batch, o, cfg.env_state_dim, generator=g) * 2 - 1
    return DiffusionObservation(
        state.to(device),
        None if images is None else images.to(device),
        None if env is None else env.to(device),
    )


def observation_values(obs: DiffusionObservation) -> dict[str, Tensor]:
    values = {"state": obs.state}
    if obs.images is not None:
        values["images"] = obs.images
    if obs.env_state is not None:
        values["env_state"] = obs.env_state
    return values


def validate_observation(cfg: DiffusionConfig, shape: DiffusionEngineShape, obs: Any) -> DiffusionObservation:
    """`obs` (a DiffusionObservation or a dict of arrays) as the engines of `shape` take it, or a
    ConfigError naming the input that does not fit."""
    fields = check_fields(obs, OBSERVATION_FIELDS, DiffusionObservation, "DiffusionObservation")
    b, o = shape.batch, cfg.n_obs_steps
    wants: dict[str, tuple[int, ...] | None] = {
        "state": (b, o, cfg.state_dim),
        "images": (b, o, cfg.n_cameras, *cfg.image_shape) if cfg.n_cameras and cfg.image_shape else None,
        "env_state": (b, o, cfg.env_state_dim) if cfg.env_state_dim is not None else None,
    }
    out: dict[str, Tensor | None] = {}
    for name, want in wants.items():
        value = fields[name]
        if want is None:
            if value is not None:
                raise ConfigError(f"input {name!r} is given, but this checkpoint takes none")
            out[name] = None
            continue
        if value is None:
            raise ConfigError(f"input {name!r} is missing; expected shape {want} (float, model space)")
        t = to_tensor(name, value)
        if tuple(t.shape) != want:
            raise ConfigError(f"input {name!r} has shape {tuple(t.shape)}; this engine takes {want}")
        check_kind(name, t, "float")
        check_finite(name, t)
        out[name] = t.float()
    state = out["state"]
    assert state is not None
    return DiffusionObservation(state, out["images"], out["env_state"])


@torch.no_grad()
def build_diffusion_subengines(
    model: DiffusionModel, shape: DiffusionEngineShape, dtype: torch.dtype
) -> dict[str, SubEngine]:
    """The three sub-engines of `model` for `shape` in `dtype` (the model copied if its dtype differs),
    sharing its weights; example inputs from a seeded observation run through the eager engines."""
    cfg = model.cfg
    model = cast(DiffusionModel, model_in(model, dtype))
    table, columns = step_table(cfg, shape.num_steps)
    sigs = signatures(cfg)
    stochastic = "step_noise" in sigs["denoise_step"].input_names
    step = DenoiseStepEngine(model, columns, stochastic).eval()
    modules: dict[str, nn.Module] = {
        "encoder": EncoderEngine(model).eval(),
        "denoise_step": step,
        "denoise_loop": DenoiseLoopEngine(step, shape.num_steps).eval(),
    }
    values = observation_values(example_observation(cfg, shape.batch))
    g = torch.Generator().manual_seed(1)
    noise = torch.randn(shape.batch, 1 + shape.num_steps, cfg.horizon, cfg.action_dim, generator=g)
    values.update(noise=noise, x_t=noise[:, 0].contiguous(), step_noise=noise[:, 1].contiguous())
    values.update(step_table=table, step_row=table[0])
    constants = {"denoise_step": {"step_table": table}, "denoise_loop": {"step_table": table}}
    return run_examples(modules, sigs, values, constants)


# ---- the pipeline ------------------------------------------------------------------------------------


class DiffusionPipeline(StagePipeline):
    """encoder -> denoise (the loop engine once, or the step engine N times over the table rows)."""

    family = "diffusion"
    stages = (one_engine("encoder"), loop_stage("denoise", table="step_table", row_input="step_row"))
    cfg: DiffusionConfig
    shape: DiffusionEngineShape

    def prepare(self) -> None:
        if "step_table" not in self.constants:
            raise ConfigError("the diffusion pipeline needs the engines' step_table constant")
        self.table = self.constants["step_table"]
        if int(self.table.shape[0]) != self.shape.num_steps:
            raise ConfigError(
                f"the step table has {int(self.table.shape[0])} rows; this engine runs {self.shape.num_steps} steps"
            )
        self.stochastic = "step_noise" in self.signatures["denoise_step"].input_names

    def check(self, obs: DiffusionObservation, noise: Tensor) -> None:
        s, cfg = self.shape, self.cfg
        if obs.batch != s.batch:
            raise ConfigError(f"observation has batch {obs.batch}; this engine takes {s.batch}")
        want = (s.batch, 1 + s.num_steps, cfg.horizon, cfg.action_dim)
        if (
            noise.dim() != 4
            or int(noise.shape[0]) != s.batch
            or int(noise.shape[1]) < 1 + s.num_steps
            or tuple(noise.shape[2:]) != want[2:]
        ):
            raise ConfigError(
                f"noise has shape {tuple(noise.shape)}; this engine takes {want} (row 0 the starting "
                "sample, row 1 + k step k's variance noise)"
            )

    @torch.no_grad()
    def sample(self, obs: DiffusionObservation, noise: Tensor, timer: StageTimer | None = None) -> Tensor:
        """The denoised sample (B, horizon, A) float32 in model space, as `sample_actions`."""
        self.check(obs, noise)
        timer = timer if timer is not None else null_timer()
        values = observation_values(obs)
        with timer.stage("encoder"):
            run_subengine(self.runners["encoder"], self.signatures["encoder"], values)
        n = self.shape.num_steps
        with timer.stage("denoise"):
            if self.runs["denoise"] == "denoise_loop":
                values["noise"] = noise[:, : 1 + n].float()
                values["step_table"] = self.table
                run_subengine(self.runners["denoise_loop"], self.signatures["denoise_loop"], values)
                return values["actions"]
            runner, sig = self.runners["denoise_step"], self.signatures["denoise_step"]
            x = noise[:, 0].float()
            for k in range(n):
                values["x_t"], values["step_row"] = x, self.table[k]
                if self.stochastic:
                    values["step_noise"] = noise[:, k + 1].float()
                run_subengine(runner, sig, values)
                x = values["x_prev"]
            return x


def split_noise(noise: Tensor, num_steps: int) -> tuple[Tensor, Tensor]:
    """(x_T (B, horizon, A), step noise (N, B, horizon, A)) of a family noise draw, as
    `hotloop.models.diffusion.sample_actions` takes them."""
    if noise.dim() != 4 or int(noise.shape[1]) < 1 + num_steps:
        raise ConfigError(
            f"noise has shape {tuple(noise.shape)}; {num_steps} steps need (B, {1 + num_steps}, horizon, A)"
        )
    return noise[:, 0], noise[:, 1 : 1 + num_steps].transpose(0, 1)


def join_noise(start: Tensor, step_noise: Tensor | None, num_steps: int) -> Tensor:
    """The family's noise (B, 1 + N, horizon, A) from LeRobot's x_T (B, horizon, A) and its per-step
    variance noise (N, B, horizon, A) (a reference run's noise.npy and step_noise.npy); zeros without it."""
    rows = torch.zeros(num_steps, *start.shape, dtype=torch.float32)
    if step_noise is not None:
        rows = step_noise.float()
    return torch.cat([start.float()[:, None], rows.transpose(0, 1)], dim=1).contiguous()


def describe_noise(cfg: DiffusionConfig, shape: Any) -> dict[str, Any]:
    """What the noise rows mean for this config and shape (for reports)."""
    drawn = drawn_rows(cfg, shape.num_steps)
    return {"scheduler": cfg.noise_scheduler_type, "steps": shape.num_steps, "noisy_steps": int(drawn.sum())}
