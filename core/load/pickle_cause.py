"""Why torch's weights_only unpickler refused a payload, in a few words.

torch's own message is a paragraph whose useful clause is sometimes on a later line, and
for a raw pickle (``pickle.dumps``, not ``torch.save``) it only says "Unsupported operand
149". This reads the payload's opcodes (``pickletools``: nothing is imported or called) to
say what it is and which globals it would import.

Contract:
pickle_cause(exc, data) -> str   e.g. "a raw pickle, not a torch.save file; it imports io.open"
file_pickle_cause(exc, path) -> str   the same, from the first MiB of a file
unpickling_error(exc) -> BaseException | None   the UnpicklingError in exc's chain
"""

from __future__ import annotations

import os
import pickle
import pickletools
import re
from collections.abc import Iterator

# torch.save's legacy (non-zip) format starts with this number, pickled as a LONG1.
_LEGACY_MAGIC = (0x1950A86A20F9469CFC6C).to_bytes(10, "little")
_MAX_OPCODES = 100_000  # a scan of the first opcodes is enough to name what it imports
_MAX_NAMES = 3
_GLOBAL_RE = re.compile(r"GLOBAL ([\w.]+)")
_TENSOR_MODULES = ("torch.", "collections.OrderedDict")  # what weights_only allows
_BOILERPLATE = ("Weights only load failed", "Check the documentation", "Please file an issue")


def pickle_cause(exc: BaseException, data: bytes) -> str:
    """What the refused payload `data` is and needs (one clause, never empty)."""
    parts = []
    if is_raw_pickle(data):
        parts.append("a raw pickle, not a torch.save file")
    named = _GLOBAL_RE.findall(str(exc))  # torch names the global it refused, in one form
    scanned = [n for n in _imports(data) if not n.startswith(_TENSOR_MODULES)]
    imports = list(dict.fromkeys([*named, *scanned]))
    if imports:
        shown = ", ".join(imports[:_MAX_NAMES]) + (", ..." if len(imports) > _MAX_NAMES else "")
        parts.append(f"it imports {shown}")
    if not parts:
        parts.append(_torch_clause(exc))
    return "; ".join(parts)[:300]


def file_pickle_cause(exc: BaseException, path: str | os.PathLike[str]) -> str:
    """`pickle_cause` for a file, read from its first MiB (enough to say what it is)."""
    from parity.errors import ParityError
    from parity.files.safe_read import open_regular

    try:
        with open_regular(path, what="", limit=None, error=ParityError) as f:
            head = f.read(1 << 20)
    except (OSError, ParityError):
        head = b""
    return pickle_cause(exc, head)


def unpickling_error(exc: BaseException) -> BaseException | None:
    """The `pickle.UnpicklingError` an error was raised from (transformers wraps torch's
    weights_only refusal in an OSError about TF checkpoints), or None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, pickle.UnpicklingError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def is_raw_pickle(data: bytes) -> bool:
    """A pickle that is not a torch.save file (neither its zip nor its legacy format)."""
    if data[:4] == b"PK\x03\x04" or _LEGACY_MAGIC in data[:16]:
        return False
    try:
        opcodes = pickletools.genops(data)
        for _ in range(2):  # two opcodes that parse: a pickle (of any protocol)
            next(opcodes)
    except (ValueError, EOFError, StopIteration, IndexError, KeyError):
        return False
    return True


def _torch_clause(exc: BaseException) -> str:
    """The clause after torch's "WeightsUnpickler error:" (or its next non-blank line), else
    the first line of the error that is not torch's boilerplate."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if "WeightsUnpickler error:" in line:
            rest = line.split("WeightsUnpickler error:", 1)[1].strip()
            if not rest and i + 1 < len(lines):
                rest = lines[i + 1]
            if rest:
                return rest[:200]
    for line in lines:
        if not line.startswith(_BOILERPLATE):
            return line[:200]
    return "torch's weights_only loader refused it"


def _imports(data: bytes) -> Iterator[str]:
    """The globals a raw pickle names (GLOBAL, or STACK_GLOBAL after two pushed strings,
    memoized ones included)."""
    if not is_raw_pickle(data):
        return
    pushed: list[str | None] = []  # the last values pushed: a string, or None for others
    memo: dict[int, str | None] = {}
    try:
        for count, (opcode, arg, _) in enumerate(pickletools.genops(data)):
            name = opcode.name
            if count > _MAX_OPCODES:
                return
            if name == "GLOBAL" and isinstance(arg, str):
                yield arg.replace(" ", ".")
                pushed.append(None)
            elif name == "STACK_GLOBAL":
                if len(pushed) >= 2 and pushed[-2] is not None and pushed[-1] is not None:
                    yield f"{pushed[-2]}.{pushed[-1]}"
                pushed.append(None)
            elif name == "MEMOIZE":
                memo[len(memo)] = pushed[-1] if pushed else None
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[_memo_key(arg)] = pushed[-1] if pushed else None
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                pushed.append(memo.get(_memo_key(arg)))
            elif name != "FRAME":
                pushed.append(arg if isinstance(arg, str) and "UNICODE" in name else None)
            del pushed[:-2]
    except (ValueError, EOFError):  # a truncated or junk payload: what was read so far
        return


def _memo_key(arg: object) -> int:
    """A PUT / GET opcode's memo index (pickletools gives an int; anything else is junk)."""
    if not isinstance(arg, int):
        raise ValueError(f"memo index {arg!r}")
    return arg
