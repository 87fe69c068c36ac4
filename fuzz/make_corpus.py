#!/usr/bin/env python3
"""make_corpus.py — (re)write the small seed corpora fuzz/corpus/<target>/ (committed).

Seeds are tiny versions of the fixture formats: a 2-layer Qwen3.5 checkpoint header (the tensor
names and shape rules of fixtures/), its config.json in the nested and flat forms, export
profiles, token lists, a sharded index, tolerance policies, and golden-builder programs (see
fuzz_golden.c). When fixtures/ holds real files their small text files (config.json,
*.index.json, profiles, tolerances.json) are added as they are. Usage: fuzz/make_corpus.py
"""
import json, os, struct, sys, glob

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "corpus")

CFG = dict(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
           num_attention_heads=2, num_key_value_heads=1, head_dim=4,
           linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=4,
           linear_value_head_dim=4, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
           layer_types=["linear_attention", "full_attention"], tie_word_embeddings=True,
           rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                            "partial_rotary_factor": 0.5})


def tensors(c, prefix="model.language_model."):
    V, H, I = c["vocab_size"], c["hidden_size"], c["intermediate_size"]
    nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    nk, nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    dk, dv, K = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
    C = 2 * nk * dk + nv * dv
    t = [(prefix + "embed_tokens.weight", [V, H])]
    for i, kind in enumerate(c["layer_types"]):
        p = prefix + "layers.%d." % i
        t += [(p + "input_layernorm.weight", [H]), (p + "post_attention_layernorm.weight", [H]),
              (p + "mlp.gate_proj.weight", [I, H]), (p + "mlp.up_proj.weight", [I, H]),
              (p + "mlp.down_proj.weight", [H, I])]
        if kind == "full_attention":
            a = p + "self_attn."
            t += [(a + "q_proj.weight", [2 * nh * hd, H]), (a + "k_proj.weight", [nkv * hd, H]),
                  (a + "v_proj.weight", [nkv * hd, H]), (a + "o_proj.weight", [H, nh * hd]),
                  (a + "q_norm.weight", [hd]), (a + "k_norm.weight", [hd])]
        else:
            a = p + "linear_attn."
            t += [(a + "in_proj_qkv.weight", [C, H]), (a + "in_proj_z.weight", [nv * dv, H]),
                  (a + "in_proj_b.weight", [nv, H]), (a + "in_proj_a.weight", [nv, H]),
                  (a + "conv1d.weight", [C, 1, K]), (a + "dt_bias", [nv]), (a + "A_log", [nv]),
                  (a + "norm.weight", [dv]), (a + "out_proj.weight", [H, nv * dv])]
    t.append((prefix + "norm.weight", [H]))  # the order of fuzz/tiny_model.h (shard = 1 + k % 2)
    return t


