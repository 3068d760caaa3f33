"""README's settings table and `.env.example`, both generated from `config.settings.Settings`.

The descriptions live on the fields (`Field(description=...)`), so the documentation of a
setting sits next to its default and validation and cannot drift from them:
`tests/cli/test_docs.py` fails when README.md or `.env.example` differ from what this module
prints. After changing a setting run:

    python -m cli.settings_doc --write         rewrite README.md's table and .env.example
    python -m cli.settings_doc --markdown      print the table (the default)
    python -m cli.settings_doc --env-example   print .env.example
"""

from __future__ import annotations

import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import click
from pydantic.fields import FieldInfo

from config.settings import DEFAULT_RATE_LIMITS, Settings
from providers import HttpProvider, provider_registry

README_START = "<!-- settings:start (generated from config/settings.py by `python -m cli.settings_doc --write`) -->"
README_END = "<!-- settings:end -->"
ENV_EXAMPLE_HEADER = """\
# Every setting of the orchestrator with its default, generated from config.settings.Settings by
# `python -m cli.settings_doc --write` (edit config/settings.py, not this file).
# Copy it to .env and uncomment what you change; the environment wins over .env.
"""


class MissingMarkersError(Exception):
    """README.md lacks the settings markers, so the table has no place to go."""


@dataclass(frozen=True)
class SettingDoc:
    """One documented setting: its environment variable(s), meaning and default as written in `.env`."""

    env_names: tuple[str, ...]
    meaning: str
    default: str  # "" when unset


def fallback_key_names() -> tuple[str, ...]:
    """`<PROVIDER>_API_KEY` for every provider that calls a server (what `load_settings` reads as a fallback's key)."""
    return tuple(
        f"{name.upper()}_API_KEY" for name, cls in provider_registry().items() if issubclass(cls, HttpProvider)
    )


def env_default(name: str, field: FieldInfo) -> str:
    """The default as one would write it in `.env` (booleans `0`/`1`, whole floats without `.0`)."""
    if name == "rate_limits":
        return DEFAULT_RATE_LIMITS
    value = field.get_default(call_default_factory=True)
    if value is None or value == {} or value == "":
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def setting_docs() -> list[SettingDoc]:
    """Every field of `Settings`, in declaration order; a field without a description is an error."""
    docs = []
    for name, field in Settings.model_fields.items():
        if not field.description:
            raise ValueError(f"Settings.{name} has no description: add Field(description=...) in config/settings.py")
        env_names = fallback_key_names() if name == "fallback_api_keys" else (name.upper(),)
        docs.append(SettingDoc(env_names=env_names, meaning=field.description, default=env_default(name, field)))
    return docs


def markdown_table() -> str:
    """The README table: variable, meaning, default (`unset` when there is none)."""
    lines = ["| variable | meaning | default |", "|---|---|---|"]
    for doc in setting_docs():
        names = ", ".join(f"`{env}`" for env in doc.env_names)
        default = f"`{doc.default}`" if doc.default else "unset"
        lines.append(f"| {names} | {doc.meaning.replace('|', chr(92) + '|')} | {default} |")
    return "\n".join(lines) + "\n"


def env_example() -> str:
    """`.env.example`: each setting commented out at its default, under its meaning."""
    blocks = [ENV_EXAMPLE_HEADER]
    for doc in setting_docs():
        comment = textwrap.fill(
            doc.meaning,
            width=98,
            initial_indent="# ",
            subsequent_indent="# ",
            break_on_hyphens=False,
            break_long_words=False,
        )
        assignments = "\n".join(f"# {env}={doc.default}" for env in doc.env_names)
        blocks.append(f"{comment}\n{assignments}\n")
    return "\n".join(blocks)


def readme_with_table(readme: str) -> str:
    """README text with the generated table between the markers (which must both be there)."""
    start, end = readme.find(README_START), readme.find(README_END)
    if start < 0 or end < start:
        raise MissingMarkersError(f"README.md needs the lines {README_START!r} and {README_END!r}")
    return readme[: start + len(README_START)] + "\n\n" + markdown_table() + "\n" + readme[end:]


def write(root: Path) -> list[Path]:
    """Regenerate README.md's table and `.env.example` under `root`; answers the files changed."""
    changed = []
    for path, text in (
        (root / "README.md", readme_with_table((root / "README.md").read_text(encoding="utf-8"))),
        (root / ".env.example", env_example()),
    ):
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    return changed


@click.command()
@click.option("--markdown", "what", flag_value="markdown", default=True, help="print README's settings table")
@click.option("--env-example", "what", flag_value="env", help="print .env.example")
@click.option("--write", "what", flag_value="write", help="rewrite README.md's table and .env.example")
def main(what: str) -> None:
    """Print or write the settings documentation generated from config.settings.Settings."""
    if what == "env":
        click.echo(env_example(), nl=False)
    elif what == "write":
        try:
            changed = write(Path(__file__).resolve().parents[1])
        except MissingMarkersError as error:
            raise click.ClickException(str(error)) from error
        click.echo("\n".join(f"wrote {path.name}" for path in changed) or "up to date")
    else:
        click.echo(markdown_table(), nl=False)


if __name__ == "__main__":
    sys.exit(main())
