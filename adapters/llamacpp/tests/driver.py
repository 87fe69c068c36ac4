#!/usr/bin/python3
"""driver.py -- run a qwen-conform runtime plugin on golden files without the harness.

    /usr/bin/python3 driver.py --driver PLUGIN_DRIVER --plugin PLUGIN.so [--options k=v,...]
                               [--mode dynamic|static] [--cases a,b] [--json OUT] GOLDEN.h5...

For every golden case: reset, replay history_tokens, the prompt (dynamic: chunks of the case's
max_seq_len, default 128; static: one token per call), the golden's decode tokens one per call
(teacher-forced); reads the logits, the hidden states of the prompt's last call (when the
plugin announces `hidden` and the prompt went in one call) and every state buffer after the
prefill and after the decode (when it announces `state_read`), and compares them with the
golden (h5py): max |diff| per tensor class, allclose with fixtures/tolerances.json's defaults.
It also checks that get_state with n_pos beyond the used positions is refused as unsupported
or returns zeros. A plugin that kills the driver process (llama.cpp's GGML_ASSERT aborts) is
reported as a crash with the signal and the last stderr lines.

Per golden file it prints one line, outcome (pass / fail / cannot_convert / cannot_load /
crash / error) and the numbers; --json writes everything. Exit status 0 always unless usage
error (this is a measuring tool; tests/gate.py gates).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
K_CACHE, V_CACHE, CONV, RECUR = 0, 1, 2, 3


class Crash(Exception):
    pass


class Driver:
    def __init__(self, exe: str, plugin: str, outdir: str):
        self.outdir = outdir
        self.errf = tempfile.TemporaryFile()
        self.p = subprocess.Popen([exe, plugin, outdir], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.errf, text=True)

    def cmd(self, line: str) -> tuple[bool, str]:
        try:
            self.p.stdin.write(line + "\n")
            self.p.stdin.flush()
            out = self.p.stdout.readline()
        except BrokenPipeError:
            out = ""
        if not out:
            rc = self.p.wait()
            raise Crash(self.describe_exit(rc))
        out = out.rstrip("\n")
        if out.startswith("ok"):
            return True, out[3:]
        return False, out[4:]

    def describe_exit(self, rc: int) -> str:
        self.errf.seek(0)
        tail = self.errf.read().decode("utf-8", "replace").strip().splitlines()[-6:]
        if rc < 0:
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = str(-rc)
            what = f"killed by signal {-rc} ({name})"
        else:
            what = f"exited with status {rc}"
        return what + (": " + " | ".join(tail) if tail else "")

    def close(self):
        try:
            self.cmd("close")
        except Crash:
            pass
        try:
            self.p.stdin.close()
        except OSError:
            pass
        self.p.wait()

    def load(self, name: str, shape) -> np.ndarray:
        return np.fromfile(os.path.join(self.outdir, name), dtype=np.float32).reshape(shape)


def load_policy() -> dict:
    try:
        with open(os.path.join(ROOT, "fixtures", "tolerances.json")) as f:
            pol = json.load(f)
    except (OSError, ValueError):
        pol = {}
    return pol


def tol(pol: dict, cls: str, case_id: str) -> tuple[float, float]:
    d = pol.get("defaults", {}).get(cls, {"atol": 1e-3, "rtol": 1e-3})
    atol, rtol = d.get("atol", 1e-3), d.get("rtol", 1e-3)
    for o in pol.get("overrides", []):
        if o.get("case") == case_id and o.get("tensor") == cls:
            atol, rtol = o.get("atol", atol), o.get("rtol", rtol)
    return atol, rtol


def dims(cfg: dict) -> dict:
    t = {**cfg, **cfg.get("text_config", {})}
    L = t["num_hidden_layers"]
    lt = t.get("layer_types")
    if not lt:
        iv = t.get("full_attention_interval", 4)
        lt = ["full_attention" if (i + 1) % iv == 0 else "linear_attention" for i in range(L)]
    nk, nv = t["linear_num_key_heads"], t["linear_num_value_heads"]
    dk, dv = t["linear_key_head_dim"], t["linear_value_head_dim"]
    return dict(L=L, H=t["hidden_size"], V=t["vocab_size"], types=lt,
                nkv=t["num_key_value_heads"], hd=t.get("head_dim") or t["hidden_size"] // t["num_attention_heads"],
                C=2 * nk * dk + nv * dv, K=t["linear_conv_kernel_dim"], nv=nv, dk=dk, dv=dv)


def read_states(drv: Driver, D: dict, prefix: str, n_pos: int) -> dict:
    out = {}
    for l in range(D["L"]):
        if D["types"][l] == "full_attention":
            for kind, nm in ((K_CACHE, "k_cache"), (V_CACHE, "v_cache")):
                shape = (D["nkv"], n_pos, D["hd"])
                f = f"{prefix}.{l}.{nm}"
                ok, msg = drv.cmd(f"state {f} {l} {kind} {n_pos} {int(np.prod(shape))}")
                out[(l, nm)] = drv.load(f, shape) if ok else msg
        else:
            for kind, nm, shape in ((CONV, "conv_state", (D["C"], D["K"])),
                                    (RECUR, "recurrent_state", (D["nv"], D["dk"], D["dv"]))):
                f = f"{prefix}.{l}.{nm}"
                ok, msg = drv.cmd(f"state {f} {l} {kind} {n_pos} {int(np.prod(shape))}")
                out[(l, nm)] = drv.load(f, shape) if ok else msg
    return out


class Cmp:
    def __init__(self, pol, fixture):
        self.pol, self.fixture = pol, fixture
        self.maxd: dict[str, float] = {}
        self.first_fail = None
        self.notes: list[str] = []

    def add(self, case: str, cls: str, what: str, actual, golden):
        if isinstance(actual, str):
            self.notes.append(f"{case} {what}: {actual}")
            if self.first_fail is None:
                self.first_fail = f"{case} {what}: runtime error: {actual}"
            return
        g = np.asarray(golden, dtype=np.float64)
        a = np.asarray(actual, dtype=np.float64)
        if a.shape != g.shape:
            if self.first_fail is None:
                self.first_fail = f"{case} {what}: shape {a.shape} != golden {g.shape}"
            return
        if not np.all(np.isfinite(a)):
            if self.first_fail is None:
                self.first_fail = f"{case} {what}: non-finite values"
            self.maxd[cls] = float("inf")
            return
        d = float(np.max(np.abs(a - g))) if a.size else 0.0
        self.maxd[cls] = max(self.maxd.get(cls, 0.0), d)
        atol, rtol = tol(self.pol, cls, f"{self.fixture}/{case}")
        bad = np.abs(a - g) > atol + rtol * np.abs(g)
        if bad.any() and self.first_fail is None:
            idx = np.unravel_index(int(np.argmax(np.abs(a - g) - (atol + rtol * np.abs(g)))), g.shape)
            self.first_fail = (f"{case} {what}: max |diff| {d:.3g} > atol {atol:g} + rtol {rtol:g}*|g| "
                               f"(worst at {tuple(int(i) for i in idx)}: actual {a[idx]:.6g}, golden {g[idx]:.6g})")


def run_golden(path: str, args, pol) -> dict:
    fixture = os.path.basename(os.path.dirname(os.path.abspath(path)))
    res = {"fixture": fixture, "golden": path, "outcome": None, "reason": "", "max_abs": {},
           "cases": 0, "notes": []}
    with h5py.File(path, "r") as f:
        cfg = json.loads(f.attrs["config_json"])
        model = os.path.join(os.path.dirname(os.path.abspath(path)), f.attrs["model_path"])
        D = dims(cfg)
        cases = list(f["cases"].keys())
        if args.cases:
            cases = [c for c in cases if c in args.cases.split(",")]
        with tempfile.TemporaryDirectory() as td:
            drv = Driver(args.driver, args.plugin, td)
            cmp = Cmp(pol, fixture)
            stage = "open"
            try:
                ok, msg = drv.cmd(f"open {model} {args.options or '-'}")
                if not ok:
                    m = msg.split(" ", 1)[1] if " " in msg else msg
                    res["reason"] = m
                    res["outcome"] = ("cannot_convert" if "cannot convert" in m else
                                      "crash" if "would abort" in m else
                                      "cannot_load" if "cannot load" in m else "error")
                    return res
                info = msg.split(" ", 7)
                res["runtime"] = info[7] if len(info) > 7 else ""
                caps = int(info[6])
                has_hidden, has_state = bool(caps & 1), bool(caps & 2)
                for cname in cases:
                    g = f["cases"][cname]
                    P = int(g.attrs.get("start_pos", 0))
                    msl = int(g.attrs.get("max_seq_len", 128))
                    toks = [int(x) for x in g["tokens"][()]]
                    T = len(toks)
                    stage = f"{cname} reset"
                    ok, msg = drv.cmd("reset")
                    if not ok:
                        cmp.add(cname, "logits", "reset", msg, None)
                        continue
                    pos = 0
                    if P > 0:
                        hist = [int(x) for x in g["history_tokens"][()]]
                        stage = f"{cname} history"
                        step = 1 if args.mode == "static" else msl
                        for i in range(0, P, step):
                            ch = hist[i:i + step]
                            ok, msg = drv.cmd(f"forward {pos} 0 - {len(ch)} " + " ".join(map(str, ch)))
                            if not ok:
                                break
                            pos += len(ch)
                        if not ok:
                            cmp.add(cname, "logits", "history", msg, None)
                            continue
                    # prompt
                    stage = f"{cname} prefill"
                    step = 1 if args.mode == "static" else msl
                    rows = []
                    failed = None
                    for i in range(0, T, step):
                        ch = toks[i:i + step]
                        ok, msg = drv.cmd(f"forward {pos} 1 pl.{cname}.{i} {len(ch)} " + " ".join(map(str, ch)))
                        if not ok:
                            failed = msg
                            break
                        rows.append(drv.load(f"pl.{cname}.{i}", (len(ch), D["V"])))
                        pos += len(ch)
                    if failed:
                        cmp.add(cname, "logits", "prefill.logits", failed, None)
                        continue
                    cmp.add(cname, "logits", "prefill.logits", np.concatenate(rows), g["prefill/logits"][()])
                    if has_hidden and len(rows) == 1:
                        ok, msg = drv.cmd(f"hidden hid.{cname} {T}")
                        hid = drv.load(f"hid.{cname}", (D["L"] + 1, T, D["H"])) if ok else msg
                        if isinstance(hid, str):
                            cmp.add(cname, "hidden", "prefill.hidden", hid, None)
                        else:
                            gh = g["prefill/hidden"][()]
                            per = [float(np.max(np.abs(hid[i].astype(np.float64) - gh[i]))) for i in range(D["L"] + 1)]
                            res.setdefault("hidden_per_layer", {})[cname] = per
                            cmp.add(cname, "hidden", "prefill.hidden", hid, gh)
                    if has_state:
                        st = read_states(drv, D, f"ps.{cname}", P + T)
                        for (l, nm), v in st.items():
                            cmp.add(cname, nm, f"prefill.state.layer_{l:02d}.{nm}", v,
                                    g[f"prefill/state/layer_{l:02d}/{nm}"][()])
                        # beyond the used positions: refused (unsupported) or zeros
                        fl = [l for l in range(D["L"]) if D["types"][l] == "full_attention"]
                        if fl:
                            n2 = P + T + 4
                            ok, msg = drv.cmd(f"state beyond {fl[0]} 0 {n2} {D['nkv'] * n2 * D['hd']}")
                            if ok:
                                kc = drv.load("beyond", (D["nkv"], n2, D["hd"]))
                                if np.any(kc[:, P + T:, :] != 0):
                                    cmp.add(cname, "k_cache", "unused_slots", "non-zero unused KV slots", None)
                            elif not msg.startswith("2 "):
                                cmp.add(cname, "k_cache", "unused_slots", "not refused as unsupported: " + msg, None)
                    # decode, teacher-forced
                    if "decode" in g:
                        dt = [int(x) for x in g["decode/tokens"][()]]
                        stage = f"{cname} decode"
                        drows = []
                        for s, t in enumerate(dt):
                            ok, msg = drv.cmd(f"forward {pos} 1 dl.{cname}.{s} 1 {t}")
                            if not ok:
                                failed = msg
                                break
                            drows.append(drv.load(f"dl.{cname}.{s}", (1, D["V"])))
                            pos += 1
                        if failed:
                            cmp.add(cname, "logits", "decode.logits", failed, None)
                            continue
                        cmp.add(cname, "logits", "decode.logits", np.concatenate(drows), g["decode/logits"][()])
                        if has_state:
                            st = read_states(drv, D, f"ds.{cname}", pos)
                            for (l, nm), v in st.items():
                                cmp.add(cname, nm, f"decode.state.layer_{l:02d}.{nm}", v,
                                        g[f"decode/state/layer_{l:02d}/{nm}"][()])
                    res["cases"] += 1
            except Crash as e:
                res["outcome"] = "crash"
                res["reason"] = f"{stage}: {e}"
                res["max_abs"] = cmp.maxd
                return res
            finally:
                drv.close()
            res["max_abs"] = cmp.maxd
            res["notes"] = cmp.notes[:20]
            if cmp.first_fail:
                res["outcome"] = "fail"
                res["reason"] = cmp.first_fail
            else:
                res["outcome"] = "pass"
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--options", default="")
    ap.add_argument("--mode", choices=["dynamic", "static"], default="dynamic")
    ap.add_argument("--cases", default="")
    ap.add_argument("--json")
    ap.add_argument("golden", nargs="+")
    args = ap.parse_args()
    pol = load_policy()
    results = []
    for gpath in args.golden:
        r = run_golden(gpath, args, pol)
        results.append(r)
        md = ", ".join(f"{k} {v:.3g}" for k, v in sorted(r["max_abs"].items()))
        print(f"{r['fixture']}: {r['outcome']}" + (f" [{md}]" if md else "") +
              (f" -- {r['reason']}" if r["reason"] else ""), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
