"""The parser class: a usage error in one line, with a did-you-mean.

argparse answers `--input-set 2` with the command's whole usage (16 lines) and
"unrecognized arguments"; a newcomer needs the one line that names the flag to write.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Sequence
from typing import NoReturn

_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)'")


def close_match(word: str, known: Sequence[str]) -> str | None:
    """The known word `word` was most likely meant to be (difflib's ratio >= 0.6), or None."""
    found = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return found[0] if found else None


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (`parity validate: error: ...`, exit 2),
    with a did-you-mean for an unknown flag or command. Its subcommands are Parsers too."""

    def error(self, message: str) -> NoReturn:
        message = self._with_suggestion(message)
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but arguments nobody took are refused by the command they were
        given to (its flags are the ones a did-you-mean looks among)."""
        parsed, unknown = self.parse_known_args(args, namespace)
        commands = getattr(parsed, "_commands", None) or {}
        if hasattr(parsed, "_commands"):
            del parsed._commands
        if unknown:
            command = commands.get(getattr(parsed, "command", None), self)
            command.error(unknown_arguments(command, unknown))
        return parsed

    def _with_suggestion(self, message: str) -> str:
        invalid = _INVALID_CHOICE.search(message)
        choices = self._command_names()
        if invalid and choices and message.startswith("argument command"):
            word = invalid.group(1)
            guess = close_match(word, choices)
            known = ", ".join(choices)
            hint = f"did you mean {guess}? " if guess else ""
            return f"no command {word!r}: {hint}(commands: {known})"
        if message.startswith("the following arguments are required") and choices:
            return f"{message} (commands: {', '.join(choices)}; {self.prog} --help says more)"
        return message

    def _command_names(self) -> list[str]:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return list(action.choices)
        return []


def unknown_arguments(parser: argparse.ArgumentParser, unknown: Sequence[str]) -> str:
    """argparse's "unrecognized arguments: ..." with the flag each unknown one was likely
    meant to be, among `parser`'s own (`--input-set` -> `--input-sets`)."""
    flags = [f for f in parser._option_string_actions if f.startswith("--")]
    guesses = []
    for item in unknown:
        if not item.startswith("-") or item == "-":
            continue
        guess = close_match(item.partition("=")[0], flags)
        if guess is not None and guess != item.partition("=")[0] and guess not in guesses:
            guesses.append(guess)
    message = f"unrecognized arguments: {' '.join(unknown)}"
    if guesses:
        return f"{message}; did you mean {' / '.join(guesses)}?"
    return f"{message} ({parser.prog} --help lists the flags)"
