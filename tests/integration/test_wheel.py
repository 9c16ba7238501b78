"""The wheel the Dockerfile builds is complete: built from exactly the image's build context, the
way its first stage builds it, installed with its runtime dependencies only (no dev tools) into
a fresh virtual environment, it starts and simulates outside the source tree.

Offline-robust: dependencies come from a wheelhouse kept outside the clone,
``${XDG_CACHE_HOME:-~/.cache}/topo-scheduler/wheelhouse/``, and pip runs with ``--no-index``
against it. Only when something is missing there (the first run, or a new dependency) is it
filled from PyPI with ``pip download``; a machine that has run this test once needs no network.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dockerfile import REPO, copy_of, parse

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
WHEELHOUSE = CACHE / "topo-scheduler" / "wheelhouse"
EXAMPLES = REPO / "configs" / "examples"
DEV_ONLY = {"pytest", "mypy", "ruff", "hypothesis", "import-linter", "grpcio-tools"}
# Files under scheduler/ that are sources, not read at run time: they need not be in the wheel.
NOT_RUNTIME = {".py", ".pyi", ".proto"}


def _clean_env() -> dict[str, str]:
    """The environment without the caller's PYTHONPATH and virtualenv: with PYTHONPATH=. in a
    checkout that holds topo_scheduler.egg-info (an editable install's), pip in the fresh venv
    took topo-scheduler as installed already and left it out."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _pip(
    python: Path | str, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", "--no-input", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_clean_env(),
    )


def _offline(
    python: Path | str, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return _pip(python, *args, "--no-index", "--find-links", str(WHEELHOUSE), cwd=cwd)


def _fill_wheelhouse(*requirements: str) -> None:
    """Download (binary) wheels for the requirements and all their dependencies from PyPI."""
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    with (WHEELHOUSE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs at once fill it one after the other
        done = _pip(
            sys.executable, "download", "--only-binary=:all:", "--dest", str(WHEELHOUSE),
            *requirements,
        )  # fmt: skip
        for ours in WHEELHOUSE.glob("topo_scheduler-*.whl"):
            ours.unlink()  # only dependencies live in the wheelhouse
    assert done.returncode == 0, f"pip download failed (no network?):\n{done.stderr[-3000:]}"


def _offline_or_fill(
    python: Path | str, args: list[str], requirements: list[str], cwd: Path | None = None
) -> None:
    done = _offline(python, *args, cwd=cwd)
    if done.returncode != 0:
        _fill_wheelhouse(*requirements)
        done = _offline(python, *args, cwd=cwd)
    assert done.returncode == 0, (
        f"pip {' '.join(args)}:\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(the wheel, a fresh venv it is installed into with the Dockerfile's extras)."""
    dockerfile = parse()
    build = dockerfile.stage("build")
    root = tmp_path_factory.mktemp("wheel")
    # Exactly the build context the Dockerfile's build stage copies, nothing else of the clone.
    context = root / "src"
    context.mkdir()
    for instruction in build.all("COPY"):
        for source in copy_of(instruction).sources:
            src = REPO / source
            if src.is_dir():
                shutil.copytree(src, context / source, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(src, context / source)
    wheels = root / "wheels"
    # As in the Dockerfile: pip wheel --no-deps, with build isolation (setuptools from the
    # wheelhouse instead of PyPI).
    _offline_or_fill(
        sys.executable,
        ["wheel", "--no-deps", "--wheel-dir", str(wheels), "."],
        ["setuptools>=68", "wheel"],
        cwd=context,
    )
    (wheel,) = wheels.glob("topo_scheduler-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    extras = dockerfile.stage_arg(build, "EXTRAS")
    target = f"{wheel}[{extras}]"
    _offline_or_fill(venv / "bin" / "python", ["install", "--only-binary=:all:", target], [target])
    yield wheel, venv


def _run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = _clean_env()
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(list(args), capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def test_wheel_holds_every_module_and_data_file(built: tuple[Path, Path]) -> None:
    wheel, _ = built
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(
        ["git", "ls-files", "scheduler"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    missing = [
        path
        for path in tracked
        if (path.endswith(".py") or Path(path).suffix not in NOT_RUNTIME) and path not in names
    ]
    assert not missing, f"not in the wheel: {missing}"


def test_installed_without_dev_tools_and_imported_from_the_venv(
    built: tuple[Path, Path], tmp_path: Path
) -> None:
    _, venv = built
    listed = _run(venv, "python", "-m", "pip", "list", "--format", "json", cwd=tmp_path)
    installed = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert "topo-scheduler" in installed and "nvidia-ml-py" in installed
    assert not installed & DEV_ONLY, installed & DEV_ONLY
    where = _run(venv, "python", "-c", "import scheduler; print(scheduler.__file__)", cwd=tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout
    # Every module imports with the runtime dependencies alone.
    code = (
        "import importlib, pkgutil, scheduler\n"
        "for m in pkgutil.walk_packages(scheduler.__path__, 'scheduler.'):\n"
        "    if not m.name.endswith('__main__'):\n"
        "        importlib.import_module(m.name)\n"
    )
    imported = _run(venv, "python", "-c", code, cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr[-3000:]


def test_entrypoint_starts(built: tuple[Path, Path], tmp_path: Path) -> None:
    _, venv = built
    top = _run(venv, "topo-scheduler", "--help", cwd=tmp_path)
    assert top.returncode == 0, top.stderr
    assert "simulate" in top.stdout and "run" in top.stdout
    run = _run(venv, "topo-scheduler", "run", "--help", cwd=tmp_path)
    assert run.returncode == 0 and "--redis-url" in run.stdout, run.stderr


def test_simulate_from_the_wheel_matches_the_source_tree(
    built: tuple[Path, Path], tmp_path: Path
) -> None:
    _, venv = built
    files = [
        "--config", str(REPO / "configs" / "scheduler.yaml"), "-o", "json",
        str(EXAMPLES / "dgx1-v100.yaml"), str(EXAMPLES / "workload-gang.yaml"),
    ]  # fmt: skip
    installed = _run(venv, "topo-scheduler", "simulate", *files, cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr
    source = subprocess.run(
        [sys.executable, "-m", "scheduler", "simulate", *files],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    assert json.loads(installed.stdout) == json.loads(source.stdout)
    result = json.loads(installed.stdout)
    assert result["summary"]["podsPlaced"] == 6 and not result["pending"]
    gang = {p["pod"]: p for p in result["placements"] if "pytorch-dist-nccl" in p["pod"]}
    assert len({p["node"] for p in gang.values()}) == 1  # seed 004: one node
