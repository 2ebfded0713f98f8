#!/usr/bin/env python3
"""Write a random-weight Qwen3.5-shaped Hugging Face folder (numpy only, no torch).

The folder is what `transformers` 5.17 would save for a `Qwen3_5ForCausalLM` (model_type
`qwen3_5_text`): config.json, generation_config.json, model.safetensors (written by hand,
tensor names as transformers names them), and the Qwen3 tokenizer from /work/shared/data
with the Qwen3.5 chat template. It is meant for benchmarks of the hybrid model (Gated
DeltaNet + gated full attention, 3:1), not for output quality: the text it generates is noise.

Layer layout: layers 3, 7, 11, ... (every 4th) are full_attention, the others linear_attention.
Weights: normal * --std (0.02) for projections and the (tied) embedding; RMSNorm weights 0
(Qwen3.5 norms compute x * (1 + w)), the gated DeltaNet output norm 1 (that one is x * w),
A_log = log(uniform(1, 16)), dt_bias = 1, conv1d normal * 0.1. These keep activations
finite over long prompts.

With --vision-depth N (> 0) the folder is a Qwen3_5ForConditionalGeneration (model_type
`qwen3_5`, text_config + vision_config, weights model.language_model.* and model.visual.*)
with a random Qwen3.5 vision tower (--vision-hidden, --vision-heads, --vision-ff, patch 16,
2x2 merger to the text width; LayerNorm weights 1, biases 0, position table normal * std)
and a preprocessor_config.json (--min-pixels / --max-pixels).

With --mtp the checkpoint also carries Qwen3.5's multi-token-prediction head as the real
ones do (config `mtp_num_hidden_layers: 1`, weights mtp.*: fc [H, 2H], the three MTP norms,
and one full-attention decoder layer mtp.layers.0.*). Its norms are random here (normal * std,
not 0) so that a conversion that forgot their +1 would show. The mtp.* names sort after
model.*, so the model's own weights are the same with and without it for one seed.

Usage: python3 benchmarks/make_qwen35_model.py OUT_DIR [--hidden 512] [--layers 8]
       [--intermediate 3*hidden] [--heads 4] [--kv-heads 2] [--head-dim 64]
       [--linear-key-heads 4] [--linear-value-heads 2*key] [--linear-key-dim 64]
       [--linear-value-dim 64] [--dtype bf16|f32] [--seed 0]
Then: build/hearth convert OUT_DIR -o OUT.gguf --type q8_0
"""
import argparse
import json
import pathlib
import shutil
import struct

import numpy as np

# The project's shared test data: ../shared/data next to the repository.
DEFAULT_DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"
TRANSFORMERS_VERSION = "5.17.0"


def vocab_size_of(tokenizer_json):
    """Number of ids the tokenizer uses (highest id + 1, added tokens included)."""
    t = json.loads(tokenizer_json.read_text())
    ids = list(t["model"]["vocab"].values()) + [a["id"] for a in t.get("added_tokens", [])]
    return max(ids) + 1


def mrope_section(rotary_dim):
    """Split rotary_dim / 2 frequencies into (t, h, w) sections like Qwen3.5's [11, 11, 10]."""
    half = rotary_dim // 2
    a = (half + 2) // 3
    return [a, a, half - 2 * a]


