"""Saving is atomic: a kill at any step leaves a loadable checkpoint, and its leftovers are cleaned.

The kill test runs each save in a forked process that dies with ``os._exit`` right
before its N-th filesystem call, for N = 1, 2, ... until a save completes. ``os._exit``
is a real kill: no ``except``/``finally`` of the save runs. Forking from one process that
imported torch and tuned the model once keeps each kill point to milliseconds.
"""

from __future__ import annotations

import ctypes
import errno
import gc
import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import aitune_core as ait
from aitune_core.checkpoint import staging
from aitune_core.checkpoint.load import load
from aitune_core.checkpoint.save import save
from aitune_core.log import capture
from aitune_core.testing.timing import FAST_PROFILE

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MAX_KILL_POINTS = 400


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def tuned(name: str, seed: int) -> ait.Module:
    torch.manual_seed(seed)
    module = ait.Module(Tiny().eval(), name)
    ait.tune(
        module,
        [torch.randn(4) for _ in range(2)],
        batch_sizes=[1, 2],
        strategy=ait.FirstWinsStrategy([ait.TorchEagerBackend()], profile=FAST_PROFILE),
    )
    return module


def probe() -> torch.Tensor:
    return torch.arange(8, dtype=torch.float32).reshape(2, 4) / 7


# Every call through which a save changes the filesystem; the nested ones (rmtree's
# unlinks, Path.mkdir's os.mkdir) add kill points in the middle of the outer ones.
KILLABLE: list[tuple[Any, str]] = [
    (os, "replace"),
    (os, "rename"),
    (os, "link"),
    (os, "unlink"),
    (os, "rmdir"),
    (os, "mkdir"),
    (os, "fsync"),
    (shutil, "copyfile"),
    (shutil, "rmtree"),
    (torch, "save"),
    (Path, "write_text"),
    (Path, "write_bytes"),
    (zipfile.ZipFile, "write"),
    (zipfile.ZipFile, "close"),
    (staging, "exchange"),
]


def die_before_call(n: int, report_fd: int) -> None:
    """Make the ``n``-th filesystem call of this process write its name to ``report_fd`` and kill it."""
    calls = itertools.count(1)

    def patched(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if next(calls) == n:
                os.write(report_fd, name.encode())
                os._exit(137)
            return original(*args, **kwargs)

        return call

    for owner, name in KILLABLE:
        setattr(owner, name, patched(f"{getattr(owner, '__name__', owner)}.{name}", getattr(owner, name)))


def exchange_unsupported(first: Path, second: Path) -> None:
    raise staging.ExchangeUnsupported(38, "no atomic exchange here")


def serve(name: str, expected: str) -> None:
    """The forking server: tune the new model once, then run one killed save per request line."""
    torch.set_num_threads(1)
    model = tuned(name, seed=2)
    torch.save(model(probe()).detach(), expected)
    print("ready", flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            if job["fallback"]:
                staging.exchange = exchange_unsupported
            die_before_call(job["n"], write_end)
            save(model, job["path"], archive=job["archive"])
            os._exit(0)
        os.close(write_end)
        _, status = os.waitpid(pid, 0)  # reaped: its pid is no longer alive for clean_stale
        with os.fdopen(read_end, "rb") as pipe:
            killed_at = pipe.read().decode()
        print(json.dumps({"exit": os.waitstatus_to_exitcode(status), "killed_at": killed_at}), flush=True)


SERVER = """
import sys
sys.path.insert(0, {here!r})
from test_save_atomic import serve
serve({name!r}, {expected!r})
"""


class Killer:
    """A long-lived child that runs saves killed at chosen steps."""

    def __init__(self, folder: Path, name: str) -> None:
        self.name = name
        expected = folder / "new.pt"
        env = {
            **os.environ,
            "AITUNE_CACHE_DIR": str(folder / "cache"),
            "PYTHONPATH": str(ROOT),
            "OMP_NUM_THREADS": "1",
        }
        self.log = (folder / "server.log").open("w")
        code = SERVER.format(here=str(HERE), name=name, expected=str(expected))
        self.process = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
        )
        assert self.reply() == "ready", (folder / "server.log").read_text()[-3000:]
        self.new_output = torch.load(expected)

    def reply(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def save_killed_at(self, n: int, path: Path, archive: bool, fallback: bool) -> dict[str, Any]:
        assert self.process.stdin is not None
        job = {"n": n, "path": str(path), "archive": archive, "fallback": fallback}
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        line = self.reply()
        assert line, self.log.name
        result: dict[str, Any] = json.loads(line)
        return result

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)
        self.log.close()


@pytest.fixture(scope="module")
def killer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Killer]:
    server = Killer(tmp_path_factory.mktemp("killer"), "atomic:new")
    try:
        yield server
    finally:
        server.close()


def siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


@pytest.mark.slow  # kills child processes at each step
@pytest.mark.parametrize(
    ("old_archive", "new_archive", "fallback", "old_aside"),
    [
        pytest.param(False, False, False, False, id="folder"),
        pytest.param(True, True, False, False, id="archive"),
        pytest.param(False, True, False, False, id="folder-to-archive"),
        pytest.param(False, False, True, False, id="folder-without-exchange"),
        # An earlier save was killed between the two renames: this one starts by recovering.
        pytest.param(False, False, True, True, id="recovering-without-exchange"),
    ],
)
def test_a_kill_at_any_step_leaves_a_loadable_checkpoint_and_no_staging_survives_the_next_save(
    killer: Killer,
    tmp_path: Path,
    unique_name: Callable[[str], str],
    old_archive: bool,
    new_archive: bool,
    fallback: bool,
    old_aside: bool,
) -> None:
    if sys.platform != "linux" and not fallback:
        pytest.skip("the atomic exchange is Linux only")
    template = tmp_path / "template" / "ckpt"
    old = tuned(unique_name("old"), seed=1)
    old_output = old(probe()).detach()
    save(old, template, archive=old_archive)
    del old
    gc.collect()

    # A save killed earlier left a partial staging folder: the next save's cleanup can be killed too.
    dead = dead_pid()
    leftover = f".ckpt.saving-{dead}-0bad"
    outcomes: dict[str, list[str]] = {"old": [], "new": []}
    missing_before_recovery = []
    for n in range(1, MAX_KILL_POINTS + 1):
        path = tmp_path / f"run-{n}" / "ckpt"
        path.parent.mkdir()
        old_at = path.parent / f".ckpt.replaced-{dead}-0a51de" if old_aside else path
        if old_archive:
            shutil.copyfile(template, old_at)
        else:
            shutil.copytree(template, old_at)
        (path.parent / leftover / "modules").mkdir(parents=True)
        (path.parent / leftover / "modules" / "weights.pt").write_bytes(b"partial")
        result = killer.save_killed_at(n, path, archive=new_archive, fallback=fallback)
        if fallback:
            if not os.path.lexists(path):
                missing_before_recovery.append(result["killed_at"])
            staging.recover(path)

        loaded = load(Tiny().eval(), path)
        assert isinstance(loaded, ait.Module)
        which = "new" if loaded.name == killer.name else "old"
        expected = killer.new_output if which == "new" else old_output
        torch.testing.assert_close(loaded(probe()), expected, rtol=0, atol=0)
        outcomes[which].append(result["killed_at"] or "completed")

        save(loaded, path, archive=new_archive)
        assert siblings(path) == ["ckpt"], f"killed before call {n} ({result['killed_at']})"
        del loaded
        gc.collect()
        if result["exit"] == 0:
            assert not result["killed_at"]
            break
        assert result["exit"] == 137, result
    else:
        pytest.fail(f"the save still had filesystem calls after {MAX_KILL_POINTS}")

    kill_points = n - 1
    print(f"{kill_points} kill points; old checkpoint after {len(outcomes['old'])}, new after {outcomes['new']}")
    assert kill_points >= 10
    assert outcomes["old"] and outcomes["new"][-1] == "completed"
    if fallback:
        assert "os.replace" in missing_before_recovery, "no kill landed between the two renames"


