"""The Runtime base class a user subclasses, and what the helper derives from it.

Capabilities are announced only for the optional methods a subclass overrides: `hidden` ->
"hidden", `state` -> "state_read", `fill_state` -> "state_fill" (also announced, at open, when
`state` returns writable views of the runtime's buffers: the helper fills them); the option names listed in
`options_supported` (which needs `set_option` overridden) -> "threads" / "dn_kernel" /
"chunk_size"; `snapshot` and `restore` (both) -> "snapshot", `select_sequence` -> "sequences",
`trim` -> "trim" (the state lifecycle checks: snapshot_restore, rollback, prefix_reuse,
multi_sequence, ...); `forward_topk` -> "topk_only" (a runtime that returns top-k
log-probabilities only: it need not define `forward`); `router` -> "router" (a MoE model's
router choices of the last forward: the router_topk check); `mlp_in` (with `hidden`) ->
"mlp_in" (each layer's mixer output: a divergent layer is split into its mixer or its MLP).
"""
import numpy as np

OPTION_NAMES = ("threads", "dn_kernel", "chunk_size")


class Unsupported(Exception):
    """Raised by a runtime for a valid request it cannot serve (e.g. state(n_pos) beyond what it
    can expose). Answered as an error frame with "unsupported": true; the check is SKIPPED."""


class Runtime:
    """A runtime under test, driven by serve(). Override reset() and forward(); the optional
    methods only when the runtime can really do them."""

    name = "python-runtime"          # shown in reports
    max_tokens_per_call = 0          # 0 any, 1 = a static [1,1] export
    max_context_len = 0              # 0 = no limit
    options_supported = ()           # subset of OPTION_NAMES
    hidden_requested = False         # set by serve() before each forward: the host wants hidden()
    router_requested = False         # set by serve() before each forward: the host wants router()
    auto_fill_state = True           # False: never announce the helper's default fill_state

    def open(self, model_dir, options):
        """Load the model. options: {key: value string} from the --backend text. Return
        {"vocab_size", "hidden_size", "n_layers"}, or None to have them read from
        model_dir/config.json."""
        return None

    def reset(self):
        """Start a new sequence: every state buffer exact zeros, position 0."""
        raise NotImplementedError("Runtime.reset")

    def forward(self, tokens, start_pos):
        """tokens: int32 [n] at positions start_pos .. start_pos+n-1; update the state and return
        the logits of every position, [n, V] (anything float32-castable)."""
        raise NotImplementedError("Runtime.forward")

    def forward_topk(self, tokens, start_pos, k):
        """Instead of forward, for a runtime that cannot return full logits (announced as
        "topk_only"): tokens int32 [n] at positions start_pos..; update the state and return
        (ids [n, k], logprobs [n, k]): per position the k token ids of highest log-probability,
        descending, and their log-probabilities (log_softmax of the logits). The helper checks
        them (shape, ids distinct in [0, V), finite, <= 0, descending) before sending."""
        raise Unsupported("top-k only")

    # ---- optional: announced only when overridden ----------------------------------------------
    def hidden(self):
        """[L+1, n, H] hidden states of the last forward (HF convention; [L] after the final norm)."""
        raise Unsupported("hidden states")

    def mlp_in(self):
        """[L, n, H] of the last forward: per layer the residual stream after its mixer (attention
        or DeltaNet) and the residual add, before post_attention_layernorm — the input of the
        layer's MLP (MoE block). Sent with hidden(), when the host asks for the hidden states;
        it lets the localisation tell a layer's mixer from its MLP."""
        raise Unsupported("mlp_in")

    def router(self):
        """MoE models: the router's choices of the last forward, (ids [L, n, k], weights [L, n, k]):
        per layer and position the k = num_experts_per_tok chosen experts in descending router
        probability (integers in [0, num_experts)) and their weights renormalised to sum 1.
        Called after forward when the host asks (router_requested); the helper checks the
        shapes and that the ids are integers, and sends the values as they are (a wrong expert,
        a repeated id or a NaN weight is the runtime's error: router_topk FAILs)."""
        raise Unsupported("router choices")

    def state(self, n_pos):
        """The state buffers of every layer, keyed "layer_NN/k_cache" | "v_cache" | "conv_state"
        | "recurrent_state" (or nested {"layer_NN": {...}}, or an HF-style cache with the lists
        key_cache, value_cache, conv_states, recurrent_states). Canonical [nkv, N, hd], [C, K],
        [nv, dk, dv] or HF's batch-1 [1, ...] layouts; a KV cache may hold only the N positions
        filled so far: the helper pads it with zeros to n_pos (state.py). Return views of your
        own buffers (writable numpy arrays, CPU torch tensors) and the helper provides
        fill_state too. Raise Unsupported to refuse n_pos."""
        raise Unsupported("state read")

    def fill_state(self, value):
        """Every element of every state buffer := value (NaN in garbage_reset); position kept.
        Not needed when state() returns writable views (see auto_fill_state)."""
        raise Unsupported("state fill")

    def set_option(self, key, value):
        """Change a setting between calls (key in options_supported; value a string)."""
        raise Unsupported("option %s" % key)

    # ---- optional state lifecycle (docs/adapter-protocol.md) -----------------------------------
    def snapshot(self, slot):
        """Copy the whole state of the current sequence (KV, conv, recurrent, position) into
        snapshot slot `slot` (0..7). A copy: later forwards must not change it."""
        raise Unsupported("snapshot")

    def restore(self, slot):
        """Make the current sequence exactly what snapshot(slot) saved; the slot keeps it."""
        raise Unsupported("restore")

    def select_sequence(self, seq):
        """Make sequence `seq` (0..2 at least) current: later calls act on it alone. Sequences
        start fresh; sequence 0 is current after open."""
        raise Unsupported("sequences")

    def trim(self, n_pos):
        """Drop positions n_pos.. of the current sequence, as if never processed (rollback)."""
        raise Unsupported("trim")

    def close(self):
        """Release resources at the end of the session (optional)."""