def st_header(ts, dtype="F32", meta=True):
    hdr, off = {}, 0
    if meta:
        hdr["__metadata__"] = {"format": "pt"}
    for name, shape in ts:
        dt = "F32" if (name.endswith("A_log") or name.endswith("linear_attn.norm.weight")) else dtype
        n = 1
        for d in shape:
            n *= d
        nb = n * (4 if dt == "F32" else 2)
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + nb]}
        off += nb
    return json.dumps(hdr, separators=(",", ":")).encode(), off


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    # --- safetensors: mode byte even = raw file, odd = u16le data size + header text
    for dtype in ("F32", "BF16"):
        h, dlen = st_header(tensors(CFG), dtype)
        put("fuzz_safetensors", "model_%s_assembled" % dtype.lower(),
            b"\x01" + struct.pack("<H", dlen) + h)
    small = [("a", [2, 3]), ("b", [3])]
    h, dlen = st_header(small, "F32")
    put("fuzz_safetensors", "raw_small", b"\x00" + struct.pack("<Q", len(h)) + h + bytes(dlen))
    h, dlen = st_header([("x", []), ("y", [0, 5]), ("z", [1, 1, 1, 1, 1, 1, 1, 2])], "F16", False)
    put("fuzz_safetensors", "raw_scalar_empty", b"\x00" + struct.pack("<Q", len(h)) + h + bytes(dlen))
    put("fuzz_safetensors", "assembled_empty", b"\x01\x00\x00{}")

    # --- config.json: nested (as the real repos) and flat, legacy rope fields, interval form
    nested = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
              "text_config": dict(CFG, model_type="qwen3_5_text", hidden_act="silu",
                                  attention_bias=False), "tie_word_embeddings": True}
    put("fuzz_config", "nested.json", json.dumps(nested, indent=2))
    put("fuzz_config", "flat.json", json.dumps(CFG, indent=2))
    legacy = dict(CFG)
    del legacy["rope_parameters"], legacy["layer_types"]
    legacy.update(rope_theta=1e6, partial_rotary_factor=0.25, full_attention_interval=2,
                  num_hidden_layers=4, head_dim=8)
    put("fuzz_config", "legacy.json", json.dumps(legacy))
    # other families / MoE (refused: model_type, architectures, num_experts)
    put("fuzz_config", "llama.json", json.dumps(dict(CFG, model_type="llama",
                                                     architectures=["LlamaForCausalLM"])))
    put("fuzz_config", "qwen3_next_moe.json",
        json.dumps(dict(CFG, model_type="qwen3_next", architectures=["Qwen3NextForCausalLM"],
                        num_experts=8, decoder_sparse_step=2, mlp_only_layers=[0])))

    # --- sharded index
    ts = tensors(CFG)
    wm = {name: "model-%05d-of-00002.safetensors" % (1 + (i % 2)) for i, (name, _) in enumerate(ts)}
    put("fuzz_index", "index.json", json.dumps({"metadata": {"total_size": 4096}, "weight_map": wm}))
    put("fuzz_index", "index_one.json", json.dumps({"weight_map": {ts[0][0]: "a.safetensors"}}))

    # --- export profiles
    put("fuzz_profile", "static.json", '{"enable_dynamic_shape": false, "use_kv_cache": true, "max_seq_len": 128, "max_context_len": 256}')
    put("fuzz_profile", "dynamic.json", '{"enable_dynamic_shape": true, "max_seq_len": 16}')
    put("fuzz_profile", "nokv.json", '{"use_kv_cache": false, "get_max_seq_len": 64, "get_max_context_len": 64}')
    put("fuzz_profile", "empty.json", "{}")
    put("fuzz_profile", "typo.json", '{"enable_dynamic_shap": true, "max_seq_len": 16}')
    put("fuzz_profile", "both_names.json", '{"max_seq_len": 16, "get_max_seq_len": 16}')

    # --- token lists
    put("fuzz_tokens", "commas.txt", "1,2,3")
    put("fuzz_tokens", "lines.txt", "151643 17 0\n5, 9\t2147483647\n")
    put("fuzz_tokens", "bad.txt", "1,x7,3")
    put("fuzz_tokens", "empty_items.txt", "1,,3\n, 4,\n")
    put("fuzz_tokens", "signs_hex.txt", "+5 -0 0x1f 99999999999\n")

    # --- tolerance policy (harness/io/qc_policy.h)
    cls = ["logits", "hidden", "k_cache", "v_cache", "conv_state", "recurrent_state"]
    pol = {"schema_version": 1, "description": "seed",
           "defaults": {c: {"atol": 1e-4, "rtol": 1e-3} for c in cls},
           "backends": {"optimized": {"logits": {"atol": 5e-4, "max_kl": 1e-6}}},
           "tie_margin": 1e-3,
           "overrides": [{"case": "len13.", "tensor": "prefill/logits", "backend": "reference",
                          "mode": "static|dynamic", "check": "logits", "atol": 2e-3,
                          "reason": "seed"},
                         {"tensor": "decode/state/layer_0[0-9]/k_cache", "rtol": 0.5,
                          "reason": "seed 2"}]}
    put("fuzz_policy", "policy.json", json.dumps(pol, indent=1))
    put("fuzz_policy", "minimal.json", json.dumps({"schema_version": 1, "defaults": pol["defaults"]}))

    # --- golden builder programs (fuzz_golden.c): 4-byte edits [op, item, a, b] of a valid golden
    put("fuzz_golden", "base", b"")
    put("fuzz_golden", "nan_logit", bytes([4, 12, 0, 5]))
    put("fuzz_golden", "drop_tokens", bytes([0, 11, 0, 0]))
    put("fuzz_golden", "f64_logits_shape", bytes([3, 12, 3, 0, 1, 12, 1, 31]))
    put("fuzz_golden", "truncated", bytes([10, 0, 20, 0]))
    put("fuzz_golden", "token_out_of_vocab", bytes([4, 11, 31, 1]))

    # --- diff programs (fuzz_diff.c): the same edits, on the ACTUAL file; op >= 0xE0 edits
    # the golden. Item numbers: golden_builder.h's base_program (11 c1/tokens, 12 c1 logits,
    # 13 c1 hidden, 14-17 c1 prefill state, 19 c1 decode logits, 21-24 c1 decode state, 8
    # config_json). Op 4 with a = 11: an integer value poked into a float (a real mismatch).
    put("fuzz_diff", "base", b"")
    put("fuzz_diff", "logit_mismatch", bytes([4, 12, 11, 5]))
    put("fuzz_diff", "hidden_mismatch_layer1", bytes([4, 13, 11, 9]))
    put("fuzz_diff", "recurrent_state_mismatch", bytes([4, 15, 11, 1]))
    put("fuzz_diff", "decode_logit_mismatch", bytes([4, 19, 11, 2]))
    put("fuzz_diff", "nan_in_actual", bytes([4, 12, 0, 5]))
    put("fuzz_diff", "actual_without_hidden", bytes([0, 13, 0, 0]))
    put("fuzz_diff", "actual_without_decode_state", bytes([0, 21, 0, 0, 0, 22, 0, 0]))
    put("fuzz_diff", "other_tokens", bytes([4, 11, 11, 0]))
    put("fuzz_diff", "case_renamed", bytes([7, 11, 0, 3]))
    put("fuzz_diff", "other_config", bytes([6, 8, 40, 0x39]))
    put("fuzz_diff", "actual_f64_logits", bytes([3, 12, 3, 0]))
    put("fuzz_diff", "golden_poked", bytes([0xE4, 12, 11, 5]))
    put("fuzz_diff", "golden_without_hidden", bytes([0xE0, 13, 0, 0]))

    # --- adapter conversations (fuzz_adapter.c): records [flags][u16 LE length][bytes], one
    # per answer of the child (record 0: hello). A frame: "QCAP", header_len u32, payload_len
    # u64, JSON header, float32 payload. Dims: fuzz/tiny_model.h (V 32, H 8, L 2).
    def frame(hdr, payload=b""):
        h = json.dumps(hdr, separators=(",", ":")).encode()
        return b"QCAP" + struct.pack("<IQ", len(h), len(payload)) + h + payload

    def rec(data, flags=0):
        return bytes([flags]) + struct.pack("<H", len(data)) + data

    def tensors_frame(ts):
        n = sum(_numel(sh) for _, sh in ts)
        return frame({"type": "ok", "tensors": [{"name": nm, "shape": sh} for nm, sh in ts]},
                     struct.pack("<%df" % n, *[0.25 * (i % 7) - 0.5 for i in range(n)]))

    def state(npos):
        return [("layer_00/conv_state", [16, 4]), ("layer_00/recurrent_state", [2, 4, 4]),
                ("layer_01/k_cache", [1, npos, 4]), ("layer_01/v_cache", [1, npos, 4])]

    caps = ["hidden", "state_read", "state_fill", "threads", "dn_kernel", "chunk_size"]
    hello = frame({"type": "hello", "protocol": "qwen-conform-adapter", "version": 1,
                   "name": "seed"})
    opened = frame({"type": "ok", "info": {"vocab_size": 32, "hidden_size": 8, "n_layers": 2,
                                           "max_tokens_per_call": 0, "max_context_len": 0,
                                           "capabilities": caps, "name": "seed runtime"}})
    ok = frame({"type": "ok"})
    fwd3 = tensors_frame([("logits", [3, 32]), ("hidden", [3, 3, 8])])
    fwd1 = tensors_frame([("logits", [1, 32]), ("hidden", [3, 1, 8])])
    full = [hello, opened, ok, fwd3, tensors_frame(state(3)), tensors_frame(state(5)), ok, ok,
            ok, ok, fwd1, tensors_frame(state(1)), ok]
    put("fuzz_adapter", "full_conversation", b"".join(rec(f) for f in full))
    bare_open = frame({"type": "ok", "info": {"vocab_size": 32, "hidden_size": 8,
                                              "n_layers": 2}})
    bare = [hello, bare_open, ok, tensors_frame([("logits", [3, 32])]), ok,
            tensors_frame([("logits", [1, 32])]), ok]
    put("fuzz_adapter", "no_capabilities", b"".join(rec(f) for f in bare))
    err = frame({"type": "error", "message": "out of\nmemory"})
    unsup = frame({"type": "error", "unsupported": True, "message": "no state"})
    put("fuzz_adapter", "error_answers", b"".join(rec(f) for f in [
        hello, opened, ok, err, unsup, unsup, unsup, ok, err, unsup, ok, err, ok]))
    put("fuzz_adapter", "stray_print_before_hello",
        rec(b"loading model...\n" + hello) + b"".join(rec(f) for f in full[1:]))
    put("fuzz_adapter", "open_refused", rec(hello) + rec(err))
    put("fuzz_adapter", "wrong_protocol", rec(frame({"type": "hello", "protocol": "other",
                                                     "version": 2})))
    put("fuzz_adapter", "crash_in_forward", b"".join(rec(f) for f in full[:3]) +
        rec(b"", 3) + b"".join(rec(f) for f in full))
    put("fuzz_adapter", "exit_3_after_reset", b"".join(rec(f) for f in full[:2]) +
        rec(ok, 1 | (3 << 5)))
    put("fuzz_adapter", "chatty_stderr", b"".join(rec(f, 4) for f in full))
    put("fuzz_adapter", "second_answer", b"".join(rec(f) for f in full[:3]) + rec(ok, 8) +
        b"".join(rec(f) for f in full[3:]))
    put("fuzz_adapter", "wrong_shape", b"".join(rec(f) for f in full[:3]) +
        rec(tensors_frame([("logits", [3, 31]), ("hidden", [3, 3, 8])])))
    put("fuzz_adapter", "truncated_payload", b"".join(rec(f) for f in full[:3]) +
        rec(fwd3[:-10]))
    put("fuzz_adapter", "hang_in_reset", b"".join(rec(f) for f in full[:2]) + rec(b"", 2))
    put("fuzz_adapter", "bad_header_len", rec(b"QCAP\xff\xff\xff\x7f" + bytes(8)))

    # --- fixtures' own small text files, when present
    for p in sorted(glob.glob(os.path.join(ROOT, "fixtures", "**", "*.json"), recursive=True)):
        if os.path.getsize(p) > 64 * 1024:
            continue
        base = os.path.basename(p)
        rel = os.path.relpath(p, os.path.join(ROOT, "fixtures")).replace(os.sep, "_")
        data = open(p, "rb").read()
        if base == "config.json":
            put("fuzz_config", "fixture_" + rel, data)
        elif base.endswith(".index.json"):
            put("fuzz_index", "fixture_" + rel, data)
        elif base == "tolerances.json" or base.endswith("policy.json"):
            put("fuzz_policy", "fixture_" + rel, data)
        elif "profile" in base:
            put("fuzz_profile", "fixture_" + rel, data)
    for p in sorted(glob.glob(os.path.join(ROOT, "fixtures", "**", "*.safetensors"), recursive=True)):
        with open(p, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            if n > 60000:
                continue
            h = f.read(n)
        total = os.path.getsize(p) - 8 - n
        if total <= 0xFFFF:
            rel = os.path.relpath(p, os.path.join(ROOT, "fixtures")).replace(os.sep, "_")
            put("fuzz_safetensors", "fixture_" + rel, b"\x01" + struct.pack("<H", total) + h)
    print("fuzz/make_corpus.py: wrote", OUT)


if __name__ == "__main__":
    sys.exit(main())
