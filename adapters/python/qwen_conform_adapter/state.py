"""What the helper does with a runtime's state() so an adapter author writes less:

* **collect**: state() may return the protocol's flat dict {"layer_NN/k_cache": ...}, a nested
  one {"layer_NN": {"k_cache": ...}}, or a Hugging Face-style hybrid cache (an object or dict
  with per-layer lists `key_cache`, `value_cache`, `conv_states`, `recurrent_states`; entries of
  the other layer kind None or empty);
* **canonical**: each buffer in the protocol's canonical layout or in HF transformers' Qwen3.5
  cache layout (a leading batch dimension of 1: k/v [1, nkv, N, hd], conv [1, C, K], recurrent
  [1, nv, dk, dv]) is reshaped to the canonical one (the memory order is the same: nothing is
  transposed); a batch other than 1, llama.cpp's K-1 conv columns, or any other shape is an
  error naming the buffer, its shape and the shapes accepted;
* **padding**: a KV cache holding only the N positions filled so far is padded with +0.0 to the
  n_pos the host asked for (the host's `unused_slots` check wants exactly +0 there, which is what
  a correct runtime's unused slots hold); one holding more (a static cache) is cut to n_pos;
* **default fill_state**: when state() returns writable numpy arrays (or CPU torch tensors) that
  are views of the runtime's own buffers (the same memory on two calls), the helper can fill
  them itself and announces `state_fill` without the runtime defining fill_state.
"""
import re

import numpy as np

HF_LISTS = (("key_cache", "k_cache"), ("value_cache", "v_cache"),
            ("conv_states", "conv_state"), ("recurrent_states", "recurrent_state"))
_FLAT = re.compile(r"^layer_(\d+)/(k_cache|v_cache|conv_state|recurrent_state)$")


class StateError(ValueError):
    """A state() result the helper cannot map to the protocol (the message names the buffer)."""


def _empty(x):
    return x is None or (hasattr(x, "shape") and 0 in tuple(x.shape) and len(x.shape) <= 1)


def collect(got, n_layers):
    """({"layer_NN/name": array-like}, hf) from whatever state() returned (see the module
    doc); hf is True for an HF-style cache, whose KV lists may lack layers not filled yet."""
    if isinstance(got, dict) and any(k in got for k, _ in HF_LISTS):
        src = {k: got.get(k) for k, _ in HF_LISTS}
    elif not isinstance(got, dict) and any(hasattr(got, k) for k, _ in HF_LISTS):
        src = {k: getattr(got, k, None) for k, _ in HF_LISTS}
    elif isinstance(got, dict):
        out = {}
        for k, v in got.items():
            if isinstance(v, dict):        # nested {"layer_NN": {"k_cache": ...}}
                for kk, vv in v.items():
                    out["%s/%s" % (k, kk)] = vv
            else:
                out[k] = v
        return out, False
    else:
        raise StateError("state() must return a dict (or an HF-style cache with key_cache, "
                         "value_cache, conv_states, recurrent_states), got %s"
                         % type(got).__name__)
    out = {}
    for attr, name in HF_LISTS:
        lst = src[attr]
        if lst is None:
            continue
        if len(lst) > n_layers:
            raise StateError("state() %s has %d entries, the model has %d layers"
                             % (attr, len(lst), n_layers))
        for i, x in enumerate(lst):
            if not _empty(x):
                out["layer_%02d/%s" % (i, name)] = x
    return out, True


def raw_array(x):
    """x as a numpy array without copying when it can (a CPU torch tensor shares its memory);
    None when x cannot be seen without a copy (a GPU or bfloat16 tensor)."""
    if hasattr(x, "detach"):
        t = x.detach()
        if str(getattr(t, "device", "cpu")) != "cpu":
            return None
        try:
            return t.numpy()
        except (TypeError, RuntimeError):   # bfloat16 and other dtypes numpy lacks
            return None
    return x if isinstance(x, np.ndarray) else None


def to_f32(x, name):
    """x as float32 numpy (torch tensors of any float dtype or device, lists, float64 ...)."""
    try:
        if hasattr(x, "detach"):
            x = x.detach().float().cpu().numpy()
        return np.asarray(x, dtype=np.float32)
    except (TypeError, ValueError, RuntimeError) as e:
        raise StateError("state() %s is not a float array: %s" % (name, e))


def _fmt(shape):
    return "[%s]" % ", ".join(str(d) for d in shape)


