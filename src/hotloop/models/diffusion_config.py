"""LeRobot's `DiffusionConfig` read from a checkpoint's config.json and tensor shapes.

Absent fields take LeRobot's dataclass defaults (draccus does the same when LeRobot loads the file), and
LeRobot's `__post_init__` / `validate_features` rules are applied, so the config here is the one LeRobot
would run: notably `crop_shape` is *derived* when `resize_shape` is set (int(resize * crop_ratio), or no
crop at all for crop_ratio 1.0), whatever config.json stores there. Every ResNet width comes from the
tensors (the backbone name fixes only block type and depth, see hotloop.models.resnet), and the feature
map size from a dry run on the meta device, as LeRobot's `get_output_shape` does. Anything LeRobot would
refuse, or hotloop cannot run faithfully, is a CheckpointError naming the file, the field and the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from hotloop.errors import CheckpointError, ConfigError
from hotloop.models.checkpoint_meta import (
    MAX_CHUNK,
    MAX_CONFIG_INT,
    MAX_FEATURE_DIM,
    MAX_OBS_STEPS,
    MAX_STEPS,
    MAX_TRAIN_TIMESTEPS,
    Fields,
    read_json_object,
)
from hotloop.models.noise_schedulers import BETA_SCHEDULES, SCHEDULER_KINDS, Scheduler, make_scheduler
from hotloop.models.resnet import ResNetConfig, ResNetTrunk, check_backbone, trunk_shapes

OBS_STATE = "observation.state"
ACTION = "action"
# LeRobot's DiffusionConfig.__post_init__ accepts only these (diffusers would also take v_prediction).
LEROBOT_PREDICTION_TYPES = ("epsilon", "sample")


@dataclass(frozen=True)
class DiffusionConfig:
    """Everything that fixes the network and the sampler; sizes as LeRobot builds them."""

    camera_keys: tuple[str, ...]  # input_features of type VISUAL, in config order
    image_shape: tuple[int, int, int] | None  # (C, H, W), the same for every camera (LeRobot's rule)
    state_dim: int
    env_state_dim: int | None  # the first ENV feature (observation.environment_state)
    action_dim: int
    n_obs_steps: int
    horizon: int
    n_action_steps: int
    vision_backbone: str
    resize_shape: tuple[int, int] | None
    crop_ratio: float
    crop_shape: tuple[int, int] | None  # after LeRobot's derivation from resize_shape / crop_ratio
    crop_is_random: bool
    use_group_norm: bool
    spatial_softmax_num_keypoints: int
    use_separate_rgb_encoder_per_camera: bool
    down_dims: tuple[int, ...]
    kernel_size: int
    n_groups: int
    diffusion_step_embed_dim: int
    use_film_scale_modulation: bool
    noise_scheduler_type: str
    num_train_timesteps: int
    beta_schedule: str
    beta_start: float
    beta_end: float
    prediction_type: str
    clip_sample: bool
    clip_sample_range: float
    num_inference_steps: int  # config null -> num_train_timesteps, as LeRobot
    # Backbone weight shapes by torchvision name (conv1.weight, layer1.0.conv1.weight, ...), and the
    # (C, h, w) feature map they give on the backbone input; () / None without cameras.
    backbone_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    feature_map: tuple[int, int, int] | None = None

    @property
    def n_cameras(self) -> int:
        return len(self.camera_keys)

    @property
    def backbone_input_hw(self) -> tuple[int, int] | None:
        """(h, w) entering the ResNet: crop if any, else resize if any, else the image (LeRobot's order)."""
        if self.image_shape is None:
            return None
        return self.crop_shape or self.resize_shape or (self.image_shape[1], self.image_shape[2])

    @property
    def image_feature_dim(self) -> int:
        return 2 * self.spatial_softmax_num_keypoints

    @property
    def obs_feature_dim(self) -> int:
        """Per observation step: [state, camera features in config order, env state]."""
        return self.state_dim + self.image_feature_dim * self.n_cameras + (self.env_state_dim or 0)

    @property
    def global_cond_dim(self) -> int:
        return self.obs_feature_dim * self.n_obs_steps

    @property
    def cond_dim(self) -> int:
        """FiLM input: the diffusion-step embedding then the global conditioning."""
        return self.diffusion_step_embed_dim + self.global_cond_dim

    @property
    def resnet(self) -> ResNetConfig:
        return ResNetConfig(self.vision_backbone, "group_norm" if self.use_group_norm else "batch_norm")

    def make_scheduler(self) -> Scheduler:
        return make_scheduler(
            self.noise_scheduler_type,
            num_train_timesteps=self.num_train_timesteps,
            beta_start=self.beta_start,
            beta_end=self.beta_end,
            beta_schedule=self.beta_schedule,
            clip_sample=self.clip_sample,
            clip_sample_range=self.clip_sample_range,
            prediction_type=self.prediction_type,
        )


def read_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """{key: shape} of a safetensors file, without reading the tensors."""
    if not path.is_file():
        raise CheckpointError(
            f"missing file {path.name!r} in {path.parent}: a checkpoint needs model.safetensors"
        )
    try:
        with safe_open(str(path), framework="pt") as handle:
            return {k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()}  # noqa: SIM118
    except Exception as exc:  # SafetensorError / OSError on a damaged header
        raise CheckpointError(
            f"{path} is not a readable safetensors file (corrupt or truncated?): {exc}"
        ) from exc


class _Reader:
    """config.json fields with LeRobot's defaults; every failure names the file and the field."""

    def __init__(self, fields: Fields) -> None:
        self.f = fields

    def fail(self, key: str, value: Any, why: str) -> CheckpointError:
        return CheckpointError(f"{self.f.file}: field {self.f.name(key)!r} is {value!r}; {why}")

    def boolean(self, key: str, default: bool) -> bool:
        value = self.f.data.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, value, "it must be true or false")
        return value

    def integer(self, key: str, default: int, minimum: int = 1, maximum: int = MAX_CONFIG_INT) -> int:
        value = self.f.integer(key, minimum=minimum, maximum=maximum)
        return default if value is None else value

    def number(self, key: str, default: float) -> float:
        value = self.f.number(key, positive=False)
        return default if value is None else value

    def string(self, key: str, default: str, choices: tuple[str, ...] | None = None) -> str:
        value = self.f.data.get(key, default)
        if not isinstance(value, str) or (choices is not None and value not in choices):
            raise self.fail(key, value, "hotloop runs " + ", ".join(choices or ("a string",)))
        return value

    def ints(
        self,
        key: str,
        default: tuple[int, ...] | None,
        length: int | None = None,
        maximum: int = MAX_FEATURE_DIM,
    ) -> tuple[int, ...] | None:
        value = self.f.data.get(key, default)
        if value is None:
            return None
        ok = isinstance(value, (list, tuple)) and 0 < len(value) <= 16
        ok = ok and all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= maximum for v in value)
        if not ok or (length is not None and len(value) != length):
            want = f"{length or 'up to 16'} integers from 1 to {maximum}"
            raise self.fail(key, value, f"it must be {want}" + (" or null" if default is None else ""))
        return tuple(int(v) for v in value)