def make_config(a, vocab):
    layer_types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(a.layers)]
    rotary_dim = int(a.head_dim * a.partial_rotary_factor)
    return {
        "architectures": ["Qwen3_5ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": None,
        "dtype": "bfloat16" if a.dtype == "bf16" else "float32",
        "eos_token_id": 151645,
        "head_dim": a.head_dim,
        "hidden_act": "silu",
        "hidden_size": a.hidden,
        "initializer_range": a.std,
        "intermediate_size": a.intermediate,
        "layer_types": layer_types,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": a.linear_key_dim,
        "linear_num_key_heads": a.linear_key_heads,
        "linear_num_value_heads": a.linear_value_heads,
        "linear_value_head_dim": a.linear_value_dim,
        "max_position_embeddings": a.max_pos,
        "model_type": "qwen3_5_text",
        "num_attention_heads": a.heads,
        "num_hidden_layers": a.layers,
        "num_key_value_heads": a.kv_heads,
        "pad_token_id": None,
        "partial_rotary_factor": a.partial_rotary_factor,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {
            "mrope_interleaved": True,
            "mrope_section": mrope_section(rotary_dim),
            "partial_rotary_factor": a.partial_rotary_factor,
            "rope_theta": 10000000.0,
            "rope_type": "default",
        },
        "tie_word_embeddings": True,
        "transformers_version": TRANSFORMERS_VERSION,
        "use_cache": True,
        "vocab_size": vocab,
    }


def vision_config(a):
    return {"depth": a.vision_depth, "hidden_act": "gelu_pytorch_tanh", "hidden_size": a.vision_hidden,
            "in_channels": 3, "initializer_range": a.std, "intermediate_size": a.vision_ff,
            "model_type": "qwen3_5_vision", "num_heads": a.vision_heads,
            "num_position_embeddings": a.vision_pos_side ** 2, "out_hidden_size": a.hidden, "patch_size": 16,
            "spatial_merge_size": 2, "temporal_patch_size": 2}


def vision_specs(a):
    V, F, P = a.vision_hidden, a.vision_ff, 16
    out = [("model.visual.patch_embed.proj.weight", (V, 3, 2, P, P), "normal"),
           ("model.visual.patch_embed.proj.bias", (V,), "zeros"),
           ("model.visual.pos_embed.weight", (a.vision_pos_side ** 2, V), "normal"),
           ("model.visual.merger.norm.weight", (V,), "ones"), ("model.visual.merger.norm.bias", (V,), "zeros"),
           ("model.visual.merger.linear_fc1.weight", (4 * V, 4 * V), "normal"),
           ("model.visual.merger.linear_fc1.bias", (4 * V,), "zeros"),
           ("model.visual.merger.linear_fc2.weight", (a.hidden, 4 * V), "normal"),
           ("model.visual.merger.linear_fc2.bias", (a.hidden,), "zeros")]
    for i in range(a.vision_depth):
        p = f"model.visual.blocks.{i}."
        out += [(p + "norm1.weight", (V,), "ones"), (p + "norm1.bias", (V,), "zeros"),
                (p + "norm2.weight", (V,), "ones"), (p + "norm2.bias", (V,), "zeros"),
                (p + "attn.qkv.weight", (3 * V, V), "normal"), (p + "attn.qkv.bias", (3 * V,), "zeros"),
                (p + "attn.proj.weight", (V, V), "normal"), (p + "attn.proj.bias", (V,), "zeros"),
                (p + "mlp.linear_fc1.weight", (F, V), "normal"), (p + "mlp.linear_fc1.bias", (F,), "zeros"),
                (p + "mlp.linear_fc2.weight", (V, F), "normal"), (p + "mlp.linear_fc2.bias", (V,), "zeros")]
    return out


def tensor_specs(a, vocab):
    """(name, shape, init) in transformers' order (sorted names, as save_pretrained writes)."""
    out = text_specs(a, vocab) + (mtp_specs(a) if a.mtp else [])
    if a.vision_depth > 0:
        out = [(n.replace("model.", "model.language_model.", 1), s, k) for n, s, k in out] + vision_specs(a)
    return sorted(out)


def text_specs(a, vocab):
    H, I = a.hidden, a.intermediate
    nk, nv, dk, dv = a.linear_key_heads, a.linear_value_heads, a.linear_key_dim, a.linear_value_dim
    conv_dim = 2 * nk * dk + nv * dv
    out = [("model.embed_tokens.weight", (vocab, H), "normal"), ("model.norm.weight", (H,), "zeros")]
    for i in range(a.layers):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (H,), "zeros"),
                (p + "post_attention_layernorm.weight", (H,), "zeros"),
                (p + "mlp.gate_proj.weight", (I, H), "normal"),
                (p + "mlp.up_proj.weight", (I, H), "normal"),
                (p + "mlp.down_proj.weight", (H, I), "normal")]
        if (i + 1) % 4 == 0:
            q = a.heads * a.head_dim
            kv = a.kv_heads * a.head_dim
            out += [(p + "self_attn.q_proj.weight", (2 * q, H), "normal"),  # query and output gate
                    (p + "self_attn.k_proj.weight", (kv, H), "normal"),
                    (p + "self_attn.v_proj.weight", (kv, H), "normal"),
                    (p + "self_attn.o_proj.weight", (H, q), "normal"),
                    (p + "self_attn.q_norm.weight", (a.head_dim,), "zeros"),
                    (p + "self_attn.k_norm.weight", (a.head_dim,), "zeros")]
        else:
            out += [(p + "linear_attn.in_proj_qkv.weight", (conv_dim, H), "normal"),
                    (p + "linear_attn.in_proj_z.weight", (nv * dv, H), "normal"),
                    (p + "linear_attn.in_proj_a.weight", (nv, H), "normal"),
                    (p + "linear_attn.in_proj_b.weight", (nv, H), "normal"),
                    (p + "linear_attn.conv1d.weight", (conv_dim, 1, 4), "conv"),
                    (p + "linear_attn.A_log", (nv,), "a_log"),
                    (p + "linear_attn.dt_bias", (nv,), "ones"),
                    (p + "linear_attn.norm.weight", (dv,), "ones"),  # RMSNormGated: x * w
                    (p + "linear_attn.out_proj.weight", (H, nv * dv), "normal")]
    return out


