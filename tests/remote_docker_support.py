"""A second Docker engine for the remote-judge tests: `dockerd` on `tcp://127.0.0.1:PORT` with TLS.

Why a second engine and not a TLS front of the first: stopping it is a real "judge host goes
away" (its TCP connections die, its containers are out of reach), and nothing it does can touch
the main engine's containers. It has its own data root, exec root, pid file, config file and
containerd (started by dockerd itself, state under the exec root), no bridge and no iptables,
and listens only on loopback with `--tlsverify`: a client needs a certificate signed by the
test CA. Certificates are made with `openssl` in a temporary directory, laid out the way the
Docker CLI and SDK expect under `DOCKER_CERT_PATH` (`ca.pem`, `cert.pem`, `key.pem`).

The engine has no image of its own: `load_images` copies the judge images from the local
engine (`docker save | docker load`, the way an operator fills a real judge host; see README
"Running on several machines"). `kill()` ends dockerd with SIGKILL (the host went away),
`start()` brings it back on the same data root (images kept), `stop()` ends it for good:
SIGTERM, then every process still running under its root (containerd, shims) by pid, every
mount left under it, and the directory.

Availability: `scripts/services/remote_docker.sh` installs docker.io and openssl. Without them
(or as non-root) the tests skip, but fail when `CI=true` or `REMOTE_DOCKER_REQUIRED=1`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import docker
import pytest

from judge.engine import EngineAddress, EngineUnavailable, connect
from testing.hostile import process_tree
from testing.ports import DOCKER
from testing.ports import free_port as ports_free_port
from tests.process_support import wait_gone

PORTS = DOCKER  # testing/ports.py: below the ephemeral ports, a slice per xdist worker
_START_S = 60.0
_STOP_S = 30.0


def required() -> bool:
    """Whether a missing second engine must fail the run instead of skipping (CI)."""
    ci = os.environ.get("CI", "")
    return (ci != "" and ci.lower() != "false") or os.environ.get("REMOTE_DOCKER_REQUIRED") == "1"


def require(ready: bool, reason: str) -> None:
    if ready:
        return
    if required():
        pytest.fail(f"a second Docker engine is required here (CI or REMOTE_DOCKER_REQUIRED=1): {reason}")
    pytest.skip(f"no second Docker engine: {reason}")


def missing_tools() -> list[str]:
    """What this machine lacks to start a second engine (empty when it can)."""
    missing = [tool for tool in ("dockerd", "containerd", "docker", "openssl") if shutil.which(tool) is None]
    if os.geteuid() != 0:
        missing.append("root")
    return missing


def free_port(ports: range = PORTS) -> int:
    """A port of the second engine's range that nothing listens on now."""
    return ports_free_port(ports)


@dataclass(frozen=True)
class Certs:
    """A test CA and the three certificate directories (each with ca.pem, cert.pem, key.pem)."""

    server: Path
    client: Path  # signed by the CA: the engine accepts it
    stranger: Path  # trusts the CA but its own certificate comes from another CA: refused


def _openssl(*args: str | Path, cwd: Path) -> None:
    subprocess.run(["openssl", *map(str, args)], cwd=cwd, check=True, capture_output=True)


def _key(path: Path, cwd: Path) -> None:
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", path, cwd=cwd)


def _ca(name: str, cwd: Path) -> None:
    _key(cwd / f"{name}-key.pem", cwd)
    _openssl(
        "req", "-x509", "-new", "-key", f"{name}-key.pem", "-out", f"{name}.pem", "-days", "2",
        "-subj", f"/CN={name}", cwd=cwd,
    )  # fmt: skip


def _signed(directory: Path, ca: str, extensions: str, cwd: Path) -> None:
    """key.pem and cert.pem in `directory`, signed by CA `ca` with the given v3 extensions."""
    directory.mkdir()
    _key(directory / "key.pem", cwd)
    _openssl("req", "-new", "-key", directory / "key.pem", "-out", directory / "req.csr", "-subj", "/CN=judge", cwd=cwd)
    (directory / "ext.cnf").write_text(extensions + "\n", encoding="utf-8")
    _openssl(
        "x509", "-req", "-in", directory / "req.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}-key.pem",
        "-CAcreateserial", "-out", directory / "cert.pem", "-days", "2", "-extfile", directory / "ext.cnf", cwd=cwd,
    )  # fmt: skip
    shutil.copy(cwd / "ca.pem", directory / "ca.pem")  # every side trusts the real CA
    for leftover in ("req.csr", "ext.cnf"):
        (directory / leftover).unlink()
    for pem in directory.iterdir():
        pem.chmod(0o600)