def _features(reader: _Reader, key: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """{name: (type, shape)} of input_features / output_features, in file order."""
    fields = reader.f.obj(key)
    if fields is None:
        raise CheckpointError(f"{reader.f.file}: field {key!r} is missing; LeRobot's config.json names it")
    out = {}
    for name in fields.data:
        ft = fields.obj(name)
        assert ft is not None
        sub = _Reader(ft)
        kind = sub.string("type", "")
        shape = sub.ints("shape", None)
        if shape is None:
            raise sub.fail("shape", None, "it must be a list of positive integers")
        out[name] = (kind, shape)
    return out


def read_diffusion_config(
    folder: Path, shapes: Mapping[str, tuple[int, ...]] | None = None
) -> DiffusionConfig:
    """The DiffusionConfig of a LeRobot checkpoint folder (config.json + model.safetensors shapes).

    `shapes` are the safetensors shapes under LeRobot's keys ("diffusion.unet...."); read from
    `folder/model.safetensors` when not given.
    """
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise CheckpointError(f"missing file 'config.json' in {folder}: a LeRobot checkpoint needs it")
    if shapes is None:
        shapes = read_shapes(Path(folder) / "model.safetensors")
    r = _Reader(Fields(read_json_object(path), path))
    kind = r.f.data.get("type", "diffusion")
    if kind != "diffusion":
        raise r.fail("type", kind, "this loader reads LeRobot's Diffusion Policy ('diffusion')")

    inputs, outputs = _features(r, "input_features"), _features(r, "output_features")
    state = inputs.get(OBS_STATE)
    if state is None or state[0] != "STATE" or len(state[1]) != 1:
        raise r.fail(
            "input_features", sorted(inputs), f"LeRobot's Diffusion needs a STATE {OBS_STATE!r} (dim,)"
        )
    cameras = tuple(k for k, (t, _) in inputs.items() if t == "VISUAL")
    env = next((s for t, s in inputs.values() if t == "ENV"), None)
    if not cameras and env is None:
        raise r.fail("input_features", sorted(inputs), "LeRobot needs at least one image or an ENV state")
    action = outputs.get(ACTION)
    if action is None or action[0] != "ACTION" or len(action[1]) != 1:
        raise r.fail(
            "output_features", sorted(outputs), f"LeRobot's Diffusion needs an ACTION {ACTION!r} (dim,)"
        )
    image_shape = None
    if cameras:
        image_shape = inputs[cameras[0]][1]
        for cam in cameras:
            if inputs[cam][1] != image_shape or len(image_shape) != 3:
                raise r.fail(
                    f"input_features.{cam}.shape",
                    list(inputs[cam][1]),
                    f"every camera must be (C, H, W) and match {cameras[0]!r} {list(image_shape)} (LeRobot's rule)",
                )

    n_obs_steps = r.integer("n_obs_steps", 2, maximum=MAX_OBS_STEPS)
    horizon = r.integer("horizon", 64, maximum=MAX_CHUNK)
    n_action_steps = r.integer("n_action_steps", 32, maximum=MAX_CHUNK)
    backbone = check_backbone(r.f.data.get("vision_backbone", "resnet18"), str(path))
    resize = r.ints("resize_shape", None, length=2)
    crop_ratio = r.number("crop_ratio", 1.0)
    if not 0 < crop_ratio <= 1.0:
        raise r.fail("crop_ratio", crop_ratio, "it must be in (0, 1] (LeRobot's rule)")
    crop = r.ints("crop_shape", None, length=2)
    if resize is not None:  # LeRobot's __post_init__ overrides crop_shape on the resize path
        crop = (int(resize[0] * crop_ratio), int(resize[1] * crop_ratio)) if crop_ratio < 1.0 else None
        if crop is not None and min(crop) <= 0:
            raise r.fail(
                "crop_ratio", crop_ratio, f"resize_shape {list(resize)} x crop_ratio gives crop {crop}"
            )
    elif (
        crop is not None
        and image_shape is not None
        and (crop[0] > image_shape[1] or crop[1] > image_shape[2])
    ):
        raise r.fail(
            "crop_shape", list(crop), f"it must fit within the images {list(image_shape)} (LeRobot's rule)"
        )
    down_dims = r.ints("down_dims", (512, 1024, 2048), maximum=MAX_CONFIG_INT)
    assert down_dims is not None
    if horizon % 2 ** len(down_dims):
        raise r.fail(
            "horizon", horizon, f"it must be a multiple of 2**len(down_dims) = {2 ** len(down_dims)}"
        )
    n_groups = r.integer("n_groups", 8)
    if any(width % n_groups for width in down_dims) or down_dims[0] % 8:  # final block: always 8 groups
        raise r.fail(
            "down_dims",
            list(down_dims),
            f"GroupNorm needs every width divisible by n_groups ({n_groups}) "
            "and the first by 8 (the final conv block's groups)",
        )
    embed = r.integer("diffusion_step_embed_dim", 128)
    if embed % 2 or embed < 4:
        raise r.fail("diffusion_step_embed_dim", embed, "the sinusoid needs an even size >= 4")
    scheduler_type = r.string("noise_scheduler_type", "DDPM", SCHEDULER_KINDS)
    num_train = r.integer("num_train_timesteps", 100, maximum=MAX_TRAIN_TIMESTEPS)
    steps = None
    if r.f.data.get("num_inference_steps") is not None:
        steps = r.f.integer("num_inference_steps", minimum=1, maximum=min(num_train, MAX_STEPS))
    cfg = DiffusionConfig(
        camera_keys=cameras,
        image_shape=(image_shape[0], image_shape[1], image_shape[2]) if image_shape else None,
        state_dim=state[1][0],
        env_state_dim=env[0] if env is not None else None,
        action_dim=action[1][0],
        n_obs_steps=n_obs_steps,
        horizon=horizon,
        n_action_steps=n_action_steps,
        vision_backbone=backbone,
        resize_shape=(resize[0], resize[1]) if resize else None,
        crop_ratio=crop_ratio,
        crop_shape=(crop[0], crop[1]) if crop else None,
        crop_is_random=r.boolean("crop_is_random", True),
        use_group_norm=r.boolean("use_group_norm", False),
        spatial_softmax_num_keypoints=r.integer("spatial_softmax_num_keypoints", 32),
        use_separate_rgb_encoder_per_camera=r.boolean("use_separate_rgb_encoder_per_camera", True),
        down_dims=down_dims,
        kernel_size=r.integer("kernel_size", 5),
        n_groups=n_groups,
        diffusion_step_embed_dim=embed,
        use_film_scale_modulation=r.boolean("use_film_scale_modulation", True),
        noise_scheduler_type=scheduler_type,
        num_train_timesteps=num_train,
        beta_schedule=r.string("beta_schedule", "squaredcos_cap_v2", BETA_SCHEDULES[scheduler_type]),
        beta_start=r.number("beta_start", 0.0001),
        beta_end=r.number("beta_end", 0.02),
        prediction_type=r.string("prediction_type", "epsilon", LEROBOT_PREDICTION_TYPES),
        clip_sample=r.boolean("clip_sample", True),
        clip_sample_range=r.number("clip_sample_range", 1.0),
        num_inference_steps=steps if steps is not None else num_train,
    )
    try:
        cfg.make_scheduler()
    except ConfigError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    return _with_backbone(cfg, shapes, Path(folder) / "model.safetensors") if cameras else cfg


def _with_backbone(
    cfg: DiffusionConfig, shapes: Mapping[str, tuple[int, ...]], file: Path
) -> DiffusionConfig:
    """cfg plus the backbone's tensor shapes and its feature map (a dry run on the meta device)."""
    prefix = (
        "diffusion.rgb_encoder." + ("0." if cfg.use_separate_rgb_encoder_per_camera else "") + "backbone."
    )
    if prefix + "0.weight" not in shapes:
        other = (
            "diffusion.rgb_encoder." + ("" if cfg.use_separate_rgb_encoder_per_camera else "0.") + "backbone."
        )
        hint = (
            f" (it has {other}..., so use_separate_rgb_encoder_per_camera is the other way)"
            if other + "0.weight" in shapes
            else ""
        )
        raise CheckpointError(f"{file}: missing key {prefix + '0.weight'!r}, the ResNet stem conv{hint}")
    backbone = trunk_shapes(shapes, prefix, sequential=True)
    assert cfg.image_shape is not None and (hw := cfg.backbone_input_hw) is not None
    stem = backbone["conv1.weight"]
    if len(stem) != 4 or stem[1] != cfg.image_shape[0]:
        raise CheckpointError(
            f"{file}: key {prefix + '0.weight'!r} has shape {tuple(stem)}, expected (out, "
            f"{cfg.image_shape[0]}, k, k) for {cfg.image_shape[0]}-channel images"
        )
    try:
        with torch.device("meta"):
            trunk = ResNetTrunk(cfg.resnet, backbone, str(file))
            out = trunk(torch.empty(1, cfg.image_shape[0], hw[0], hw[1]))
    except (RuntimeError, ValueError) as exc:  # inconsistent widths between tensors, bad GroupNorm widths
        raise CheckpointError(
            f"{file}: the {prefix}* tensors do not form a {cfg.vision_backbone}: {exc}"
        ) from None
    c, h, w = (int(d) for d in out.shape[1:])
    return DiffusionConfig(
        **{**cfg.__dict__, "backbone_shapes": tuple(sorted(backbone.items())), "feature_map": (c, h, w)}
    )


__all__ = ["DiffusionConfig", "read_diffusion_config", "read_shapes"]