def canonical(name, a, want):
    """Buffer `name` (float32 array) in its canonical shape `want` ((nkv, n_pos, hd) for k/v,
    the N axis padded with +0.0 or cut), or StateError naming name, shape and what fits."""
    kv = name.endswith(("k_cache", "v_cache"))
    have = tuple(a.shape)
    if kv:
        nkv, n_pos, hd = want
        forms = "[%d, N, %d] (canonical) or [1, %d, N, %d] (HF, batch 1)" % (nkv, hd, nkv, hd)
        ok3 = len(have) == 3 and have[0] == nkv and have[2] == hd
        ok4 = len(have) == 4 and have[1] == nkv and have[3] == hd
    else:
        forms = "%s (canonical) or %s (HF, batch 1)" % (_fmt(want), _fmt((1,) + tuple(want)))
        ok3 = have == tuple(want)
        ok4 = len(have) == len(want) + 1 and have[1:] == tuple(want)
    if ok4 and have[0] != 1:
        raise StateError("state() %s has shape %s: batch %d, the protocol is batch 1 (return "
                         "the sequence's own slice)" % (name, _fmt(have), have[0]))
    if not (ok3 or ok4):
        hint = ""
        if name.endswith("conv_state") and have[-2:] == (want[0], want[1] - 1):
            hint = ("; K-1 columns (llama.cpp keeps only the newest K-1): the protocol needs "
                    "all K columns, the oldest included")
        raise StateError("state() %s has shape %s, fits no layout: expected %s%s"
                         % (name, _fmt(have), forms, hint))
    if ok4:
        a = a.reshape(have[1:])
    if not kv:
        return a
    N = a.shape[1]
    if N >= n_pos:
        return a[:, :n_pos]
    buf = np.zeros(want, np.float32)       # +0.0: what a correct runtime's unused slots hold
    buf[:, :N] = a
    return buf


def normalise(got, shape, n_pos):
    """[(name, float32 canonical array)] in protocol order for state(n_pos)'s result `got`;
    StateError on an unknown, missing or misshapen buffer. shape: modelcfg.ModelShape."""
    flat, hf = collect(got, shape.n_layers)
    want = shape.state_shapes(n_pos)
    if want is None:    # config without the state dims: send what the runtime gave
        return [(k, to_f32(flat[k], k)) for k in sorted(flat)]
    names = {name for name, _ in want}
    extra = sorted(set(flat) - names)
    if extra:
        m = _FLAT.match(extra[0])
        why = (" (layer %s is not a layer of that kind in config.json)" % m.group(1)
               if m else "")
        raise StateError("state() returned an unknown buffer %s%s" % (extra[0], why))
    out = []
    for name, w in want:
        if name not in flat and hf and name.endswith(("k_cache", "v_cache")):
            out.append((name, np.zeros(w, np.float32)))   # an HF cache before its first call
            continue
        if name not in flat:
            raise StateError("state() lacks %s" % name)
        out.append((name, canonical(name, to_f32(flat[name], name), w)))
    return out


def writable_views(rt, shape, n_pos):
    """The runtime's own state arrays (numpy views it can be filled through), or None when
    state(n_pos) returns copies, read-only arrays, non-float or unviewable tensors, or misses a
    buffer. Two calls must give the same memory (np.shares_memory), so a fresh copy per call is
    never mistaken for a view."""
    try:
        (a, hf), (b, _) = (collect(rt.state(n_pos), shape.n_layers) for _ in range(2))
    except Exception:   # noqa: BLE001 - any failure means: no default fill
        return None
    want = shape.state_shapes(n_pos)
    names = {name for name, _ in want or ()}
    if hf:      # KV lists of an HF cache may lack the layers not filled yet
        names = {n for n in names if n in a or not n.endswith(("k_cache", "v_cache"))}
    if want is None or set(a) != names or set(b) != set(a):
        return None
    views, shared = [], 0
    for name in sorted(a):
        x, y = raw_array(a[name]), raw_array(b[name])
        if x is None or y is None or x.dtype.kind != "f" or not x.flags.writeable:
            return None
        if x.size == 0:    # nothing allocated yet (a dynamic cache after reset)
            continue
        if not np.shares_memory(x, y):
            return None
        views.append(x)
        shared += 1
    return views if shared else None


def fill(rt, shape, n_pos, value):
    """Write `value` into every state array the runtime exposes (its own buffers)."""
    views = writable_views(rt, shape, n_pos)
    if views is None:
        raise StateError("the default fill_state found no writable view of the state "
                         "(state() now returns copies)")
    for v in views:
        v[...] = value
