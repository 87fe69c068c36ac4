#!/usr/bin/env bash
# test_diff_contract.sh — the ACTUAL contract of golden/SCHEMA.md is one contract: for a set
# of generated ACTUAL variants (valid ones in every layout, and one per way of breaking it),
# `golden/validate.py --actual` and `qwen-conform diff` agree: validate.py calls a file INVALID
# (exit 1) exactly when diff refuses it with a format error (exit 2), and each variant's
# verdict is the one the contract gives.
#   bash tests/cli/test_diff_contract.sh <path-to-qwen-conform> <source-dir>
set -u
QC="${1:?usage: test_diff_contract.sh <qwen-conform> <source-dir>}"
SRC="${2:?usage: test_diff_contract.sh <qwen-conform> <source-dir>}"
PY=/usr/bin/python3
if ! $PY -c "import h5py" 2>/dev/null; then echo "SKIP: /usr/bin/python3 lacks h5py"; exit 0; fi
TMP="$(mktemp -d "${TMPDIR:-/tmp}/qc_test_diff_contract.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
exec $PY - "$QC" "$SRC" "$TMP" <<'EOF'
import os, shutil, subprocess, sys
import h5py
import numpy as np

qc, src, tmp = sys.argv[1:4]
golden = os.path.join(src, "fixtures", "tiny-f32-tied-flat", "golden.h5")
mk = os.path.join(src, "tests", "cli", "diff_make_actual.py")
py = "/usr/bin/python3"
act = os.path.join(tmp, "act.h5")
subprocess.run([py, mk, qc, golden, act], check=True)


def edit(fn):
    def make(path):
        shutil.copyfile(act, path)
        with h5py.File(path, "r+") as f:
            fn(f)
    return make


def variant(name):
    return lambda path: subprocess.run([py, mk, "--variant", name, act, path], check=True)


def replace(f, p, a):
    del f[p]
    f[p] = a


def positions(f, pos):
    g = f["cases/len005"]
    a = g["prefill/logits"][()]
    replace(f, "cases/len005/prefill/logits", a[list(pos)])
    g["prefill/logits_positions"] = np.asarray(pos, np.int32)


