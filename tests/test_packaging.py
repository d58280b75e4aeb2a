"""Packaging: the wheel ships ldp, transforms, pipelines and schemas (with the schema files) and nothing else,
the version has one source, the console script and the license are declared, Beam is pinned to a range.

The wheel is built from a copy of the source tree (so the working tree gets no build/ or egg-info), offline
(``--no-build-isolation`` with the environment's setuptools and wheel), and then imported from its
unpacked contents alone. Integration tier (tests/conftest.py: the whole file).
"""

from __future__ import annotations

import email
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import ldp

PACKAGES = ("ldp", "wire", "store", "simulator", "transforms", "pipelines", "schemas")
LEFT_OUT = ("bench", "experiments", "tests", "tools", "docs")


def _source_files(root: Path) -> list[str]:
    """The repository's files (tracked or new, not ignored), as git sees them."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=root, capture_output=True, check=True,
    )  # fmt: skip
    return [f for f in out.stdout.decode().split("\0") if f and (root / f).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory, repo_root):
    if shutil.which("git") is None:
        pytest.fail("git is needed to list the source tree")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    files = _source_files(repo_root)
    for f in files:
        dst = src / f
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo_root / f, dst)
    dist = tmp / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", dist, src],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (path,) = dist.glob("ldp_beam-*.whl")
    return {"path": path, "src": src, "files": files, "tmp": tmp}


@pytest.mark.integration
def test_wheel_ships_the_packages_and_schema_files_only(wheel):
    with zipfile.ZipFile(wheel["path"]) as zf:
        names = zf.namelist()
    top = {n.split("/", 1)[0] for n in names}
    info = f"ldp_beam-{ldp.__version__}.dist-info"
    assert top == {*PACKAGES, info}, top
    assert not [n for n in names if n.split("/", 1)[0] in LEFT_OUT]
    # every module and schema file of the packages is in it (a missing __init__.py would drop a package)
    wanted = {
        f for f in wheel["files"]
        if f.split("/", 1)[0] in PACKAGES and (f.endswith(".py") or f.endswith((".avsc", ".json")))
    }  # fmt: skip
    assert wanted - set(names) == set(), sorted(wanted - set(names))
    schema_files = {n for n in names if n.startswith("schemas/") and not n.endswith(".py")}
    assert {"schemas/report.avsc", "schemas/estimate.avsc", "schemas/dead_letter.avsc"} <= schema_files
    assert any(n.endswith(".schema.json") for n in schema_files)  # the task file's JSON Schema
    assert all(n.endswith((".avsc", ".json")) for n in schema_files)
    assert f"{info}/LICENSE" in names


@pytest.mark.integration
def test_wheel_metadata_version_license_entry_point_and_pins(wheel):
    with zipfile.ZipFile(wheel["path"]) as zf:
        info = f"ldp_beam-{ldp.__version__}.dist-info"
        meta = email.message_from_bytes(zf.read(f"{info}/METADATA"))
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
        license_text = zf.read(f"{info}/LICENSE").decode()
    assert meta["Name"] == "ldp-beam" and meta["Version"] == ldp.__version__
    assert meta["License"] == "Apache-2.0"
    assert "Apache License" in license_text and "Version 2.0" in license_text
    assert re.search(r"^ldp-beam = pipelines\.cli:main$", entry_points, re.M), entry_points
    requires = meta.get_all("Requires-Dist")
    beam = [r for r in requires if r.startswith("apache-beam")]
    assert beam and "<2.78" in beam[0] and ">=2.77" in beam[0], beam  # a tested range, not a hard pin
    assert not any("==" in r.split(";")[0] for r in requires), requires  # no hard pins (markers aside)


@pytest.mark.integration
def test_the_unpacked_wheel_works_on_its_own(wheel, tmp_path):
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel["path"]) as zf:
        zf.extractall(site)
    code = (
        "import ldp, pipelines.cli, schemas, transforms;"
        "from ldp.task import load_task;"
        "mods = (ldp, pipelines.cli, schemas, transforms);"
        f"assert all(m.__file__.startswith({str(site)!r}) for m in mods);"
        "schemas.report_schema();"
        "print(ldp.__version__)"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}

    def python(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True)

    out = python("-c", code)
    assert out.returncode == 0 and out.stdout.strip() == ldp.__version__, out.stderr
    help_out = python("-m", "pipelines.cli", "--help")
    assert help_out.returncode == 0 and "simulate" in help_out.stdout, help_out.stderr
    assert python("-c", "import bench").returncode != 0  # bench is not installed


def test_version_has_one_source(repo_root):
    setup_py = (repo_root / "setup.py").read_text(encoding="utf-8")
    assert "version=VERSION" in setup_py and not re.search(r"version\s*=\s*['\"]\d", setup_py)
    assert re.fullmatch(r"\d+\.\d+\.\d+", ldp.__version__)


def test_constraints_pin_what_setup_allows(repo_root):
    pins = dict(
        line.split("==", 1)
        for line in (repo_root / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert pins["apache-beam"].startswith("2.77.")
    for name in ("numpy", "scipy", "fastavro", "pytest", "google-cloud-pubsub", "google-apitools", "wheel"):
        assert name in pins, name
    script = (repo_root / "tools" / "ensure_venv.sh").read_text()
    assert '-c "$constraints"' in script and "[test,pubsub]" in script