def make_checkpoint(folder: Path, name: str = "ckpt") -> Path:
    path = folder / name
    path.mkdir(parents=True)
    (path / "manifest.json").write_text("{}")
    return path


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_clean_stale_removes_what_dead_saves_left_and_nothing_else(tmp_path: Path) -> None:
    target = make_checkpoint(tmp_path)
    live, dead = os.getppid(), dead_pid()
    kept = [
        f".ckpt.saving-{live}-0a1b2c3d",
        f".ckpt.replaced-{live}-00ff.zip",
        ".ckpt.saving-1a2b3c4d",  # no pid, and recent: maybe a save of an older version
        ".ckpt.notes",
        f"ckpt.saving-{dead}-ab",
        f".ckpt2.saving-{dead}-ab",
        f".ckpt.saving-{dead}-xyz",
        f".ckpt.saving-{dead}-ab.tar",
    ]
    removed = [
        f".ckpt.saving-{dead}-abcdef12",
        f".ckpt.saving-{dead}-12ab.zip",
        f".ckpt.replaced-{dead}-77",
        ".ckpt.saving-5e6f7a8b",  # no pid, and untouched for two hours
    ]
    for name in kept + removed:
        if name.endswith(".zip"):
            (tmp_path / name).write_bytes(b"PK")
        else:
            (tmp_path / name / "modules").mkdir(parents=True)
            (tmp_path / name / "modules" / "weights.pt").write_bytes(b"x")
    old = time.time() - 7200
    for path in [tmp_path / ".ckpt.saving-5e6f7a8b", *(tmp_path / ".ckpt.saving-5e6f7a8b").rglob("*")]:
        os.utime(path, (old, old))

    with capture() as events:
        result = staging.clean_stale(target)

    assert sorted(p.name for p in result) == sorted(removed)
    assert siblings(target) == sorted([*kept, "ckpt"])
    logged = [e for e in events if e["event"].startswith("removed staging")]
    assert len(logged) == 1 and sorted(logged[0]["removed"]) == sorted(removed)
    assert staging.clean_stale(target) == []


def test_an_idle_save_without_pid_is_kept_while_anything_in_it_is_recent(tmp_path: Path) -> None:
    target = make_checkpoint(tmp_path)
    folder = tmp_path / ".ckpt.saving-5e6f7a8b"
    (folder / "modules").mkdir(parents=True)
    (folder / "modules" / "weights.pt").write_bytes(b"x")
    old = time.time() - 7200
    os.utime(folder, (old, old))
    os.utime(folder / "modules", (old, old))
    assert staging.clean_stale(target) == []
    assert folder.is_dir()


@pytest.mark.parametrize("archive", [False, True], ids=["folder", "archive"])
def test_a_checkpoint_left_only_aside_is_moved_back_not_deleted(tmp_path: Path, archive: bool) -> None:
    target = tmp_path / "ckpt"
    dead = dead_pid()
    if archive:
        aside = tmp_path / f".ckpt.replaced-{dead}-0abc.zip"
        with zipfile.ZipFile(aside, "w") as bundle:
            bundle.writestr("manifest.json", "{}")
    else:
        aside = make_checkpoint(tmp_path, f".ckpt.replaced-{dead}-0abc")
    partial = tmp_path / f".ckpt.saving-{dead}-0def"
    partial.mkdir()  # the new checkpoint, never finished

    with capture() as events:
        removed = staging.clean_stale(target)

    assert removed == [partial]
    assert siblings(target) == ["ckpt"]
    assert staging.is_complete(target) and target.is_file() == archive
    assert any(e["event"].startswith("checkpoint restored") for e in events)


