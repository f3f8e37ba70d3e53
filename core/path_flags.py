"""What a command-line flag does with the path it is given, declared on its argparse action.

`writes(group.add_argument("--html", metavar="FILE"))` marks a flag whose value is a file the
run writes; `reads(...)` one whose value names something it reads. Whoever needs to know
(the sweep, which places every written file inside its pair's folder and hashes every file
read) asks validate's real parser (`PathFlags.of`), so a new flag is handled by what it does,
not by a list kept beside the parser.

Contract: reads(action) / writes(action) mark and return the action;
PathFlags.of(parser) -> PathFlags(reads, writes): every option string of the marked actions
(`parser` is validate's parser, or the `parity` parser, whose `validate` is then read).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

_MARK = "parity_path"
READS, WRITES = "reads", "writes"


def reads(action: argparse.Action) -> argparse.Action:
    """Mark `action` as a flag whose value names a file (or a model spec) the run reads."""
    setattr(action, _MARK, READS)
    return action


def writes(action: argparse.Action) -> argparse.Action:
    """Mark `action` as a flag whose value is a file the run writes."""
    setattr(action, _MARK, WRITES)
    return action


@dataclass(frozen=True)
class PathFlags:
    reads: tuple[str, ...]
    writes: tuple[str, ...]

    @property
    def all(self) -> tuple[str, ...]:
        return self.reads + self.writes

    @classmethod
    def of(cls, parser: argparse.ArgumentParser) -> PathFlags:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction) and "validate" in action.choices:
                parser = action.choices["validate"]
        found: dict[str, list[str]] = {READS: [], WRITES: []}
        for action in parser._actions:
            role = getattr(action, _MARK, None)
            if role in found:
                found[role].extend(action.option_strings)
        return cls(reads=tuple(found[READS]), writes=tuple(found[WRITES]))
