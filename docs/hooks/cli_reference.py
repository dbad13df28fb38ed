"""mkdocs hook: the CLI reference page is the CLI's own help, generated at every build.

A page holding ``<!-- cli-reference -->`` gets, in its place, one section per command and
subcommand with the text ``harness COMMAND --help`` prints, so the reference cannot drift from the
parser (harness/cli.py builds it from the pydantic configs, one source of truth per option).
"""

import argparse
import os
from typing import Any

MARKER = "<!-- cli-reference -->"


def _sections(parser: argparse.ArgumentParser, name: str) -> list[str]:
    out = [f"## `{name}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    for action in parser._actions:  # argparse keeps its subparsers here, in order
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                out += _sections(child, f"{name} {sub}")
    return out


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    os.environ.setdefault("COLUMNS", "100")  # argparse wraps help at the terminal's width
    from harness.cli import build_parser

    return markdown.replace(MARKER, "\n".join(_sections(build_parser(), "harness")))