def test_recover_leaves_a_live_save_and_incomplete_asides_alone(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    live = make_checkpoint(tmp_path, f".ckpt.replaced-{os.getppid()}-0abc")
    incomplete = tmp_path / f".ckpt.replaced-{dead_pid()}-0def"
    incomplete.mkdir()
    assert staging.recover(target) is None
    assert not target.exists() and live.is_dir()

    present = make_checkpoint(tmp_path / "other")
    make_checkpoint(tmp_path / "other", f".ckpt.replaced-{dead_pid()}-0abc")
    assert staging.recover(present) is None


def test_an_aside_that_cannot_be_moved_back_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(source: Path, target: Path) -> None:
        raise PermissionError(13, "read-only", str(target))

    monkeypatch.setattr(staging, "_move_without_overwriting", refused)
    aside = make_checkpoint(tmp_path, f".ckpt.replaced-{dead_pid()}-0abc")
    with capture() as events:
        assert staging.clean_stale(tmp_path / "ckpt") == []
    assert aside.is_dir()
    assert any(e["event"].startswith("could not restore") for e in events)


@pytest.mark.skipif(sys.platform != "linux", reason="renameat2 is Linux only")
def test_exchange_swaps_folders_and_files_in_one_step(tmp_path: Path) -> None:
    folder = make_checkpoint(tmp_path, "a")
    single = tmp_path / "b"
    single.write_text("file")
    staging.exchange(folder, single)
    assert folder.read_text() == "file" and (single / "manifest.json").is_file()
    other = make_checkpoint(tmp_path, "c")
    (other / "marker").write_text("c")
    staging.exchange(other, single)
    assert (single / "marker").is_file() and not (other / "marker").exists()
    with pytest.raises(FileNotFoundError):
        staging.exchange(tmp_path / "missing", single)


@pytest.mark.skipif(
    sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64", "aarch64", "arm64"),
    reason="the renameat2 syscall number is known for x86_64 and aarch64",
)
def test_exchange_through_the_raw_syscall_where_libc_lacks_renameat2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    call = staging._renameat2_syscall(ctypes.CDLL(None, use_errno=True), platform.machine())
    monkeypatch.setattr(staging, "_renameat2", lambda: call)
    first, second = make_checkpoint(tmp_path, "a"), make_checkpoint(tmp_path, "b")
    (first / "marker").write_text("a")
    staging.exchange(first, second)
    assert (second / "marker").is_file() and not (first / "marker").exists()


def test_a_filesystem_that_rejects_the_exchange_gets_the_two_renames(
    tmp_path: Path, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def rejecting(*args: Any) -> int:
        ctypes.set_errno(errno.EINVAL)
        return -1

    asides: list[Path] = []
    original = staging.replace_via_aside

    def counted(source: Path, target: Path) -> None:
        asides.append(source)
        original(source, target)

    monkeypatch.setattr(staging, "_renameat2", lambda: rejecting)
    monkeypatch.setattr(staging, "replace_via_aside", counted)
    module = tuned(unique_name("rejected"), seed=6)
    path = save(module, tmp_path / "out" / "ckpt")
    save(module, path)
    assert len(asides) == 1
    assert siblings(path) == ["ckpt"] and staging.is_complete(path)


POLLER = """
import os, sys
path, stop = sys.argv[1], sys.argv[2]
polls = misses = 0
print("polling", flush=True)
while not os.path.exists(stop):
    for _ in range(1000):
        polls += 1
        if not os.path.lexists(path):
            misses += 1
print(polls, misses)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="renameat2 is Linux only")
def test_saving_over_a_checkpoint_swaps_it_in_without_a_moment_where_the_path_is_missing(
    tmp_path: Path, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_fallback(source: Path, target: Path) -> None:
        raise AssertionError("the two-rename fallback was used on Linux")

    monkeypatch.setattr(staging, "replace_via_aside", no_fallback)
    module = tuned(unique_name("swap"), seed=3)
    path = save(module, tmp_path / "out" / "ckpt")
    stop = tmp_path / "out" / "stop"
    poller = subprocess.Popen([sys.executable, "-c", POLLER, str(path), str(stop)], stdout=subprocess.PIPE, text=True)
    try:
        assert poller.stdout is not None and poller.stdout.readline().strip() == "polling"
        for index in range(30):
            archive = index % 3 == 2
            before = os.stat(path).st_ino
            save(module, path, archive=archive)
            assert os.stat(path).st_ino != before  # a new file or folder, not the old one rewritten
            assert path.is_file() == archive
    finally:
        stop.touch()
        output, _ = poller.communicate(timeout=60)
    polls, misses = map(int, output.split())
    assert polls > 1000
    assert misses == 0
    assert siblings(path) == ["ckpt", "stop"]


def test_without_the_exchange_saving_still_replaces_the_checkpoint_and_leaves_nothing(
    tmp_path: Path, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(staging, "exchange", exchange_unsupported)
    first = tuned(unique_name("first"), seed=4)
    path = save(first, tmp_path / "out" / "ckpt")
    second = tuned(unique_name("second"), seed=5)
    expected = second(probe()).detach()
    save(second, path)
    assert siblings(path) == ["ckpt"]
    del first, second
    gc.collect()
    torch.testing.assert_close(load(Tiny().eval(), path)(probe()), expected, rtol=0, atol=0)


def test_staging_names_carry_the_pid_and_match_the_cleanup_pattern(tmp_path: Path) -> None:
    target = tmp_path / "model.aitune"
    name = staging.staging_path(target, staging.SAVING, ".zip")
    assert name.parent == tmp_path
    assert name.name.startswith(f".model.aitune.saving-{os.getpid()}-") and name.name.endswith(".zip")
    name.write_bytes(b"")
    assert staging.staging_siblings(target) == [(name, os.getpid())]
    assert staging.clean_stale(target) == []  # our own save is alive