# (name, maker, valid per the contract)
V = [
    ("full", lambda p: shutil.copyfile(act, p), True),
    ("logits_only", variant("logits_only"), True),
    ("no_hidden", variant("no_hidden"), True),
    ("prefill_only", variant("prefill_only"), True),
    ("last_row", variant("last_row"), True),
    ("hf", variant("hf"), True),
    ("llamacpp_conv", variant("llamacpp_conv"), True),
    ("minimal", variant("minimal"), True),
    ("positions", edit(lambda f: positions(f, [0, 2, 3])), True),
    ("hidden_batch_first", edit(lambda f: replace(f, "cases/len002/prefill/hidden",
                                                  f["cases/len002/prefill/hidden"][()][None])), True),
    ("partial_state", edit(lambda f: f.__delitem__("cases/len064/prefill/state/layer_01")), True),
    ("float64_logits", edit(lambda f: replace(f, "cases/len001/prefill/logits",
                                              f["cases/len001/prefill/logits"][()].astype(np.float64))), True),
    ("nan", edit(lambda f: f["cases/len005/prefill/logits"].__setitem__((2, 7), np.nan)), True),
    ("other_hash", edit(lambda f: f.attrs.__setitem__("config_sha256", "cd" * 32)), True),
    ("static_cache", edit(lambda f: replace(f, "cases/len005/prefill/state/layer_03/k_cache",
                                            np.pad(f["cases/len005/prefill/state/layer_03/k_cache"][()],
                                                   ((0, 0), (0, 40), (0, 0))))), True),
    ("one_case", edit(lambda f: [f["cases"].__delitem__(c) for c in list(f["cases"]) if c != "len002"]), True),
    ("whole_sequence", edit(lambda f: replace(f, "cases/cont/tokens", np.concatenate(
        [f["cases/cont/history_tokens"][()], f["cases/cont/tokens"][()]]))), True),
    ("wrong_kind", edit(lambda f: f.copy(f["cases/len002/prefill/state/layer_00/conv_state"],
                                         f["cases/len002/prefill/state/layer_03"], "conv_state")), True),
    # invalid: diff exits 2
    ("short_cache", edit(lambda f: replace(f, "cases/len005/prefill/state/layer_03/k_cache",
                                           f["cases/len005/prefill/state/layer_03/k_cache"][()][:, :4])), False),
    ("no_schema_version", edit(lambda f: f.attrs.__delitem__("schema_version")), False),
    ("schema_version_2", edit(lambda f: f.attrs.__setitem__("schema_version", np.int32(2))), False),
    ("no_cases", edit(lambda f: f.__delitem__("cases")), False),
    ("no_logits", edit(lambda f: f.__delitem__("cases/len002/prefill/logits")), False),
    ("int_logits", edit(lambda f: replace(f, "cases/len002/prefill/logits",
                                          f["cases/len002/prefill/logits"][()].astype(np.int32))), False),
    ("bad_shape", edit(lambda f: replace(f, "cases/len005/prefill/logits",
                                         f["cases/len005/prefill/logits"][()][:3])), False),
    ("bad_positions", edit(lambda f: positions(f, [3, 1])), False),
    ("unknown_case", edit(lambda f: f.copy(f["cases/len002"], f["cases"], "len002x")), False),
    ("duplicate", edit(lambda f: f.__setitem__("cases/len002_alias", f["cases/len002"])), False),
    ("tokens", edit(lambda f: f["cases/len002/tokens"].__setitem__(1, (f["cases/len002/tokens"][1] + 1) % 256)), False),
    ("start_pos", edit(lambda f: f["cases/cont"].attrs.__setitem__("start_pos", np.int32(47))), False),
    ("golden_as_actual", lambda p: shutil.copyfile(golden, p), False),
    ("other_golden", lambda p: shutil.copyfile(os.path.join(src, "fixtures", "tiny-bf16-gva-nested", "golden.h5"), p), False),
    ("golden_attrs_copied", edit(lambda f: [f.attrs.__setitem__(k, v) for k, v in h5py.File(golden, "r").attrs.items()]), True),
    ("odd_root_attrs", edit(lambda f: [f.attrs.__setitem__("config_sha256", "sha256:xyz"),
                                       f.attrs.__setitem__("generator", np.int32(7)),
                                       f.attrs.__setitem__("config_json", "{not json")]), True),
    ("float64_runtime", edit(lambda f: f.attrs.__setitem__("compute_dtype", "float64")), True),
    ("truncated", lambda p: open(p, "wb").write(open(act, "rb").read()[:50000]), False),
]

fail = 0
for name, make, valid in V:
    path = os.path.join(tmp, name + ".h5")
    make(path)
    v = subprocess.run([py, os.path.join(src, "golden", "validate.py"), "--actual", golden, path],
                       capture_output=True, text=True)
    d = subprocess.run([qc, "diff", golden, path, "--quiet"], capture_output=True, text=True)
    agree = (v.returncode == 1) == (d.returncode == 2)
    right = (v.returncode == 0) == valid and v.returncode in (0, 1)
    if agree and right:
        print("ok   - %-20s validate.py exit %d, diff exit %d (contract: %s)"
              % (name, v.returncode, d.returncode, "valid" if valid else "refused"))
    else:
        fail += 1
        print("FAIL - %-20s validate.py exit %d, diff exit %d, contract %s\n%s\n%s"
              % (name, v.returncode, d.returncode, "valid" if valid else "refused",
                 v.stdout[-600:] + v.stderr[-300:], d.stdout[-600:] + d.stderr[-300:]))
    if not valid and d.returncode == 2 and path.split("/")[-1] not in d.stdout + d.stderr \
            and name not in ("golden_as_actual", "other_golden"):
        fail += 1
        print("FAIL - %-20s diff's message does not name the file" % name)
print("# %d variants, %d failed" % (len(V), fail))
sys.exit(1 if fail else 0)
EOF
