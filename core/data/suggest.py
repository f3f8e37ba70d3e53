"""--suggest on a data run: a --min-agreement criterion per output whose task has answers
(a classification's class, an embedding's nearest neighbour), checked before it is shown.

Like a suggested tolerance, it must hold on samples it was not fitted to. The samples are
split by position in the data set's order: the even-positioned ones fit it, the others check
it (an ImageFolder's order is by class, so halves by position would not be alike). The value
is the lower end of the 95% Wilson interval of the agreement on the fitted half, rounded down
to three decimals: what this file's rate of changed answers allows by chance, no more. It is
shown only where the checked half's agreement reaches it. None is suggested for a
regression (its answer is its values: the tolerances judge it), for an output whose changes
look like a bug (all to one class, or an accuracy drop beyond noise: a criterion would pass
the bug), or on too few samples to check anything.
"""

from __future__ import annotations

import math

import numpy as np

from parity.data.result import AgreementSuggestion, DataOutput

MIN_HALF = 20  # samples each half needs (fitted and checked)
Z95 = 1.959964  # the two-sided 95% normal quantile


def wilson_low(agree: int, n: int) -> float:
    """The lower end of the 95% Wilson score interval of agree / n."""
    if n == 0:
        return 0.0
    p = agree / n
    z2 = Z95 * Z95
    centre = p + z2 / (2 * n)
    spread = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z2 / n))


def suggest_agreement(output: DataOutput, agrees: np.ndarray | None) -> AgreementSuggestion:
    """The criterion for `output`, its per-sample agreement `agrees` (bool, in the data set's
    order; None: the task has no per-sample answer), by the rule of this module's doc."""
    from parity.data.words import one_class

    if output.task == "regression" or agrees is None:
        return AgreementSuggestion(
            None, "a regression: its answer is its values, which the tolerances judge"
        )
    if one_class(output.flips) is not None:
        return AgreementSuggestion(
            None, "its changed samples all go to one class, likely a bug: no criterion"
        )
    a = output.accuracy
    if a is not None and not a.within_noise and a.difference < 0:
        return AgreementSuggestion(
            None, "its accuracy drops beyond noise, likely a bug: no criterion"
        )
    fit, check = agrees[0::2], agrees[1::2]
    if check.size < MIN_HALF:
        return AgreementSuggestion(
            None,
            f"too few samples to check a criterion ({agrees.size}; at least {2 * MIN_HALF})",
        )
    value = math.floor(1000 * wilson_low(int(fit.sum()), int(fit.size))) / 1000
    held = float(check.mean())
    where = (
        f"fitted on the {fit.size} even-positioned samples, checked on the other "
        f"{check.size}: {100 * held:.1f}% agree there"
    )
    if held < value:
        return AgreementSuggestion(
            None, f"not held out of sample ({where}, below {value:g})", fit.size, check.size, held
        )
    return AgreementSuggestion(value, where, int(fit.size), int(check.size), held)
