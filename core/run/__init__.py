"""Running: the run's configuration, candidates, inputs, ONNX Runtime and torch, budgets."""
