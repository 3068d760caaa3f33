"""Submitted file names and sizes are checked, and the archive holds only plain files."""

from __future__ import annotations

import io
import tarfile

import pytest

from judge.files import MAX_FILE_BYTES, MAX_FILES, SubmissionError, build_archive, check_files


@pytest.mark.parametrize(
    "name",
    [
        "../etc/passwd",
        "/etc/passwd",
        "a/../../x",
        "a/./b",
        "a//b",
        "a/",
        "",
        "a\\b",
        "x\x00y",
        "new\nline",
        ".judge/stdin",
        "/".join(["d"] * 9) + "/f",
        "x" * 101,
    ],
)
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(SubmissionError):
        check_files({name: "print(1)"})


@pytest.mark.parametrize("name", ["main.py", "src/util.py", "a/b/c/d.txt", ".hidden", "..dots", "ünï cödé.py"])
def test_good_names_pass(name: str) -> None:
    assert name in check_files({name: "x"})


def test_huge_files_are_refused_with_a_clear_message() -> None:
    with pytest.raises(SubmissionError, match="at most"):
        check_files({"main.py": "x" * (MAX_FILE_BYTES + 1)})
    with pytest.raises(SubmissionError, match="total"):
        check_files({f"f{i}.py": "x" * (MAX_FILE_BYTES - 1) for i in range(5)})
    with pytest.raises(SubmissionError, match="at most"):
        check_files({f"f{i}.py": "" for i in range(MAX_FILES + 1)})
    with pytest.raises(SubmissionError, match="no files"):
        check_files({})


def test_a_name_cannot_be_both_file_and_folder() -> None:
    with pytest.raises(SubmissionError, match="both a file and a folder"):
        check_files({"a": "1", "a/b": "2"})


@pytest.mark.parametrize(
    "files",
    [{"main.py": "print('\udcff')"}, {"main\ud800.py": "print(1)"}, {"main.py": "# \ud83d\ude00 as two escapes"}],
)
def test_lone_surrogates_are_refused_with_a_clear_message(files: dict[str, str]) -> None:
    """A surrogate is not text: the program is refused, never judged after a silent change."""
    with pytest.raises(SubmissionError, match="lone surrogate"):
        check_files(files)


def test_real_characters_outside_the_bmp_pass() -> None:
    assert check_files({"main.py": "print('😀')"})["main.py"] == "print('😀')".encode()


def test_archive_holds_only_regular_files_and_folders_owned_by_the_sandbox_user() -> None:
    files = check_files({"main.py": "print(1)", "pkg/mod.py": "X = 1"})
    data = build_archive(files, {"stdin": b"42\n"})
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {"main.py", "pkg", "pkg/mod.py", ".judge", ".judge/stdin"}
        for member in members.values():
            assert member.isfile() or member.isdir()
            assert (member.uid, member.gid) == (65534, 65534)
            assert member.mode == (0o755 if member.isdir() else 0o644)
        assert tar.extractfile("pkg/mod.py").read() == b"X = 1"  # type: ignore[union-attr]
