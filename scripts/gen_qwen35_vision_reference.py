# Builds a tiny random-weight Qwen3.5-MoE checkpoint WITH its vision tower (Qwen3_5MoeForConditionalGeneration)
# with transformers (no download), saves it with save_pretrained beside a preprocessor_config.json, draws two test
# images of different sizes, and records the reference: the image processor's pixel values and grids, the vision
# tower's merged embeddings, the 3-D mRoPE positions, prompt logits for prompts with one and with two images, and
# 12-token greedy continuations by whole-sequence forwards (with their top-1 / top-2 margins).
# Usage: python3 gen_qwen35_vision_reference.py OUT_DIR   (CPU, float32 compute, eager attention; about 20 s)
# Writes OUT_DIR/vision_moe/ (the checkpoint), OUT_DIR/vision_moe_images/{a,b}.png, OUT_DIR/vision_moe.json and
# OUT_DIR/vision_moe_pixels_{a,b}.f32 (the processor's pixel values, little-endian float32, row-major).
import copy, json, math, os, sys, traceback
import numpy as np, torch, transformers as T
from PIL import Image

torch.set_grad_enabled(False)
OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/data/qwen35"
LT = (["linear_attention"] * 3 + ["full_attention"]) * 2
TEXT = dict(vocab_size=256, hidden_size=64, num_hidden_layers=8, layer_types=LT, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=16, linear_value_head_dim=24, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
            max_position_embeddings=1024, hidden_act="silu", num_experts=8, num_experts_per_tok=2,
            moe_intermediate_size=16, shared_expert_intermediate_size=32, tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5,
                                 mrope_section=[3, 3, 2], mrope_interleaved=True))
VISION = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3, patch_size=16,
              temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=64, num_position_embeddings=64,
              hidden_act="gelu_pytorch_tanh")
IDS = dict(vision_start_token_id=248, vision_end_token_id=249, image_token_id=250, video_token_id=251)
PROC = dict(patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5, 0.5, 0.5],
            image_std=[0.5, 0.5, 0.5], size={"shortest_edge": 4096, "longest_edge": 16384})
NGEN = 12
rnd = lambda v: [round(float(x), 6) for x in v]


def randomize(m, dt, g):
    for n, p in m.named_parameters():
        r = torch.randn(p.shape, generator=g, dtype=torch.float64)
        if n.endswith("A_log"):
            v = torch.rand(p.shape, generator=g, dtype=torch.float64) * 3.5 - 3.0
        elif n.endswith("dt_bias"):
            v = 0.5 * r
        elif n.endswith("linear_attn.norm.weight"):
            v = 1 + 0.2 * r
        elif "visual" in n and p.ndim == 1 and "norm" in n and n.endswith("weight"):
            v = 1 + 0.2 * r                                    # LayerNorm weights
        elif p.ndim == 1:
            v = 0.2 * r                                        # biases, (1 + w) RMSNorms
        elif n.endswith("embed_tokens.weight"):
            v = 0.25 * r
        elif n.endswith("pos_embed.weight"):
            v = 0.5 * r
        else:
            v = r / math.sqrt(p[0].numel())                    # fan-in scaled (conv: C*T*P*P)
        p.copy_(v.to(dt).to(torch.float32))


def draw(w, h, seed):
    g = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([255 * x / max(w - 1, 1), 255 * y / max(h - 1, 1), 128 + 60 * np.sin(x / 5.0 + y / 7.0)], -1)
    img = np.clip(img + g.normal(0, 25, img.shape), 0, 255).astype(np.uint8)
    return Image.fromarray(img, "RGB")


def processors():
    out = []
    for name in ["Qwen2VLImageProcessorPil", "Qwen2VLImageProcessor", "Qwen2VLImageProcessorFast"]:
        cls = getattr(T, name, None)
        if cls is None:
            continue
        try:
            out.append((name, cls(**PROC)))
        except Exception as e:
            print("processor", name, "failed:", e)
    return out


def vision_embeds(m, pv, grid):
    o = m.model.visual(pv, grid_thw=grid)
    if hasattr(o, "pooler_output") and o.pooler_output is not None:
        return o.pooler_output
    return o[0] if isinstance(o, (tuple, list)) else o


