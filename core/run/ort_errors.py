"""What ONNX Runtime raising on one input set means, and its message in one line.

A file that runs at one size and raises at another (a Reshape to a size frozen at export, an
Add whose sides no longer broadcast) ran and broke: that input set fails, its outputs get
`Status.ERROR` and the other sets are still compared (the verdict FAIL, exit 1). Running out of
memory is the machine's limit, not the file's answer: the run could not be made (exit 2).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

_NOT_THE_FILE = ("failed to allocate", "bad_alloc", "out of memory")

# "[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Reshape node.
#  Name:'/Reshape' Status Message: /src/.../reshape_helper.h:91 onnxruntime::...(...) cond was
#  false. The input tensor cannot be reshaped ..."
_NODE = re.compile(
    r"running (?P<op>\w+) node\. Name:'(?P<name>[^']*)' Status Message: (?P<rest>.*)"
)
_SOURCE = re.compile(r"^\S+\.(?:h|cc|cpp|cu):\d+ .*? was false\. ?")
_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ")


def is_set_failure(message: str) -> bool:
    """ONNX Runtime's error is this input set's failure (the file's), not the run's."""
    text = message.lower()
    return not any(words in text for words in _NOT_THE_FILE)


def ort_error_line(message: str) -> str:
    """ORT's message as one line a reader follows: ``Reshape node '/Reshape': The input tensor
    cannot be reshaped to the requested shape. Input shape:{2,8,96,64}, requested
    shape:{1,8,3072}`` (the C++ file and condition dropped; anything else kept as it is)."""
    line = " ".join(message.split())
    found = _NODE.search(line)
    if found is None:
        return _PREFIX.sub("", line)
    rest = _SOURCE.sub("", found["rest"]).strip()
    name = f" {found['name']!r}" if found["name"] else ""
    return f"{found['op']} node{name}: {rest}"


_SAID = re.compile(r"(?P<op>\w+) node '(?P<name>[^']*)'")


def file_node(
    op: str, name: str, nodes: Mapping[str, str], prefer: Sequence[str] = ()
) -> str | None:
    """The file's node an ONNX Runtime node name stands for (`nodes`: the file's node name ->
    op): the name itself when the file has it; else a `prefer`red node of that op (the one a
    finding already names: ORT fused two Reshapes, ``/Reshape`` and ``/Reshape_1``, into
    ``/Reshape_new_reshape``, and the frozen one is what fails); else the longest name of a
    node of the same op that ORT's begins with (its optimisers name what they make after a
    node they replaced); else the file's only node of that op; else None."""
    if nodes.get(name) == op:
        return name
    for n in prefer:
        if nodes.get(n) == op:
            return n
    same = [n for n, o in nodes.items() if o == op and n]
    prefixes = [n for n in same if name.startswith(n)]
    if prefixes:
        return max(prefixes, key=len)
    return same[0] if len(same) == 1 else None


def with_file_node(line: str, nodes: Mapping[str, str], prefer: Sequence[str] = ()) -> str:
    """`line` (ort_error_line's words) naming the file's node where ORT named one the file
    does not have (an optimiser's), ORT's own name kept in brackets."""
    found = _SAID.search(line)
    if found is None:
        return line
    name = found["name"]
    if "\\" in name:
        return line  # an escaped name: left as ORT said it
    ours = file_node(found["op"], name, nodes, prefer)
    if ours is None or ours == name:
        return line
    said = f"{found['op']} node {ours!r} (fused by ONNX Runtime into {name!r})"
    return line[: found.start()] + said + line[found.end() :]
