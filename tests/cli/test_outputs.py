"""Output hazards: every kind of target a ``--json``/``--csv``/``--out`` path can name.

Each test builds its targets in a tmp dir; ``/dev/null`` is only written when running as root
(the case that used to replace it) and then checked to still be a character device.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from neuscale_opt.cli import main
from neuscale_opt.errors import InputError
from neuscale_opt.io import Outputs, check_output, emit

ROOT = Path(__file__).resolve().parents[2]
SMALL = str(ROOT / "instances" / "small.toml")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield 0o027
    os.umask(old)


def _read_fifo(path: Path, sink: list[bytes]) -> threading.Thread:
    def reader() -> None:
        with open(path, "rb") as fh:
            sink.append(fh.read())

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    return t


# ----------------------------------------------------------------------------------------------
# the write rules, one hazard kind each
# ----------------------------------------------------------------------------------------------
def test_regular_file_is_replaced_atomically_with_the_umask(tmp_path, umask_027):
    p = tmp_path / "a.json"
    emit("one\n", str(p))
    assert p.read_text() == "one\n"
    assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~0o027 == 0o640
    os.chmod(p, 0o604)  # an existing file keeps its mode when replaced
    ino = p.stat().st_ino
    emit("two\n", str(p))
    assert p.read_text() == "two\n" and stat.S_IMODE(p.stat().st_mode) == 0o604
    assert p.stat().st_ino != ino  # replaced by rename, not rewritten in place
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a.json"]  # no temporary left


def test_symlink_is_followed_and_kept(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old\n")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    emit("new\n", str(link))
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new\n"
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "created.json")
    emit("x\n", str(dangling))
    assert dangling.is_symlink() and (tmp_path / "created.json").read_text() == "x\n"


def test_fifo_is_written_through(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    t = _read_fifo(fifo, got)
    emit("through the pipe\n", str(fifo))
    t.join(timeout=10)
    assert not t.is_alive() and got == [b"through the pipe\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still a FIFO, not replaced by a file


def test_fifo_through_the_cli(tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    t = _read_fifo(fifo, got)
    code, _, err = run(capsys, "catalog", "chips", "--csv", fifo)
    t.join(timeout=10)
    assert code == 0, err
    assert got and got[0].decode().startswith("name,label,vendor")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_dev_stdout_redirected_to_a_file_is_appended_to(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "out.csv"
    out.write_text("kept\n")
    with open(out, "ab") as fh:  # the shell's `>> out.csv`
        cmd = [sys.executable, "-m", "neuscale_opt.cli", "catalog", "chips", "--csv", "/dev/stdout"]
        subprocess.run(cmd, stdout=fh, check=True)
    lines = out.read_text().splitlines()
    assert lines[0] == "kept" and lines[1].startswith("name,label,vendor")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="only as root could it be replaced")
def test_dev_null_stays_a_character_device(capsys):
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    code, _, err = run(capsys, "catalog", "models", "--csv", "/dev/null")
    assert code == 0, err
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_non_regular_target_is_opened_not_replaced(tmp_path):
    """The rule itself, without touching a real device: a non-regular target is opened for writing."""
    dev = tmp_path / "dev"
    os.mkfifo(dev)  # stands in for a device: any non-regular file takes the write-through path
    got: list[bytes] = []
    t = _read_fifo(dev, got)
    with Outputs() as out:
        out.add(b"\x00\x01", str(dev))
    t.join(timeout=10)
    assert got == [b"\x00\x01"]


@pytest.mark.parametrize(
    "dest, message",
    [
        ("", "empty path"),
        ("a\x00b.json", "NUL"),
        ("{tmp}", "is a directory"),
        ("{tmp}/missing/x.json", "directory does not exist"),
        ("{tmp}/file.txt/x.json", "parent is not a directory"),
    ],
)
def test_bad_targets_are_one_line_input_errors(tmp_path, capsys, dest, message):
    (tmp_path / "file.txt").write_text("keep")
    dest = dest.replace("{tmp}", str(tmp_path))
    with pytest.raises(InputError, match=message):
        check_output(dest, "--json")
    code, out, err = run(capsys, "validate", SMALL, "--json", dest)
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err
    assert out == ""
    assert (tmp_path / "file.txt").read_text() == "keep"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["file.txt"]


def test_empty_out_folder_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "plan", SMALL, "--out", "", "--quiet")
    assert code == 2 and "--out: empty path" in err
    assert list(tmp_path.iterdir()) == []  # nothing written into the working directory


def test_output_paths_are_checked_before_the_solve(tmp_path, capsys, monkeypatch):
    import neuscale_opt.planning as planning

    def no_solve(*a, **k):  # pragma: no cover - reached only if the check came too late
        raise AssertionError("planned before checking --json")

    monkeypatch.setattr(planning, "plan_any", no_solve)
    code, _, err = run(capsys, "plan", SMALL, "--json", tmp_path / "no" / "x.json", "--quiet")
    assert code == 2 and "directory does not exist" in err
    code, _, err = run(capsys, "plan", SMALL, "--save-lp", tmp_path, "--quiet")
    assert code == 2 and "--save-lp" in err and "is a directory" in err


# ----------------------------------------------------------------------------------------------
# all or nothing
# ----------------------------------------------------------------------------------------------
def test_partial_multi_output_leaves_nothing(tmp_path, capsys):
    old = tmp_path / "c.json"
    old.write_text("previous\n")
    code, _, err = run(capsys, "candidates", SMALL, "--json", old, "--csv", tmp_path / "no" / "c.csv")
    assert code == 2 and "--csv" in err
    assert old.read_text() == "previous\n"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["c.json"]


def test_a_failing_commit_stage_removes_every_staged_file(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    with pytest.raises(RuntimeError):
        with Outputs() as out:
            out.add("A", str(a))
            out.add("B", str(b))
            raise RuntimeError("work failed after staging")
    assert list(tmp_path.iterdir()) == []


def test_replay_json_and_requests_both_or_neither(tmp_path, capsys):
    from neuscale_opt.candidates import build_coefficients
    from neuscale_opt.instance import load_instance
    from neuscale_opt.replay import simple_plan

    inst = str(ROOT / "instances" / "azure-conv.toml")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(simple_plan(build_coefficients(load_instance(inst)))))
    (tmp_path / "d").mkdir()
    code, _, err = run(
        capsys, "replay", plan, "--instance", inst, "--json", tmp_path / "r.json", "--requests", tmp_path / "d"
    )
    assert code == 2 and "--requests" in err and "is a directory" in err
    assert not (tmp_path / "r.json").exists()


def test_folder_is_built_aside_and_renamed(tmp_path, umask_027):
    out = tmp_path / "rep"
    with Outputs() as o:
        o.add_folder({"a.txt": b"a", "sub/b.txt": b"b"}, str(out))
    assert (out / "a.txt").read_bytes() == b"a" and (out / "sub" / "b.txt").read_bytes() == b"b"
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~0o027
    assert stat.S_IMODE((out / "sub").stat().st_mode) == 0o750
    assert stat.S_IMODE((out / "a.txt").stat().st_mode) == 0o640
    assert sorted(x.name for x in tmp_path.iterdir()) == ["rep"]
    # into an existing folder: new files moved in, other files kept
    (out / "mine.txt").write_text("keep")
    with Outputs() as o:
        o.add_folder({"a.txt": b"A"}, str(out))
    assert (out / "a.txt").read_bytes() == b"A" and (out / "mine.txt").read_text() == "keep"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["rep"]


def test_folder_and_file_fail_together(tmp_path):
    with pytest.raises(InputError, match="--json"):
        with Outputs() as o:
            o.add_folder({"a.txt": b"a"}, str(tmp_path / "rep"))
            o.add("x", str(tmp_path / "missing" / "p.json"), "--json")
    assert list(tmp_path.iterdir()) == []


def test_default_umask_files(tmp_path):
    p = tmp_path / "plain.txt"
    emit("x", str(p))
    assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~_umask()
