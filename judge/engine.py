"""How the judge reaches its Docker engine: this machine's socket, or another machine's (SPEC 2, 13).

The engine is named by the Docker CLI's own variables, read from `config.settings.Settings` (never from
`os.environ` after start-up): `DOCKER_HOST` (`unix://…` default, `tcp://host:2376`, `ssh://user@host`),
`DOCKER_TLS_VERIFY` (any non-empty value: verify the engine's certificate against the CA, as the
CLI does) and `DOCKER_CERT_PATH` (a directory with `ca.pem`, `cert.pem`, `key.pem`).

Decisions:
- A `tcp://` engine without TLS is refused: whoever reaches that port owns the judge host as
  root, so the judge reports itself unavailable and says which variables to set.
- The client ignores the process environment's HTTP settings (`trust_env = False`):
  `REQUESTS_CA_BUNDLE` / `CURL_CA_BUNDLE` would otherwise replace the engine's CA from
  `DOCKER_CERT_PATH` on every request (a known `requests` behaviour), and a proxy meant for the
  web must not sit between the judge and its engine.
- The API version is asked of the engine once at connect time by a probe client that already
  ignores the environment, then pinned (the SDK's own negotiation would run before
  `trust_env` could be turned off).
- Every engine failure the judge catches is `ENGINE_ERRORS`: the SDK raises `DockerException`
  for answers it understood, but a refused, reset or timed-out connection (the judge host went
  away) surfaces as `requests`' `ConnectionError`/`Timeout`, which are `OSError`s, and an
  `ssh://` host that refuses the key or is not in `~/.ssh/known_hosts` as paramiko's
  `SSHException`.
- `ssh://user@host[:port]` goes through paramiko (the SDK's own transport): the server's user
  needs a key the judge host accepts and the host in `~/.ssh/known_hosts` (unknown hosts are
  refused); on the judge host, `docker system dial-stdio` reaches its engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.constants import DEFAULT_DOCKER_API_VERSION, MINIMUM_DOCKER_API_VERSION
from docker.utils import kwargs_from_env


def _engine_errors() -> tuple[type[Exception], ...]:
    """The SDK's errors, `requests`' (`OSError`s), and paramiko's for `ssh://` (not `OSError`s)."""
    try:
        from paramiko import SSHException
    except ImportError:  # without paramiko the SDK refuses ssh:// with a DockerException
        return (docker.errors.DockerException, OSError)
    return (docker.errors.DockerException, OSError, SSHException)


ENGINE_ERRORS: tuple[type[Exception], ...] = _engine_errors()


class EngineUnavailable(Exception):
    """The judge's engine could not be reached or is not configured safely; the message says why."""


@dataclass(frozen=True)
class EngineAddress:
    """Where the judge's engine is: the three Docker CLI variables (None: unset)."""

    host: str | None = None
    tls_verify: str | None = None
    cert_path: str | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> EngineAddress:
        return cls(
            host=environ.get("DOCKER_HOST") or None,
            tls_verify=environ.get("DOCKER_TLS_VERIFY") or None,
            cert_path=environ.get("DOCKER_CERT_PATH") or None,
        )

    def environment(self) -> dict[str, str]:
        """The variables as the Docker SDK reads them (unset ones left out)."""
        pairs = {"DOCKER_HOST": self.host, "DOCKER_TLS_VERIFY": self.tls_verify, "DOCKER_CERT_PATH": self.cert_path}
        return {key: value for key, value in pairs.items() if value}

    @property
    def remote(self) -> bool:
        return bool(self.host) and not str(self.host).startswith(("unix://", "npipe://"))

    def describe(self) -> str:
        """For status lines: the engine's address (no secret is in it), or the local default."""
        return self.host or "the local engine"


def connect(address: EngineAddress, timeout_s: float) -> docker.DockerClient:
    """A client of the engine at `address` that has answered once; raises `EngineUnavailable`."""
    params = _client_params(address)
    try:
        probe = docker.DockerClient(version=MINIMUM_DOCKER_API_VERSION, timeout=int(timeout_s), **params)
    except ENGINE_ERRORS as error:
        raise EngineUnavailable(f"Docker engine {address.describe()} unusable: {error}") from error
    probe.api.trust_env = False
    try:
        answer = probe.api.version(api_version=False)
    except ENGINE_ERRORS as error:
        raise EngineUnavailable(f"Docker engine {address.describe()} unreachable: {short_error(error)}") from error
    finally:
        probe.close()
    client = docker.DockerClient(
        version=_api_version(str(answer.get("ApiVersion", ""))), timeout=int(timeout_s), **params
    )
    client.api.trust_env = False
    return client


def _client_params(address: EngineAddress) -> dict[str, object]:
    _check_cert_files(address)
    try:
        params: dict[str, object] = kwargs_from_env(environment=address.environment())
    except ENGINE_ERRORS as error:  # e.g. DOCKER_CERT_PATH without the three files
        raise EngineUnavailable(f"Docker engine {address.describe()}: bad TLS settings: {error}") from error
    if address.host and address.host.startswith("tcp://") and params.get("tls") is None:
        raise EngineUnavailable(
            f"DOCKER_HOST={address.host} without TLS is refused (anyone reaching that port is root on the judge "
            "host): set DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH to a directory with ca.pem, cert.pem and key.pem"
        )
    return params


def _check_cert_files(address: EngineAddress) -> None:
    """Name the missing files of DOCKER_CERT_PATH (the SDK's own message does not)."""
    if not (address.tls_verify or address.cert_path):
        return
    directory = Path(address.cert_path) if address.cert_path else Path.home() / ".docker"
    wanted = ("ca.pem", "cert.pem", "key.pem") if address.tls_verify else ("cert.pem", "key.pem")
    missing = [name for name in wanted if not (directory / name).is_file()]
    if missing:
        raise EngineUnavailable(
            f"Docker engine {address.describe()}: bad TLS settings: DOCKER_CERT_PATH {directory} lacks "
            f"{', '.join(missing)}"
        )


def _api_version(engine: str) -> str:
    """The engine's API version, capped at the newest this SDK speaks."""

    def key(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split("."))

    try:
        return str(min(engine, DEFAULT_DOCKER_API_VERSION, key=key))
    except ValueError:
        return str(DEFAULT_DOCKER_API_VERSION)


def short_error(error: Exception) -> str:
    """The useful end of a `requests` error chain (they nest three deep)."""
    text = str(error)
    for marker in ("Caused by ", "SSLError(", "NewConnectionError("):
        if marker in text:
            text = text[text.index(marker) :]
    return text[:300]
