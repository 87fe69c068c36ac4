"""The gated delta rule (docs/qwen35-model.md 8.6 and 8.7), float64, all value heads at once.

Inputs are the kernel inputs after l2norm, q scaling and the k -> v head mapping:
  q, k  [T, nv, dk]    v [T, nv, dv]    g, beta [T, nv]    S0 [nv, dk, dv] (row = key dim)
Both functions return (o [T, nv, dv], S [nv, dk, dv]) and never modify their inputs.
"""
import torch

CHUNK = 64


def recurrent(q, k, v, g, beta, S0):
    """Token recurrence (HF torch_recurrent_gated_delta_rule): decay BEFORE the delta update,
    output from the updated state."""
    S = S0.clone()
    out = []
    for t in range(q.shape[0]):
        S = S * torch.exp(g[t])[:, None, None]                  # S = e^g S
        kv = torch.einsum("hij,hi->hj", S, k[t])                # S^T k
        d = beta[t][:, None] * (v[t] - kv)                      # beta (v - S^T k)
        S = S + k[t][:, :, None] * d[:, None, :]                # S += k d^T
        out.append(torch.einsum("hij,hi->hj", S, q[t]))         # o = S^T q
    return torch.stack(out), S


def chunked(q, k, v, g, beta, S0, chunk=CHUNK):
    """Chunked form (HF torch_chunk_gated_delta_rule): end padding to a multiple of `chunk`,
    cumulative in-chunk decay, unit lower-triangular solve, sequential scan over chunks
    starting from S0."""
    T, nv, dk = q.shape
    pad = (-T) % chunk
    n = (T + pad) // chunk

    def heads_first(x):  # [T, nv, ...] -> [nv, T + pad, ...] zero-padded at the end
        x = x.transpose(0, 1)
        if pad:
            x = torch.cat([x, x.new_zeros((nv, pad) + tuple(x.shape[2:]))], dim=1)
        return x

    q, k, v, g, beta = (heads_first(x) for x in (q, k, v, g, beta))
    v_beta = v * beta[..., None]
    k_beta = k * beta[..., None]
    q, k, v_beta, k_beta = (x.reshape(nv, n, chunk, -1) for x in (q, k, v_beta, k_beta))
    # gamma_r = sum_{s<=r} g_s, always summed in float64 (no-op for the float64 golden): in a
    # float32 run a chunk of huge decays (|gamma| ~ 1e5, the hazard fixture) would otherwise
    # lose every digit of gamma_r - gamma_c. The C kernels do the same (QC_REF_DN_GAMMA_EXACT);
    # HF's float32 torch_chunk_gated_delta_rule does not. Every exp() below is cast back.
    dt = q.dtype
    gam = g.reshape(nv, n, chunk).to(torch.float64).cumsum(-1)

    lower = torch.ones(chunk, chunk, dtype=torch.bool).tril()   # s <= r
    D = torch.exp((gam[..., :, None] - gam[..., None, :])
                  .masked_fill(~lower, float("-inf"))).to(dt)

    A = (k_beta @ k.transpose(-1, -2)) * D                      # [nv, n, C, C]
    eye = torch.eye(chunk, dtype=q.dtype)
    Tm = torch.linalg.solve_triangular(eye + A.tril(-1), eye.expand_as(A),
                                      upper=False, unitriangular=True)  # (I + strict_lower(A))^-1
    U = Tm @ v_beta                                             # new values
    W = Tm @ (k_beta * torch.exp(gam).to(dt)[..., None])        # k_cumdecay

    S = S0.clone()
    out = []
    for i in range(n):
        qi, ki, gi = q[:, i], k[:, i], gam[:, i]
        attn = (qi @ ki.transpose(-1, -2) * D[:, i]).tril()     # incl. diagonal
        vn = U[:, i] - W[:, i] @ S
        out.append((qi * torch.exp(gi).to(dt)[..., None]) @ S + attn @ vn)
        last = gi[:, -1]
        S = S * torch.exp(last).to(dt)[:, None, None] + \
            (ki * torch.exp(last[:, None] - gi).to(dt)[..., None]).transpose(-1, -2) @ vn
    o = torch.cat(out, dim=1)[:, :T]                            # [nv, T, dv]
    return o.transpose(0, 1).contiguous(), S
