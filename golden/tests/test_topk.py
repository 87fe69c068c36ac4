"""The top-k log-probability limits (qcgolden/topk.py, `measure-topk`): the metric definitions
on hand-made rows, the measurement file (the topk objects added, nothing else touched), and
that the committed limits, docs table and C table are what the committed measurements give."""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from conftest import FIXTURES, GOLDEN, REPO
from qcgolden import precision_run as pr, topk as tk

MEAS = os.path.join(FIXTURES, "tolerance-tiers-measurements.json")
DOC = os.path.join(REPO, "docs", "tolerance-tiers.md")
POLICY = os.path.join(FIXTURES, "tolerances.json")


def _committed():
    with open(MEAS) as f:
        return json.load(f)


# ------------------------------------------------------------------------------------------------
# Metrics on hand-made rows
# ------------------------------------------------------------------------------------------------

G = np.array([[0.0, 1.9, 0.5, 2.0, -1.0, 0.2, 1.0, -0.5]], np.float32)   # argmax 3, then 1 (0.1)


def test_runtime_topk_order_and_ties():
    a = np.array([[1.0, 3.0, 3.0, 0.0, 2.0]], np.float32)
    ids, lps = tk.runtime_topk(a, 3)
    assert ids.tolist() == [[1, 2, 4]]                        # equal values: the lower id first
    assert np.allclose(lps, tk.log_softmax(a)[0, [1, 2, 4]])
    assert tk.runtime_topk(a, 20)[0].shape == (1, 5)          # k capped at V


def test_lp_of_a_shifted_distribution():
    lpg = tk.log_softmax(G)
    # the runtime's logits shifted by a constant: the same log-probs
    ids, lps = tk.runtime_topk(G + 7.5, 5)
    assert tk.row_metrics(G, ids, lps)["lp_max_abs"] < 1e-6
    # log-probs every one shifted by 0.3 (a wrong normaliser): |dlp| = 0.3 on every entry
    ids, lps = tk.runtime_topk(G, 5)
    assert tk.row_metrics(G, ids, lps + 0.3)["lp_max_abs"] == pytest.approx(0.3, abs=1e-12)
    # unnormalised logits returned as log-probs: off by logsumexp(g)
    lse = float(G[0, 3] - lpg[0, 3])
    assert tk.row_metrics(G, ids, G[0, ids[0]][None])["lp_max_abs"] == pytest.approx(lse)
    # one logit off by d: every log-prob moves, none by more than 2 |d| (|dLSE| <= max |dlogit|)
    a = G.copy()
    a[0, 3] += 0.5
    ids, lps = tk.runtime_topk(a, 5)
    m = tk.row_metrics(G, ids, lps)["lp_max_abs"]
    assert 0.25 < m <= 2 * 0.5


def test_flip_within_delta_excused_outside_not():
    a = G.copy()
    a[0, 1] = 2.1                                             # the runtime's top-1 is id 1
    ids, lps = tk.runtime_topk(a, 5)
    assert ids[0, 0] == 1
    m = tk.row_metrics(G, ids, lps, delta=0.2)
    assert m["flips"] == 0 and m["flip_margin_max"] == pytest.approx(0.1, abs=1e-6)
    assert tk.row_metrics(G, ids, lps, delta=0.05)["flips"] == 1
    # a flip to a token far below the golden top: margin lpg[argmax] - lpg[a_1] = 2.5
    b = G.copy()
    b[0, 4] = 5.0
    ids, lps = tk.runtime_topk(b, 5)
    m = tk.row_metrics(G, ids, lps, delta=1.0)
    assert m["flips"] == 1 and m["flip_margin_max"] == pytest.approx(3.0, abs=1e-6)
    assert tk.row_metrics(G, ids, lps, delta=5.0)["flips"] == 0


def test_top1_missing_from_top_k():
    a = G.copy()
    a[0, 3] = -5.0                                            # the golden argmax drops out
    ids, lps = tk.runtime_topk(a, 3)                          # ids 1, 6, 2
    assert 3 not in ids[0] and ids[0, -1] == 2
    m = tk.row_metrics(G, ids, lps, delta=1.0)                # lpg[3] - lpg[2] = 1.5 > 1
    assert m["top1_missing"] == 1 and m["top1_missing_margin_max"] == pytest.approx(1.5, abs=1e-6)
    assert tk.row_metrics(G, ids, lps, delta=1.5 + 1e-6)["top1_missing"] == 0
    assert tk.row_metrics(G, *tk.runtime_topk(G, 3))["top1_missing"] == 0


