"""The eval-mode fast paths nn.TransformerEncoderLayer and
nn.MultiheadAttention take on a tpu device, written with lowered aten ops
(each runs through its own tpu lowering; none of them is a CPU kernel)."""
import math

import torch
import torch.nn.functional as F

from .._registry import composite


def _heads(t, b, n, h, d):
    return t.reshape(b, n, h, d).transpose(1, 2)   # [B, H, N, dh]


@composite("aten::_native_multi_head_attention")
def native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
                                proj_weight, proj_bias, mask=None, need_weights=True,
                                average_attn_weights=True, mask_type=None):
    """Batch-first attention with packed in-projection, as PyTorch's fast
    path computes it. mask_type: 0 = [T, S] attention mask, 1 = [B, S] key
    padding mask, 2 = a mask broadcastable to [B, H, T, S]; True masks out.
    Rows whose keys are all masked give zeros (masked softmax)."""
    b, t, d = query.shape
    s = key.shape[1]
    dh = embed_dim // num_head
    if query is key and key is value:
        q, k, v = F.linear(query, qkv_weight, qkv_bias).chunk(3, dim=-1)
    else:
        wq, wk, wv = qkv_weight.chunk(3, dim=0)
        bq, bk, bv = qkv_bias.chunk(3, dim=0)
        q, k, v = F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)
    q = _heads(q, b, t, num_head, dh) / math.sqrt(dh)
    k = _heads(k, b, s, num_head, dh)
    v = _heads(v, b, s, num_head, dh)
    scores = q @ k.transpose(-2, -1)                  # [B, H, T, S]
    masked = None
    if mask is not None:
        if mask_type == 1:
            m = mask.reshape(b, 1, 1, s)
        elif mask_type == 0:
            m = mask.reshape(1, 1, t, s)
        else:
            m = mask
        if m.dtype == torch.bool:
            masked = m.expand(scores.shape)
            scores = scores.masked_fill(masked, float("-inf"))
        else:
            scores = scores + m
    attn = torch.softmax(scores, dim=-1)
    if masked is not None:
        all_masked = masked.all(dim=-1, keepdim=True)
        attn = attn.masked_fill(all_masked, 0.0)
    out = (attn @ v).transpose(1, 2).reshape(b, t, embed_dim)
    out = F.linear(out, proj_weight, proj_bias)
    if not need_weights:
        return out, torch.empty(0, dtype=out.dtype, device=out.device)
    weights = attn.mean(dim=1) if average_attn_weights else attn
    return out, weights


@composite("aten::_transformer_encoder_layer_fwd")
def transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                                  proj_bias, use_gelu, norm_first, eps, norm_weight_1,
                                  norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1,
                                  ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                                  mask_type=None):
    shape = (embed_dim,)
    x = src
    if norm_first:
        x = F.layer_norm(x, shape, norm_weight_1, norm_bias_1, eps)
    x = native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias,
                                    proj_weight, proj_bias, mask, False, True, mask_type)[0]
    x = x + src
    if not norm_first:
        x = F.layer_norm(x, shape, norm_weight_1, norm_bias_1, eps)
    residual = x
    if norm_first:
        x = F.layer_norm(x, shape, norm_weight_2, norm_bias_2, eps)
    x = F.linear(x, ffn_weight_1, ffn_bias_1)
    x = F.gelu(x) if use_gelu else F.relu(x)
    x = F.linear(x, ffn_weight_2, ffn_bias_2)
    x = x + residual
    if not norm_first:
        x = F.layer_norm(x, shape, norm_weight_2, norm_bias_2, eps)
    return x
