"""Top-k log-probability limits for runtimes that return only their top-k (servers: vLLM,
SGLang, llama-server), measured on the simulated precisions (docs/tolerance-tiers.md,
"Top-k limits (servers)").

Per position p the golden has full logits g (float32 in the file, from the float64 model) and
the runtime returns its top-k ids a_1..a_k (descending) with log-probabilities lp_a. The golden
log-probabilities are lpg = g - logsumexp(g), in float64; the golden argmax is the lowest id of
the largest g. Per check row (a case's prefill positions, or its decode steps):

  logprob_max_abs  max over positions and j of |lp_a[j] - lpg[a_j]|
  argmax flips     positions with a_1 != argmax(g) and golden margin lpg[argmax] - lpg[a_1] > delta
  top1_in_k        positions whose golden argmax is not among a_1..a_k, unless
                   lpg[argmax] - lpg[a_k] <= delta (the same near-tie delta)
  overlap          per position |{j : rank_golden(a_j) < k or lpg[a_j] >= lpg_kth - delta_b}| / k
                   (lpg_kth the golden's k-th largest, ranks by a stable sort: ties to the lower
                   id; delta_b = 2 x the log-prob limit), the row's value its minimum

measured here for k = 5 and 20 on every simulation of precision.py and on "fp32" (the golden
model run in float32, as adapters/golden/qc_golden_adapter.py runs it), teacher-forced as
measure-tiers runs them, and the limits derived from them:

  log-prob limit   4 x the largest |dlp|, 1-2-5 rounded up, never below the floor
                   2 x (atol + rtol x |g|_typ) of the fp32 policy (fixtures/tolerances.json):
                   lp_a - lpg = (a - g) - (LSE(a) - LSE(g)) and |LSE(a) - LSE(g)| <= max|a - g|,
                   so |dlp| <= 2 max|a - g|, which the fp32 policy allows up to atol + rtol |g|;
                   |g|_typ = the median over positions of the row's largest |g|
  near-tie delta   2 x the largest golden margin of a flip (or of a top-1 missing from top-k),
                   1-2-5 rounded
  overlap limit    1 - 4 x the worst measured loss (1 - overlap at delta_b), floored at 0

`python3 golden/qcgolden measure-topk` (precision_cli.py) adds them, as a "topk" object per
simulation, to fixtures/tolerance-tiers-measurements.json, and writes the docs table and the
generated C table (qc_tier_topk.c / .h).
"""
import contextlib
import json
import math
import os

import numpy as np
import torch

from . import checkpoint
from . import model as qmodel
from . import precision_run as pr
from .precision import SIMS

KS = (5, 20)             # the k measured (servers commonly cap at 20: vLLM's max_logprobs)
LP_MARGIN = 4.0          # log-prob limit: 4 x the measured max |dlp|
TIE_MARGIN = 2.0         # near-tie delta: 2 x the largest golden margin of a flip
LOSS_MARGIN = 4.0        # overlap: allowed loss = 4 x the measured worst loss
BOUNDARY = 2.0           # delta_b = 2 x the log-prob limit (the k-th boundary near-tie)
FLOOR = 2.0              # |dlp| <= 2 max |dlogit|: the floor is 2 x the fp32 logits tolerance
RUNTIMES = ("fp32",) + tuple(SIMS)
TOOL = "python3 golden/qcgolden measure-topk"
FP32_ABOUT = ("the golden model run in float32 (float32 weights and arithmetic, RoPE angles "
              "in float64 rounded to float32: adapters/golden/qc_golden_adapter.py)")


# ------------------------------------------------------------------------------------------------
# Metrics (the definitions the C checker implements)
# ------------------------------------------------------------------------------------------------

