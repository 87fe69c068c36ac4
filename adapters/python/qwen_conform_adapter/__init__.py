"""qwen_conform_adapter — the child side of the qwen-conform adapter protocol v1
(docs/adapter-protocol.md), for runtimes written in or wrapped by Python. stdlib + numpy only.

    from qwen_conform_adapter import Runtime, Unsupported, serve

    class Mine(Runtime):
        name = "my-runtime 1.2"
        def open(self, model_dir, options): ...          # load; dims from config.json
        def reset(self): ...
        def forward(self, tokens, start_pos): ...        # int32 [n] -> [n, V]

    if __name__ == "__main__":
        raise SystemExit(serve(Mine()))

then `qwen-conform check --golden DIR --backend exec:"python3 mine.py"`.

Modules: runtime (Runtime, Unsupported, capabilities), server (serve), framing (frames),
modelcfg (config.json dims), client (the host side, for tests and debugging), golden (read
golden cases and write an ACTUAL file in the golden layout; needs h5py).
"""
from .runtime import Runtime, Unsupported
from .server import PROTOCOL, VERSION, serve

__all__ = ["Runtime", "Unsupported", "serve", "PROTOCOL", "VERSION"]
