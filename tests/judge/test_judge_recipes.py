"""Image tags are a hash of the recipe, shared by the build script and the judge."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

from judge.languages import LANGUAGES
from judge.models import Limits
from judge.recipes import RECIPES, image_tag
from judge.sandbox import container_options


def test_tags_change_only_when_the_recipe_changes() -> None:
    python = RECIPES["python"]
    assert python.tag == replace(python).tag
    assert python.tag.startswith("orchestrator-judge-python:") and len(python.digest()) == 12
    assert replace(python, packages=("python3", "python3-numpy")).tag != python.tag
    assert replace(python, revision=2).tag != python.tag
    assert len({recipe.tag for recipe in RECIPES.values()}) == len(RECIPES)


def test_the_build_script_reads_the_same_tags(tmp_path: object) -> None:
    out = subprocess.run([sys.executable, "judge/recipes.py", "tags"], capture_output=True, text=True, check=True)
    assert dict(line.split() for line in out.stdout.splitlines()) == {n: r.tag for n, r in RECIPES.items()}
    args = subprocess.run([sys.executable, "judge/recipes.py", "args", "java"], capture_output=True, text=True)
    assert "--include=openjdk-17-jdk-headless" in args.stdout.splitlines()


def test_every_language_has_an_image() -> None:
    assert set(LANGUAGES) >= {"python", "javascript", "c", "cpp", "java", "sql"}
    for language in LANGUAGES.values():
        assert language.image == image_tag(language.recipe)


def test_container_options_isolate_the_run() -> None:
    options = container_options("img:tag", Limits(memory_mb=128, pids=32, cpus=0.5))
    assert options["network_mode"] == "none" and options["network_disabled"] is True
    assert options["read_only"] is True and options["privileged"] is False
    assert options["user"] == "65534:65534"
    assert options["cap_drop"] == ["ALL"] and options["security_opt"] == ["no-new-privileges"]
    assert options["init"] is True
    assert options["mem_limit"] == options["memswap_limit"] == "128m"
    assert options["pids_limit"] == 32 and options["nano_cpus"] == 500_000_000
    assert {u["Name"] for u in options["ulimits"]} == {"fsize", "nofile", "core"}
    assert options["labels"]["orchestrator.judge"] == "1"
    assert "volumes" not in options and "mounts" not in options
    assert set(options["tmpfs"]) == {"/work", "/tmp"}