def test_overlap_boundary_tie():
    # golden order 3, 1, 6, 2, 5, 0, 7, 4: top-3 = {3, 1, 6}, lpg_kth = lpg[6]; id 2 is 0.5
    # below it. A runtime ranking 2 above 6: overlap 2/3 strictly, 1 once delta_b >= 0.5
    a = G.copy()
    a[0, 2] = 1.2
    ids, lps = tk.runtime_topk(a, 3)
    assert sorted(ids[0].tolist()) == [1, 2, 3]
    assert tk.row_metrics(G, ids, lps)["overlap"] == pytest.approx(2 / 3)
    assert tk.row_metrics(G, ids, lps, delta_b=0.49)["overlap"] == pytest.approx(2 / 3)
    assert tk.row_metrics(G, ids, lps, delta_b=0.5 + 1e-9)["overlap"] == 1.0
    gaps = tk.row_metrics(G, ids, lps)["gaps"]
    assert tk.overlap_at(gaps, 0.6).tolist() == [1.0]
    # an exact tie at the golden k-th: either token is in the golden top-k (gap 0)
    g2 = np.array([[3.0, 2.0, 1.0, 1.0, 0.0]], np.float32)
    m = tk.row_metrics(g2, np.array([[0, 1, 3]]), tk.log_softmax(g2)[:, [0, 1, 3]])
    assert m["overlap"] == 1.0 and m["lp_max_abs"] == 0.0
    # the row's value is the minimum over its positions
    g3 = np.vstack([G, G])
    ids3 = np.vstack([tk.runtime_topk(G, 3)[0], ids])
    assert tk.row_metrics(g3, ids3, np.zeros((2, 3)))["overlap"] == pytest.approx(2 / 3)


def test_derivation_rules():
    assert tk.lp_floor(1e-3, 1e-3, 3.0) == 0.01              # 2 x (0.001 + 0.003) = 0.008
    assert tk.overlap_limit(0.95) == 0.8 and tk.overlap_limit(0.7) == 0.0
    assert tk.overlap_limit(1.0) == 1.0
    m = {"lp_max_abs": 0.011, "flips": 1, "flip_margin_max": 0.3, "top1_missing": 1,
         "top1_missing_margin_max": 0.7, "overlap_min": 0.95}
    assert tk.limits_of(m, 0.01) == {"lp_max_abs": 0.05, "lp_floor": 0.01, "tie_delta": 2.0,
                                     "overlap_min": 0.8}
    m.update(lp_max_abs=1e-4, flips=0, top1_missing=0)
    assert tk.limits_of(m, 0.01)["lp_max_abs"] == 0.01 and tk.limits_of(m, 0.01)["tie_delta"] == 0


# ------------------------------------------------------------------------------------------------
# The measurement file
# ------------------------------------------------------------------------------------------------

def _without_topk(obj):
    obj = dict(obj)
    obj.pop("topk_measure", None)
    sims = {}
    for s, d in obj["sims"].items():
        d = {k: v for k, v in d.items() if k != "topk"}
        if d:
            sims[s] = d
    obj["sims"] = sims
    return obj


def test_measure_adds_topk_and_keeps_every_other_key(tmp_path):
    out = str(tmp_path / "m.json")
    shutil.copy(MEAS, out)
    gp = os.path.join(FIXTURES, "tiny-f32-tied-flat", "golden.h5")
    res = tk.measure(gp, ["fp32", "f16-kv"], "len00[15]", policy=POLICY)
    assert set(res) == {"fp32", "f16-kv"}
    t = res["f16-kv"]
    assert t["ks"] == [5, 20] and set(t["per_golden"]) == {"tiny-f32-tied-flat"}
    for k in ("k5", "k20"):
        m = t["measured"][k]
        assert m["rows"] == 4 and m["positions"] == 1 + 8 + 5 + 8
        assert 0 < m["lp_max_abs"] < 0.01 and m["overlap_min"] == 1.0
        assert m["overlap_boundary_delta"] == 2 * t["limits"][k]["lp_max_abs"]
    assert res["fp32"]["measured"]["k5"]["lp_max_abs"] < 1e-3
    tk.add_to_file(out, res)
    with open(out) as f:
        new = json.load(f)
    before = _committed()
    assert _without_topk(new) == _without_topk(before)
    assert new["sims"]["f16-kv"]["topk"] == pr._round4(res["f16-kv"])
    # runtimes not measured keep the topk object they had
    for s in set(before["sims"]) - {"fp32", "f16-kv"}:
        assert new["sims"][s].get("topk") == before["sims"][s].get("topk")
    # the text: the committed file is what its content dumps to, so every other key keeps
    # its lines
    with open(out) as f:
        assert f.read() == pr._dump_json(new, 0) + "\n"
    with open(MEAS) as f:
        assert f.read() == pr._dump_json(before, 0) + "\n"


def test_measure_tiers_write_keeps_topk(tmp_path):
    out = str(tmp_path / "m.json")
    shutil.copy(MEAS, out)
    before = _committed()
    pr.write_json(out, _without_topk(before))    # what measure-tiers --out writes
    with open(out) as f:
        assert json.load(f) == before
    with open(out) as f, open(MEAS) as g:
        assert f.read() == g.read()


# ------------------------------------------------------------------------------------------------
# The committed numbers
# ------------------------------------------------------------------------------------------------

