"""LeRobot's ACT training objective (`ACTPolicy.forward` at commit 7427f318) on hotloop's `ACTModel`.

The inference modules (`hotloop.models.act`) have no dropout and no masks; training needs both, so the
training forward is written here over the same parameters, layer by layer as LeRobot's:

- the VAE encoder reads [cls, robot state, the action chunk] (sequence first, its fixed sinusoid as
  positions) with the padded actions masked out of the keys (`action_is_pad`), and its cls output gives
  the latent's mean and log-variance (2 log sigma); the latent is sampled by the reparameterisation;
- the transformer runs on [latent token, state, env state, image tokens] as at inference, with dropout
  after attention and in the feed-forward (LeRobot's dropout1..3), and dropout on the attention weights
  (nn.MultiheadAttention's `dropout`);
- the loss is the L1 over the unpadded actions plus kl_weight times the KL divergence of the latent from
  N(0, I) (summed over the latent, averaged over the batch).

Dropout and the latent noise draw from torch's global generator (seed it for repeatable runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor

from hotloop.models.act import ACTModel
from hotloop.models.act_layers import Attention, sinusoid_2d


def attention(
    att: Attention, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, p: float, training: bool
) -> Tensor:
    """nn.MultiheadAttention's forward with the module's parameters (dropout on the weights, key mask)."""
    dim = att.heads * att.head_dim
    out, _ = F.multi_head_attention_forward(
        query, key, value, dim, att.heads, att.in_proj_weight, att.in_proj_bias, None, None, False, p,
        att.out_proj.weight, att.out_proj.bias, training=training, key_padding_mask=mask, need_weights=False,
    )  # fmt: skip
    return out


def _norm(layer: Any, x: Tensor, pre: str, post: str) -> tuple[Tensor, Tensor]:
    """(skip, input) of a layer's next sub-block: the residual stream and its `pre` norm in a pre-norm
    layer; the `post` norm of the stream, both, in a post-norm one."""
    if layer.pre_norm:
        return x, getattr(layer, pre)(x)
    x = getattr(layer, post)(x)
    return x, x


def _self_attention(
    layer: Any, x: Tensor, pos: Tensor, mask: Tensor | None, p: float, training: bool
) -> Tensor:
    """The self-attention sub-block every ACT layer opens with (its residual included)."""
    h = layer.norm1(x) if layer.pre_norm else x
    q = h + pos
    return x + F.dropout(attention(layer.self_attn, q, q, h, mask, p, training), p, training)


def _feed_forward(layer: Any, skip: Tensor, x: Tensor, p: float, training: bool) -> Tensor:
    x = layer.linear2(F.dropout(layer.activation(layer.linear1(x)), p, training))
    return skip + F.dropout(x, p, training)


def encoder_layer(
    layer: Any, x: Tensor, pos: Tensor, mask: Tensor | None, p: float, training: bool
) -> Tensor:
    """ACTEncoderLayer.forward."""
    skip, x = _norm(layer, _self_attention(layer, x, pos, mask, p, training), "norm2", "norm1")
    x = _feed_forward(layer, skip, x, p, training)
    return x if layer.pre_norm else layer.norm2(x)  # type: ignore[no-any-return]


def decoder_layer(
    layer: Any, x: Tensor, memory: Tensor, pos: Tensor, memory_pos: Tensor, p: float, training: bool
) -> Tensor:
    """ACTDecoderLayer.forward."""
    skip, x = _norm(layer, _self_attention(layer, x, pos, None, p, training), "norm2", "norm1")
    cross = attention(layer.multihead_attn, x + pos, memory + memory_pos, memory, None, p, training)
    skip, x = _norm(layer, skip + F.dropout(cross, p, training), "norm3", "norm2")
    x = _feed_forward(layer, skip, x, p, training)
    return x if layer.pre_norm else layer.norm3(x)  # type: ignore[no-any-return]


def vae_latent(
    model: ACTModel, state: Tensor | None, actions: Tensor, is_pad: Tensor, p: float, training: bool = True
) -> tuple[Tensor, Tensor]:
    """(mu, log_sigma_x2) of the latent from the VAE encoder's cls token (B, latent_dim) each."""
    cfg = model.cfg
    batch = actions.shape[0]
    parts = [model.vae_encoder_cls_embed.weight.expand(batch, 1, cfg.dim_model)]
    if state is not None:
        parts.append(model.vae_encoder_robot_state_input_proj(state).unsqueeze(1))
    parts.append(model.vae_encoder_action_input_proj(actions))
    x = torch.cat(parts, dim=1).permute(1, 0, 2)  # (S, B, D)
    table = cast(Tensor, model.vae_encoder_pos_enc)  # a registered buffer
    pos = table.clone().detach().permute(1, 0, 2)  # (S, 1, D)
    lead = torch.zeros(batch, 1 + (state is not None), dtype=torch.bool, device=actions.device)
    mask = torch.cat([lead, is_pad], dim=1)
    for layer in model.vae_encoder.layers:
        x = encoder_layer(layer, x, pos, mask, p, training)
    x = model.vae_encoder.norm(x)
    params = model.vae_encoder_latent_output_proj(x[0])
    return params[:, : cfg.latent_dim], params[:, cfg.latent_dim :]


