"""What each attack of `testing/attacks/` costs the real server, and what others feel meanwhile.

    .venv/bin/python bench/hostile.py [--only SUBSTRING] [--repeat N]

One real server (`python app.py`, a fake model and a fake web server on loopback, two ordinary
users) per group of attacks that need the same settings. For each attack, side by side in one
run: the server tree's RSS before, at its peak during, and after the attack; the CPU seconds
the tree used during it against the attack's own deadline; the attacker's answer (status,
size); and a bystander's `GET /health` latency (p50 / p99 / worst) during the attack, from a
process of its own, during the attack and for at least a second from its start (an attack
that ends sooner is watched just after it too), next to the same figure with no attack
running. Targets (SPEC 12, issue 11): no single request raises
server memory by more than 100 MB (an attack of many requests says its own bound:
`Attack.memory_mb`) or runs more than 2 s of CPU past its deadline; `/health` p99 under 100 ms
during any attack. The attacks on the seams (`testing/attacks/seams.py`, issue 32) also report
what the OTHER user got meanwhile: how long their turn or their token requests took.

The attacks in PostgreSQL's dialect (`testing/attacks/sql_pg.py`, `PG_ATTACKS`) run against a
server whose `DATABASE_URL` is a private PostgreSQL (tests/pg_support.py, started as the tests
start it), a database of its own migrated from scratch; `--no-postgres` leaves them out.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import testing.attacks as attacks_package
from testing.attacks import Attack, Target, hostile_target
from testing.attacks.sql_pg import PG_ATTACKS
from testing.hostile import PeakMemory, ProcessBystander
from tests.pg_support import PgCluster, migrate_template, start_cluster

MIN_WATCH_S = 1.0  # the bystander watches at least this long per attack


def all_attacks() -> list[Attack]:
    """Every module's `ATTACKS` (the PostgreSQL ones, `PG_ATTACKS`, need their own server)."""
    found: list[Attack] = []
    for module in sorted(pkgutil.iter_modules(attacks_package.__path__), key=lambda m: m.name):
        found.extend(getattr(importlib.import_module(f"testing.attacks.{module.name}"), "ATTACKS", []))
    return found


def quiet_health(target: Target, seconds: float = 2.0) -> ProcessBystander:
    with ProcessBystander(target.server) as bystander:
        time.sleep(seconds)
    return bystander


def measure(target: Target, attack: Attack) -> str:
    server = target.server
    cpu_before = server.cpu_s()
    with PeakMemory(server) as memory, ProcessBystander(server) as bystander:
        start = time.perf_counter()
        try:
            outcome = attack.run(target)
            result = f"{outcome.status} {outcome.body_bytes:>9,} B {outcome.note[:60]}"
        except Exception as error:  # the bench reports a broken attack instead of stopping
            result = f"raised {type(error).__name__}: {str(error)[:40]}"
        wall = time.perf_counter() - start
        time.sleep(max(0.0, MIN_WATCH_S - wall))  # a short attack: /health is watched just after it too
    cpu = server.cpu_s() - cpu_before
    after_mb = server.rss_kb() / 1024
    over = max(0.0, cpu - attack.deadline_s)
    failures = [
        failure for failure in bystander.failures if not (attack.unhealthy_ok and failure.startswith("503:"))
    ]  # an honest /health
    healthy = bystander.percentile_ms(0.99) < 100 and not failures
    verdict = "ok" if memory.added_mb < attack.memory_mb and over <= 2 and healthy else "MISSED"
    return (
        f"| {attack.name} | {result} | {memory.baseline_kb / 1024:.0f} / {memory.peak_kb / 1024:.0f} / "
        f"{after_mb:.0f} (+{memory.added_mb:.1f}) | {cpu:.2f} / {attack.deadline_s:g} | {wall:.2f} | "
        f"{bystander.percentile_ms(0.5):.1f} / {bystander.percentile_ms(0.99):.1f} / {bystander.worst_ms:.1f} | "
        f"{len(failures)}{' (+503s: /health said so)' if len(failures) < len(bystander.failures) else ''} | "
        f"{verdict} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="run only attacks whose name contains this")
    parser.add_argument("--repeat", type=int, default=1, help="run each attack this many times")
    parser.add_argument("--no-postgres", action="store_true", help="leave out the attacks in PostgreSQL's dialect")
    args = parser.parse_args()
    groups: dict[tuple[tuple[str, str], ...], list[Attack]] = defaultdict(list)
    for attack in all_attacks():
        if args.only.lower() in attack.name.lower():
            groups[tuple(sorted(attack.env.items()))].append(attack)
    pg_attacks = [] if args.no_postgres else [a for a in PG_ATTACKS if args.only.lower() in a.name.lower()]
    print(
        "| attack | answer (status, size) | server RSS MB before / peak / after (added) | CPU s / deadline s "
        "| wall s | /health ms p50 / p99 / worst | bystander failures | |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for env, group in groups.items():
        run_group(dict(env), group, args.repeat)
    if pg_attacks:
        cluster = start_cluster()
        try:
            run_postgres(cluster, pg_attacks, args.repeat)
        finally:
            cluster.stop()


def run_group(env: dict[str, str], group: list[Attack], repeat: int, shown: str | None = None) -> None:
    """One server with `env`, the `group` of attacks against it, after a quiet baseline."""
    with tempfile.TemporaryDirectory() as tmp, hostile_target(Path(tmp), env) as target:
        quiet = quiet_health(target)
        settings = shown or ", ".join(f"{key}={value}" for key, value in sorted(env.items())) or "defaults"
        print(
            f"| *no attack ({settings})* | | {target.server.rss_kb() / 1024:.0f} | | | "
            f"{quiet.percentile_ms(0.5):.1f} / {quiet.percentile_ms(0.99):.1f} / {quiet.worst_ms:.1f} | "
            f"{len(quiet.failures)} | |"
        )
        for attack in group:
            for _ in range(repeat):
                print(measure(target, attack), flush=True)


def run_postgres(cluster: PgCluster, attacks: list[Attack], repeat: int) -> None:
    """The PostgreSQL attacks, grouped by settings, each group on a fresh migrated database."""
    groups: dict[tuple[tuple[str, str], ...], list[Attack]] = defaultdict(list)
    for attack in attacks:
        groups[tuple(sorted(attack.env.items()))].append(attack)
    for env, group in groups.items():
        name, url = cluster.fresh_database()
        try:
            migrate_template(url)
            shown = ", ".join(f"{key}={value}" for key, value in env) + ", DATABASE_URL=postgresql://… (private)"
            run_group({**dict(env), "DATABASE_URL": url}, group, repeat, shown)
        finally:
            cluster.drop_database(name)


if __name__ == "__main__":
    main()
