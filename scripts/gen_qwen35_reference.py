# Builds tiny random-weight Qwen3.5 dense, Qwen3.5-MoE and Qwen3-Next models with transformers (no download),
# saves them with save_pretrained, and records reference logits: whole-prompt prefill, token-by-token decode
# through past_key_values, a split prefill (second part on top of the cache), and 16-token greedy continuations.
# Usage: python3 gen_qwen35_reference.py OUT_DIR   (CPU, float32 compute; writes OUT_DIR/<name>/ and <name>.json)
import copy, importlib.util as U, json, math, sys, traceback, torch, transformers as T
torch.set_grad_enabled(False)
OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/data/qwen35"
LT = (["linear_attention"] * 3 + ["full_attention"]) * 2          # layers 3 and 7 are full attention
BASE = dict(vocab_size=256, hidden_size=64, num_hidden_layers=8, layer_types=LT, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=16, linear_value_head_dim=24, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
            max_position_embeddings=1024, hidden_act="silu", partial_rotary_factor=0.5)
ROPE = dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5)
MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=32)
MODELS = [  # name, config class, model class, extra config, storage dtype, seed
    ("dense", "Qwen3_5TextConfig", "Qwen3_5ForCausalLM", dict(intermediate_size=64, tie_word_embeddings=True,
     rope_parameters=dict(ROPE, mrope_section=[3, 3, 2], mrope_interleaved=True)), torch.float32, 1),
    ("moe", "Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM", dict(MOE, tie_word_embeddings=False,
     rope_parameters=dict(ROPE, mrope_section=[3, 3, 2], mrope_interleaved=True)), torch.bfloat16, 2),
    ("next", "Qwen3NextConfig", "Qwen3NextForCausalLM", dict(MOE, intermediate_size=64, decoder_sparse_step=1,
     norm_topk_prob=True, mlp_only_layers=[], tie_word_embeddings=False, rope_parameters=ROPE), torch.float16, 3),
]
LENS, NGEN, SPLIT = [5, 17, 70], 16, 40
rnd = lambda v: [round(float(x), 6) for x in v]


def randomize(m, dt, g):
    # Every parameter random (HF init leaves norms at 0/1 and the router at 0), rounded to the storage dtype.
    for n, p in m.named_parameters():
        r = torch.randn(p.shape, generator=g, dtype=torch.float64)
        if n.endswith("A_log"):
            v = torch.rand(p.shape, generator=g, dtype=torch.float64) * 3.5 - 3.0   # A = exp(A_log) in [0.05, 1.6]
        elif n.endswith("dt_bias"):
            v = 0.5 * r
        elif n.endswith("linear_attn.norm.weight"):
            v = 1 + 0.2 * r                                                      # plain gated RMSNorm weight
        elif p.ndim == 1:
            v = 0.2 * r                                                          # (1 + w) norms
        elif n.endswith("embed_tokens.weight"):
            v = 0.25 * r                                                         # tied logits stay O(1)
        else:
            v = r / math.sqrt(p.shape[-1])                                       # fan-in scaled
        p.copy_(v.to(dt).to(torch.float32))


def logits(m, ids, cache=None):
    o = m(torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return o.logits[0].double(), o.past_key_values


def prompt_record(m, ids):
    n = len(ids)
    pos = sorted({p for p in [0, 1, n // 2, 63, 64, n - 3, n - 2, n - 1] if 0 <= p < n})
    full = m(torch.tensor([ids]), use_cache=False).logits[0].double()
    cache, dec = T.DynamicCache(config=m.config), []
    for t in ids:                                                   # one token at a time through the cache
        lg, cache = logits(m, [t], cache)
        dec.append(lg[-1])
    dec = torch.stack(dec)
    s = min(SPLIT, n - 1)
    c2 = T.DynamicCache(config=m.config)
    a, c2 = logits(m, ids[:s], c2)
    b, c2 = logits(m, ids[s:], c2)                                  # multi-token chunk on top of a state
    split = torch.cat([a, b])
    cache = T.DynamicCache(config=m.config)
    lg, cache = logits(m, ids, cache)
    gen, margins = [], []
    for _ in range(NGEN):
        top = torch.topk(lg[-1], 2)
        gen.append(int(top.indices[0]))
        margins.append(float(top.values[0] - top.values[1]))
        lg, cache = logits(m, [gen[-1]], cache)
    return dict(ids=ids, positions=pos, prefill_logits=[rnd(full[p]) for p in pos],
                decode_logits=[rnd(dec[p]) for p in pos],
                max_abs_prefill_vs_decode=float((full - dec).abs().max()), split_at=s,
                max_abs_prefill_vs_split=float((full - split).abs().max()),
                greedy=gen, greedy_min_margin=min(margins))


def main():
    paths = {p: U.find_spec(p) is not None for p in ["fla", "causal_conv1d", "kernels"]}
    for model in MODELS:
        try:
            one(paths, *model)
        except Exception:
            traceback.print_exc()


def one(paths, name, ccls, mcls, extra, dt, seed):
    cfg = getattr(T, ccls)(**BASE, **extra)
    torch.manual_seed(seed)
    m = getattr(T, mcls)._from_config(cfg, attn_implementation="eager").eval()
    randomize(m, dt, torch.Generator().manual_seed(seed))
    copy.deepcopy(m).to(dt).save_pretrained(f"{OUT}/{name}")   # a copy: .to() would also round inv_freq
    g = torch.Generator().manual_seed(100 + seed)
    prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=g).tolist() for n in LENS]
    rec = dict(model=name, model_type=cfg.model_type, hf_class=mcls, storage_dtype=str(dt)[6:], rotary_dim=2 * m.model.rotary_emb.inv_freq.numel(),
               transformers=T.__version__, torch=torch.__version__, compute="float32, CPU, eager attention",
               optional_kernel_packages_present=paths,
               code_path="torch fallbacks (torch_chunk_gated_delta_rule, torch_recurrent_gated_delta_rule, "
                         "F.conv1d)" if not any(paths.values()) else "see optional_kernel_packages_present",
               logits_round=1e-6, prompts=[prompt_record(m, p) for p in prompts])
    with open(f"{OUT}/{name}.json", "w") as f:
        json.dump(rec, f, separators=(",", ":"))
    for p in rec["prompts"]:
        print(name, len(p["ids"]), p["max_abs_prefill_vs_decode"], p["max_abs_prefill_vs_split"],
              p["greedy_min_margin"], p["greedy"])


main()
