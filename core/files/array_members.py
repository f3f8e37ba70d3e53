"""The two callbacks through which a result's arrays become a saved run's members and come
back: parity.reports.saved_run supplies them, the codec and every result that writes its own
JSON (parity.results.by_name.OwnJson: --data's, --layers') call them. Declared once, on the
floor below all of them (parity.data may import nothing above parity.files).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

ArrayPut = Callable[[str, np.ndarray, str], str]
"""(member name, array, what it is, for errors) -> the member name the manifest records."""
ArrayGet = Callable[[Any, str], np.ndarray]
"""(member name as the manifest has it, its dotted path) -> the array (FieldError if absent)."""