def overrides(runtime, method):
    """True when type(runtime) (or a base between it and Runtime) redefines `method`."""
    return getattr(type(runtime), method, None) is not getattr(Runtime, method)


def capabilities(runtime):
    """The capability strings to announce for this runtime, in protocol order.
    ValueError when options_supported is inconsistent."""
    caps = [c for m, c in (("hidden", "hidden"), ("state", "state_read"),
                           ("fill_state", "state_fill"), ("router", "router"))
            if overrides(runtime, m)]
    if "hidden" in caps and overrides(runtime, "mlp_in"):
        caps.insert(1, "mlp_in")     # sent with the hidden states
    opts = tuple(runtime.options_supported or ())
    bad = [o for o in opts if o not in OPTION_NAMES]
    if bad:
        raise ValueError("options_supported: unknown option %r (known: %s)"
                         % (bad[0], ", ".join(OPTION_NAMES)))
    if opts and not overrides(runtime, "set_option"):
        raise ValueError("options_supported lists %s but set_option is not overridden"
                         % ", ".join(opts))
    life = []
    if overrides(runtime, "snapshot") and overrides(runtime, "restore"):
        life.append("snapshot")
    if overrides(runtime, "select_sequence"):
        life.append("sequences")
    if overrides(runtime, "trim"):
        life.append("trim")
    if overrides(runtime, "forward_topk"):
        life.append("topk_only")
    return caps + [o for o in OPTION_NAMES if o in opts] + life


def as_f32(x, what):
    """x as a float32 numpy array (torch tensors, lists, float64 arrays ...), or ValueError."""
    try:
        if hasattr(x, "detach"):                # a torch tensor: no autograd, on the CPU
            x = x.detach().cpu().numpy()
        return np.asarray(x, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise ValueError("%s is not a float array: %s" % (what, e))