def mtp_specs(a):
    """Qwen3.5's MTP head (mtp_num_hidden_layers 1): names as the released checkpoints have them."""
    H, I = a.hidden, a.intermediate
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    p = "mtp.layers.0."
    return [("mtp.fc.weight", (H, 2 * H), "normal"),
            ("mtp.norm.weight", (H,), "normal"),
            ("mtp.pre_fc_norm_embedding.weight", (H,), "normal"),
            ("mtp.pre_fc_norm_hidden.weight", (H,), "normal"),
            (p + "input_layernorm.weight", (H,), "normal"),
            (p + "post_attention_layernorm.weight", (H,), "normal"),
            (p + "mlp.gate_proj.weight", (I, H), "normal"),
            (p + "mlp.up_proj.weight", (I, H), "normal"),
            (p + "mlp.down_proj.weight", (H, I), "normal"),
            (p + "self_attn.q_proj.weight", (2 * q, H), "normal"),
            (p + "self_attn.k_proj.weight", (kv, H), "normal"),
            (p + "self_attn.v_proj.weight", (kv, H), "normal"),
            (p + "self_attn.o_proj.weight", (H, q), "normal"),
            (p + "self_attn.q_norm.weight", (a.head_dim,), "normal"),
            (p + "self_attn.k_norm.weight", (a.head_dim,), "normal")]


def init_tensor(rng, shape, kind, std):
    if kind == "normal":
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
    if kind == "conv":
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(0.1)
    if kind == "zeros":
        return np.zeros(shape, np.float32)
    if kind == "ones":
        return np.ones(shape, np.float32)
    if kind == "a_log":
        return np.log(rng.uniform(1.0, 16.0, shape)).astype(np.float32)
    raise ValueError(kind)


