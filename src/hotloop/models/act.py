"""LeRobot's ACT (Action Chunking Transformer, `policies/act` at commit 7427f318) as plain nn.Modules.

Two sub-engines, compiled separately by hotloop:

    backbone(image (B, 3, H, W))                    -> feature map (B, C, h, w)   (one camera; shared weights)
    transformer(feature_maps, state, env_state)     -> actions (B, chunk_size, action_dim)

`forward(images, state, env_state)` runs the backbone on every camera, then the transformer. Parameter
names are LeRobot's state-dict keys minus the leading "model.", so a checkpoint loads strictly as is.

What inference computes, and LeRobot's quirks reproduced on purpose (all checked against the fixture
`lerobot-act-tiny`, stage by stage):
- The VAE encoder is never run at inference: the latent is zeros, so the latent token is
  `encoder_latent_input_proj(0)` (its bias). Its weights (and the fixed `vae_encoder_pos_enc` buffer) are
  loaded, because the checkpoint holds them and loading is strict, but unused.
- Encoder tokens: [latent, state (if any), env state (if any), image tokens camera by camera in
  `input_features` order, each feature map flattened (h w) row-major]. The 1-D tokens take their
  positions from rows of the learned `encoder_1d_feature_pos_embed`; image tokens from a parameter-free
  2-D sinusoid whose coordinates start at 1 and are divided by (last + 1e-6) before scaling by 2*pi.
- Positions are added to queries and keys, never values; the decoder's cross-attention keys carry the
  encoder positions. The decoder input is zeros; its queries are the learned `decoder_pos_embed` rows.
- Post-norm by default. The encoder ends in a LayerNorm only when `pre_norm` (else Identity, no
  weights); the decoder always ends in one. Every decoder layer runs (older ACT ports ran only the first).
- Attention is `F.multi_head_attention_forward` with `need_weights=True` (nn.MultiheadAttention's
  default, which ACT never overrides): separate q/k/v projections (k is never v), q scaled by
  head_dim^-0.5 before a bmm, softmax, bmm, out-projection; written out here in the same op order.
- `feedforward_activation` "glu" is accepted by LeRobot's config but cannot run there (glu halves
  `dim_feedforward` and linear2 expects all of it), so hotloop refuses it instead of guessing.
- Without a robot state LeRobot still reads `batch["observation.state"].device` to place the zero
  latent (a KeyError there unless a dummy is passed; its values are never used): here `state` is None.

The layers live in `act_layers`; loading (config.json + tensor shapes, strict) is below.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import torch
from torch import Tensor, nn

from hotloop.errors import CheckpointError, ConfigError
from hotloop.finite import assign_finite
from hotloop.models.act_layers import Attention, Decoder, Encoder, sinusoid_1d, sinusoid_2d
from hotloop.models.checkpoint_meta import (
    MAX_CHUNK,
    MAX_CONFIG_INT,
    MAX_FEATURE_DIM,
    Fields,
    lerobot_config,
)
from hotloop.models.resnet import ResNetConfig, ResNetTrunk, check_backbone

PREFIX = "model."  # LeRobot saves the policy's state dict; the network is its `model` attribute
STATE_KEY = "observation.state"  # LeRobot's robot_state_feature: a STATE feature with exactly this name
ENV_STATE_KEY = "observation.environment_state"  # the batch key ACT reads its env state from
ACTION_KEY = "action"
ACTIVATIONS = ("relu", "gelu")
BACKBONE = "backbone."


@dataclass(frozen=True)
class ACTConfig:
    """Everything ACT's inference needs, from config.json and the checkpoint's tensor shapes.

    `backbone_shapes` are the ResNet's weight shapes (torchvision names, no prefix): the trunk's widths come
    from them, not from the backbone name (the fixtures narrow resnet18's channels).
    """

    cameras: tuple[str, ...]
    camera_shapes: tuple[tuple[int, int, int], ...]
    state_dim: int | None
    env_state_dim: int | None
    action_dim: int
    chunk_size: int
    n_action_steps: int
    dim_model: int
    n_heads: int
    dim_feedforward: int
    feedforward_activation: str
    n_encoder_layers: int
    n_decoder_layers: int
    pre_norm: bool
    use_vae: bool
    latent_dim: int
    n_vae_encoder_layers: int
    temporal_ensemble_coeff: float | None
    vision_backbone: str
    replace_final_stride_with_dilation: bool
    backbone_shapes: tuple[tuple[str, tuple[int, ...]], ...] = field(default=(), repr=False)
    layer_norm_eps: float = 1e-5  # nn.LayerNorm's default; LeRobot never sets it

    @property
    def n_1d_tokens(self) -> int:
        """Latent, then state and env state when present: the rows of encoder_1d_feature_pos_embed."""
        return 1 + (self.state_dim is not None) + (self.env_state_dim is not None)

    @property
    def resnet(self) -> ResNetConfig:
        return ResNetConfig(
            self.vision_backbone, norm="frozen_bn", dilate_last=self.replace_final_stride_with_dilation
        )


# ----------------------------------------------------------------------------------------------- model


class ACTModel(nn.Module):
    """LeRobot's `ACT` network (inference path). Parameter names = LeRobot keys minus "model."."""

    def __init__(self, cfg: ACTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.dim_model
        if d % cfg.n_heads:
            raise ConfigError(f"dim_model {d} is not a multiple of n_heads {cfg.n_heads}")
        if cfg.use_vae:  # training-only; present so the checkpoint loads strictly
            self.vae_encoder = Encoder(cfg, cfg.n_vae_encoder_layers)
            self.vae_encoder_cls_embed = nn.Embedding(1, d)
            if cfg.state_dim is not None:
                self.vae_encoder_robot_state_input_proj = nn.Linear(cfg.state_dim, d)
            self.vae_encoder_action_input_proj = nn.Linear(cfg.action_dim, d)
            self.vae_encoder_latent_output_proj = nn.Linear(d, 2 * cfg.latent_dim)
            n_tokens = 1 + cfg.chunk_size + (cfg.state_dim is not None)
            table = sinusoid_1d(n_tokens, d).unsqueeze(0)
            self.register_buffer("vae_encoder_pos_enc", table.to(self.vae_encoder_cls_embed.weight.device))
        if cfg.cameras:
            # The method `backbone` (the sub-engine) shadows the attribute, so the trunk is registered
            # under LeRobot's name directly and reached through `trunk`.
            self._modules["backbone"] = ResNetTrunk(
                cfg.resnet, dict(cfg.backbone_shapes), PREFIX + "backbone"
            )
        self.encoder = Encoder(cfg, cfg.n_encoder_layers)
        self.decoder = Decoder(cfg)
        if cfg.state_dim is not None:
            self.encoder_robot_state_input_proj = nn.Linear(cfg.state_dim, d)
        if cfg.env_state_dim is not None:
            self.encoder_env_state_input_proj = nn.Linear(cfg.env_state_dim, d)
        self.encoder_latent_input_proj = nn.Linear(cfg.latent_dim, d)
        if cfg.cameras:
            self.encoder_img_feat_input_proj = nn.Conv2d(self.trunk.out_channels, d, kernel_size=1)
        self.encoder_1d_feature_pos_embed = nn.Embedding(cfg.n_1d_tokens, d)
        self.decoder_pos_embed = nn.Embedding(cfg.chunk_size, d)
        self.action_head = nn.Linear(d, cfg.action_dim)

    @property
    def trunk(self) -> ResNetTrunk:
        """The shared ResNet (state-dict name `backbone`)."""
        return cast(ResNetTrunk, self._modules["backbone"])

    def backbone(self, image: Tensor) -> Tensor:
        """One camera's normalised image (B, 3, H, W) -> its layer4 feature map (B, C, h, w)."""
        return cast(Tensor, self.trunk(image))

    def transformer(
        self, feature_maps: Sequence[Tensor], state: Tensor | None = None, env_state: Tensor | None = None
    ) -> Tensor:
        """Feature maps (one per camera, config order), state (B, S), env state (B, E) -> (B, chunk, A)."""
        return self._transformer(feature_maps, state, env_state, None)

    def forward(
        self, images: Sequence[Tensor], state: Tensor | None = None, env_state: Tensor | None = None
    ) -> Tensor:
        return self.transformer([self.backbone(img) for img in images], state, env_state)

    def _check_inputs(self, n_maps: int, state: Tensor | None, env_state: Tensor | None) -> None:
        cfg = self.cfg
        if n_maps != len(cfg.cameras):
            raise ConfigError(f"ACT expects {len(cfg.cameras)} camera(s) {list(cfg.cameras)}, got {n_maps}")
        for name, value, dim in (
            ("state", state, cfg.state_dim),
            ("env_state", env_state, cfg.env_state_dim),
        ):
            if (value is None) != (dim is None):
                raise ConfigError(
                    f"ACT {name}: the checkpoint {'has no' if dim is None else f'needs a {dim}-dim'} {name}, "
                    f"got {'none' if value is None else tuple(value.shape)}"
                )
        if n_maps == 0 and env_state is None:
            raise ConfigError("ACT needs at least one camera or an environment state")

    def _transformer(
        self,
        feature_maps: Sequence[Tensor],
        state: Tensor | None,
        env_state: Tensor | None,
        record: dict[str, Tensor] | None,
    ) -> Tensor:
        self._check_inputs(len(feature_maps), state, env_state)
        cfg = self.cfg
        batch = feature_maps[0].shape[0] if feature_maps else cast(Tensor, env_state).shape[0]
        proj_dtype = self.encoder_latent_input_proj.weight.dtype
        latent = torch.zeros(batch, cfg.latent_dim, dtype=proj_dtype, device=self.action_head.weight.device)
        # LeRobot stacks lists of (B, D) tokens; concatenating (n, B, D) blocks gives the same tensor
        # without iterating over tensors (which tracing and ONNX export warn about).
        latent_token = self.encoder_latent_input_proj(latent)
        tokens = [latent_token.unsqueeze(0)]
        pos = [self.encoder_1d_feature_pos_embed.weight.unsqueeze(1)]  # (n_1d, 1, D)
        if record is not None:
            record["latent_sample"], record["latent_token"] = latent, latent_token
        for name, value, proj in (
            ("state_token", state, "encoder_robot_state_input_proj"),
            ("env_state_token", env_state, "encoder_env_state_input_proj"),
        ):
            if value is not None:
                token = getattr(self, proj)(value)
                tokens.append(token.unsqueeze(0))
                if record is not None:
                    record[name] = token
        for i, fmap in enumerate(feature_maps):
            cam_pos = sinusoid_2d(fmap, cfg.dim_model // 2).to(dtype=fmap.dtype)
            cam = self.encoder_img_feat_input_proj(fmap)
            if record is not None:
                record[f"cam_pos_embed_cam{i}"], record[f"cam_features_proj_cam{i}"] = cam_pos, cam
            tokens.append(cam.flatten(2).permute(2, 0, 1))  # "b c h w -> (h w) b c"
            pos.append(cam_pos.flatten(2).permute(2, 0, 1))
        encoder_in = torch.cat(tokens, dim=0)  # (S, B, D)
        encoder_pos = torch.cat(pos, dim=0)  # (S, 1, D)
        encoder_out = self.encoder(encoder_in, encoder_pos, record)
        decoder_in = torch.zeros(
            cfg.chunk_size, batch, cfg.dim_model, dtype=encoder_pos.dtype, device=encoder_pos.device
        )
        decoder_pos = self.decoder_pos_embed.weight.unsqueeze(1)
        decoder_out = self.decoder(decoder_in, encoder_out, decoder_pos, encoder_pos, record)
        actions = cast(Tensor, self.action_head(decoder_out.transpose(0, 1)))
        if record is not None:
            record.update(
                encoder_in_tokens=encoder_in,
                encoder_in_pos_embed=encoder_pos,
                encoder_out=encoder_out,
                decoder_in=decoder_in,
                decoder_pos_embed=decoder_pos,
                decoder_out=decoder_out,
                action_head_out=actions,
                actions=actions,
            )
        return actions


def act_intermediates(
    model: ACTModel, images: Sequence[Tensor], state: Tensor | None = None, env_state: Tensor | None = None
) -> dict[str, Tensor]:
    """Every stage of one forward, keyed like the fixture's intermediates.npz (plus `env_state_token`
    when an env state is present): for stage-by-stage comparisons in tests and `hotloop verify`."""
    record: dict[str, Tensor] = {}
    trunk = model.trunk if images else None
    maps = []
    with torch.no_grad():
        for i, img in enumerate(images):
            assert trunk is not None
            x = trunk.maxpool(trunk.relu(trunk.bn1(trunk.conv1(img))))
            record[f"backbone_stem_cam{i}"] = x
            for stage in range(1, 5):
                x = getattr(trunk, f"layer{stage}")(x)
                name = "feature_map" if stage == 4 else f"layer{stage}"
                record[f"backbone_{name}_cam{i}"] = x
            maps.append(x)
        model._transformer(maps, state, env_state, record)
    return {k: v.detach() for k, v in record.items()}


# ---------------------------------------------------------------------------------------------- loading


def read_tensor_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape in a safetensors file (header only), with errors naming the file."""
    from safetensors import safe_open

    if not path.is_file():
        raise CheckpointError(f"missing file {path.name!r} in {path.parent}: an ACT checkpoint needs it")
    try:
        with safe_open(str(path), framework="pt") as handle:
            return {k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()}  # noqa: SIM118
    except Exception as exc:  # safetensors raises SafetensorError / OSError on damaged headers
        raise CheckpointError(
            f"{path} is not a readable safetensors file (corrupt or truncated?): {exc}; re-save it"
        ) from exc


def _flag(f: Fields, key: str, default: bool, ints: bool = False) -> bool:
    """A JSON boolean (0/1 too when `ints`: LeRobot types replace_final_stride_with_dilation as int)."""
    if key not in f:
        return default
    value = f.data[key]
    if isinstance(value, bool):
        return value
    if ints and isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise CheckpointError(
        f"{f.file}: field {f.name(key)!r} must be true or false (got {value!r}); fix the field"
    )


def _int(f: Fields, key: str, default: int, minimum: int = 1, maximum: int = MAX_CONFIG_INT) -> int:
    """An integer field; when absent, LeRobot's dataclass default (what its own loader would use)."""
    value = f.integer(key, minimum=minimum, maximum=maximum)
    return default if value is None else value


def _shape(f: Fields, key: str, rank: int) -> tuple[int, ...]:
    value = f.data.get(key)
    if (
        not isinstance(value, list)
        or len(value) != rank
        or any(isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_FEATURE_DIM for v in value)
    ):
        raise CheckpointError(
            f"{f.file}: field {f.name(key)!r} must be a list of {rank} integers from 1 to {MAX_FEATURE_DIM} "
            f"(got {value!r})"
        )
    return tuple(value)


def _input_features(f: Fields) -> tuple[list[str], list[tuple[int, int, int]], int | None, int | None]:
    """Cameras (VISUAL, in input_features order), state dim and env-state dim, chosen as LeRobot does:
    the state is the STATE feature named observation.state, the env state the first ENV feature; other
    features (another STATE name, LANGUAGE...) are not read by ACT and are ignored as LeRobot ignores them."""
    features = f.obj("input_features")
    if features is None:
        raise CheckpointError(
            f"{f.file}: field 'input_features' is missing; ACT needs cameras or an env state"
        )
    cameras: list[str] = []
    camera_shapes: list[tuple[int, int, int]] = []
    state_dim = env_dim = None
    for name in features.data:
        feature = features.obj(name)
        assert feature is not None
        kind = feature.string("type", ("STATE", "VISUAL", "ENV", "ACTION", "REWARD", "LANGUAGE"))
        if kind == "VISUAL":
            c, h, w = _shape(feature, "shape", 3)
            cameras.append(name)
            camera_shapes.append((c, h, w))
        elif kind == "STATE" and name == STATE_KEY:
            state_dim = _shape(feature, "shape", 1)[0]
        elif kind == "ENV" and env_dim is None:
            env_dim = _shape(feature, "shape", 1)[0]
    if not cameras and env_dim is None:
        raise CheckpointError(
            f"{f.file}: field 'input_features' has no VISUAL and no ENV feature; ACT needs at least one image "
            "or the environment state (LeRobot refuses this config too)"
        )
    return cameras, camera_shapes, state_dim, env_dim


def _action_dim(f: Fields) -> int:
    outputs = f.obj("output_features")
    action = outputs.obj(ACTION_KEY) if outputs is not None and ACTION_KEY in outputs else None
    if action is None or action.string("type") != "ACTION":
        raise CheckpointError(
            f"{f.file}: field 'output_features' must hold {ACTION_KEY!r} of type 'ACTION' (ACT's action output)"
        )
    return _shape(action, "shape", 1)[0]


def read_act_config(folder: Path) -> ACTConfig:
    """ACTConfig from `folder/config.json` (LeRobot's ACTConfig as saved) and model.safetensors' shapes.

    Absent fields take LeRobot's dataclass defaults, as LeRobot's loader does; every size is then checked
    against the tensors, so a config that does not describe the weights is refused naming the key.
    """
    folder = Path(folder)
    f = lerobot_config(folder, "an ACT checkpoint needs LeRobot's config")
    path = f.file
    kind = f.string("type")
    if kind is not None and kind != "act":
        raise CheckpointError(f"{path}: field 'type' is {kind!r}; this loader reads LeRobot ACT ('act')")
    n_obs = f.integer("n_obs_steps")
    if n_obs not in (None, 1):
        raise CheckpointError(
            f"{path}: field 'n_obs_steps' is {n_obs}; ACT (and hotloop) runs 1 observation step"
        )
    cameras, camera_shapes, state_dim, env_dim = _input_features(f)
    chunk = _int(f, "chunk_size", 100, maximum=MAX_CHUNK)
    n_action_steps = _int(f, "n_action_steps", 100, maximum=MAX_CHUNK)
    if n_action_steps > chunk:
        raise CheckpointError(f"{path}: field 'n_action_steps' is {n_action_steps} > chunk_size {chunk}")
    activation = f.string("feedforward_activation") or "relu"
    if activation not in ACTIVATIONS:
        why = (
            "LeRobot's glu halves dim_feedforward before linear2, which expects all of it, so such a "
            "checkpoint cannot run there either"
            if activation == "glu"
            else "LeRobot's ACT knows relu, gelu and glu"
        )
        raise CheckpointError(
            f"{path}: field 'feedforward_activation' is {activation!r}; hotloop runs relu and gelu ({why})"
        )
    coeff = None
    if f.data.get("temporal_ensemble_coeff") is not None:
        coeff = f.number("temporal_ensemble_coeff", positive=False)
        if n_action_steps != 1:
            raise CheckpointError(
                f"{path}: field 'temporal_ensemble_coeff' is {coeff} but n_action_steps is {n_action_steps}; "
                "temporal ensembling queries the policy every step, so LeRobot requires n_action_steps 1"
            )
    backbone = f.string("vision_backbone") or "resnet18"
    if cameras:
        backbone = check_backbone(backbone, str(path))
    n_heads = _int(f, "n_heads", 8)
    dim_model = _int(f, "dim_model", 512)
    if dim_model % n_heads:
        raise CheckpointError(
            f"{path}: field 'dim_model' ({dim_model}) is not a multiple of 'n_heads' ({n_heads})"
        )

    weights = folder / "model.safetensors"
    shapes = read_tensor_shapes(weights)
    trunk = {k[len(PREFIX + BACKBONE) :]: s for k, s in shapes.items() if k.startswith(PREFIX + BACKBONE)}
    if cameras and not trunk:
        raise CheckpointError(
            f"{path}: input_features {cameras} are cameras (VISUAL), but {weights.name} holds no backbone "
            f"weights ('{PREFIX}{BACKBONE}*'); the weights were saved without cameras"
        )
    if trunk and not cameras:
        raise CheckpointError(
            f"{weights}: holds backbone weights ('{PREFIX}{BACKBONE}*') but {path.name} names no VISUAL "
            "input feature; the config lost its cameras"
        )
    if cameras:
        conv1 = trunk.get("conv1.weight")
        for name, (c, _, _) in zip(cameras, camera_shapes, strict=True):
            if conv1 is not None and len(conv1) == 4 and conv1[1] != c:
                raise CheckpointError(
                    f"{path}: input_features.{name}.shape has {c} channels, but {PREFIX}{BACKBONE}conv1.weight "
                    f"{conv1} takes {conv1[1]}"
                )
    cfg = ACTConfig(
        cameras=tuple(cameras),
        camera_shapes=tuple(camera_shapes),
        state_dim=state_dim,
        env_state_dim=env_dim,
        action_dim=_action_dim(f),
        chunk_size=chunk,
        n_action_steps=n_action_steps,
        dim_model=dim_model,
        n_heads=n_heads,
        dim_feedforward=_int(f, "dim_feedforward", 3200),
        feedforward_activation=activation,
        n_encoder_layers=_int(f, "n_encoder_layers", 4),
        n_decoder_layers=_int(f, "n_decoder_layers", 1),
        pre_norm=_flag(f, "pre_norm", False),
        use_vae=_flag(f, "use_vae", True),
        latent_dim=_int(f, "latent_dim", 32),
        n_vae_encoder_layers=_int(f, "n_vae_encoder_layers", 4),
        temporal_ensemble_coeff=coeff,
        vision_backbone=backbone,
        replace_final_stride_with_dilation=_flag(f, "replace_final_stride_with_dilation", False, ints=True),
        backbone_shapes=tuple(sorted(trunk.items())),
    )
    check_tensors(cfg, shapes, weights)
    return cfg


def _layer_count(shapes: Mapping[str, tuple[int, ...]], prefix: str) -> int:
    found = {int(k[len(prefix) :].split(".")[0]) for k in shapes if k.startswith(prefix)}
    return max(found) + 1 if found else 0


def _field_conflicts(cfg: ACTConfig, shapes: Mapping[str, tuple[int, ...]]) -> list[str]:
    """The config.json fields the tensors contradict, each with the key and shape that says so."""
    out = []
    anchors: list[tuple[str, int | None, str, int]] = [
        ("dim_model", cfg.dim_model, "action_head.weight", 1),
        ("output_features.action.shape", cfg.action_dim, "action_head.weight", 0),
        ("chunk_size", cfg.chunk_size, "decoder_pos_embed.weight", 0),
        ("latent_dim", cfg.latent_dim, "encoder_latent_input_proj.weight", 1),
        ("dim_feedforward", cfg.dim_feedforward, "encoder.layers.0.linear1.weight", 0),
        (f"input_features.{STATE_KEY}.shape", cfg.state_dim, "encoder_robot_state_input_proj.weight", 1),
        ("input_features (ENV).shape", cfg.env_state_dim, "encoder_env_state_input_proj.weight", 1),
    ]
    for name, value, key, axis in anchors:
        shape = shapes.get(PREFIX + key)
        if value is not None and shape is not None and len(shape) > axis and shape[axis] != value:
            out.append(
                f"field {name!r} is {value}, but {PREFIX}{key} has shape {shape} (dim {axis} = {shape[axis]})"
            )
    for name, value, prefix in (
        ("n_encoder_layers", cfg.n_encoder_layers, "encoder.layers."),
        ("n_decoder_layers", cfg.n_decoder_layers, "decoder.layers."),
        ("n_vae_encoder_layers", cfg.n_vae_encoder_layers if cfg.use_vae else None, "vae_encoder.layers."),
    ):
        count = _layer_count(shapes, PREFIX + prefix)
        if value is not None and count and count != value:
            out.append(f"field {name!r} is {value}, but the weights hold {count} ({PREFIX}{prefix}*)")
    for name, value, key in (
        ("pre_norm", cfg.pre_norm, "encoder.norm.weight"),
        ("use_vae", cfg.use_vae, "vae_encoder_cls_embed.weight"),
    ):
        if value != (PREFIX + key in shapes):
            out.append(
                f"field {name!r} is {str(value).lower()}, but {PREFIX}{key} is {'missing' if value else 'present'}"
            )
    return out


def check_tensors(cfg: ACTConfig, shapes: Mapping[str, tuple[int, ...]], file: Path) -> None:
    """One CheckpointError naming the config fields the tensors contradict, then every missing and
    unexpected key and every shape (found vs expected)."""
    conflicts = _field_conflicts(cfg, shapes)
    if conflicts:  # said before the model is built from them (a chunk_size of 1e9 would take minutes)
        raise CheckpointError(f"{file} does not match config.json: {'; '.join(conflicts)}")
    try:
        with torch.device("meta"):
            model = ACTModel(cfg)
    except CheckpointError as exc:  # the ResNet's depth or a conv weight does not fit vision_backbone
        raise CheckpointError(
            f"{file} does not fit config.json's vision_backbone {cfg.vision_backbone!r}: {exc}"
        ) from None
    expected = {PREFIX + k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = [k for k in expected if k not in shapes]
    unexpected = [k for k in shapes if k not in expected]
    wrong = [
        f"{k}: found {shapes[k]}, expected {expected[k]}"
        for k in expected
        if k in shapes and shapes[k] != expected[k]
    ]
    if not (missing or unexpected or wrong):
        return

    def listed(items: list[str], sep: str) -> str:
        return sep.join(items[:12]) + (f"{sep}... ({len(items) - 12} more)" if len(items) > 12 else "")

    parts = [f"{file} does not match config.json:"]
    parts += [f"config.json: {c}" for c in _field_conflicts(cfg, shapes)]
    if missing:
        parts.append(f"missing keys ({len(missing)}): {listed(missing, ', ')}")
    if unexpected:
        parts.append(f"unexpected keys ({len(unexpected)}): {listed(unexpected, ', ')}")
    if wrong:
        parts.append(f"shape mismatches ({len(wrong)}): {listed(wrong, '; ')}")
    parts.append("fix config.json or use the weights it describes")
    raise CheckpointError("\n  ".join(parts))


def load_act(folder: Path, dtype: torch.dtype = torch.float32) -> tuple[ACTConfig, ACTModel]:
    """Read the config, build the model on `meta` and load model.safetensors strictly (assign=True)."""
    from safetensors import safe_open

    folder = Path(folder)
    if not dtype.is_floating_point:
        raise ConfigError(f"ACT loads into a floating-point dtype, not {dtype}")
    cfg = read_act_config(folder)
    with torch.device("meta"):
        model = ACTModel(cfg)
    with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
        state = {k[len(PREFIX) :]: handle.get_tensor(k).to(dtype) for k in handle.keys()}  # noqa: SIM118
    return cfg, assign_finite(model, state, folder / "model.safetensors", PREFIX)


__all__ = [
    "ACTConfig",
    "Attention",
    "ACTModel",
    "act_intermediates",
    "check_tensors",
    "load_act",
    "read_act_config",
    "read_tensor_shapes",
    "sinusoid_1d",
    "sinusoid_2d",
]
