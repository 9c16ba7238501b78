"""A small reader for this project's Dockerfile and .dockerignore, for the tests that check the
image's contract (tests/unit/test_dockerfile.py) and build its wheel the way the Dockerfile does
(tests/integration/test_wheel.py). Not a general Dockerfile parser: it reads what ours uses
(ARG, FROM ... AS, COPY [--from=], RUN, ENV, LABEL, USER, EXPOSE, ENTRYPOINT, CMD, WORKDIR),
with line continuations and comments."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"


@dataclass
class Instruction:
    keyword: str  # upper case
    args: str  # the rest of the instruction, continuations joined


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


@dataclass
class Dockerfile:
    global_args: dict[str, str]  # ARGs before the first FROM, with their defaults
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    def stage_arg(self, stage: Stage, name: str) -> str:
        """The default of an ARG declared in a stage."""
        for instruction in stage.all("ARG"):
            key, _, default = instruction.args.partition("=")
            if key.strip() == name:
                return default.strip()
        raise KeyError(name)


def instructions(text: str) -> list[Instruction]:
    out: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        keyword, _, args = whole.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip()))
    if pending:
        raise ValueError("Dockerfile ends inside a continued instruction")
    return out


def parse(path: Path = DOCKERFILE) -> Dockerfile:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for instruction in instructions(path.read_text()):
        if instruction.keyword == "FROM":
            words = instruction.args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name))
        elif not stages:
            if instruction.keyword != "ARG":
                raise ValueError(f"only ARG may come before FROM, not {instruction.keyword}")
            key, _, default = instruction.args.partition("=")
            global_args[key.strip()] = default.strip()
        else:
            stages[-1].instructions.append(instruction)
    return Dockerfile(global_args, stages)


def exec_form(args: str) -> list[str] | None:
    """The JSON array of an exec-form ENTRYPOINT/CMD, or None for the shell form."""
    try:
        value = json.loads(args)
    except ValueError:
        return None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None


@dataclass
class Copy:
    flags: dict[str, str]
    sources: list[str]
    destination: str


def copy_of(instruction: Instruction) -> Copy:
    words = shlex.split(instruction.args)
    flags = {}
    while words and words[0].startswith("--"):
        key, _, value = words.pop(0)[2:].partition("=")
        flags[key] = value
    return Copy(flags, words[:-1], words[-1])


def build_context_allowlist(path: Path = DOCKERIGNORE) -> set[str]:
    """The paths our allow-list .dockerignore (``*`` then ``!path`` lines) lets in."""
    lines = [
        line.strip()
        for line in path.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not lines or lines[0] != "*":
        raise ValueError(".dockerignore must start by excluding everything ('*')")
    return {line[1:].rstrip("/") for line in lines if line.startswith("!")}
