"""Run torch and ONNX Runtime on an input set; flatten and name torch's outputs.

STUB — contract:
run_torch(model: TorchModel, input_set: InputSet, signature: OnnxSignature) -> OutputSet
    eval + torch.inference_mode(); inputs by name where ONNX names match forward()'s
    parameters, else by position; nested outputs flattened in order and named by ONNX
    output names where names match, else by position. Extra torch outputs keep a path
    name (e.g. "out.2") so they show up as missing in ONNX. Raises ModelRunError.
run_onnx(session, input_set: InputSet) -> OutputSet   raises OnnxRunError
"""
