"""A private PostgreSQL cluster for the `DATABASE_URL=postgresql://…` tests.

Loaded as a pytest plugin (`pytest_plugins` in tests/conftest.py). `pg_cluster` is
session-scoped: one `initdb` in a temp dir (about a second), one server on 127.0.0.1 at a free
port of 31000-31499 (testing/ports.py), its socket in the temp dir, `fsync=off` (the data dies with the session
anyway), stopped at the end of the session. The binaries come from Debian's postgresql package
(scripts/services/postgres.sh installs it). initdb refuses to run as root, so as root the cluster
runs as the `postgres` OS user and its directory is owned by it.

A test gets a database of its own cheaply: a template database is prepared once per session
(`PgCluster.template(name, prepare)`, e.g. migrated), and each test copies it with
`CREATE DATABASE t_<n> TEMPLATE …` (a file copy), dropped after the test.

Without the binaries the tests skip, or fail under `CI=true` or `PG_REQUIRED=1`.
"""

from __future__ import annotations

import itertools
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from glob import glob
from pathlib import Path

import psycopg
import pytest

from storage.connection import Store
from storage.db import Database
from storage.pg import PgDatabase
from testing.ports import POSTGRES, candidates, is_free

PORT_RANGE = POSTGRES  # testing/ports.py: below the ephemeral ports, a slice per xdist worker
START_TIMEOUT_S = 30
SUPERUSER = "postgres"


def pg_required() -> bool:
    """Under CI (or PG_REQUIRED=1) a missing PostgreSQL is a failure, not a skip."""
    ci = os.environ.get("CI", "")
    return (ci != "" and ci.lower() not in ("0", "false")) or os.environ.get("PG_REQUIRED") == "1"


def require(ready: bool, reason: str) -> None:
    if ready:
        return
    message = f"PostgreSQL tests: {reason} (scripts/services/postgres.sh installs it)"
    if pg_required():
        pytest.fail(message)
    pytest.skip(message)


