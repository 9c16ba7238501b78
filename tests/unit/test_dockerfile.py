"""The image's contract, read from the Dockerfile (no Docker engine exists on our machines, so the
image itself is never built here; tests/integration/test_wheel.py builds and runs the wheel
the way its first stage does)."""

from __future__ import annotations

import re

from tests.dockerfile import (
    REPO,
    build_context_allowlist,
    copy_of,
    exec_form,
    parse,
)

VENV = "/opt/topo-scheduler"


def test_two_stages_on_one_pinned_slim_python() -> None:
    dockerfile = parse()
    image = dockerfile.global_args["PYTHON_IMAGE"]
    # An exact patch release of a slim Debian Python, never a moving tag like 3.12-slim.
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", image), image
    assert [s.base for s in dockerfile.stages] == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]
    assert dockerfile.stages[0].name == "build"


def test_build_stage_builds_a_wheel_and_installs_binary_wheels_into_the_venv() -> None:
    build = parse().stage("build")
    script = " && ".join(i.args for i in build.all("RUN"))
    assert "python -m pip wheel --no-deps --wheel-dir /wheels ." in script
    assert f"python -m venv {VENV}" in script
    # Binary wheels only: the slim base has no compiler and none is ever installed.
    assert "--only-binary=:all:" in script
    assert "apt-get" not in script
    assert "[${EXTRAS}]" in script


def test_final_stage_copies_only_the_venv_and_runs_as_a_numeric_non_root_user() -> None:
    final = parse().stages[-1]
    keywords = {i.keyword for i in final.instructions}
    assert not keywords & {"RUN", "ADD"}, "the final stage must not install or build anything"
    copies = [copy_of(i) for i in final.all("COPY")]
    assert [(c.flags, c.sources, c.destination) for c in copies] == [
        ({"from": "build"}, [VENV], VENV)
    ]
    (user,) = final.all("USER")
    match = re.fullmatch(r"(\d+)(?::(\d+))?", user.args)
    assert match, f"USER must be numeric (runAsNonRoot can only verify a number): {user.args}"
    assert int(match.group(1)) != 0 and int(match.group(2) or 1) != 0
    # deploy/'s manifests run the same user.
    assert match.group(1) == "65532"


def test_exec_form_entrypoint() -> None:
    final = parse().stages[-1]
    (entrypoint,) = final.all("ENTRYPOINT")
    assert exec_form(entrypoint.args) == ["topo-scheduler"]
    (cmd,) = final.all("CMD")
    assert exec_form(cmd.args) is not None
    env = " ".join(i.args for i in final.all("ENV"))
    assert f"PATH={VENV}/bin:$PATH" in env


def test_build_context_holds_what_the_build_stage_copies() -> None:
    allowed = build_context_allowlist()
    build = parse().stage("build")
    sources = {s.rstrip("/") for i in build.all("COPY") for s in copy_of(i).sources}
    assert sources == allowed, "copy exactly what .dockerignore lets into the build context"
    for source in sources:
        assert (REPO / source).exists(), source
