#!/usr/bin/python3
"""tests/adversarial/corpus.py QC SRC — the malformed-input corpus of the hardening issue (#13).

Generates (into a temporary directory, nothing committed) malformed config.json files,
safetensors files, goldens, token lists, profiles and policies derived from the tiny fixture,
runs qwen-conform on each, and asserts for every case: exit status 2 (never a signal, never
0/1), a message naming the malformed file and the field / tensor, and no output file left.
Exit 0 when every case behaves, 1 otherwise (each failure is listed)."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import h5py
import numpy as np

# ===================================================================================== #
# setup                                                                                 #
# ===================================================================================== #
QC, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
FX = os.path.join(SRC, "fixtures", "tiny-f32-tied-flat")
TMP = tempfile.mkdtemp(prefix="qc_corpus.")
CASES = []  # (id, argv, [substrings the message must hold], output path)
with open(os.path.join(FX, "model", "config.json")) as f:
    BASE_CFG = json.load(f)
with open(os.path.join(FX, "model", "model.safetensors"), "rb") as f:
    ST = f.read()
HLEN = struct.unpack("<Q", ST[:8])[0]
HDR = json.loads(ST[8:8 + HLEN])
DATA = ST[8 + HLEN:]
TOKS = "1,2,3"
REPORT = "report:"  # an output of `check` that must exist and hold an ERROR row (the reports
                    # are written even for a golden that cannot be read: the row says why)


def newdir(cid):
    d = os.path.join(TMP, cid)
    os.makedirs(d)
    return d


def record_case(cid, d, needles, extra=None):
    out = os.path.join(d, "out.h5")
    argv = [QC, "record", "--model", d, "--out", out] + (extra or ["--tokens", TOKS])
    CASES.append((cid, argv, needles, out))


# ===================================================================================== #
# config.json                                                                           #
# ===================================================================================== #
def cfg_case(cid, text_or_obj, needles):
    d = newdir(cid)
    p = os.path.join(d, "config.json")
    with open(p, "w") as f:
        f.write(text_or_obj if isinstance(text_or_obj, str) else json.dumps(text_or_obj))
    os.symlink(os.path.join(FX, "model", "model.safetensors"), os.path.join(d, "model.safetensors"))
    record_case(cid, d, [p] + needles)


def cfg_with(**kv):
    c = json.loads(json.dumps(BASE_CFG))
    for k, v in kv.items():
        if v is KeyError:
            c.pop(k, None)
        else:
            c[k] = v
    return c


base_txt = json.dumps(BASE_CFG)
cfg_case("cfg.truncated", base_txt[: len(base_txt) // 2], [])
cfg_case("cfg.empty", "", [])
cfg_case("cfg.array", "[1, 2]", [])
cfg_case("cfg.garbage", "\x00\x01garbage{", [])
cfg_case("cfg.trailing_comma", base_txt[:-1] + ",}", [])
INTS = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "linear_num_key_heads",
        "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim"]
BADV = ["64", True, 4.5, -16, 0, None, [2], {}, "2", -1]
for name, bad in zip(INTS, BADV):
    cfg_case("cfg.type.%s" % name, cfg_with(**{name: bad}), [name])
for name in INTS:
    cfg_case("cfg.missing.%s" % name, cfg_with(**{name: KeyError}), [name])
cfg_case("cfg.type.head_dim", cfg_with(head_dim="16"), ["head_dim"])
cfg_case("cfg.type.linear_conv_kernel_dim", cfg_with(linear_conv_kernel_dim=-4),
         ["linear_conv_kernel_dim"])
cfg_case("cfg.model_type.llama", cfg_with(model_type="llama"), ["model_type"])
cfg_case("cfg.model_type.number", cfg_with(model_type=5), ["model_type"])
cfg_case("cfg.geom.heads_not_multiple", cfg_with(num_attention_heads=3), ["num_attention_heads"])
cfg_case("cfg.geom.vheads_not_multiple", cfg_with(linear_num_value_heads=3),
         ["linear_num_value_heads"])
cfg_case("cfg.geom.layer_types_len", cfg_with(layer_types=["linear_attention"] * 3), ["layer_types"])
cfg_case("cfg.geom.layer_types_entry", cfg_with(layer_types=["linear_attention"] * 3 + ["moe"]),
         ["layer_types"])
cfg_case("cfg.geom.layer_types_type", cfg_with(layer_types="full_attention"), ["layer_types"])
cfg_case("cfg.absurd.vocab", cfg_with(vocab_size=10 ** 12), ["vocab_size"])
cfg_case("cfg.absurd.layers", cfg_with(num_hidden_layers=100000), ["num_hidden_layers"])
cfg_case("cfg.absurd.hidden", cfg_with(hidden_size=1 << 40), ["hidden_size"])
for name, bad in [("rms_norm_eps", "NaN"), ("rms_norm_eps", "Infinity"), ("rms_norm_eps", "-1e-6"),
                  ("rms_norm_eps", '"1e-6"')]:
    t = json.dumps(cfg_with(**{name: 12345.0})).replace("12345.0", bad)
    cfg_case("cfg.float.%s=%s" % (name, bad.strip('"')), t, [name])
for bad in ["NaN", "Infinity", "0", '"big"']:
    c = cfg_with()
    c["rope_parameters"]["rope_theta"] = 12345.0
    cfg_case("cfg.float.rope_theta=%s" % bad.strip('"'), json.dumps(c).replace("12345.0", bad),
             ["rope_theta"])
cfg_case("cfg.type.tie", cfg_with(tie_word_embeddings="yes"), ["tie_word_embeddings"])


# ===================================================================================== #
# model.safetensors                                                                     #
# ===================================================================================== #
def st_bytes(hdr, data=DATA, hlen=None, raw=None):
    h = raw if raw is not None else json.dumps(hdr).encode()
    return struct.pack("<Q", len(h) if hlen is None else hlen) + h + data


def st_case(cid, blob, needles):
    d = newdir(cid)
    shutil.copy(os.path.join(FX, "model", "config.json"), d)
    p = os.path.join(d, "model.safetensors")
    with open(p, "wb") as f:
        f.write(blob)
    record_case(cid, d, [p] + needles)


def hdr_with(name, **kv):
    h = json.loads(json.dumps(HDR))
    if kv.get("drop"):
        del h[name]
    else:
        h[name].update(kv)
    return h


NAMES = [k for k in HDR if k != "__metadata__"]
T0, T1 = NAMES[0], NAMES[1]
st_case("st.empty", b"", [])
st_case("st.seven_bytes", ST[:7], [])
st_case("st.truncated_data", ST[: 8 + HLEN + len(DATA) // 2], [])
st_case("st.truncated_header", ST[: 8 + HLEN // 2], [])
st_case("st.header_len_huge", st_bytes(HDR, hlen=1 << 62), [])
st_case("st.header_len_past_end", st_bytes(HDR, hlen=HLEN + len(DATA) + 100), [])
st_case("st.header_len_zero", st_bytes(HDR, hlen=0), [])
st_case("st.header_not_json", st_bytes(None, raw=b"{not json" + b" " * 16), [])
st_case("st.offsets_out_of_file", st_bytes(hdr_with(T1, data_offsets=[0, len(DATA) + 4096])), [T1])
st_case("st.offsets_reversed", st_bytes(hdr_with(T1, data_offsets=[65792, 65536])), [T1])
o0 = HDR[T0]["data_offsets"]
st_case("st.offsets_overlap", st_bytes(hdr_with(T1, data_offsets=[o0[0], o0[0] + 256])), [T1])
st_case("st.dtype_unknown", st_bytes(hdr_with(T1, dtype="Q9")), [T1])
st_case("st.dtype_size_mismatch", st_bytes(hdr_with(T1, dtype="F16")), [T1])
st_case("st.shape_wrong", st_bytes(hdr_with(T0, shape=[128, 128])), [T0])
st_case("st.shape_bytes_mismatch", st_bytes(hdr_with(T1, shape=[65])), [T1])
ren = json.loads(json.dumps(HDR))
ren["model.bogus_name"] = ren.pop(T1)
st_case("st.unknown_tensor", st_bytes(ren), ["model.bogus_name"])
TL = max(NAMES, key=lambda n: HDR[n]["data_offsets"][1])  # the last tensor in the file: drop
st_case("st.missing_tensor", st_bytes(hdr_with(TL, drop=True),  # it and its bytes (no gap)
                                      data=DATA[:HDR[TL]["data_offsets"][0]]), [TL])
dup = json.dumps(HDR)[:-1] + ', "%s": %s}' % (T1, json.dumps(HDR[T1]))
st_case("st.duplicate_name", st_bytes(None, raw=dup.encode()), [T1])
# (NaN weights: the runtime does not scan weights for non-finite values; qcgolden does)


# ===================================================================================== #
# goldens                                                                               #
# ===================================================================================== #
POLICY = os.path.join(TMP, "policy.json")
with open(os.path.join(SRC, "fixtures", "tolerances.json")) as f:
    pol = json.load(f)
pol.pop("overrides", None)
with open(POLICY, "w") as f:
    json.dump(pol, f)


def golden_case(cid, mutate, needles, blob=None):
    d = newdir(cid)
    os.symlink(os.path.join(FX, "model"), os.path.join(d, "model"))
    g = os.path.join(d, "golden.h5")
    if blob is not None:
        with open(g, "wb") as f:
            f.write(blob)
    else:
        shutil.copy(os.path.join(FX, "golden.h5"), g)
        with h5py.File(g, "r+") as f:
            mutate(f["cases/len001"], f)
    out = os.path.join(d, "report.json")
    CASES.append((cid, [QC, "--golden", g, "--policy", POLICY, "--quiet", "--filter", "len001/",
                        "--json", out], [g] + needles, REPORT + out))


def replace(c, name, arr):
    del c[name]
    c[name] = arr


with open(os.path.join(FX, "golden.h5"), "rb") as f:
    GB = f.read()
golden_case("golden.truncated", None, [], blob=GB[: len(GB) // 3])
golden_case("golden.not_hdf5", None, [], blob=b"this is not an HDF5 file\n" * 40)
golden_case("golden.tokens_float", lambda c, f: replace(c, "tokens", c["tokens"][()].astype("f4")),
            ["tokens"])
golden_case("golden.missing_logits", lambda c, f: c.__delitem__("prefill/logits"), ["prefill/logits"])
golden_case("golden.logits_shape", lambda c, f: replace(c, "prefill/logits",
            np.zeros((c["prefill/logits"].shape[0], 255), "f4")), ["prefill/logits"])
golden_case("golden.token_out_of_range", lambda c, f: replace(c, "tokens",
            np.full(c["tokens"].shape, 99999, "i4")), ["tokens"])
golden_case("golden.nan_logits", lambda c, f: replace(c, "prefill/logits",
            np.full(c["prefill/logits"].shape, np.nan, "f4")), ["prefill/logits"])
golden_case("golden.schema_version", lambda c, f: f.attrs.__setitem__("schema_version", 99),
            ["schema_version"])
golden_case("golden.missing_config_json", lambda c, f: f.attrs.__delitem__("config_json"),
            ["config_json"])
golden_case("golden.prompt_longer_than_context", lambda c, f: replace(c, "tokens",
            np.ones(5000, "i4")), ["tokens"])


# ===================================================================================== #
# token lists, profiles, policies                                                       #
# ===================================================================================== #
def file_case(cid, content, argv_of, needles):
    d = newdir(cid)
    p = os.path.join(d, "input")
    with open(p, "wb") as f:
        f.write(content)
    out = os.path.join(d, "out")
    CASES.append((cid, argv_of(p, out), [p] + needles, out))


MODEL = os.path.join(FX, "model")
rec = lambda p, o, *a: [QC, "record", "--model", MODEL, "--out", o] + list(a)
file_case("tokens.empty", b"", lambda p, o: rec(p, o, "--tokens-file", p), [])
file_case("tokens.garbage", b"hello world\n", lambda p, o: rec(p, o, "--tokens-file", p), [])
file_case("tokens.out_of_range", b"1,2,99999\n", lambda p, o: rec(p, o, "--tokens-file", p), [])
file_case("tokens.huge_value", b"1,2,1" + b"0" * 40 + b"\n",
          lambda p, o: rec(p, o, "--tokens-file", p), [])
file_case("tokens.negative", b"1,-2,3\n", lambda p, o: rec(p, o, "--tokens-file", p), [])
file_case("tokens.binary", bytes(range(256)), lambda p, o: rec(p, o, "--tokens-file", p), [])
file_case("tokens.huge_file", b"1," * 3000000 + b"1\n", lambda p, o: rec(p, o, "--tokens-file", p), [])
for cid, txt, field in [("profile.not_json", b"{max_seq_len:", ""),
                        ("profile.string_int", b'{"max_seq_len": "4"}', "max_seq_len"),
                        ("profile.negative", b'{"max_seq_len": -4}', "max_seq_len"),
                        ("profile.bool", b'{"max_seq_len": true}', "max_seq_len")]:
    file_case(cid, txt, lambda p, o: rec(p, o, "--tokens", TOKS, "--profile", p),
              [field] if field else [])
for cid, txt, field in [("policy.not_json", b"{\"a\": ", ""),
                        ("policy.array", b"[1,2,3]", ""),
                        ("policy.empty", b"", "")]:
    file_case(cid, txt, lambda p, o: [QC, "--golden", os.path.join(FX, "golden.h5"), "--policy", p,
                                      "--quiet", "--json", o], [field] if field else [])


# ===================================================================================== #
# mixture-of-experts checkpoints (issue #15 "Bad input"; when the MoE fixtures exist)   #
# ===================================================================================== #
MOE_FX = os.path.join(SRC, "fixtures", "tiny-moe-f32-nested")
MOE_SH = os.path.join(SRC, "fixtures", "tiny-moe-bf16-flat")


def st_parse(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def moe_case(cid, cfg_edit=None, hdr_edit=None, needles=(), named=None):
    """The fused nested MoE fixture with its text config and/or safetensors header edited; the
    message must name `named` (default: the edited file)."""
    d = newdir(cid)
    with open(os.path.join(MOE_FX, "model", "config.json")) as f:
        c = json.load(f)
    if cfg_edit:
        cfg_edit(c, c["text_config"])
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f)
    st = os.path.join(MOE_FX, "model", "model.safetensors")
    if hdr_edit:
        h, data = st_parse(st)
        hdr_edit(h)
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(st_bytes(h, data))
    else:
        os.symlink(st, os.path.join(d, "model.safetensors"))
    named = named or ("config.json" if cfg_edit else "model.safetensors")
    record_case(cid, d, [os.path.join(d, named)] + list(needles))


def rename(h, old, new):
    h[new] = h.pop(old)


if os.path.isdir(MOE_FX):
    LP = "model.language_model.layers."
    MTP = "mtp.norm.weight"  # skipped by the loader: renamed, it becomes a stray text tensor
    moe_case("moe.cfg.k_gt_e", lambda c, t: t.update(num_experts_per_tok=9), needles=[
        "num_experts_per_tok", "greater than num_experts"])
    moe_case("moe.cfg.zero_experts", lambda c, t: t.update(num_experts=0), needles=["num_experts"])
    moe_case("moe.cfg.no_renorm", lambda c, t: t.update(norm_topk_prob=False),
             needles=["norm_topk_prob"])
    moe_case("moe.cfg.dense_layers", lambda c, t: t.update(mlp_only_layers=[1]),
             needles=["mlp_only_layers"])
    moe_case("moe.cfg.missing_width", lambda c, t: t.pop("moe_intermediate_size"),
             needles=["moe_intermediate_size"])
    moe_case("moe.cfg.family_mix", lambda c, t: t.update(model_type="qwen3_5_text"),
             needles=["text_config.model_type"])

    def dense(c, t):  # a dense config over the MoE tensors
        c.update(model_type="qwen3_5", architectures=["Qwen3_5ForConditionalGeneration"])
        t.update(model_type="qwen3_5_text", intermediate_size=16)
        for k in ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                  "shared_expert_intermediate_size"):
            t.pop(k)
    moe_case("moe.cfg.dense_config_moe_tensors", dense, needles=["mlp.", "mixture-of-experts"],
             named="model.safetensors")  # the first MoE tensor of the file is named
    # tensors: same byte count, wrong shape (so the loader's shape check speaks, not the reader's)
    moe_case("moe.st.router_expert_count", hdr_edit=lambda h: h[LP + "1.mlp.gate.weight"].update(
        shape=[4, 64]), needles=[LP + "1.mlp.gate.weight", "[4,64] != [8,32]"])
    moe_case("moe.st.shared_gate_shape", hdr_edit=lambda h: h[
        LP + "2.mlp.shared_expert_gate.weight"].update(shape=[32, 1]),
        needles=[LP + "2.mlp.shared_expert_gate.weight", "[32,1] != [1,32]"])
    moe_case("moe.st.experts_transposed", hdr_edit=lambda h: h[
        LP + "0.mlp.experts.down_proj"].update(shape=[8, 16, 32]),
        needles=[LP + "0.mlp.experts.down_proj", "[8,16,32] != [8,32,16]"])
    moe_case("moe.st.missing_experts", hdr_edit=lambda h: rename(
        h, LP + "3.mlp.experts.down_proj", "mtp.moved.down_proj"),
        needles=[LP + "3.mlp.experts.down_proj", "missing"])
    moe_case("moe.st.both_layouts", hdr_edit=lambda h: rename(
        h, MTP, LP + "0.mlp.experts.0.gate_proj.weight"),
        needles=[LP + "0.mlp.experts.0.gate_proj.weight", "per-expert"])
    moe_case("moe.st.expert_id_range", hdr_edit=lambda h: rename(
        h, MTP, LP + "0.mlp.experts.8.up_proj.weight"),
        needles=[LP + "0.mlp.experts.8.up_proj.weight", "num_experts 8"])
    moe_case("moe.st.dense_mlp_in_moe", hdr_edit=lambda h: rename(
        h, MTP, LP + "1.mlp.gate_proj.weight"), needles=[LP + "1.mlp.gate_proj.weight"])

if os.path.isdir(MOE_SH):
    # the sharded per-expert fixture: one expert tensor of shard 1 also stored in shard 2
    d = newdir("moe.st.duplicate_in_two_shards")
    idx = os.path.join(MOE_SH, "model", "model.safetensors.index.json")
    with open(idx) as f:
        wm = json.load(f)["weight_map"]
    shards = sorted(set(wm.values()))
    name = sorted(k for k in wm if wm[k] == shards[0] and ".mlp.experts." in k)[0]
    for fn in ["config.json", "model.safetensors.index.json"] + shards[:-1]:
        os.symlink(os.path.join(MOE_SH, "model", fn), os.path.join(d, fn))
    h0, d0 = st_parse(os.path.join(MOE_SH, "model", shards[0]))
    h1, d1 = st_parse(os.path.join(MOE_SH, "model", shards[-1]))
    b, e = h0[name]["data_offsets"]
    h1[name] = dict(h0[name], data_offsets=[len(d1), len(d1) + e - b])
    with open(os.path.join(d, shards[-1]), "wb") as f:
        f.write(st_bytes(h1, d1 + d0[b:e]))
    record_case("moe.st.duplicate_in_two_shards", d, [os.path.join(d, shards[-1]), name])


# ===================================================================================== #
# run                                                                                   #
# ===================================================================================== #
def report_problems(path):
    try:
        with open(path) as f:
            rows = json.load(f)["checks"]
    except (OSError, ValueError, KeyError) as e:
        return ["the JSON report %s is missing or unreadable: %s" % (path, e)]
    return [] if any(r.get("verdict") == "ERROR" for r in rows) else ["no ERROR row in " + path]


def main():
    bad = 0
    only = os.environ.get("QC_CORPUS_ONLY")
    for cid, argv, needles, out in CASES:
        if only and only not in cid:
            continue
        try:
            p = subprocess.run(argv, capture_output=True, timeout=60)
            rc, err = p.returncode, p.stderr.decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            rc, err = -999, "timed out (60 s)"
        why = []
        if rc != 2:
            why.append("exit %d (want 2)" % rc if rc >= 0 else "killed by signal %d" % -rc)
        low = err.lower()
        why += ["message does not name %r" % n for n in needles if n.lower() not in low]
        if out.startswith(REPORT):
            why += report_problems(out[len(REPORT):])
        elif os.path.exists(out):
            why.append("output %s was created" % out)
        first = err.strip().splitlines()[0][:150] if err.strip() else "(no message)"
        print("%s %-36s %s" % ("ok  " if not why else "FAIL", cid, first if not why else
                                "; ".join(why) + " | " + first))
        bad += bool(why)
    print("== corpus: %d cases, %d failed" % (len(CASES), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
