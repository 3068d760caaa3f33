"""How each language is judged: image, entry file, compile step and run step.

Files live in the container's `/work` (a tmpfs, also the working directory). Commands are
argument lists the sandbox's launcher runs as they are (no shell), with the step's stdin
redirected from a file the judge ships in the archive (see `judge/launcher.sh`). C and C++
compile every top-level source with `-O2 -std=c17/c++17 -lm`; Java compiles every top-level
`.java` file and runs class `Main`; the JVM flags (serial GC, C1 only, no perf data) cut its
start-up on one CPU and keep it off the read-only root. SQL runs `judge/sql_runner.py` in
the python image: a fresh in-memory database per run, one JSON document out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from judge.recipes import image_tag

SQL_RUNNER = Path(__file__).with_name("sql_runner.py")
_JVM = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData", "-Xss8m"]


@dataclass(frozen=True)
class Language:
    """One judged language; `compile` is None for interpreted ones."""

    name: str
    recipe: str
    entry: str
    run: tuple[str, ...]
    compile: tuple[str, ...] | None = None

    @property
    def image(self) -> str:
        return image_tag(self.recipe)


LANGUAGES: dict[str, Language] = {
    language.name: language
    for language in (
        Language("python", "python", "main.py", ("python3", "-B", "-E", "-s", "main.py")),
        Language("javascript", "node", "main.js", ("node", "main.js")),
        Language(
            "c",
            "cc",
            "main.c",
            ("./.judge/prog",),
            ("sh", "-c", "exec gcc -O2 -std=c17 -pipe -o .judge/prog *.c -lm"),
        ),
        Language(
            "cpp",
            "cc",
            "main.cpp",
            ("./.judge/prog",),
            ("sh", "-c", "exec g++ -O2 -std=c++17 -pipe -o .judge/prog *.cpp -lm"),
        ),
        Language(
            "java",
            "java",
            "Main.java",
            ("java", *_JVM, "-cp", ".judge/classes", "Main"),
            ("sh", "-c", "exec javac " + " ".join(f"-J{flag}" for flag in _JVM) + " -d .judge/classes *.java"),
        ),
        Language("sql", "python", "query.sql", ("python3", "-B", "-E", "-s", ".judge/sql_runner.py", "query.sql")),
    )
}