def act_forward(
    model: ACTModel,
    images: Sequence[Tensor],
    state: Tensor | None,
    env_state: Tensor | None,
    latent: Tensor,
    p: float,
    training: bool = True,
) -> Tensor:
    """The transformer on a given latent (B, latent_dim), with dropout: the action chunk (B, chunk, A)."""
    cfg = model.cfg
    batch = latent.shape[0]
    tokens = [model.encoder_latent_input_proj(latent).unsqueeze(0)]
    pos = [model.encoder_1d_feature_pos_embed.weight.unsqueeze(1)]
    if state is not None:
        tokens.append(model.encoder_robot_state_input_proj(state).unsqueeze(0))
    if env_state is not None:
        tokens.append(model.encoder_env_state_input_proj(env_state).unsqueeze(0))
    for img in images:
        fmap = model.backbone(img)
        cam_pos = sinusoid_2d(fmap, cfg.dim_model // 2).to(dtype=fmap.dtype)
        cam = model.encoder_img_feat_input_proj(fmap)
        tokens.append(cam.flatten(2).permute(2, 0, 1))
        pos.append(cam_pos.flatten(2).permute(2, 0, 1))
    x = torch.cat(tokens, dim=0)
    encoder_pos = torch.cat(pos, dim=0)
    for layer in model.encoder.layers:
        x = encoder_layer(layer, x, encoder_pos, None, p, training)
    memory = model.encoder.norm(x)
    y = torch.zeros(cfg.chunk_size, batch, cfg.dim_model, dtype=encoder_pos.dtype, device=encoder_pos.device)
    decoder_pos = model.decoder_pos_embed.weight.unsqueeze(1)
    for layer in model.decoder.layers:
        y = decoder_layer(layer, y, memory, decoder_pos, encoder_pos, p, training)
    return model.action_head(model.decoder.norm(y).transpose(0, 1))  # type: ignore[no-any-return]


def act_loss(
    model: ACTModel,
    images: Sequence[Tensor],
    state: Tensor | None,
    env_state: Tensor | None,
    actions: Tensor,
    is_pad: Tensor,
    kl_weight: float,
    dropout: float,
) -> dict[str, Tensor]:
    """{"loss", "l1", "kld"} of one normalised batch, as LeRobot's ACTPolicy.forward computes them."""
    cfg = model.cfg
    if cfg.use_vae:
        mu, log_sigma_x2 = vae_latent(model, state, actions, is_pad, dropout)
        latent = mu + log_sigma_x2.div(2).exp() * torch.randn_like(mu)
    else:
        latent = torch.zeros(actions.shape[0], cfg.latent_dim, dtype=actions.dtype, device=actions.device)
    predicted = act_forward(model, images, state, env_state, latent, dropout)
    abs_err = F.l1_loss(actions, predicted, reduction="none")
    valid = ~is_pad.unsqueeze(-1)
    l1 = (abs_err * valid).sum() / (valid.sum() * abs_err.shape[-1]).clamp_min(1)
    out = {"l1": l1}
    if cfg.use_vae:
        kld = (-0.5 * (1 + log_sigma_x2 - mu.pow(2) - log_sigma_x2.exp())).sum(-1).mean()
        out.update(kld=kld, loss=l1 + kld * kl_weight)
    else:
        out["loss"] = l1
    return out


__all__ = ["act_forward", "act_loss", "attention", "decoder_layer", "encoder_layer", "vae_latent"]