def test_committed_limits_are_what_the_measurements_give():
    topk = tk.topk_of(_committed())
    assert list(topk) == list(tk.RUNTIMES)
    for rt, t in topk.items():
        floors = []
        for stem, p in t["per_golden"].items():
            for k in t["ks"]:
                m, lim = p["measured"]["k%d" % k], p["limits"]["k%d" % k]
                floor = tk.lp_floor(*tk.policy_logits_tol(POLICY, stem), m["logit_scale"])
                assert lim == tk.limits_of(m, floor), (rt, stem, k)
                assert m["overlap_boundary_delta"] == pytest.approx(2 * lim["lp_max_abs"])
                floors.append(floor)
        for k in t["ks"]:
            m, lim = t["measured"]["k%d" % k], t["limits"]["k%d" % k]
            assert lim == tk.limits_of(m, max(floors)), (rt, k)
            # the limits over every golden are the loosest
            for p in t["per_golden"].values():
                pl = p["limits"]["k%d" % k]
                assert lim["lp_max_abs"] >= pl["lp_max_abs"]
                assert lim["tie_delta"] >= pl["tie_delta"]


def test_committed_docs_table():
    with open(DOC) as f:
        text = f.read()
    b, e = "<!-- BEGIN TOPK NUMBERS -->\n", "<!-- END TOPK NUMBERS -->"
    assert text[text.index(b) + len(b):text.index(e)] == tk.md_table(tk.topk_of(_committed()))


def test_c_table_from_the_measurements(tmp_path):
    """--from writes the C table (and the header) of the committed measurements; it compiles
    with only <stddef.h>, the lookup falls back as documented, and a committed copy in
    harness/ (if there is one) is the same text."""
    c = str(tmp_path / "qc_tier_topk.c")
    r = subprocess.run(["/usr/bin/python3", os.path.join(GOLDEN, "qcgolden"), "measure-topk",
                        "--from", MEAS, "--c-table", c], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    topk = tk.topk_of(_committed())
    with open(c) as f:
        text = f.read()
    assert "#include" in text and all(l in ("#include <stddef.h>", '#include "qc_tier_topk.h"')
                                      for l in text.splitlines() if l.startswith("#include"))
    assert "GENERATED by\n *     python3 golden/qcgolden measure-topk --golden fixtures" in text
    for d in ("harness/io", "harness"):
        shipped = os.path.join(REPO, d, "qc_tier_topk.c")
        if os.path.exists(shipped):
            want_c, want_h = tk.c_files(topk, d + "/qc_tier_topk.c")
            with open(shipped) as f:
                assert f.read() == want_c
            with open(os.path.join(REPO, d, "qc_tier_topk.h")) as f:
                assert f.read() == want_h
    cc = shutil.which("cc")
    if not cc:
        pytest.skip("no C compiler")
    lim = topk["int8"]
    per = lim["per_golden"]["tiny-f32-tied-flat"]["limits"]
    main = tmp_path / "main.c"
    main.write_text(r'''#include <stdio.h>
#include "qc_tier_topk.h"
static void show(const char *t, const char *g, int k)
{
    const qc_topk_limit *r = qc_topk_limit_find(t, g, k);
    if (!r) { printf("none\n"); return; }
    printf("%s %s %d %.6g %.6g %.6g\n", r->tier, r->golden ? r->golden : "-", r->k,
           r->lp_max_abs, r->tie_delta, r->overlap_min);
}
int main(void)
{
    show("int8", "tiny-f32-tied-flat", 5);
    show("int8", "tiny-f32-tied-flat", 3);
    show("int8", "tiny-f32-tied-flat", 10);
    show("int8", "tiny-f32-tied-flat", 64);
    show("int8", "not-a-fixture", 20);
    show("int8", NULL, 5);
    show("fp32", NULL, 1);
    show("nope", NULL, 5);
    printf("%d\n", (int)qc_topk_n_limits);
    return 0;
}
''')
    exe = str(tmp_path / "t")
    r = subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-o", exe,
                        c, str(main), "-I", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([exe], capture_output=True, text=True).stdout.splitlines()

    def row(golden, k, L):
        return "int8 %s %d %s %s %s" % (golden, k, "%.6g" % L["lp_max_abs"],
                                        "%.6g" % L["tie_delta"], "%.6g" % L["overlap_min"])
    assert out[0] == row("tiny-f32-tied-flat", 5, per["k5"])
    assert out[1] == row("tiny-f32-tied-flat", 5, per["k5"])      # k 3: the nearest larger, 5
    assert out[2] == row("tiny-f32-tied-flat", 20, per["k20"])    # k 10: 20
    assert out[3] == row("tiny-f32-tied-flat", 20, per["k20"])    # k 64: the largest, 20
    assert out[4] == row("-", 20, lim["limits"]["k20"])           # another golden: every golden
    assert out[5] == row("-", 5, lim["limits"]["k5"])
    assert out[6].startswith("fp32 - 5 ")
    assert out[7] == "none"
    assert int(out[8]) == sum(len(t["ks"]) * (1 + len(t["per_golden"])) for t in topk.values())
