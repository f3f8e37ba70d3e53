"""Loading: model specs and files (torch, .pt2, ONNX), the demos, safe unpacking."""
