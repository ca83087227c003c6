"""A ``.pt2`` package is checked and unpacked by aitune before torch sees it.

torch's package loader extracts members under their stored names, so a package with a
``..`` member writes outside the loader's folder. The unit tests hand-make zip files
(no compile); the end-to-end ones take one compiled package, add an escaping member to
a copy, and load both through the backend.
"""

from __future__ import annotations

import stat
import tempfile
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import torch

from aitune_core.plugin_api import BuildContext
from aitune_core.testing.recording import at_shape
from aitune_inductor import TorchInductorAotBackend, aot
from aitune_inductor.aot import PACKAGE_ARTIFACT, load_package
from aitune_inductor.package_safety import DEFAULT_LIMITS, PackageLimits, check_package, unpack_package


def _member(name: str, mode: int = 0) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = mode << 16
    return info


def _write_zip(path: Path, members: list[tuple[zipfile.ZipInfo, bytes]], compression: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", compression=compression) as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zipfile warns about duplicate names, which some tests want
        for info, data in members:
            info.compress_type = compression
            archive.writestr(info, data)
    return path


def _plain(name: str, data: bytes = b"data") -> tuple[zipfile.ZipInfo, bytes]:
    return _member(name), data


GOOD = [_plain("pkg/data/aotinductor/model/wrapper.cpp"), _plain("pkg/archive_format", b"pt2")]


@pytest.fixture
def canary(tmp_path: Path) -> Iterator[Path]:
    """A folder that must stay empty; the test's temp folder is where torch would extract."""
    folder = tmp_path / "canary-dir"
    folder.mkdir()
    yield folder
    assert list(folder.iterdir()) == []


def _refused(path: Path, member: str, scratch: Path, limits: PackageLimits = DEFAULT_LIMITS) -> str:
    with pytest.raises(ValueError, match="refusing AOT package") as refused:
        unpack_package(path, scratch, limits)
    message = str(refused.value)
    assert repr(member) in message, message
    assert not scratch.exists() or list(scratch.iterdir()) == [], "a refused package leaves nothing behind"
    return message


# --------------------------------------------------------------------------- unit tests
@pytest.mark.parametrize(
    "name",
    [
        "pkg/data/aotinductor/model/../../../../canary-dir/pwned",
        "../canary-dir/pwned",
        "pkg/./data",
        "pkg//data",
        "pkg\\..\\canary-dir\\pwned",
        "C:/canary-dir/pwned",
    ],
)
def test_member_names_that_could_leave_the_folder_are_refused(tmp_path: Path, canary: Path, name: str) -> None:
    package = _write_zip(tmp_path / "evil.pt2", [*GOOD, _plain(name)])
    _refused(package, name, tmp_path / "scratch")


def test_an_absolute_member_is_refused(tmp_path: Path, canary: Path) -> None:
    name = str(canary / "pwned")
    package = _write_zip(tmp_path / "evil.pt2", [*GOOD, _plain(name)])
    assert name in zipfile.ZipFile(package).namelist()
    assert "absolute" in _refused(package, name, tmp_path / "scratch")


@pytest.mark.parametrize("kind", [stat.S_IFLNK, stat.S_IFCHR, stat.S_IFIFO])
def test_links_and_special_files_are_refused(tmp_path: Path, canary: Path, kind: int) -> None:
    link = _member("pkg/data/aotinductor/model/link", kind | 0o777)
    package = _write_zip(tmp_path / "evil.pt2", [*GOOD, (link, str(canary).encode())])
    assert "not a plain file" in _refused(package, link.filename, tmp_path / "scratch")


@pytest.mark.parametrize("second", ["pkg/archive_format", "PKG/Archive_Format"])
def test_duplicate_names_are_refused(tmp_path: Path, canary: Path, second: str) -> None:
    package = _write_zip(tmp_path / "evil.pt2", [*GOOD, _plain(second, b"replaced")])
    assert "appears twice" in _refused(package, second, tmp_path / "scratch")


def test_too_many_members_are_refused(tmp_path: Path) -> None:
    package = _write_zip(tmp_path / "many.pt2", [_plain(f"pkg/file{i}") for i in range(5)])
    with pytest.raises(ValueError, match="holds 5 members, more than the limit of 4"):
        check_package(package, PackageLimits(max_members=4))
    assert len(check_package(package, PackageLimits(max_members=5))) == 5


def test_a_package_too_large_once_extracted_is_refused(tmp_path: Path) -> None:
    package = _write_zip(tmp_path / "large.pt2", [_plain("pkg/a", b"x" * 600), _plain("pkg/b", b"y" * 600)])
    message = _refused(package, "pkg/b", tmp_path / "scratch", PackageLimits(max_total_bytes=1000))
    assert "limit of 1000 bytes" in message


def test_a_highly_compressed_member_is_refused(tmp_path: Path) -> None:
    bomb = _member("pkg/data/aotinductor/model/zeros.bin")
    package = _write_zip(tmp_path / "bomb.pt2", [*GOOD, (bomb, bytes(8 * 2**20))], zipfile.ZIP_DEFLATED)
    assert "more than 100 times" in _refused(package, bomb.filename, tmp_path / "scratch")


def test_a_clean_package_is_unpacked_into_a_private_folder(tmp_path: Path) -> None:
    package = _write_zip(tmp_path / "good.pt2", [(_member("pkg/data/"), b""), *GOOD])
    checked = unpack_package(package, tmp_path / "scratch")
    assert checked.folder.parent == tmp_path / "scratch"
    assert stat.S_IMODE(checked.folder.stat().st_mode) == 0o700
    assert (checked.tree / "pkg" / "archive_format").read_bytes() == b"pt2"
    copy = checked.clean_copy()
    with zipfile.ZipFile(copy) as archive:
        assert archive.namelist() == [info.filename for info, _ in GOOD]
    checked.remove()
    assert not checked.folder.exists()


def test_a_damaged_zip_is_refused(tmp_path: Path) -> None:
    (tmp_path / "junk.pt2").write_bytes(b"not a zip at all")
    with pytest.raises(ValueError, match="not a valid zip file"):
        unpack_package(tmp_path / "junk.pt2", tmp_path / "scratch")


# --------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def built(mlp_context: BuildContext) -> Iterator[TorchInductorAotBackend]:
    backend = TorchInductorAotBackend().build(mlp_context)
    yield backend
    backend.deactivate()


def _restored(built: TorchInductorAotBackend, package: Path) -> TorchInductorAotBackend:
    state = built.to_dict()
    return TorchInductorAotBackend.from_dict({**state, "artifacts": {PACKAGE_ARTIFACT: str(package)}})


def _with_member(source: Path, target: Path, name: str) -> Path:
    target.write_bytes(source.read_bytes())
    with zipfile.ZipFile(target, "a") as archive:
        archive.writestr(name, b"written by a package")
    return target


@pytest.mark.slow
def test_a_package_with_an_escaping_member_is_refused_through_the_backend(
    built: TorchInductorAotBackend, mlp_context: BuildContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch extracts under $TMPDIR/<random>/: six ``..`` from the model folder reach the test's folder."""
    assert built.package_path is not None
    monkeypatch.setenv("TMPDIR", str(tmp_path / "torch-tmp"))
    monkeypatch.setattr(tempfile, "tempdir", None)
    (tmp_path / "torch-tmp").mkdir()
    canary = tmp_path / "canary-dir"
    canary.mkdir()
    with zipfile.ZipFile(built.package_path) as archive:
        root = archive.namelist()[0].split("/")[0]
    member = f"{root}/data/aotinductor/model/../../../../../../canary-dir/pwned"
    evil = _with_member(built.package_path, tmp_path / "evil.pt2", member)
    context = attrs.evolve(mlp_context, cache_dir=tmp_path / "cache")
    backend = _restored(built, evil)
    with pytest.raises(ValueError, match="refusing AOT package") as refused:
        backend.activate(context)
    assert repr(member) in str(refused.value)
    assert list(canary.iterdir()) == []
    assert list((tmp_path / "torch-tmp").iterdir()) == []
    assert not (tmp_path / "cache").exists() or list((tmp_path / "cache").iterdir()) == []


@pytest.mark.slow
def test_a_clean_package_loads_and_runs_from_a_private_copy(
    built: TorchInductorAotBackend, mlp_context: BuildContext, tmp_path: Path
) -> None:
    assert built.package_path is not None
    copy = tmp_path / "checkpoint" / "model.pt2"
    copy.parent.mkdir()
    copy.write_bytes(built.package_path.read_bytes())
    backend = _restored(built, copy)
    assert backend.native_artifacts() == frozenset({PACKAGE_ARTIFACT})
    context = attrs.evolve(mlp_context, cache_dir=tmp_path / "cache")
    backend.activate(context)
    (unpacked,) = (tmp_path / "cache").iterdir()
    assert unpacked.name.startswith("aitune-aot-") and stat.S_IMODE(unpacked.stat().st_mode) == 0o700
    args, kwargs = at_shape(mlp_context, "opt")
    with torch.no_grad():
        torch.testing.assert_close(backend(*args, **kwargs), mlp_context.module(*args, **kwargs))
    backend.deactivate()
    assert not unpacked.exists(), "the private copy goes with the loaded package"


@pytest.mark.slow
def test_a_torch_that_reads_only_zip_files_gets_a_clean_copy(
    built: TorchInductorAotBackend, mlp_context: BuildContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert built.package_path is not None
    monkeypatch.setattr(aot, "_folder_loader", lambda tree, index: None)
    model = load_package(built.package_path, -1, tmp_path / "scratch")
    x = torch.randn(3, 8)
    with pytest.raises(RuntimeError, match="reads its weights from the module and was given none"):
        model(x)
    weights = mlp_context.module.state_dict()
    model.load_constants({name: weights[name] for name in model.get_constant_fqns()}, check_full_update=True)
    with torch.no_grad():
        torch.testing.assert_close(model(x), mlp_context.module(x))
    assert list((tmp_path / "scratch").iterdir()) == [], "torch extracted the clean copy; aitune's is gone"
