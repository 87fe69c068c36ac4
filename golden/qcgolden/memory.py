"""qcgolden.memory — what a golden generation needs in memory (the float64 model, the float32
staging while loading, the results, the activations of the longest case) and what the machine
(or its cgroup) has; used by the CLI to refuse a run that will not fit before it starts."""
import os
import re

from . import config as qconfig


class MemInfoError(Exception):
    """/proc/meminfo cannot tell the available memory (the CLI reports it as an input error)."""


def param_count(c):
    """Parameters the model holds (the tied lm_head is the embedding)."""
    H, I, V = c.hidden_size, c.intermediate_size, c.vocab_size
    n = V * H + H + (0 if c.tie_word_embeddings else V * H)
    mlp = 3 * I * H
    if c.is_moe:  # router + routed experts + shared expert + its gate
        mlp = (c.num_experts * H + 3 * c.num_experts * c.moe_intermediate_size * H
               + 3 * c.shared_expert_intermediate_size * H + H)
    for kind in c.layer_types:
        n += 2 * H + mlp
        if kind == qconfig.LINEAR:
            nv = c.linear_num_value_heads
            n += (c.conv_dim * H + c.value_dim * H + 2 * nv * H + c.conv_dim *
                  c.linear_conv_kernel_dim + 2 * nv + c.linear_value_head_dim + H * c.value_dim)
        else:
            nh, nkv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
            n += 2 * nh * hd * H + 2 * nkv * hd * H + H * nh * hd + 2 * hd
    return n


def state_floats(c, n_pos):
    n = 0
    for kind in c.layer_types:
        if kind == qconfig.FULL:
            n += 2 * c.num_key_value_heads * n_pos * c.head_dim
        else:
            n += c.conv_dim * c.linear_conv_kernel_dim + \
                c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim
    return n


def forward_floats(c, T, past, hidden=True):
    """Peak float64 elements alive during one forward of T tokens after `past` positions
    (beyond the weights and the state): hidden states, logits, the largest layer's temporaries."""
    H, I, V, L = c.hidden_size, c.intermediate_size, c.vocab_size, c.num_hidden_layers
    P = past + T
    nh, nkv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
    nv, dk, dv, C, K = (c.linear_num_value_heads, c.linear_key_head_dim,
                        c.linear_value_head_dim, c.conv_dim, c.linear_conv_kernel_dim)
    Tp = -(-T // 64) * 64
    full = (4 * T * nh * hd + 4 * T * nkv * hd + 4 * nh * P * hd + 2 * nkv * P * hd
            + 3 * nh * T * P)
    linear = (T * C * (4 + K) + C * (K + T) + 2 * T * c.value_dim + 4 * T * nv * dk
              + 6 * nv * Tp * max(dk, dv) + 4 * nv * Tp * 64 + 3 * nv * Tp * dv)
    layer = max(full if qconfig.FULL in c.layer_types else 0,
                linear if qconfig.LINEAR in c.layer_types else 0)
    if c.is_moe:  # router probabilities, the expert temporaries
        I = max(c.moe_intermediate_size, c.shared_expert_intermediate_size)
        layer += 3 * T * c.num_experts + 2 * T * H
    layer += L * T * H  # moe_in / mlp_in kept per layer (traced in a history prefill too)
    return (2 * (L + 1) * T * H if hidden else 0) + 6 * T * H + 3 * T * I + layer + 2 * T * V


def estimate(c, cases):
    """{'params', 'weights', 'staging', 'results', 'activations', 'longest', 'total'} in bytes.
    cases: [(name, history_prompt, history_decode, n_tokens, n_decode)]."""
    P = param_count(c)
    B = 8
    act, longest, results, biggest = 0, "", 0, 0
    for name, hp, hd_, T, S in cases:
        past = hp + hd_
        a = forward_floats(c, T, past)
        if hp:
            a = max(a, forward_floats(c, hp, 0, hidden=False))
        if a > act:
            act, longest = a, "%s: %d tokens after %d" % (name, T, past)
        # one case's arrays: logits, decode logits, hidden, state after prefill and decode
        r = (T + S) * c.vocab_size + (c.num_hidden_layers + 1) * T * c.hidden_size + \
            state_floats(c, past + T) + state_floats(c, past + T + S)
        # moe_in (MoE, and the router record) or mlp_in (dense) of every position
        r += c.num_hidden_layers * (T + S) * (c.hidden_size + (
            2 * c.num_experts_per_tok + 1 if c.is_moe else 0))
        results += r
        biggest = max(biggest, r)
    results += biggest  # the prompt search keeps the previous try until the next one is done
    weights, staging = B * P, 4 * P
    run = B * (state_floats(c, max((hp + hd_ + T + S for _, hp, hd_, T, S in cases), default=0))
               + act + results)
    return {"params": P, "weights": weights, "staging": staging, "results": B * results,
            "activations": B * act, "longest": longest,
            "total": _with_margin(weights + max(staging, run))}


def _with_margin(n):
    """+10% and 64 MiB: allocator slack, numpy temporaries, h5py's write buffers (measured:
    a 60M-parameter BF16 checkpoint, 130 tokens, peaked 4.5% above the bare sum)."""
    return n + n // 10 + 64 * 2 ** 20


def _cgroup_room():
    """Room under this process's cgroup memory limit, or None."""
    rel = ""
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    rel = line[3:].strip()
    except OSError:
        pass
    for d in ("/sys/fs/cgroup" + rel, "/sys/fs/cgroup"):
        try:
            with open(os.path.join(d, "memory.max")) as f:
                mx = f.read().strip()
            if not mx.isdigit():
                continue
            with open(os.path.join(d, "memory.current")) as f:
                cur = int(f.read().strip() or 0)
            return max(int(mx) - cur, 1)
        except (OSError, ValueError):
            continue
    return None


def available_memory():
    """(bytes, where from) of MemAvailable (/proc/meminfo), the cgroup room when lower."""
    try:
        with open("/proc/meminfo") as f:
            text = f.read()
    except OSError as e:
        raise MemInfoError("/proc/meminfo: cannot read: %s (pass --max-memory SIZE)"
                         % (e.strerror or e))
    m = re.search(r"^MemAvailable:\s+([0-9]+) kB$", text, re.M)
    if not m:
        raise MemInfoError("/proc/meminfo: MemAvailable: missing (pass --max-memory SIZE)")
    avail, src = int(m.group(1)) * 1024, "available memory (MemAvailable of /proc/meminfo)"
    room = _cgroup_room()
    if room is not None and room < avail:
        avail, src = room, "room under this cgroup's memory.max"
    return avail, src