def bin_dir() -> Path | None:
    """The newest installed server's bin dir (/usr/lib/postgresql/<major>/bin on Debian)."""
    found = sorted(glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


@dataclass
class PgCluster:
    """A running private cluster; `url(db)` connects as the superuser over TCP with a password."""

    root: Path
    port: int
    password: str
    binaries: Path
    _run_as: list[str]
    _counter: Iterator[int] = field(default_factory=itertools.count)
    _templates: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def url(self, database: str = "postgres", user: str = SUPERUSER, password: str | None = None) -> str:
        secret = self.password if password is None else password
        return f"postgresql://{user}:{secret}@127.0.0.1:{self.port}/{database}"

    def admin(self) -> psycopg.Connection[tuple[object, ...]]:
        """An autocommit superuser connection to the `postgres` database (CREATE/DROP DATABASE)."""
        return psycopg.connect(self.url(), autocommit=True)

    def create_database(self, name: str, template: str = "template1") -> str:
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def template(self, name: str, prepare: Callable[[str], None]) -> str:
        """A template database made once per session: created empty, `prepare(url)` run on it
        (migrations, fixtures), then copied by `fresh_database`. Returns its name."""
        with self._lock:
            if name not in self._templates:
                url = self.create_database(name)
                prepare(url)
                with self.admin() as conn:  # no connection may stay on a template being copied
                    conn.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                        (name,),
                    )
                self._templates[name] = name
            return self._templates[name]

    def fresh_database(self, template: str = "template1") -> tuple[str, str]:
        """A new database copied from `template`: (name, superuser url)."""
        name = f"t_{os.getpid()}_{next(self._counter)}"
        return name, self.create_database(name, template)

    def psql(self, database: str, sql: str) -> str:
        """Run SQL through the real `psql` client (for tests that check from outside the app)."""
        done = subprocess.run(
            [
                str(self.binaries / "psql"),
                "-X",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                self.url(database),
                "-c",
                sql,
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout

    def stop(self) -> None:
        subprocess.run(
            [*self._run_as, str(self.binaries / "pg_ctl"), "stop", "-D", str(self.data_dir), "-m", "immediate", "-w"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        shutil.rmtree(self.root, ignore_errors=True)


def start_cluster() -> PgCluster:
    """initdb + pg_ctl start on a free port of PORT_RANGE; raises RuntimeError with the log."""
    binaries = bin_dir()
    if binaries is None:
        raise FileNotFoundError("no initdb found")
    root = Path(tempfile.mkdtemp(prefix="pgtest-"))
    run_as: list[str] = []
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(root, owner.pw_uid, owner.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    password = secrets.token_hex(16)
    pwfile = root / "pw"
    pwfile.write_text(password)
    if run_as:
        os.chown(pwfile, pwd.getpwnam("postgres").pw_uid, -1)
    subprocess.run(
        [
            *run_as,
            str(binaries / "initdb"),
            "-D",
            str(root / "data"),
            "-U",
            SUPERUSER,
            f"--pwfile={pwfile}",
            "--auth-host=scram-sha-256",
            "--auth-local=trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    pwfile.unlink()
    options = (
        f"-c listen_addresses=127.0.0.1 -c unix_socket_directories={root} -c fsync=off"
        " -c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
    )
    log = root / "server.log"
    for port in candidates(PORT_RANGE)[:20]:
        if not is_free(port):
            continue
        started = subprocess.run(
            [
                *run_as,
                str(binaries / "pg_ctl"),
                "start",
                "-D",
                str(root / "data"),
                "-l",
                str(log),
                "-w",
                "-t",
                str(START_TIMEOUT_S),
                "-o",
                f"-p {port} {options}",
            ],
            capture_output=True,
            timeout=START_TIMEOUT_S + 10,
            check=False,
        )
        if started.returncode == 0:
            return PgCluster(root=root, port=port, password=password, binaries=binaries, _run_as=run_as)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    shutil.rmtree(root, ignore_errors=True)
    raise RuntimeError(f"PostgreSQL did not start on any port of {PORT_RANGE}: {tail}")


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    require(bin_dir() is not None, "no PostgreSQL server binaries (initdb)")
    try:
        cluster = start_cluster()
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        require(False, f"could not start a private cluster: {error}")
        raise
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_empty_url(pg_cluster: PgCluster) -> Iterator[str]:
    """A superuser URL to a new, empty database of this test's own (dropped after)."""
    name, url = pg_cluster.fresh_database()
    try:
        yield url
    finally:
        pg_cluster.drop_database(name)


MIGRATED_TEMPLATE = "tmpl_migrated"


def migrate_template(url: str) -> None:
    """Apply the app's PostgreSQL migrations (the template every `pg_url` test copies)."""
    database = PgDatabase(url, pool_size=2)
    try:
        database.migrate()
    finally:
        database.close()


@pytest.fixture
def pg_url(pg_cluster: PgCluster) -> Iterator[str]:
    """A superuser URL to a new database of this test's own, migrated (dropped after)."""
    template = pg_cluster.template(MIGRATED_TEMPLATE, migrate_template)
    name, url = pg_cluster.fresh_database(template)
    try:
        yield url
    finally:
        pg_cluster.drop_database(name)


# --------------------------------------------------------------------------- both backends

BACKENDS = ("sqlite", "postgresql")  # the engines' `Store.dialect`


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each test that asks for it runs twice: on a SQLite file and on a PostgreSQL database."""
    return str(request.param)


@pytest.fixture
def store(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Store]:
    """A migrated, empty database of this test's own, on `backend`."""
    if backend == "sqlite":
        database = Database(tmp_path / "t.db")
        database.migrate()
        yield database
        return
    pg = PgDatabase(request.getfixturevalue("pg_url"), pool_size=8)
    try:
        yield pg
    finally:
        pg.close()


@pytest.fixture
def blank_store(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Store]:
    """A blank database (no migration applied yet) of this test's own, on `backend`."""
    if backend == "sqlite":
        yield Database(tmp_path / "blank.db")
        return
    pg = PgDatabase(request.getfixturevalue("pg_empty_url"), pool_size=4)
    try:
        yield pg
    finally:
        pg.close()


@pytest.fixture
def backend_settings(backend: str, request: pytest.FixtureRequest) -> dict[str, str]:
    """`Settings` overrides putting an app on `backend` (nothing for SQLite: DATABASE_PATH)."""
    if backend == "sqlite":
        return {}
    return {"database_url": request.getfixturevalue("pg_url")}