def make_certs(directory: Path) -> Certs:
    """A CA, a server certificate for 127.0.0.1, a client certificate, and a stranger's."""
    directory.mkdir(parents=True, exist_ok=True)
    _ca("ca", directory)
    _ca("other-ca", directory)
    server_ext = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"
    client_ext = "extendedKeyUsage=clientAuth"
    _signed(directory / "server", "ca", server_ext, directory)
    _signed(directory / "client", "ca", client_ext, directory)
    _signed(directory / "stranger", "other-ca", client_ext, directory)
    return Certs(directory / "server", directory / "client", directory / "stranger")


@dataclass
class RemoteEngine:
    """A private dockerd on loopback with TLS; `env()` is what points a judge at it."""

    root: Path
    port: int
    certs: Certs
    process: subprocess.Popen[bytes] | None = field(default=None)

    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def env(self, cert_path: Path | None = None) -> dict[str, str]:
        """The Docker CLI's own variables for this engine (the client certificate by default)."""
        return {
            "DOCKER_HOST": self.url,
            "DOCKER_TLS_VERIFY": "1",
            "DOCKER_CERT_PATH": str(cert_path or self.certs.client),
        }

    def client(self, timeout_s: int = 30) -> docker.DockerClient:
        """A client the way the judge makes one (`docker.from_env` would verify against REQUESTS_CA_BUNDLE)."""
        return connect(EngineAddress.from_environ(self.env()), timeout_s)

    def start(self) -> None:
        """Start dockerd (again, on the same data root) and wait until it answers over TLS."""
        server = self.certs.server
        (self.root / "daemon.json").write_text("{}\n", encoding="utf-8")
        # Pid files of a killed dockerd and containerd: a dead process that is still a zombie (or a
        # reused pid) would make the new dockerd wait on a containerd that is not there.
        for stale in (self.root / "dockerd.pid", self.root / "exec" / "containerd" / "containerd.pid"):
            stale.unlink(missing_ok=True)
        log = (self.root / "dockerd.log").open("ab")
        self.process = subprocess.Popen(
            [
                "dockerd",
                "--host", self.url,
                "--tlsverify",
                "--tlscacert", str(server / "ca.pem"),
                "--tlscert", str(server / "cert.pem"),
                "--tlskey", str(server / "key.pem"),
                "--data-root", str(self.root / "data"),
                "--exec-root", str(self.root / "exec"),
                "--pidfile", str(self.root / "dockerd.pid"),
                "--config-file", str(self.root / "daemon.json"),
                "--bridge", "none",
                "--iptables=false",
                "--ip6tables=false",
                "--log-level", "warn",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + _START_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                self.client(timeout_s=5).close()
                return
            except EngineUnavailable:
                time.sleep(0.2)
        tail = (self.root / "dockerd.log").read_text(errors="replace")[-3000:]
        self.stop()
        raise RuntimeError(f"the second dockerd did not answer within {_START_S:g} s:\n{tail}")

    def kill(self) -> None:
        """The judge host goes away, as at a power cut: SIGKILL dockerd first (its connections drop),
        then its containerd, the shims and every container process under them. A dockerd-only
        crash is not a host going away: the containers would run on, and a restarted containerd
        hangs restoring a task whose stdin is still open (the judge's always is). The next
        `start()` is the host booting again: it marks those containers exited."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.kill()
        self.process.wait()
        doomed = [pid for top in _processes_under(self.root) for pid in process_tree(top)]
        for pid in doomed:
            _kill(pid)
        wait_gone(doomed, timeout_s=10)

    def freeze(self) -> None:
        """SIGSTOP dockerd: the judge host hangs (connections stay open, nothing answers)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Stop dockerd, then whatever still runs or is mounted under the root, and remove the root."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a frozen dockerd would not see the SIGTERM
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=_STOP_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pid in _processes_under(self.root):
            _kill(pid)
        _unmount_under(self.root)
        shutil.rmtree(self.root, ignore_errors=True)


def _processes_under(root: Path) -> list[int]:
    """Pids whose command line names a path under `root` (this engine's containerd and shims)."""
    needle = str(root).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _unmount_under(root: Path) -> None:
    prefix = str(root) + "/"
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def start_engine(directory: Path) -> RemoteEngine:
    """A started second engine under `directory` (short path: containerd's socket lives there)."""
    certs = make_certs(directory / "certs")
    engine = RemoteEngine(root=directory, port=free_port(), certs=certs)
    engine.start()
    return engine


def load_images(engine: RemoteEngine, tags: list[str]) -> None:
    """Copy images from the local engine to `engine`: `docker save TAGS | docker load`."""
    env = {**os.environ, **engine.env()}
    with subprocess.Popen(["docker", "save", *tags], stdout=subprocess.PIPE, env={**os.environ}) as save:
        loaded = subprocess.run(["docker", "load", "--quiet"], stdin=save.stdout, env=env, capture_output=True)
    if save.returncode != 0 or loaded.returncode != 0:
        raise RuntimeError(f"loading {tags} into the second engine failed: {loaded.stderr.decode(errors='replace')}")


@dataclass
class SshGateway:
    """A private `sshd` on loopback whose sessions reach `engine`: the judge host as `ssh://` sees it.

    Keys are made with ssh-keygen in `root`; `home` is a HOME for the client side (its
    `.ssh/id_ed25519` is authorized, its `.ssh/known_hosts` knows this server), since the Docker
    SDK's paramiko transport reads both from `~/.ssh`. `SetEnv` points the session's
    `docker system dial-stdio` at the second engine over TLS, so what runs through ssh runs there.
    """

    root: Path
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"ssh://root@127.0.0.1:{self.port}"

    @property
    def home(self) -> Path:
        return self.root / "home"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=_STOP_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def sshd_missing() -> list[str]:
    """What this machine lacks for `start_ssh_gateway` (empty when it can)."""
    missing = [tool for tool in ("ssh-keygen",) if shutil.which(tool) is None]
    if not Path("/usr/sbin/sshd").is_file():
        missing.append("sshd (openssh-server)")
    try:
        import paramiko  # noqa: F401  # the SDK's ssh transport
    except ImportError:
        missing.append("paramiko")
    return missing


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, capture_output=True)


def start_ssh_gateway(directory: Path, engine: RemoteEngine) -> SshGateway:
    """sshd on a free loopback port, key-only root login, sessions pointed at `engine`."""
    ssh = directory / "home" / ".ssh"
    ssh.mkdir(parents=True)
    _keygen(directory / "host_key")
    _keygen(ssh / "id_ed25519")
    shutil.copy(ssh / "id_ed25519.pub", directory / "authorized_keys")
    port = free_port()
    host_key = " ".join((directory / "host_key.pub").read_text().split()[:2])
    (ssh / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key}\n", encoding="utf-8")
    environment = " ".join(f"{key}={value}" for key, value in engine.env().items())
    (directory / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {directory / 'host_key'}\n"
        f"PidFile {directory / 'sshd.pid'}\nAuthorizedKeysFile {directory / 'authorized_keys'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        f"UsePAM no\nStrictModes no\nSetEnv {environment}\n",
        encoding="utf-8",
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    log = (directory / "sshd.log").open("ab")
    process = subprocess.Popen(
        ["/usr/sbin/sshd", "-D", "-e", "-f", str(directory / "sshd_config")],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    gateway = SshGateway(directory, port, process)
    deadline = time.monotonic() + _START_S
    while time.monotonic() < deadline and process.poll() is None:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return gateway
        time.sleep(0.1)
    tail = (directory / "sshd.log").read_text(errors="replace")[-2000:]
    gateway.stop()
    raise RuntimeError(f"sshd did not listen on 127.0.0.1:{port}:\n{tail}")
