"""The workspace sandbox: `paths.resolve_path`, link and special-file refusal, fuzzing.

Every refusal is its own test. Link tests check both that the tool refuses (or skips) and
that the link's target is never read, written or created.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.workspace_support import Workspaces
from tools.base import ToolFailure
from tools.workspace.fs import read_bytes, write_atomic
from tools.workspace.paths import MAX_COMPONENT_BYTES, MAX_DEPTH, MAX_PATH_CHARS, resolve_path

EDIT = "<<<<<<< SEARCH\nTOP SECRET\n=======\nPWNED\n>>>>>>> REPLACE"


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Workspaces]:
    world = Workspaces(tmp_path)
    yield world
    world.close()


REFUSED = [
    ("", "VALIDATION_FAILED"),
    ("   ", "VALIDATION_FAILED"),
    (".", "VALIDATION_FAILED"),
    ("./", "VALIDATION_FAILED"),
    ("../x", "PERMISSION_DENIED"),
    ("a/../../x", "PERMISSION_DENIED"),
    ("a/..", "PERMISSION_DENIED"),
    ("..", "PERMISSION_DENIED"),
    ("/etc/passwd", "PERMISSION_DENIED"),
    ("//etc/passwd", "PERMISSION_DENIED"),
    ("C:/x", "PERMISSION_DENIED"),
    ("C:\\x", "VALIDATION_FAILED"),
    ("a\\b.txt", "VALIDATION_FAILED"),
    ("..\\x", "VALIDATION_FAILED"),
    ("a\x00b", "VALIDATION_FAILED"),
    ("a\nb", "VALIDATION_FAILED"),
    ("tab\there", "VALIDATION_FAILED"),
    ("~", "VALIDATION_FAILED"),
    ("~/x", "VALIDATION_FAILED"),
    ("~root/.ssh/id_rsa", "VALIDATION_FAILED"),
    ("a/~b", "VALIDATION_FAILED"),
    ("x" * (MAX_COMPONENT_BYTES + 1), "VALIDATION_FAILED"),
    ("é" * (MAX_COMPONENT_BYTES // 2 + 1), "VALIDATION_FAILED"),
    ("/".join(["d"] * (MAX_DEPTH + 1)), "VALIDATION_FAILED"),
    ("a/" * (MAX_PATH_CHARS // 2 + 1), "VALIDATION_FAILED"),
    ("\ud800.txt", "VALIDATION_FAILED"),
]


@pytest.mark.parametrize(("raw", "code"), REFUSED, ids=[repr(raw)[:40] for raw, _ in REFUSED])
def test_resolver_refuses(ws: Workspaces, raw: str, code: str) -> None:
    with pytest.raises(ToolFailure) as info:
        resolve_path(ws.root(), raw)
    assert info.value.code == code
    assert info.value.message.endswith(".")  # a sentence telling the model what to do


@pytest.mark.parametrize(
    ("raw", "code"), [r for r in REFUSED if r[0].strip()], ids=[repr(r[0])[:40] for r in REFUSED if r[0].strip()]
)
def test_write_tool_refuses_and_creates_nothing(ws: Workspaces, raw: str, code: str) -> None:
    ws.root()  # created lazily by any call; what matters is that nothing else appears
    before = sorted(Path(ws.settings.data_dir).rglob("*"))
    ws.fail("write_file", code, path=raw, content="x")
    assert sorted(Path(ws.settings.data_dir).rglob("*")) == before


@pytest.mark.parametrize(
    ("raw", "parts"),
    [
        ("./a//b.txt", ("a", "b.txt")),
        ("a/./b/", ("a", "b")),
        ("...", ("...",)),
        ("a..b", ("a..b",)),
        ("café/naïve.txt", ("café", "naïve.txt")),
        ("x" * MAX_COMPONENT_BYTES, ("x" * MAX_COMPONENT_BYTES,)),
    ],
)
def test_resolver_accepts_and_normalises(ws: Workspaces, raw: str, parts: tuple[str, ...]) -> None:
    target = resolve_path(ws.root(), raw)
    assert target.parts == parts
    assert target.absolute == ws.root().joinpath(*parts)


def test_root_is_per_user_and_lazy(ws: Workspaces) -> None:
    base = Path(ws.settings.data_dir).resolve() / "workspaces"
    assert not base.exists()
    assert ws.root() == base / str(ws.alice)
    assert ws.root(ws.bob) == base / str(ws.bob)
    assert stat.S_IMODE(os.stat(ws.root()).st_mode) == 0o700


# links pointing outside: every tool refuses or skips, the target is never touched ----------


def link_outside_file(ws: Workspaces) -> Path:
    link = ws.root() / "link.txt"
    link.symlink_to(ws.secret)
    return link


def test_read_through_link_outside_is_refused(ws: Workspaces) -> None:
    link_outside_file(ws)
    message = ws.fail("read_file", "PERMISSION_DENIED", path="link.txt")
    assert "symbolic link" in message and "TOP SECRET" not in message


def test_write_through_link_outside_is_refused(ws: Workspaces) -> None:
    link = link_outside_file(ws)
    ws.fail("write_file", "PERMISSION_DENIED", path="link.txt", content="PWNED")
    assert ws.secret.read_text() == "TOP SECRET outside the sandbox\n"
    assert link.is_symlink()


def test_edit_through_link_outside_is_refused(ws: Workspaces) -> None:
    link_outside_file(ws)
    ws.fail("edit_file", "PERMISSION_DENIED", path="link.txt", edits=EDIT)
    assert ws.secret.read_text() == "TOP SECRET outside the sandbox\n"


def test_list_and_search_skip_links(ws: Workspaces) -> None:
    link_outside_file(ws)
    (ws.root() / "ok.txt").write_text("TOP SECRET is not here, just the words\n")
    listed = ws.ok("list_files").output
    assert [entry["path"] for entry in listed["files"]] == ["ok.txt"]
    assert listed["skipped"] == ["link.txt"]
    found = ws.ok("search_files", pattern="outside the sandbox").output
    assert found["matches"] == [] and found["skipped"] == ["link.txt"]


def test_dangling_link_is_not_written_through(ws: Workspaces) -> None:
    (ws.root() / "new.txt").symlink_to(ws.outside / "created.txt")
    ws.fail("write_file", "PERMISSION_DENIED", path="new.txt", content="x")
    assert not (ws.outside / "created.txt").exists()


def test_link_to_a_file_inside_is_refused_too(ws: Workspaces) -> None:
    (ws.root() / "real.txt").write_text("inside\n")
    (ws.root() / "alias.txt").symlink_to(ws.root() / "real.txt")
    ws.fail("read_file", "PERMISSION_DENIED", path="alias.txt")
    ws.fail("write_file", "PERMISSION_DENIED", path="alias.txt", content="changed")
    assert (ws.root() / "real.txt").read_text() == "inside\n"


@pytest.mark.parametrize("inside", [False, True])
def test_linked_directory_component_is_refused(ws: Workspaces, inside: bool) -> None:
    target = ws.root() / "realdir" if inside else ws.outside
    target.mkdir(exist_ok=True)
    (target / "secret.txt").write_text("TOP SECRET\n")
    (ws.root() / "dir").symlink_to(target, target_is_directory=True)
    ws.fail("read_file", "PERMISSION_DENIED", path="dir/secret.txt")
    ws.fail("write_file", "PERMISSION_DENIED", path="dir/new.txt", content="x")
    ws.fail("write_file", "PERMISSION_DENIED", path="dir/sub/new.txt", content="x")
    ws.fail("edit_file", "PERMISSION_DENIED", path="dir/secret.txt", edits=EDIT)
    assert not (target / "new.txt").exists() and not (target / "sub").exists()
    assert (target / "secret.txt").read_text() == "TOP SECRET\n"
    listed = [entry["path"] for entry in ws.ok("list_files").output["files"]]
    assert "dir/secret.txt" not in listed
    assert all(m["path"] != "dir/secret.txt" for m in ws.ok("search_files", pattern="SECRET").output["matches"])


def test_file_used_as_directory(ws: Workspaces) -> None:
    (ws.root() / "plain.txt").write_text("x")
    ws.fail("read_file", "VALIDATION_FAILED", path="plain.txt/inner")
    ws.fail("write_file", "VALIDATION_FAILED", path="plain.txt/inner", content="x")


# special files: refused without being opened (a FIFO would block a plain open) ------------


def test_fifo_is_refused_and_skipped(ws: Workspaces) -> None:
    os.mkfifo(ws.root() / "pipe")
    assert "FIFO" in ws.fail("read_file", "PERMISSION_DENIED", path="pipe")
    ws.fail("write_file", "PERMISSION_DENIED", path="pipe", content="x")
    ws.fail("edit_file", "PERMISSION_DENIED", path="pipe", edits=EDIT)
    assert ws.ok("list_files").output["skipped"] == ["pipe"]
    assert ws.ok("search_files", pattern="x").output["skipped"] == ["pipe"]
    assert stat.S_ISFIFO(os.lstat(ws.root() / "pipe").st_mode)


def test_device_node_is_refused(ws: Workspaces) -> None:
    try:
        os.mknod(ws.root() / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError):
        pytest.skip("creating device nodes needs CAP_MKNOD")
    assert "device" in ws.fail("read_file", "PERMISSION_DENIED", path="null")
    ws.fail("write_file", "PERMISSION_DENIED", path="null", content="x")
    assert ws.ok("list_files").output["skipped"] == ["null"]


def test_socket_is_refused(ws: Workspaces) -> None:
    import socket

    path = ws.root() / "s.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        assert "socket" in ws.fail("read_file", "PERMISSION_DENIED", path="s.sock")


# swapped between calls, and between the check and the I/O ---------------------------------


def test_file_swapped_for_a_link_between_calls(ws: Workspaces) -> None:
    ws.ok("write_file", path="a.txt", content="mine")
    assert "mine" in ws.ok("read_file", path="a.txt").text
    (ws.root() / "a.txt").unlink()
    (ws.root() / "a.txt").symlink_to(ws.secret)
    ws.fail("read_file", "PERMISSION_DENIED", path="a.txt")
    ws.fail("write_file", "PERMISSION_DENIED", path="a.txt", content="PWNED")
    assert ws.secret.read_text() == "TOP SECRET outside the sandbox\n"


def test_component_swapped_after_the_check_cannot_redirect(ws: Workspaces) -> None:
    """resolve_path checked `d` as a real directory; it then becomes a link: fs.py still refuses."""
    (ws.root() / "d").mkdir()
    (ws.root() / "d" / "secret.txt").write_text("mine\n")
    read_target = resolve_path(ws.root(), "d/secret.txt")
    write_target = resolve_path(ws.root(), "d/new.txt")
    (ws.root() / "d").rename(ws.root() / "d-old")
    (ws.root() / "d").symlink_to(ws.outside, target_is_directory=True)
    with pytest.raises(ToolFailure) as info:
        read_bytes(read_target)
    assert info.value.code == "PERMISSION_DENIED"
    with pytest.raises(ToolFailure):
        write_atomic(write_target, b"PWNED")
    assert sorted(p.name for p in ws.outside.iterdir()) == ["secret.txt"]


def test_leaf_swapped_after_the_check_is_replaced_not_followed(ws: Workspaces) -> None:
    target = resolve_path(ws.root(), "leaf.txt")
    (ws.root() / "leaf.txt").symlink_to(ws.secret)
    with pytest.raises(ToolFailure):
        write_atomic(target, b"PWNED")
    assert ws.secret.read_text() == "TOP SECRET outside the sandbox\n"


# fuzzing: anything either fails cleanly or lands strictly inside the workspace -------------


@pytest.fixture(scope="module")
def fuzz_root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "workspace"
        (root / "sub").mkdir(parents=True)
        (root / "sub" / "file.txt").write_text("x")
        (root / "link").symlink_to(Path(tmp), target_is_directory=True)
        (root / "sub" / "up").symlink_to("..", target_is_directory=True)
        os.mkfifo(root / "fifo")
        yield root


PIECES = st.sampled_from(
    ["a", "..", ".", "/", "\\", "~", "\x00", "link", "sub", "up", "fifo", "file.txt", "C:", " ", "é"]
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.one_of(st.text(max_size=80), st.lists(PIECES, max_size=12).map("".join)))
def test_fuzzed_paths_are_refused_or_strictly_inside(fuzz_root: Path, raw: str) -> None:
    try:
        target = resolve_path(fuzz_root, raw)
    except ToolFailure as failure:
        assert failure.code in {"VALIDATION_FAILED", "PERMISSION_DENIED", "NOT_FOUND"}
        return
    real_root = os.path.realpath(fuzz_root)
    real = os.path.realpath(target.absolute)
    assert os.path.commonpath([real_root, real]) == real_root
    assert real != real_root
    assert real == os.path.join(real_root, *target.parts)  # no component was a link
