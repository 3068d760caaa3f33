"""The settings documentation cannot drift: README.md's table and `.env.example` are what
`cli/settings_doc.py` generates from `config.settings.Settings`, and every field says what it means."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli.settings_doc import (
    README_END,
    README_START,
    MissingMarkersError,
    env_example,
    fallback_key_names,
    markdown_table,
    readme_with_table,
)
from config.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]
FIX = "run `.venv/bin/python cli/settings_doc.py --write` and commit README.md and .env.example"


@pytest.mark.parametrize("name", list(Settings.model_fields))
def test_every_setting_has_a_description(name):
    assert (Settings.model_fields[name].description or "").strip(), f"Settings.{name}: add Field(description=...)"


def test_readme_table_is_the_generated_one():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.count(README_START) == 1 and readme.count(README_END) == 1
    assert readme == readme_with_table(readme), f"README.md's settings table is stale: {FIX}"


def test_env_example_is_the_generated_one():
    assert (ROOT / ".env.example").read_text(encoding="utf-8") == env_example(), f".env.example is stale: {FIX}"


def test_every_setting_is_in_the_table():
    table = markdown_table()
    names = [name.upper() for name in Settings.model_fields if name != "fallback_api_keys"]
    for env in [*names, *fallback_key_names()]:
        assert f"`{env}`" in table


def test_env_example_uncommented_gives_the_defaults(tmp_path):
    """Each line `# NAME=default` really is the default: uncommenting all of them changes nothing."""
    lines = [line[2:] for line in env_example().splitlines() if re.match(r"# [A-Z][A-Z0-9_]*=", line)]
    dotenv = tmp_path / ".env"
    dotenv.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert len(lines) == len(Settings.model_fields) - 1 + len(fallback_key_names())
    assert load_settings(environ={}, dotenv_path=dotenv) == Settings()


def test_a_readme_without_markers_is_a_clear_error():
    with pytest.raises(MissingMarkersError, match="settings:start"):
        readme_with_table("# a README\n")


@pytest.mark.parametrize(("flag", "expected"), [("--markdown", markdown_table), ("--env-example", env_example)])
def test_the_command_prints_what_the_tests_compare(flag, expected):
    result = subprocess.run(
        [sys.executable, "-m", "cli.settings_doc", flag], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected()


# docs/errors.md ---------------------------------------------------------------------------

_RAISED_CODE = re.compile(r'ApiError\(\s*\d{3},\s*"([a-z_]+)"|"code": "([a-z_]+)"')


def test_every_error_code_is_documented():
    """A code raised anywhere in the HTTP layer, or a tool's code, appears in docs/errors.md."""
    from api.errors import _HTTP_CODES
    from tools.base import ErrorCode

    doc = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    raised = {
        match.group(1) or match.group(2)
        for path in [*ROOT.glob("api/*.py"), ROOT / "serving" / "protocol.py"]
        for match in _RAISED_CODE.finditer(path.read_text(encoding="utf-8"))
    }
    codes = raised | set(_HTTP_CODES.values()) | {"http_error"} | {code.value for code in ErrorCode}
    assert {"invalid_request", "rate_limited", "headers_too_large", "VALIDATION_FAILED"} <= codes  # the scan works
    missing = sorted(code for code in codes if f"`{code}`" not in doc)
    assert not missing, f"document these codes in docs/errors.md: {missing}"