def to_bf16_bytes(x):
    """float32 -> bfloat16 (round to nearest even), as raw little-endian bytes."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    r = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype("<u2")
    return r.tobytes()


def write_safetensors(path, specs, a):
    """safetensors: u64 LE header length, JSON header {name: {dtype, shape, data_offsets}}, data."""
    esize = 2 if a.dtype == "bf16" else 4
    header = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, shape, _ in specs:
        n = int(np.prod(shape)) * esize
        header[name] = {"dtype": "BF16" if a.dtype == "bf16" else "F32", "shape": list(shape),
                        "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)  # pad the header to 8 bytes, as the safetensors library does
    rng = np.random.default_rng(a.seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name, shape, kind in specs:
            x = init_tensor(rng, shape, kind, a.std)
            f.write(to_bf16_bytes(x) if a.dtype == "bf16" else x.astype("<f4").tobytes())
    return off


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--intermediate", type=int, default=None, help="default: 3 * hidden")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--partial-rotary-factor", type=float, default=0.25)
    ap.add_argument("--linear-key-heads", type=int, default=4)
    ap.add_argument("--linear-value-heads", type=int, default=None, help="default: 2 * key heads")
    ap.add_argument("--linear-key-dim", type=int, default=64)
    ap.add_argument("--linear-value-dim", type=int, default=64)
    ap.add_argument("--max-pos", type=int, default=65536)
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mtp", action="store_true", help="add the multi-token-prediction head (mtp.*)")
    ap.add_argument("--vision-depth", type=int, default=0, help="> 0: add a vision tower of this many blocks")
    ap.add_argument("--vision-hidden", type=int, default=64)
    ap.add_argument("--vision-heads", type=int, default=2)
    ap.add_argument("--vision-ff", type=int, default=None, help="default: 4 * vision hidden")
    ap.add_argument("--vision-pos-side", type=int, default=8, help="learned position table side (Qwen3.5: 48)")
    ap.add_argument("--min-pixels", type=int, default=32 * 32 * 4)
    ap.add_argument("--max-pixels", type=int, default=256 * 256)
    ap.add_argument("--shared", type=pathlib.Path, default=DEFAULT_DATA,
                    help="the shared data folder (tokenizers/qwen3, chat-templates/Qwen3.5-4B.jinja)")
    a = ap.parse_args()
    a.intermediate = a.intermediate or 3 * a.hidden
    a.linear_value_heads = a.linear_value_heads or 2 * a.linear_key_heads
    if a.layers % 4:
        ap.error("--layers must be a multiple of 4 (3 linear_attention + 1 full_attention)")

    out = pathlib.Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer_dir = a.shared / "tokenizers/qwen3"
    chat_template = a.shared / "chat-templates/Qwen3.5-4B.jinja"
    vocab = vocab_size_of(tokenizer_dir / "tokenizer.json")
    cfg = make_config(a, vocab)
    if a.mtp:
        cfg["mtp_num_hidden_layers"] = 1
        cfg["mtp_use_dedicated_embeddings"] = False
    a.vision_ff = a.vision_ff or 4 * a.vision_hidden
    if a.vision_depth > 0:
        text = dict(cfg, model_type="qwen3_5_text")
        del text["architectures"], text["transformers_version"], text["tie_word_embeddings"]
        cfg = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
               "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
               "vision_end_token_id": 151653, "tie_word_embeddings": True, "text_config": text,
               "vision_config": vision_config(a), "transformers_version": TRANSFORMERS_VERSION}
        (out / "preprocessor_config.json").write_text(json.dumps({
            "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
            "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "image_processor_type": "Qwen2VLImageProcessor",
            "merge_size": 2, "patch_size": 16, "resample": 3, "rescale_factor": 1 / 255,
            "size": {"longest_edge": a.max_pixels, "shortest_edge": a.min_pixels}, "temporal_patch_size": 2},
            indent=2) + "\n")
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps({
        "bos_token_id": 151643, "do_sample": True, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
        "temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": TRANSFORMERS_VERSION}, indent=2) + "\n")
    shutil.copyfile(tokenizer_dir / "tokenizer.json", out / "tokenizer.json")
    tc = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    tc["chat_template"] = chat_template.read_text()
    (out / "tokenizer_config.json").write_text(json.dumps(tc, indent=2, ensure_ascii=False) + "\n")

    specs = tensor_specs(a, vocab)
    nbytes = write_safetensors(out / "model.safetensors", specs, a)
    n_params = sum(int(np.prod(s)) for _, s, _ in specs)
    n_embed = vocab * a.hidden
    print(f"wrote {out}: {len(specs)} tensors, {n_params / 1e6:.1f}M parameters "
          f"({(n_params - n_embed) / 1e6:.1f}M outside the tied embedding), {nbytes / 2**20:.0f} MiB {a.dtype}; "
          f"vocab {vocab}, layers {a.layers} ({a.layers // 4} full_attention)")


if __name__ == "__main__":
    main()
