"""Built-in demo models and their ONNX exports (exported on first use, cached).

STUB — contract:
DEMOS: Mapping[str, Demo]   names: cnn, transformer, fp16, broken
@dataclass(frozen=True) class Demo: name; description; build: Callable[[], nn.Module];
    tolerances: Tolerances | None  (fp16: the per-output tolerances that pass)
demo_onnx_path(name) -> Path   export cached under $PARITY_CACHE or ~/.cache/parity
"""
