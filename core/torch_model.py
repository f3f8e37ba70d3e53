"""Resolve a model-spec string to a runnable torch model.

STUB — contract:
Specs: "demo:NAME", "FILE.pt2" (torch.export), TorchScript archive (torch.jit.save),
"FILE.py:CALLABLE", "package.module:CALLABLE"; optional weights (.safetensors, or a torch
file loaded with weights_only=True).
@dataclass(frozen=True) class TorchModel: spec: str; kind: str; module: Callable (eval mode);
    parameter_names: tuple[str, ...] (forward()'s parameters, () if unknown); sha256: str
load_torch_model(spec, *, weights=None) -> TorchModel   raises ModelLoadError / UsageError
"""