def main():
    cfg = T.Qwen3_5MoeConfig(text_config=TEXT, vision_config=VISION, **IDS)
    torch.manual_seed(7)
    m = T.Qwen3_5MoeForConditionalGeneration._from_config(cfg, attn_implementation="eager").eval()
    randomize(m, torch.bfloat16, torch.Generator().manual_seed(7))
    folder = f"{OUT}/vision_moe"
    copy.deepcopy(m).to(torch.bfloat16).save_pretrained(folder)
    procs = processors()
    print("processors:", [n for n, _ in procs])
    ref_name, proc = procs[0]
    proc.save_pretrained(folder)
    os.makedirs(f"{OUT}/vision_moe_images", exist_ok=True)
    imgs = {"a": draw(96, 64, 1), "b": draw(90, 150, 2)}     # (width, height)
    rec = dict(transformers=T.__version__, torch=torch.__version__, processor=ref_name, ids=IDS, images={},
               vision_rope_inv_freq=rnd(m.model.visual.rotary_pos_emb.inv_freq), prompts=[])
    pix, grids = {}, {}
    for k, im in imgs.items():
        im.save(f"{OUT}/vision_moe_images/{k}.png")
        im = Image.open(f"{OUT}/vision_moe_images/{k}.png").convert("RGB")
        res = proc(images=[im], return_tensors="pt")
        pv, grid = res["pixel_values"].float(), res["image_grid_thw"]
        pv.numpy().astype("<f4").tofile(f"{OUT}/vision_moe_pixels_{k}.f32")
        other = {}
        for n, p in procs[1:]:
            r2 = p(images=[im], return_tensors="pt")
            other[n] = dict(grid=r2["image_grid_thw"][0].tolist(),
                            max_abs_vs_ref=float((r2["pixel_values"].float() - pv).abs().max())
                            if r2["pixel_values"].shape == pv.shape else "shape differs")
        emb = vision_embeds(m, pv, grid).double()
        pix[k], grids[k] = pv, grid
        rec["images"][k] = dict(size=[im.width, im.height], grid_thw=grid[0].tolist(), pixel_shape=list(pv.shape),
                                pixel_sum=float(pv.double().sum()), other_processors=other,
                                embeds_shape=list(emb.shape), embeds=[rnd(r) for r in emb])
    g = torch.Generator().manual_seed(11)
    text = lambda n: torch.randint(0, 240, (n,), generator=g).tolist()
    S, E, P = IDS["vision_start_token_id"], IDS["vision_end_token_id"], IDS["image_token_id"]
    ntok = lambda k: int(grids[k][0].prod()) // 4
    layouts = [("one image", ["a"], text(5) + [S] + [P] * ntok("a") + [E] + text(6)),
               ("two images", ["a", "b"], text(3) + [S] + [P] * ntok("a") + [E] + text(4) + [S] + [P] * ntok("b")
                + [E] + text(5))]
    for label, keys, ids in layouts:
        pv = torch.cat([pix[k] for k in keys])
        grid = torch.cat([grids[k] for k in keys])
        inp = torch.tensor([ids])
        tt = (inp == P).int()                                           # mm_token_type_ids: 1 on image pads
        pos = None
        try:
            pos, delta = m.model.get_rope_index(inp, tt, image_grid_thw=grid, attention_mask=torch.ones_like(inp))
            pos = pos[:, 0, :].tolist()
        except Exception:
            traceback.print_exc()
        full = m(input_ids=inp, pixel_values=pv, image_grid_thw=grid, mm_token_type_ids=tt).logits[0].double()
        # Greedy continuation by whole-sequence forwards (no cache): the positions of the generated tokens are
        # the ones get_rope_index gives a longer prompt. transformers' generate() is recorded beside it: in
        # 5.17 its first step already disagrees with forward() on these prompts (see the fixture README).
        gen, margins = [], []
        for _ in range(NGEN):
            seq = torch.tensor([ids + gen])
            lg = m(input_ids=seq, pixel_values=pv, image_grid_thw=grid, mm_token_type_ids=(seq == P).int()).logits[0, -1]
            top = torch.topk(lg.double(), 2)
            gen.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
        hf_gen = None
        try:
            out = m.generate(input_ids=inp, pixel_values=pv, image_grid_thw=grid, mm_token_type_ids=tt,
                             max_new_tokens=NGEN, do_sample=False, pad_token_id=0, eos_token_id=None)
            hf_gen = out[0, len(ids):].tolist()
        except Exception:
            traceback.print_exc()
        chain_ok = hf_gen == gen
        n = len(ids)
        at = sorted({0, 1, n // 3, n // 2, n - 2, n - 1})
        rec["prompts"].append(dict(label=label, images=keys, ids=ids, positions3=pos, logit_positions=at,
                                   prompt_logits=[rnd(full[p]) for p in at], greedy=gen, greedy_margins=margins,
                                   greedy_min_margin=min(margins), hf_generate_greedy=hf_gen))
        print(label, n, "tokens; greedy", gen, "min margin", min(margins), "generate() agrees", chain_ok)
    with open(f"{OUT}/vision_moe.json", "w") as f:
        json.dump(rec, f, separators=(",", ":"))
    print(json.dumps({k: dict(v, embeds="...") for k, v in rec["images"].items()}, indent=1))


main()
