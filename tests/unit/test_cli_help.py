"""Every option of every command says what it does; README's commands parse."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.cli import build_parser
from headwater.cli.common import DEFAULT_BOOTSTRAP


def _parsers(
    parser: argparse.ArgumentParser, path: str = "headwater"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_option_has_help_and_bootstrap_shows_its_default() -> None:
    missing = []
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction) or not action.option_strings:
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{path} {action.option_strings[0]}")
            if "--bootstrap" in action.option_strings and action.default is not None:
                assert f"default {DEFAULT_BOOTSTRAP}" in action.help, path
    assert missing == []


def _readme_commands() -> list[str]:
    text = (Path(__file__).parents[2] / "README.md").read_text()
    section = text.split("## Command line", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    block = block.replace("\\\n", " ")
    out = []
    for line in block.splitlines():
        command = line.split("#", 1)[0].strip()
        command = command.split("| headwater", 1)[-1] if "| headwater" in command else command
        if command.startswith("headwater"):
            out.append(command)
    return out


@pytest.mark.parametrize("command", _readme_commands())
def test_readme_command_line_parses(command: str) -> None:
    # Alternatives "a | b" and optional "[...]" : try the first alternative of each.
    first = re.sub(r"\[([^\]]*)\]", r"\1", command)
    first = re.sub(r"\s*\|\s*[^\s|]+(?:\s+[^-|\s][^\s|]*)*", "", first)
    words = shlex.split(first.replace("...", ""))[1:]
    build_parser().parse_args(words)
