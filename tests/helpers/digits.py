"""A small CNN trained on scikit-learn's digits (the data ships inside its wheel), exported by
torch.onnx, quantized to int8 by ONNX Runtime's quantize_static (QDQ, per channel), and the
held-out third of the digits as the user's data: what tests/test_data.py judges answers on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

MODEL_CODE = """
import torch
from torch import nn


class DigitsNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        x = nn.functional.max_pool2d(x, 2)
        return self.fc(x.flatten(1))


def make():
    return DigitsNet()
"""


@dataclass(frozen=True)
class Digits:
    folder: Path
    model: str  # FILE.py:make
    weights: Path
    onnx: Path  # float32 export
    int8: Path  # quantize_static QDQ
    x_test: np.ndarray  # (n, 1, 8, 8) float32 in [0, 1]
    y_test: np.ndarray  # (n,) int64
    test_npz: Path  # {"x": x_test}
    labels: Path  # y_test as .npy


def split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits as (n, 1, 8, 8) float32 in [0, 1]: the first two thirds to train, the rest to
    test (597 samples)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    y = digits.target.astype(np.int64)
    cut = len(x) - 597
    return x[:cut], y[:cut], x[cut:], y[cut:]


def build(folder: Path, *, steps: int = 150) -> Digits:
    import onnxruntime.quantization as q
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    x_train, y_train, x_test, y_test = split()
    model_file = folder / "digits_model.py"
    model_file.write_text(MODEL_CODE)
    scope: dict = {}
    exec(compile(MODEL_CODE, str(model_file), "exec"), scope)
    torch.manual_seed(0)
    net = scope["make"]()
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    for _ in range(steps):  # full batch: a second or two on a CPU
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(xt), yt).backward()
        opt.step()
    net.eval()
    weights = folder / "digits.pt"
    torch.save(net.state_dict(), weights)
    onnx_path = folder / "digits.onnx"
    torch.onnx.export(
        net,
        (torch.from_numpy(x_test[:2]),),
        str(onnx_path),
        input_names=["x"],
        output_names=["logits"],
        dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
        dynamo=False,
    )

    class Reader(q.CalibrationDataReader):
        def __init__(self) -> None:
            self._batches = iter([{"x": x_train[i : i + 100]} for i in range(0, 400, 100)])

        def get_next(self):  # type: ignore[no-untyped-def]
            return next(self._batches, None)

    int8 = folder / "digits.int8.onnx"
    q.quantize_static(
        str(onnx_path),
        str(int8),
        Reader(),
        quant_format=q.QuantFormat.QDQ,
        per_channel=True,
        activation_type=q.QuantType.QInt8,
        weight_type=q.QuantType.QInt8,
    )
    test_npz = folder / "digits_test.npz"
    np.savez(test_npz, x=x_test)
    labels = folder / "digits_labels.npy"
    np.save(labels, y_test)
    return Digits(
        folder, f"{model_file}:make", weights, onnx_path, int8, x_test, y_test, test_npz, labels
    )
