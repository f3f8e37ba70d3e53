"""What a command-line flag does with the path it is given, declared on its argparse action.

`writes(group.add_argument("--html", metavar="FILE"))` marks a flag whose value is a file the
run writes; `reads(...)` one whose value names something it reads (`reads(...,
uri_in_place=True)`: a URI given to it the run opens itself, where it runs). Whoever needs to
know (the sweep, which places every written file inside its pair's folder, hashes every file
read and fetches every URI read, but those) asks validate's real parser (`PathFlags.of`), so
a new flag is handled by what it does, not by a list kept beside the parser.

Contract: reads(action, uri_in_place=False) / writes(action) mark and return the action;
PathFlags.of(parser) -> PathFlags(reads, writes, uris_in_place): every option string of the
marked actions (`parser` is validate's parser, or the `parity` parser, whose `validate` is
then read).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

_MARK = "parity_path"
_IN_PLACE = "parity_uri_in_place"
READS, WRITES = "reads", "writes"


def reads(action: argparse.Action, *, uri_in_place: bool = False) -> argparse.Action:
    """Mark `action` as a flag whose value names a file (or a model spec) the run reads;
    `uri_in_place`: a URI given to it is opened by the run itself (a data set, one object or
    a prefix of many, read a sample at a time: parity.data.storage), never fetched whole."""
    setattr(action, _MARK, READS)
    setattr(action, _IN_PLACE, uri_in_place)
    return action


def writes(action: argparse.Action) -> argparse.Action:
    """Mark `action` as a flag whose value is a file the run writes."""
    setattr(action, _MARK, WRITES)
    return action


@dataclass(frozen=True)
class PathFlags:
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    uris_in_place: tuple[str, ...] = ()
    """Those of `reads` whose URI the run opens itself (reads(..., uri_in_place=True))."""

    @property
    def all(self) -> tuple[str, ...]:
        return self.reads + self.writes

    @classmethod
    def of(cls, parser: argparse.ArgumentParser) -> PathFlags:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction) and "validate" in action.choices:
                parser = action.choices["validate"]
        found: dict[str, list[str]] = {READS: [], WRITES: []}
        in_place: list[str] = []
        for action in parser._actions:
            role = getattr(action, _MARK, None)
            if role in found:
                found[role].extend(action.option_strings)
            if getattr(action, _IN_PLACE, False):
                in_place.extend(action.option_strings)
        return cls(tuple(found[READS]), tuple(found[WRITES]), tuple(in_place))
