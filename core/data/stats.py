"""Paired accuracy of torch and the ONNX file on the same labelled samples: McNemar's exact
test on the discordant pairs, and a bootstrap 95% interval of the difference."""

from __future__ import annotations

import math

import numpy as np

from parity.data.result import Accuracy

NOISE_LEVEL = 0.05  # "within noise": McNemar's exact p-value at or above it
BOOTSTRAP_DRAWS = 10_000


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact p-value of b against c discordant pairs (binomial, p = 1/2)."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return min(1.0, 2 * tail / 2**n)


def paired_accuracy(torch_right: np.ndarray, onnx_right: np.ndarray) -> Accuracy:
    """Both accuracies, onnx - torch, the paired bootstrap interval (samples drawn again with
    replacement, seeded: the same numbers every run) and McNemar's verdict."""
    n = int(torch_right.size)
    b = int(np.count_nonzero(torch_right & ~onnx_right))  # torch right, onnx wrong
    c = int(np.count_nonzero(~torch_right & onnx_right))
    p_value = mcnemar_exact(b, c)
    rest = max(0.0, 1.0 - (b + c) / n)
    draws = np.random.default_rng(0).multinomial(n, [b / n, c / n, rest], size=BOOTSTRAP_DRAWS)
    differences = (draws[:, 1] - draws[:, 0]) / n
    low, high = np.percentile(differences, [2.5, 97.5])
    torch_acc = float(torch_right.mean())
    onnx_acc = float(onnx_right.mean())
    return Accuracy(
        torch=torch_acc,
        onnx=onnx_acc,
        difference=(c - b) / n,
        interval=(float(low), float(high)),
        p_value=p_value,
        within_noise=p_value >= NOISE_LEVEL,
        n=n,
    )
