"""The flag table (parity.cli.definition) is the parser: every flag it declares is in its
command's --help with its path mark, documented in docs/, and the hf: flags read from it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from parity.cli import build_parser, main
from parity.cli.definition import COMMANDS, HF, VALIDATE
from parity.cli.hf_args import hf_flags_given
from parity.path_flags import READS, WRITES, PathFlags

DOCS = Path(__file__).resolve().parents[1] / "docs"


def options(flags) -> list[str]:
    return [name for f in flags for name in f.names if name.startswith("--")]


def mentioned(name: str, text: str) -> bool:
    """`--layers` is mentioned by `--layers` or `--layers MB`, not by `--layers-memory`."""
    return re.search(re.escape(name) + r"(?![\w-])", text) is not None


def help_text(capsys, *command: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_every_flag_of_the_table_is_in_its_commands_help(command, capsys):
    shown = help_text(capsys, command.name)
    missing = [name for name in options(command.flags) if not mentioned(name, shown)]
    assert not missing, f"parity {command.name} --help lacks {missing}"
    assert all(f.help for f in command.flags), "every flag of the table says what it does"
    assert command.help in " ".join(help_text(capsys).split())  # `parity --help`, unwrapped


def test_the_parser_has_exactly_the_tables_flags_and_path_marks():
    parser = build_parser()
    commands = parser._defaults["_commands"]
    assert list(commands) == [c.name for c in COMMANDS]
    for command in COMMANDS:
        built = [s for a in commands[command.name]._actions for s in a.option_strings]
        assert sorted(built) == sorted(["-h", "--help", *options(command.flags)]), command.name
    marked = PathFlags.of(parser)
    assert marked.reads == tuple(options(f for f in VALIDATE.flags if f.path == READS))
    assert marked.writes == tuple(options(f for f in VALIDATE.flags if f.path == WRITES))
    assert {"--json", "--html", "--save-run", "--export-path"} <= set(marked.writes)


def test_docs_cli_page_names_every_validate_flag():
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    missing = [name for name in options(VALIDATE.flags) if not mentioned(name, page)]
    assert not missing, f"docs/cli.md does not mention {missing}"


def test_the_docs_name_every_flag_of_every_command():
    docs = "\n".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.md")))
    missing = {
        c.name: names
        for c in COMMANDS
        if (names := [n for n in options(c.flags) if not mentioned(n, docs)])
    }
    assert not missing, f"flags no page of docs/ mentions: {missing}"


@pytest.mark.parametrize("item", HF.flags, ids=lambda f: f.names[0])
def test_each_hf_flag_alone_counts_as_given(item):
    value = [] if item.action == "store_true" else ["0" if item.type is int else "x"]
    parser = build_parser()
    assert not hf_flags_given(parser.parse_args(["validate", "--model", "demo:cnn"]))
    args = parser.parse_args(["validate", "--model", "demo:cnn", item.names[0], *value])
    assert hf_flags_given(args)


def test_report_and_dashboard_share_validates_flags_not_copies():
    """A flag two commands take is one value of the table: the same words in both helps."""
    by_name = {c.name: {f.names[0]: f for f in c.flags} for c in COMMANDS}
    validate = by_name["validate"]
    shared = set(by_name["report"]) & set(validate)
    assert {"--json", "--html", "--model-explorer", "--atol", "--tol", "--max-memory"} <= shared
    assert all(by_name["report"][name] is validate[name] for name in shared)
    assert all(by_name["dashboard"][name] is validate[name] for name in validate)
