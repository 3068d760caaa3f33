"""Judge image recipes: the one source of truth for what each image holds and how it is tagged.

Both `scripts/judge_images.sh` (which builds the images) and `judge/languages.py` (which runs
them) read this module, so a recipe and its tag can never disagree. It imports only the
standard library so the build script can run it with the system `python3` before the venv
exists: `python3 judge/recipes.py tags` prints `name tag` lines, `python3 judge/recipes.py
args NAME` prints the mmdebstrap arguments of one recipe, one per line.

Decisions:
- An image is `mmdebstrap --variant=essential --include=...` of Debian bookworm piped into
  `docker import` (no registry is reachable). `essential` leaves apt out of the image; dpkg
  path excludes drop docs, man pages and locales.
- The tag is the first 12 hex digits of the sha256 of the recipe's canonical JSON, so any
  change to a recipe (packages, options, `revision`) yields a new tag and a rebuild, and an
  unchanged recipe is never rebuilt. The mirror is not part of the hash: it is where packages
  come from, not what the image is.
- Four images serve six languages: `python` also runs SQL cases (its stdlib `sqlite3`
  module gives each case a fresh in-memory database), `cc` serves C and C++.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import asdict, dataclass

SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
IMAGE_PREFIX = "orchestrator-judge"

_DPKG_EXCLUDES = (
    "path-exclude=/usr/share/doc/*",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
    "path-exclude=/usr/share/lintian/*",
)


@dataclass(frozen=True)
class Recipe:
    """What one judge image is made of."""

    name: str
    packages: tuple[str, ...]
    variant: str = "essential"
    suite: str = SUITE
    dpkg_options: tuple[str, ...] = _DPKG_EXCLUDES
    setup_hooks: tuple[str, ...] = ()  # shell commands run by mmdebstrap, "$1" is the root
    revision: int = 1  # bump to force a rebuild without changing anything else

    def digest(self) -> str:
        # Empty fields are left out, so adding an optional field changes no existing tag.
        fields = {key: value for key, value in asdict(self).items() if value not in ((), "")}
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]

    @property
    def tag(self) -> str:
        return f"{IMAGE_PREFIX}-{self.name}:{self.digest()}"

    def mmdebstrap_args(self, mirror: str = DEFAULT_MIRROR) -> list[str]:
        args = [f"--variant={self.variant}", f"--include={','.join(self.packages)}"]
        args += [f"--dpkgopt={option}" for option in self.dpkg_options]
        args += [f"--setup-hook={hook}" for hook in self.setup_hooks]
        return [*args, self.suite, "-", mirror]


RECIPES: dict[str, Recipe] = {
    recipe.name: recipe
    for recipe in (
        Recipe("python", ("python3",)),
        Recipe("node", ("nodejs",)),
        Recipe("cc", ("gcc", "g++", "libc6-dev")),
        # The JRE's postinst registers a man page alternative: its folder must exist.
        Recipe("java", ("openjdk-17-jdk-headless",), setup_hooks=('mkdir -p "$1/usr/share/man/man1"',)),
    )
}


def image_tag(name: str) -> str:
    """The tag of the image built from recipe `name`."""
    return RECIPES[name].tag


def main(argv: list[str]) -> int:
    if argv[:1] == ["tags"]:
        for recipe in RECIPES.values():
            print(recipe.name, recipe.tag)
        return 0
    if len(argv) in (2, 3) and argv[0] == "args" and argv[1] in RECIPES:
        print("\n".join(RECIPES[argv[1]].mmdebstrap_args(*argv[2:])))
        return 0
    print("usage: recipes.py tags | args NAME [MIRROR]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
