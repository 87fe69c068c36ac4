"""Simulated reduced-precision runs of golden cases: ACTUAL files, and the tier measurements.

  simulate(golden, sim, out, bug=None, cases=None)   an ACTUAL file (schema v1, golden/SCHEMA.md)
      of the simulated runtime, teacher-forced on the golden's inputs: logits, states (no
      hidden states).
  measure(goldens, sims)   the metrics docs/tolerance-tiers.md gates on, per golden file, case
      and phase, and the tier limits derived from them (fixtures/tolerance-tiers-measurements.json,
      written by `python3 golden/qcgolden measure-tiers`).

The metric definitions here are the harness's (harness/io/qc_metrics_dist.c); a change in one must
be made in the other.
"""
import json
import math
import os
import re

import numpy as np
import torch

from . import checkpoint
from .precision import SIMS, SimModel

TOPK = 5            # top-k overlap: k
KL_MARGIN = 4.0     # KL limits: 4 x the measured max (a simulation has no sampling noise)
TOL_MARGIN = 4.0    # atol / rtol: 4 x the measured max (as calibrate's factor)
RATE_MARGIN = 4.0   # top-k overlap: allowed loss = 4 x the measured worst loss
TIE_MARGIN = 2.0    # near-tie delta: 2 x the largest golden margin of a measured top-1 flip
CLASSES = ("logits", "hidden", "k_cache", "v_cache", "conv_state", "recurrent_state")


# ------------------------------------------------------------------------------------------------
# Reading a golden
# ------------------------------------------------------------------------------------------------

def _h5py():
    import h5py
    return h5py


def read_cases(path, cases=None):
    """[(name, case group dict of numpy arrays)] of the golden at `path` (selected by the regex
    `cases`, anchored), and its root attributes."""
    h5py = _h5py()
    out = []
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise ValueError("%s: not a readable HDF5 golden (%s)" % (path, e)) from None
    if "cases" not in f:
        f.close()
        raise ValueError("%s: no /cases group: not a golden" % path)
    with f:
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        for name in sorted(f["cases"]):
            if cases and not re.fullmatch(cases, name):
                continue
            g = f["cases"][name]
            c = {"start_pos": int(g.attrs.get("start_pos", 0)), "tokens": g["tokens"][()],
                 "history": g["history_tokens"][()] if "history_tokens" in g else np.zeros(0, int),
                 "prefill_logits": g["prefill/logits"][()],
                 "max_seq_len": g.attrs.get("max_seq_len"), "description": g.attrs.get(
                     "description", "")}
            c["description"] = c["description"].decode() if isinstance(
                c["description"], bytes) else str(c["description"])
            if "decode" in g and "tokens" in g["decode"]:
                c["decode_tokens"] = g["decode/tokens"][()]
                c["decode_logits"] = g["decode/logits"][()]
            else:
                c["decode_tokens"] = np.zeros(0, int)
            for ph in ("prefill", "decode"):
                if ph in g and "state" in g[ph]:
                    c[ph + "_state"] = {"%s/%s" % (l, k): g[ph]["state"][l][k][()]
                                        for l in g[ph]["state"] for k in g[ph]["state"][l]}
                if ph == "prefill" and "hidden" in g["prefill"]:
                    c["prefill_hidden"] = g["prefill/hidden"][()]
            out.append((name, c))
    return out, attrs


def model_dir_of(path, attrs):
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(path)),
                                         attrs.get("model_path", "model")))


# ------------------------------------------------------------------------------------------------
# Running a case on the simulated model (teacher-forced, as a runtime is fed the golden inputs)
# ------------------------------------------------------------------------------------------------

def _flat_state(state):
    return {"%s/%s" % (l, k): v for l, d in state.arrays().items() for k, v in d.items()}