def log_softmax(x):
    """x (float32 values) - logsumexp(x) per row, in float64."""
    x = np.asarray(x, np.float32).astype(np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def runtime_topk(a, k):
    """(ids [n, k], log-probs [n, k]) a runtime with float32 logits `a` returns: its k largest
    (descending, ties to the lower id) and their log-softmax (float64)."""
    a = np.asarray(a, np.float32)
    k = min(k, a.shape[1])
    ids = np.argsort(-a, axis=1, kind="stable")[:, :k]
    return ids, np.take_along_axis(log_softmax(a), ids, 1)


def row_metrics(g, ids, lps, delta=0.0, delta_b=0.0):
    """The metrics of one check row: golden logits g [n, V], the runtime's top-k ids [n, k]
    (descending) and log-probs lps [n, k]. delta: the near-tie delta (flips and top-1 misses with
    a golden margin <= delta are excused); delta_b: the overlap's boundary allowance.
    Returns lp_max_abs, flips / top1_missing (counted at delta), flip_margin_max /
    top1_missing_margin_max (over every flip / miss, excused or not: what delta derives from),
    overlap (the minimum over positions at delta_b) and gaps [n, k]: per entry
    lpg_kth - lpg[a_j], -inf when a_j is in the golden top-k (the overlap at any delta_b is
    overlap_at(gaps, delta_b))."""
    g = np.asarray(g, np.float32)
    ids = np.asarray(ids, np.int64)
    n, k = ids.shape
    lpg = log_softmax(g)
    rows = np.arange(n)
    lpg_ids = np.take_along_axis(lpg, ids, 1)
    dlp = np.abs(np.asarray(lps, np.float64) - lpg_ids)
    top = g.argmax(1)                                   # first maximum: the lowest id
    lp_top = lpg[rows, top]
    flip = ids[:, 0] != top
    fmarg = lp_top - lpg_ids[:, 0]
    miss = ~(ids == top[:, None]).any(1)
    mmarg = lp_top - lpg_ids[:, -1]
    gk = np.argsort(-g, axis=1, kind="stable")[:, :k]   # the golden top-k (rank < k)
    kth = lpg[rows, gk[:, -1]]
    in_gk = (ids[:, :, None] == gk[:, None, :]).any(2)
    gaps = np.where(in_gk, -np.inf, kth[:, None] - lpg_ids)
    return {"positions": int(n),
            "lp_max_abs": float(dlp.max()) if n else 0.0,
            "flips": int((flip & (fmarg > delta)).sum()),
            "flip_margin_max": float(fmarg[flip].max()) if flip.any() else 0.0,
            "n_flip": int(flip.sum()),
            "top1_missing": int((miss & (mmarg > delta)).sum()),
            "top1_missing_margin_max": float(mmarg[miss].max()) if miss.any() else 0.0,
            "n_miss": int(miss.sum()),
            "overlap": float(overlap_at(gaps, delta_b).min()) if n else 1.0,
            "gaps": gaps}


def overlap_at(gaps, delta_b):
    """Per position overlap at the boundary allowance delta_b (gaps: row_metrics)."""
    return (np.asarray(gaps) <= delta_b).sum(1) / float(np.shape(gaps)[1])


# ------------------------------------------------------------------------------------------------
# The fp32 runtime: the golden model in float32 (adapters/golden/qc_golden_adapter.py's logic)
# ------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _float32_calls():
    """Default dtype float32 and RoPE cos / sin cast to it, while inside (restored after)."""
    old_dtype, old_rope = torch.get_default_dtype(), qmodel.rope_cos_sin

    def rope(positions, rd, theta):
        return tuple(t.to(torch.float32) for t in old_rope(positions, rd, theta))
    torch.set_default_dtype(torch.float32)
    qmodel.rope_cos_sin = rope
    try:
        yield
    finally:
        qmodel.rope_cos_sin = old_rope
        torch.set_default_dtype(old_dtype)


class F32Model(qmodel.Model):
    """qmodel.Model on float32 weights, every call computed in float32."""

    def __init__(self, cfg, weights):
        super().__init__(cfg, {k: v.to(torch.float32) for k, v in weights.items()})

    def new_state(self):
        with _float32_calls():
            return super().new_state()

    def forward(self, tokens, state, kernel="auto", collect_hidden=False, moe_trace=None):
        with _float32_calls():
            logits, hidden = super().forward(tokens, state, kernel, collect_hidden, moe_trace)
        if logits.dtype != torch.float32:
            raise AssertionError("fp32 runtime computed in %s" % logits.dtype)
        return logits, hidden


def load_runtime(golden_path, attrs, rt):
    if rt != "fp32":
        return pr.load_sim(golden_path, attrs, rt)
    from . import setup_torch
    setup_torch()
    cfg, W, _ = checkpoint.load(pr.model_dir_of(golden_path, attrs))
    return F32Model(cfg, W)


# ------------------------------------------------------------------------------------------------
# Measuring and deriving
# ------------------------------------------------------------------------------------------------

def policy_logits_tol(policy_path, stem=None):
    """(atol, rtol) of the fp32 policy's logits: the defaults and the logits overrides of the
    cases of `stem` (every case: None), the largest of each."""
    try:
        with open(policy_path) as f:
            pol = json.load(f)
    except (OSError, ValueError):
        pol = {}
    d = pol.get("defaults", {}).get("logits", {})
    atol, rtol = d.get("atol", 1e-3), d.get("rtol", 1e-3)
    for o in pol.get("overrides", []):
        if o.get("tensor", "logits") in ("logits", "prefill/logits", "decode/logits") and (
                stem is None or str(o.get("case", "")).startswith(stem + "/")):
            atol, rtol = max(atol, o.get("atol", 0.0)), max(rtol, o.get("rtol", 0.0))
    return atol, rtol


def lp_floor(atol, rtol, g_typ):
    """The log-prob limit's floor: 2 x the fp32 logits tolerance at |g|_typ, 1-2-5 rounded."""
    return pr._r125(FLOOR * (atol + rtol * g_typ))


def overlap_limit(ov):
    """1 - 4 x (1 - ov), floored at 0, rounded down to 0.01."""
    x = max(0.0, 1.0 - LOSS_MARGIN * (1.0 - ov))
    return math.floor(x * 100 + 1e-9) / 100.0


def derive(rows, floor, g_typ):
    """(measured, limits) for k -> [row metrics] of one scope (every golden, or one)."""
    meas, lim = {}, {}
    for k in sorted(rows):
        rs = rows[k]
        m = pr._round4({
            "rows": len(rs), "positions": sum(r["positions"] for r in rs),
            "lp_max_abs": max((r["lp_max_abs"] for r in rs), default=0.0),
            "flips": sum(r["n_flip"] for r in rs),
            "flip_margin_max": max((r["flip_margin_max"] for r in rs), default=0.0),
            "top1_missing": sum(r["n_miss"] for r in rs),
            "top1_missing_margin_max": max((r["top1_missing_margin_max"] for r in rs),
                                           default=0.0),
            "logit_scale": g_typ})
        delta_b = BOUNDARY * max(floor, pr._r125(LP_MARGIN * m["lp_max_abs"]))
        m["overlap_boundary_delta"] = delta_b
        m["overlap_min"] = float("%.4g" % min(
            (overlap_at(r["gaps"], delta_b).min() for r in rs), default=1.0))
        m["overlap_min_strict"] = float("%.4g" % min(
            (overlap_at(r["gaps"], 0.0).min() for r in rs), default=1.0))
        meas["k%d" % k] = m
        lim["k%d" % k] = limits_of(m, floor)
    return meas, lim


def limits_of(m, floor):
    """The limits from one measured block (as written: what a test recomputes)."""
    l_lp = max(floor, pr._r125(LP_MARGIN * m["lp_max_abs"]))
    worst = max(m["flip_margin_max"], m["top1_missing_margin_max"])
    return {"lp_max_abs": l_lp, "lp_floor": floor,
            "tie_delta": pr._r125(TIE_MARGIN * worst) if m["flips"] or m["top1_missing"]
            else 0.0,
            "overlap_min": overlap_limit(m["overlap_min"])}


def _phases(c, r):
    for ph, g, a in (("prefill", c["prefill_logits"], r["prefill_logits"]),
                     ("decode", c.get("decode_logits"), r.get("decode_logits"))):
        if g is not None and a is not None and len(g):
            yield ph, np.asarray(g, np.float32), np.asarray(a, np.float32)


def measure(root, runtimes=None, cases=None, log=None, policy=None, ks=KS):
    """{runtime: topk object} (see module doc): the limits over every golden and per golden."""
    if policy is None:
        policy = os.path.join(root if os.path.isdir(root) else os.path.dirname(root),
                              "tolerances.json")
    goldens = pr.find_goldens(root)
    if not goldens:
        raise ValueError("%s: no golden.h5 found" % root)
    data = {}        # stem -> (cases, attrs, path, |g| row maxima)
    for gp in goldens:
        cs, attrs = pr.read_cases(gp, cases)
        if not cs:
            continue
        gmax = np.concatenate([np.abs(np.asarray(c[key], np.float32)).max(1) for _, c in cs
                               for key in ("prefill_logits", "decode_logits")
                               if c.get(key) is not None and len(c[key])])
        data[os.path.basename(os.path.dirname(gp))] = (cs, attrs, gp, gmax)
    if not data:
        raise ValueError("%s: no case matches %r" % (root, cases))
    out = {}
    for rt in runtimes or RUNTIMES:
        per, all_rows, floors = {}, {k: [] for k in ks}, []
        for stem, (cs, attrs, gp, gmax) in data.items():
            m = load_runtime(gp, attrs, rt)
            rows = {k: [] for k in ks}
            for _, c in cs:
                r = pr.run_case(m, c)
                for ph, g, a in _phases(c, r):
                    for k in ks:
                        ids, lps = runtime_topk(a, k)
                        rows[k].append(row_metrics(g, ids, lps))
            g_typ = float("%.4g" % float(np.median(gmax)))
            floor = lp_floor(*policy_logits_tol(policy, stem), g_typ)
            floors.append(floor)
            pm, pl = derive(rows, floor, g_typ)
            per[stem] = {"measured": pm, "limits": pl}
            for k in ks:
                all_rows[k] += rows[k]
            if log:
                log("%s: %s: %d cases" % (rt, stem, len(cs)))
        g_all = float("%.4g" % float(np.median(np.concatenate([d[3] for d in data.values()]))))
        meas, lim = derive(all_rows, max(floors), g_all)
        out[rt] = {"ks": list(ks), "measured": meas, "limits": lim, "per_golden": per}
        if rt == "fp32":
            out[rt]["runtime"] = FP32_ABOUT
    return out


def meta():
    """The root "topk_measure" object: how the topk objects were derived."""
    return {"tool": TOOL, "ks": list(KS), "runtimes": list(RUNTIMES),
            "policy": "fixtures/tolerances.json",
            "margins": {"lp": LP_MARGIN, "tie": TIE_MARGIN, "overlap_loss": LOSS_MARGIN,
                        "boundary": BOUNDARY, "floor": FLOOR}}


# ------------------------------------------------------------------------------------------------
# The measurement file: add the topk objects, touch nothing else
# ------------------------------------------------------------------------------------------------

def merge(obj, topk):
    """obj (a measurement file's content) with sims[rt]["topk"] set for every runtime of
    `topk` and the root "topk_measure"; every other key as it was."""
    obj = dict(obj)
    sims = dict(obj.get("sims", {}))
    for rt, t in topk.items():
        sims[rt] = dict(sims.get(rt, {}), topk=pr._round4(t))
    obj["sims"] = sims
    obj["topk_measure"] = meta()
    return obj


def add_to_file(path, topk):
    """Read `path` (if it exists), add the topk objects, write it back (temp file + rename)."""
    obj = {}
    if os.path.exists(path):
        with open(path) as f:
            obj = json.load(f)
    obj = merge(obj, topk)
    tmp = path + ".tmp.%d" % os.getpid()
    try:
        with open(tmp, "w") as f:
            f.write(pr._dump_json(obj, 0) + "\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return obj


def topk_of(obj):
    """{runtime: topk object} of a measurement file's content, in RUNTIMES order."""
    sims = obj.get("sims", {})
    return {rt: sims[rt]["topk"] for rt in list(RUNTIMES) + sorted(sims)
            if rt in sims and "topk" in sims[rt]}


# ------------------------------------------------------------------------------------------------
# The docs table and the C table
# ------------------------------------------------------------------------------------------------

def _scopes(t):
    return [("(all)", t)] + sorted(t["per_golden"].items())


def md_table(topk):
    """Markdown: per runtime and golden, k = 5 / 20 (deterministic text)."""
    out = ["| tier | golden | max abs Δlp, k=5 / 20 | Δlp limit, k=5 / 20 (floor) | argmax flips "
           "(max golden margin) | golden top-1 not in top-k, k=5 / 20 (max margin) | tie δ, "
           "k=5 / 20 | overlap min strict, k=5 / 20 | overlap min at δ_b, k=5 / 20 → limit |",
           "|---|---|---|---|---|---|---|---|---|"]
    for rt, t in topk.items():
        ks = ["k%d" % k for k in t["ks"]]
        for stem, p in _scopes(t):
            m, lim = p["measured"], p["limits"]
            j = " / ".join
            out.append("| %s | %s | %s | %s (%s) | %d (%s) | %s (%s) | %s | %s | %s → %s |" % (
                rt, stem, j("%.2g" % m[k]["lp_max_abs"] for k in ks),
                j(pr._g(lim[k]["lp_max_abs"]) for k in ks), pr._g(lim[ks[0]]["lp_floor"]),
                m[ks[0]]["flips"], "%.3g" % m[ks[0]]["flip_margin_max"],
                j("%d" % m[k]["top1_missing"] for k in ks),
                "%.3g" % max(m[k]["top1_missing_margin_max"] for k in ks),
                j(pr._g(lim[k]["tie_delta"]) for k in ks),
                j("%.2f" % m[k]["overlap_min_strict"] for k in ks),
                j("%.2f" % m[k]["overlap_min"] for k in ks),
                j("%.2f" % lim[k]["overlap_min"] for k in ks)))
    return "\n".join(out) + "\n"


def _cmd(c_path):
    return ("python3 golden/qcgolden measure-topk --golden fixtures\n *     --out "
            "fixtures/tolerance-tiers-measurements.json --c-table %s" % c_path)


def c_files(topk, c_path="harness/io/qc_tier_topk.c"):
    """(qc_tier_topk.c text, qc_tier_topk.h text) from the topk objects (deterministic)."""
    gen = (" * GENERATED by\n *     %s\n * from fixtures/tolerance-tiers-measurements.json "
           "(the \"topk\" object of each tier); do not edit:\n * rerun it, or `measure-topk "
           "--from fixtures/tolerance-tiers-measurements.json --c-table PATH`\n * without "
           "measuring. docs/tolerance-tiers.md, \"Top-k limits (servers)\", explains the "
           "metrics\n * and how the limits derive from the measurements.\n" % _cmd(c_path))
    h = ("/* qc_tier_topk.h — the top-k log-probability limits of the tolerance tiers, for runtimes\n"
         " * that return only their top-k log-probabilities (servers).\n" + gen + " */\n"
         "#ifndef QC_TIER_TOPK_H\n#define QC_TIER_TOPK_H\n\n#include <stddef.h>\n\n"
         "typedef struct {\n"
         "    const char *tier;\n"
         "    const char *golden; /* NULL = every golden */\n"
         "    int k;\n"
         "    double lp_max_abs;  /* max |lp_runtime - lp_golden| over the runtime's k tokens */\n"
         "    double tie_delta;   /* flips / top-1 misses within this golden margin: excused */\n"
         "    double overlap_min; /* per-position overlap (boundary allowance 2 x lp_max_abs) */\n"
         "} qc_topk_limit;\n\n"
         "extern const qc_topk_limit qc_topk_limits[];\n"
         "extern const size_t qc_topk_n_limits;\n\n"
         "/* The limits of `tier` for the golden whose stem is `golden_stem` (NULL or a stem with\n"
         " * no row of its own: the tier's row over every golden), at `k`; a k that was not\n"
         " * measured uses the nearest larger measured k, or the largest. NULL: unknown tier. */\n"
         "const qc_topk_limit *qc_topk_limit_find(const char *tier, const char *golden_stem, "
         "int k);\n\n#endif /* QC_TIER_TOPK_H */\n")
    rows = []
    for rt, t in topk.items():
        for stem, p in _scopes(t):
            for k in t["ks"]:
                lim = p["limits"]["k%d" % k]
                rows.append('    {"%s", %s, %d, %s, %s, %s},' % (
                    rt, "NULL" if stem == "(all)" else '"%s"' % stem, k,
                    pr._g(lim["lp_max_abs"]), pr._g(lim["tie_delta"]),
                    pr._g(lim["overlap_min"])))
    c = ("/* qc_tier_topk.c — the top-k log-probability limits of the tolerance tiers\n"
         " * (qc_tier_topk.h).\n" + gen + " */\n"
         "#include <stddef.h>\n\n#include \"qc_tier_topk.h\"\n\n"
         "const qc_topk_limit qc_topk_limits[] = {\n" + "\n".join(rows) + "\n};\n\n"
         "const size_t qc_topk_n_limits = sizeof qc_topk_limits / sizeof qc_topk_limits[0];\n\n"
         "static int same(const char *a, const char *b)\n{\n"
         "    while (*a && *a == *b) a++, b++;\n    return *a == *b;\n}\n\n"
         "const qc_topk_limit *qc_topk_limit_find(const char *tier, const char *golden_stem, "
         "int k)\n{\n"
         "    int best = 0, largest = 0;\n"
         "    size_t i;\n"
         "    if (!tier) return NULL;\n"
         "    for (i = 0; i < qc_topk_n_limits; i++) {\n"
         "        const qc_topk_limit *r = &qc_topk_limits[i];\n"
         "        if (!same(r->tier, tier)) continue;\n"
         "        if (r->k > largest) largest = r->k;\n"
         "        if (r->k >= k && (!best || r->k < best)) best = r->k;\n"
         "    }\n"
         "    if (!largest) return NULL;\n"
         "    if (!best) best = largest;\n"
         "    if (golden_stem)\n"
         "        for (i = 0; i < qc_topk_n_limits; i++) {\n"
         "            const qc_topk_limit *r = &qc_topk_limits[i];\n"
         "            if (r->k == best && r->golden && same(r->tier, tier) &&\n"
         "                same(r->golden, golden_stem))\n"
         "                return r;\n"
         "        }\n"
         "    for (i = 0; i < qc_topk_n_limits; i++) {\n"
         "        const qc_topk_limit *r = &qc_topk_limits[i];\n"
         "        if (r->k == best && !r->golden && same(r->tier, tier)) return r;\n"
         "    }\n"
         "    return NULL;\n}\n")
    return c, h


def write_c(c_path, topk):
    """Write c_path and qc_tier_topk.h next to it (temp files + rename)."""
    rel = c_path
    try:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        r = os.path.relpath(os.path.abspath(c_path), root)
        if not r.startswith(".."):
            rel = r
    except ValueError:
        pass
    c, h = c_files(topk, rel)
    for path, text in ((c_path, c), (os.path.join(os.path.dirname(c_path), "qc_tier_topk.h"), h)):
        tmp = path + ".tmp.%d" % os.getpid()
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
