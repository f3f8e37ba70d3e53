"""Load an ONNX file (external data beside it included), check it, read its signature.

STUB — contract:
@dataclass(frozen=True) class OnnxModel: path: Path; signature: OnnxSignature; sha256: str
load_onnx(path) -> OnnxModel            raises OnnxLoadError (one line: what and where)
make_session(model: OnnxModel, *, provider="CPUExecutionProvider", opt_level="all")
    -> onnxruntime.InferenceSession     opt_level in ORT_OPT_LEVELS; raises OnnxLoadError
ORT_OPT_LEVELS = ("disable", "basic", "extended", "all")
"""
