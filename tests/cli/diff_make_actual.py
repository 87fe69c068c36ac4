#!/usr/bin/python3
"""diff_make_actual.py — an ACTUAL file of every case of a golden, from a correct runtime (a
built-in backend through `qwen-conform record`, teacher-forced with the golden's decode
tokens), for the diff tests; then variants of it made with h5py.

    diff_make_actual.py QWEN_CONFORM GOLDEN.h5 OUT.h5 [--backend reference|optimized]
    diff_make_actual.py --variant NAME IN.h5 OUT.h5 [GOLDEN.h5]

Variants (each a copy of IN.h5, never IN.h5 itself):
  logits_only   prefill/logits and decode/logits only (+ inputs), no root provenance but
                schema_version
  no_hidden     everything but prefill/hidden
  prefill_only  no decode group
  last_row      prefill/logits of the last position only, as [V]
  hf            Hugging Face shapes: a batch dim of 1 on every tensor, hidden [L+1,1,T,H]
  llamacpp_conv conv states with their K-1 newest columns [C, K-1]
  minimal       schema_version + /cases/<c>/prefill/logits only
"""
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np


def _ids(a):
    return ",".join(str(int(v)) for v in a)


def record_all(qc, golden, out, backend="reference"):
    tmp = tempfile.mkdtemp(prefix="qc_diff_actual.")
    try:
        with h5py.File(golden, "r") as g:
            model = os.path.join(os.path.dirname(os.path.abspath(golden)), g.attrs["model_path"])
            parts = []
            for name in sorted(g["cases"]):
                c = g["cases"][name]
                cmd = [qc, "record", "--model", model, "--case", name, "--backend", backend,
                       "--tokens", _ids(c["tokens"][()]), "--dynamic",
                       "--out", os.path.join(tmp, name + ".h5")]
                if "max_seq_len" in c.attrs:
                    cmd += ["--max-seq-len", str(int(c.attrs["max_seq_len"]))]
                if "history_tokens" in c:
                    cmd += ["--history", _ids(c["history_tokens"][()])]
                if "decode" in c:
                    cmd += ["--decode-tokens", _ids(c["decode/tokens"][()])]
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                parts.append(name)
        first = os.path.join(tmp, parts[0] + ".h5")
        with h5py.File(first, "r") as src, h5py.File(out + ".tmp", "w") as dst:
            for k, v in src.attrs.items():
                dst.attrs[k] = v
            dst.create_group("cases")
            for name in parts:
                with h5py.File(os.path.join(tmp, name + ".h5"), "r") as p:
                    p.copy(p["cases"][name], dst["cases"], name)
        os.replace(out + ".tmp", out)
    finally:
        shutil.rmtree(tmp)


def _walk(f):
    out = []
    f.visititems(lambda n, o: out.append(n) if isinstance(o, h5py.Dataset) else None)
    return out


def variant(name, src, out, golden=None):
    shutil.copyfile(src, out)
    with h5py.File(out, "r+") as f:
        cases = sorted(f["cases"])
        if name in ("logits_only", "minimal"):
            for k in list(f.attrs):
                if k != "schema_version":
                    del f.attrs[k]
            keep = ("prefill/logits", "decode/logits") if name == "logits_only" else ("prefill/logits",)
            if name == "logits_only":
                keep += ("tokens", "history_tokens", "decode/tokens")
            for c in cases:
                g = f["cases"][c]
                if name == "minimal":
                    for a in list(g.attrs):
                        del g.attrs[a]
                for p in _walk(g):
                    if p not in keep:
                        del g[p]
                for grp in ("prefill/state", "decode/state"):
                    if grp in g:
                        del g[grp]
                if name == "minimal" and "decode" in g:
                    del g["decode"]
        elif name == "no_hidden":
            for c in cases:
                del f["cases"][c]["prefill/hidden"]
        elif name == "prefill_only":
            for c in cases:
                if "decode" in f["cases"][c]:
                    del f["cases"][c]["decode"]
        elif name == "last_row":
            for c in cases:
                g = f["cases"][c]
                last = g["prefill/logits"][()][-1]
                del g["prefill/logits"]
                g["prefill/logits"] = last
        elif name == "hf":
            for c in cases:
                g = f["cases"][c]
                for p in _walk(g):
                    a = g[p][()]
                    if p.endswith("hidden"):
                        a = a[:, None]
                    else:
                        a = a[None]
                    del g[p]
                    g[p] = a
        elif name == "llamacpp_conv":
            for c in cases:
                g = f["cases"][c]
                for p in _walk(g):
                    if p.endswith("conv_state"):
                        a = g[p][()][:, 1:]
                        del g[p]
                        g[p] = a
        else:
            raise SystemExit("unknown variant " + name)


def main(argv):
    if argv and argv[0] == "--variant":
        variant(argv[1], argv[2], argv[3], argv[4] if len(argv) > 4 else None)
        return 0
    backend = "reference"
    if "--backend" in argv:
        i = argv.index("--backend")
        backend = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    record_all(argv[0], argv[1], argv[2], backend)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