def run_case(m, c, hidden=False):
    st = m.new_state()
    if len(c["history"]):
        m.forward(c["history"], st)
    logits, hid = m.forward(c["tokens"], st, collect_hidden=hidden)
    r = {"prefill_logits": logits.numpy(), "prefill_state": _flat_state(st)}
    if hidden:
        r["prefill_hidden"] = hid.numpy()
    rows = [m.forward([int(t)], st)[0].numpy()[0] for t in c["decode_tokens"]]
    if rows:
        r["decode_logits"] = np.stack(rows)
        r["decode_state"] = _flat_state(st)
    return r


def load_sim(golden_path, attrs, sim, bug=None):
    from . import setup_torch
    setup_torch()
    cfg, W, _ = checkpoint.load(model_dir_of(golden_path, attrs))
    return SimModel(cfg, W, sim, bug)


# ------------------------------------------------------------------------------------------------
# Writing an ACTUAL file
# ------------------------------------------------------------------------------------------------

def _ds(f, path, data, dtype):
    parent, name = path.rsplit("/", 1)
    grp = f.require_group(parent)
    grp.create_dataset(name, data=np.ascontiguousarray(data, dtype=dtype), track_times=False)


def simulate(golden_path, sim, out_path, bug=None, cases=None, hidden=False):
    """Write the ACTUAL file of simulation `sim` (+ bug) for the golden's cases; returns the
    number of cases written. The file is written to a temporary and renamed into place."""
    h5py = _h5py()
    if os.path.exists(out_path) and os.path.samefile(out_path, golden_path):
        raise ValueError("%s: is the golden (an input): refusing to overwrite it" % out_path)
    cs, attrs = read_cases(golden_path, cases)
    if not cs:
        raise ValueError("%s: no case matches %r" % (golden_path, cases))
    m = load_sim(golden_path, attrs, sim, bug)
    tmp = "%s.tmp.%d" % (out_path, os.getpid())
    try:
        with h5py.File(tmp, "w", libver=("earliest", "v108"), track_order=False) as f:
            f.attrs["schema_version"] = np.int32(1)
            f.attrs["generator"] = "qcgolden precision simulation %s%s" % (
                sim, " + bug " + bug if bug else "")
            f.attrs["compute_dtype"] = "simulated-" + sim
            for k in ("config_sha256", "weights_sha256", "config_json"):
                if k in attrs:
                    f.attrs[k] = str(attrs[k])
            for name, c in cs:
                r = run_case(m, c, hidden)
                g = "cases/" + name
                grp = f.require_group(g)
                grp.attrs["start_pos"] = np.int32(c["start_pos"])
                if c["max_seq_len"] is not None:
                    grp.attrs["max_seq_len"] = np.int32(c["max_seq_len"])
                if len(c["history"]):
                    _ds(f, g + "/history_tokens", c["history"], np.int32)
                _ds(f, g + "/tokens", c["tokens"], np.int32)
                _ds(f, g + "/prefill/logits", r["prefill_logits"], np.float32)
                if hidden:
                    _ds(f, g + "/prefill/hidden", r["prefill_hidden"], np.float32)
                for n, v in r["prefill_state"].items():
                    _ds(f, g + "/prefill/state/" + n, v, np.float32)
                if "decode_logits" in r:
                    _ds(f, g + "/decode/tokens", c["decode_tokens"], np.int32)
                    _ds(f, g + "/decode/logits", r["decode_logits"], np.float32)
                    for n, v in r["decode_state"].items():
                        _ds(f, g + "/decode/state/" + n, v, np.float32)
        os.replace(tmp, out_path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return len(cs)


# ------------------------------------------------------------------------------------------------
# Metrics (the harness's definitions: harness/io/qc_metrics_dist.c)
# ------------------------------------------------------------------------------------------------

def kl_rows(g, a):
    """KL(softmax(g) || softmax(a)) per row, float64 (g, a as float32 values)."""
    g, a = np.asarray(g, np.float32).astype(np.float64), np.asarray(a, np.float32).astype(
        np.float64)
    lg = g - g.max(1, keepdims=True)
    lg = lg - np.log(np.exp(lg).sum(1, keepdims=True))
    la = a - a.max(1, keepdims=True)
    la = la - np.log(np.exp(la).sum(1, keepdims=True))
    return np.maximum((np.exp(lg) * (lg - la)).sum(1), 0.0)


def p99(x):
    """Nearest-rank 99th percentile: the ceil(0.99 n)-th smallest."""
    s = np.sort(np.asarray(x, np.float64))
    return float(s[max(0, int(math.ceil(0.99 * len(s))) - 1)]) if len(s) else 0.0


def topk_overlap(g, a, k=TOPK):
    """Per row |top-k(g) & top-k(a)| / k (ties: the lower id first, as a stable sort)."""
    g, a = np.asarray(g, np.float32), np.asarray(a, np.float32)
    tg = np.argsort(-g, axis=1, kind="stable")[:, :k]
    ta = np.argsort(-a, axis=1, kind="stable")[:, :k]
    return np.array([len(set(x) & set(y)) / k for x, y in zip(tg, ta)])


def top1_flips(g, a):
    """Golden top1 - top2 margins of the rows whose argmax differs."""
    g, a = np.asarray(g, np.float32).astype(np.float64), np.asarray(a, np.float32)
    s = np.sort(g, axis=1)
    marg = s[:, -1] - s[:, -2]
    return marg[np.argmax(g, 1) != np.argmax(a, 1)]


def _tensor_err(a, g):
    """(max |a - g|, max |a - g| / |g| over |g| >= 0.25 max |g|) as calibrate measures them."""
    a, g = np.asarray(a, np.float32).astype(np.float64), np.asarray(g, np.float64)
    d = np.abs(a - g)
    ag = np.abs(g)
    big = (ag > 0) & (ag >= 0.25 * ag.max()) if ag.size else ag
    return float(d.max()) if d.size else 0.0, float((d[big] / ag[big]).max()) if big.any() else 0.0


def _nmse_add(acc, key, a, g):
    a, g = np.asarray(a, np.float32).astype(np.float64), np.asarray(g, np.float64)
    dd, gg = acc.get(key, (0.0, 0.0))
    acc[key] = (dd + float(((a - g) ** 2).sum()), gg + float((g ** 2).sum()))


def measure_case(c, r):
    """Per phase the logits distribution metrics, per class the tensor errors and the NMSE
    (sum (a - g)^2 / sum g^2 over every layer of the class in one phase, as a check row)."""
    out = {"phases": {}, "tensors": {}, "nmse": {}}
    acc = {}
    gl = np.asarray(c["prefill_logits"], np.float32)
    for ph, g, a in (("prefill", gl, r["prefill_logits"]),
                     ("decode", c.get("decode_logits"), r.get("decode_logits"))):
        if g is None or a is None:
            continue
        g = np.asarray(g, np.float32)
        kl = kl_rows(g, a)
        out["phases"][ph] = {"rows": int(len(kl)), "kl_mean": float(kl.mean()),
                             "kl_p99": p99(kl), "kl_max": float(kl.max()),
                             "top1_flips": int(len(top1_flips(g, a))),
                             "top1_flip_margin_max": float(max(top1_flips(g, a), default=0.0)),
                             "topk_overlap_mean": float(topk_overlap(g, a).mean())}
        out["tensors"].setdefault("logits", [0.0, 0.0])
        e = _tensor_err(a, g)
        out["tensors"]["logits"] = [max(x, y) for x, y in zip(out["tensors"]["logits"], e)]
        _nmse_add(acc, (ph, "logits"), a, g)
    for ph in ("prefill", "decode"):
        for n, v in r.get(ph + "_state", {}).items():
            gv = c.get(ph + "_state", {}).get(n)
            if gv is None:
                continue
            cls = n.split("/")[1]
            _nmse_add(acc, (ph, cls), v, gv)
            e = _tensor_err(v, gv)
            prev = out["tensors"].get(cls, [0.0, 0.0])
            out["tensors"][cls] = [max(x, y) for x, y in zip(prev, e)]
    if "prefill_hidden" in r and "prefill_hidden" in c:
        out["tensors"]["hidden"] = list(_tensor_err(r["prefill_hidden"], c["prefill_hidden"]))
        _nmse_add(acc, ("prefill", "hidden"), r["prefill_hidden"], c["prefill_hidden"])
    for (ph, cls), (dd, gg) in acc.items():
        v = dd / gg if gg > 0 else (0.0 if dd == 0 else float("inf"))
        out["nmse"][cls] = max(out["nmse"].get(cls, 0.0), v)
    return out


def _r125(x):
    """Round x up to the next 1-2-5 step (as qc_round_125)."""
    if x <= 0:
        return 0.0
    e = math.floor(math.log10(x))
    for m in (1, 2, 5, 10):
        v = m * 10.0 ** e
        if v >= x * (1 - 1e-12):
            return float("%.6g" % v)
    return float("%.6g" % (10 * 10.0 ** e))


def fp32_kl_bound(policy_path, stem=None):
    """The largest per-row KL bound the fp32 policy (fixtures/tolerances.json) allows for the
    cases of `stem` (every case: None): a tier's KL limits are never below it, since a runtime
    of any tier also has float32 arithmetic noise."""
    try:
        with open(policy_path) as f:
            pol = json.load(f)
    except (OSError, ValueError):
        return 5e-08
    b = pol.get("defaults", {}).get("logits", {}).get("max_kl", 5e-08)
    for o in pol.get("overrides", []):
        if "max_kl" in o and o.get("tensor", "logits") in ("logits", "prefill/logits",
                                                          "decode/logits"):
            if stem is None or str(o.get("case", "")).startswith(stem + "/"):
                b = max(b, o["max_kl"])
    return b


def derive_limits(per_case, kl_floor=0.0):
    """The tier limits from the measured maxima (docs/tolerance-tiers.md, "Derivation")."""
    kl = {k: max((p[k] for c in per_case for p in c["phases"].values()), default=0.0)
          for k in ("kl_mean", "kl_p99", "kl_max")}
    ph = [p for c in per_case for p in c["phases"].values()]
    n_flips = sum(p["top1_flips"] for p in ph)
    flip_max = max((p["top1_flip_margin_max"] for p in ph if p["top1_flips"]), default=0.0)
    ov = min((p["topk_overlap_mean"] for c in per_case for p in c["phases"].values()),
             default=1.0)
    tens = {}
    for cls in CLASSES:
        v = [c["tensors"][cls] for c in per_case if cls in c["tensors"]]
        if v:
            tens[cls] = {"max_abs": max(x[0] for x in v), "max_rel": max(x[1] for x in v)}
    lim = {"kl_mean": max(kl_floor, _r125(KL_MARGIN * kl["kl_mean"])),
           "kl_p99": max(kl_floor, _r125(KL_MARGIN * kl["kl_p99"])),
           "kl_max": max(kl_floor, _r125(KL_MARGIN * kl["kl_max"])),
           "tie_delta": _r125(TIE_MARGIN * flip_max) if n_flips else 0.0,
           "topk_min": max(0.0, 1.0 - RATE_MARGIN * (1.0 - ov)),
           "tol": {cls: {"atol": _r125(TOL_MARGIN * t["max_abs"]),
                         "rtol": _r125(TOL_MARGIN * t["max_rel"])} for cls, t in tens.items()},
           "nmse": {cls: _r125(TOL_MARGIN * max(c["nmse"].get(cls, 0.0) for c in per_case))
                    for cls in CLASSES if any(cls in c["nmse"] for c in per_case)}}
    lim["topk_min"] = math.floor(lim["topk_min"] * 100) / 100.0
    meas = {"kl": kl, "top1_flips": n_flips, "top1_flip_margin_max": flip_max,
            "topk_overlap_min": ov,
            "tensors": tens, "nmse": {cls: max(c["nmse"].get(cls, 0.0) for c in per_case)
                                      for cls in CLASSES if any(cls in c["nmse"] for c in per_case)}}
    return meas, lim


def find_goldens(root):
    if os.path.isfile(root):
        return [root]
    out = []
    for d, _, fs in os.walk(root):
        out += [os.path.join(d, f) for f in fs if f == "golden.h5"]
    return sorted(out)


def measure(root, sims=None, cases=None, log=None, policy=None):
    """{"sims": {sim: {"measured": ..., "limits": ..., "per_golden": {stem: {"measured",
    "limits"}}, "files": {...}}}, ...}: the limits over every golden and per golden (stem)."""
    if policy is None:
        policy = os.path.join(root if os.path.isdir(root) else os.path.dirname(root),
                              "tolerances.json")
    res = {"schema_version": 1, "tool": "python3 golden/qcgolden measure-tiers",
           "margins": {"kl": KL_MARGIN, "tol": TOL_MARGIN, "topk_loss": RATE_MARGIN,
                       "tie": TIE_MARGIN}, "topk": TOPK, "sims": {}}
    for sim in sims or list(SIMS):
        files, per_case = {}, []
        for gp in find_goldens(root):
            cs, attrs = read_cases(gp, cases)
            m = load_sim(gp, attrs, sim)
            stem = os.path.basename(os.path.dirname(gp))
            files[stem] = {}
            for name, c in cs:
                mc = measure_case(c, run_case(m, c, hidden="prefill_hidden" in c))
                files[stem][name] = mc
                per_case.append(mc)
            if log:
                log("%s: %s: %d cases" % (sim, stem, len(cs)))
        meas, lim = derive_limits(per_case, fp32_kl_bound(policy))
        per = {}
        for stem, fc in files.items():
            pm, pl = derive_limits(list(fc.values()), fp32_kl_bound(policy, stem))
            per[stem] = {"measured": pm, "limits": pl}
        res["sims"][sim] = {"weights_activations_kv_state": list(SIMS[sim]), "measured": meas,
                            "limits": lim, "per_golden": per, "files": files}
    return res


def _round4(o):
    """Floats to 4 significant digits (the limits are 1-2-5 steps: unchanged)."""
    if isinstance(o, float):
        return float("%.4g" % o) if math.isfinite(o) else o
    if isinstance(o, dict):
        return {k: _round4(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_round4(v) for v in o]
    return o


def write_json(path, obj):
    """The measurements as JSON, floats to 4 significant digits (temp file + rename), without
    the per-case detail ("files": kept in memory only): the limits, and the measured maxima
    they derive from, over every golden and per golden, are what --from regenerates from."""
    obj = dict(obj, sims={s: {k: v for k, v in d.items() if k != "files"}
                          for s, d in obj["sims"].items()})
    obj = _round4(obj)
    # keep what `measure-topk` (topk.py) added to the file: the "topk" object of each sim
    # (and of "fp32") and the root "topk_measure"; rerun measure-topk after changing the sims
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        old = {}
    for s, d in old.get("sims", {}).items():
        if isinstance(d, dict) and "topk" in d:
            obj["sims"][s] = dict(obj["sims"].get(s, {}), topk=d["topk"])
    if "topk_measure" in old:
        obj["topk_measure"] = old["topk_measure"]
    tmp = path + ".tmp.%d" % os.getpid()
    with open(tmp, "w") as f:
        f.write(_dump_json(obj, 0) + "\n")
    os.replace(tmp, path)


def _dump_json(o, depth, deep=False):
    """JSON, sorted keys: nested dicts indented down to depth 3 (sims / sim / per_golden /
    golden), anything deeper on one line (one line per "measured" / "limits" block). Inside a
    "topk" / "topk_measure" object (topk.py: deeper) every dict holding a dict is indented, a
    dict of plain values is one line."""
    if not isinstance(o, dict) or not o or (
            not any(isinstance(v, dict) for v in o.values()) if deep else depth >= 4):
        return json.dumps(o, sort_keys=True)
    pad = " " * (depth + 1)
    items = ["%s%s: %s" % (pad, json.dumps(k), _dump_json(
        o[k], depth + 1, deep or k in ("topk", "topk_measure"))) for k in sorted(o)]
    return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"


# ------------------------------------------------------------------------------------------------
# The C table (harness/io/qc_tier.c between its BEGIN / END TIER TABLE markers)
# ------------------------------------------------------------------------------------------------

ABOUT = {
    "f16-kv": "float32 compute, KV cache stored in f16",
    "bf16-kv": "float32 compute, KV cache stored in bf16",
    "bf16": "bf16 weights, activations and KV cache; DeltaNet states float32",
    "int8": "Q8_0 weights (group 32, symmetric, f16 scales); f16 KV cache",
    "int4": "Q4_0 weights (group 32, symmetric, f16 scales); f16 KV cache",
}


def _g(x):
    return "%.6g" % x


def c_table(res):
    """The tier rows of harness/io/qc_tier.c from a measurement (deterministic text)."""
    out = ["static const tier_row tiers[] = {",
           '    {"fp32", "float32 runtimes: the policy as loaded (fixtures/tolerances.json)", '
           'NULL, 0,', "     0, 0, 0, 0, 0, {{0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}},",
           "     {0, 0, 0, 0, 0, 0}},"]
    for sim in SIMS:
        if sim not in res["sims"]:
            continue
        v = res["sims"][sim]
        for stem, lim in [(None, v["limits"])] + sorted(
                (k, p["limits"]) for k, p in v["per_golden"].items()):
            tol = ", ".join("{%s, %s}" % (_g(lim["tol"].get(c, {}).get("atol", 0)),
                                          _g(lim["tol"].get(c, {}).get("rtol", 0)))
                            for c in CLASSES)
            out.append('    {"%s", "%s", %s, 1,' % (sim, ABOUT[sim],
                                                    '"%s"' % stem if stem else "NULL"))
            out.append("     %s, %s, %s, %s, %s," % (_g(lim["kl_mean"]), _g(lim["kl_p99"]),
                                                     _g(lim["kl_max"]), _g(lim["tie_delta"]),
                                                     _g(lim["topk_min"])))
            gated = SIMS[sim][0] not in ("f32", "f64")   # weights rounded: NMSE-gated tensors
            nm = ", ".join(_g(lim["nmse"].get(c, 0.0)) if gated else "0" for c in CLASSES)
            out.append("     {%s}," % tol)
            out.append("     {%s}}," % nm)
    out.append("};")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------------
# The docs table (docs/tolerance-tiers.md between its BEGIN / END TIER NUMBERS markers)
# ------------------------------------------------------------------------------------------------

def md_table(res):
    """Markdown: per tier the measured maxima and the limits, over every fixture and per
    fixture (deterministic text)."""
    out = ["| tier | golden | measured KL mean / p99 / max | KL limits mean / p99 / max | "
           "top-1 flips (max golden margin) | tie δ | top-5 overlap min → limit | "
           "NMSE gates (logits, k_cache, recurrent_state) |",
           "|---|---|---|---|---|---|---|---|"]
    for sim in SIMS:
        if sim not in res["sims"]:
            continue
        v = res["sims"][sim]
        gated = SIMS[sim][0] not in ("f32", "f64")
        for stem, p in [("(all)", v)] + sorted(v["per_golden"].items()):
            m, lim = p["measured"], p["limits"]
            nm = ", ".join(_g(lim["nmse"].get(c, 0)) for c in ("logits", "k_cache",
                                                                "recurrent_state"))
            out.append("| %s | %s | %s / %s / %s | %s / %s / %s | %d (%s) | %s | %.2f → %.2f | %s |"
                       % (sim, stem, "%.2g" % m["kl"]["kl_mean"], "%.2g" % m["kl"]["kl_p99"],
                          "%.2g" % m["kl"]["kl_max"], _g(lim["kl_mean"]), _g(lim["kl_p99"]),
                          _g(lim["kl_max"]), m["top1_flips"], "%.3g" % m["top1_flip_margin_max"],
                          _g(lim["tie_delta"]), m["topk_overlap_min"], lim["topk_min"],
                          nm if gated else "— (element-wise)"))
    return "\n".join(out) + "\n"
