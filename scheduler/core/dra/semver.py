"""Semantic versions (semver 2.0.0), for ``version`` attributes and CEL's ``semver()``.

Parsing is strict, as blang/semver's ``Parse`` which Kubernetes uses: ``MAJOR.MINOR.PATCH``
without leading zeros, an optional ``-pre.release`` (numeric identifiers without leading zeros)
and an optional ``+build`` (ignored by comparison and equality). ``normalize`` first does what
the Kubernetes CEL library's ``semver(s, true)`` does: drop a leading ``v``, strip leading zeros
and fill a missing minor or patch with 0.
"""

from __future__ import annotations

import re
from typing import Final

from msgspec import Struct

_IDENT: Final = re.compile(r"^[0-9A-Za-z-]+$")
_NUMBER: Final = re.compile(r"^(0|[1-9][0-9]*)$")


class SemverError(ValueError):
    pass


class Semver(Struct, frozen=True):
    major: int
    minor: int
    patch: int
    pre: tuple[str, ...] = ()

    def canonical(self) -> str:
        """The version without build metadata: equal versions have equal canonical strings."""
        text = f"{self.major}.{self.minor}.{self.patch}"
        return f"{text}-{'.'.join(self.pre)}" if self.pre else text

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1, by semver 2.0.0 precedence."""
        mine = (self.major, self.minor, self.patch)
        theirs = (other.major, other.minor, other.patch)
        if mine != theirs:
            return -1 if mine < theirs else 1
        if self.pre == other.pre:
            return 0
        # A version without a pre-release ranks above any with one.
        if not self.pre:
            return 1
        if not other.pre:
            return -1
        for a, b in zip(self.pre, other.pre, strict=False):
            if a == b:
                continue
            a_num, b_num = _NUMBER.match(a) is not None, _NUMBER.match(b) is not None
            if a_num and b_num:
                return -1 if int(a) < int(b) else 1
            if a_num != b_num:  # numeric identifiers rank below alphanumeric ones
                return -1 if a_num else 1
            return -1 if a < b else 1
        return -1 if len(self.pre) < len(other.pre) else 1


def parse(text: str, normalize: bool = False) -> Semver:
    """The version ``text``; SemverError when it is not one."""
    if normalize:
        text = _normalized(text)
    core, plus, build = text.partition("+")
    if plus and not _all_identifiers(build.split(".")):
        raise SemverError(f"invalid build metadata in {text!r}")
    core, dash, pre_text = core.partition("-")
    parts = core.split(".")
    if len(parts) != 3 or not all(_NUMBER.match(p) for p in parts):
        raise SemverError(f"{text!r} is not MAJOR.MINOR.PATCH")
    pre: tuple[str, ...] = ()
    if dash:
        pre = tuple(pre_text.split("."))
        if not _all_identifiers(pre):
            raise SemverError(f"invalid pre-release in {text!r}")
        for ident in pre:
            if ident.isdigit() and not _NUMBER.match(ident):
                raise SemverError(f"pre-release number with a leading zero in {text!r}")
    return Semver(int(parts[0]), int(parts[1]), int(parts[2]), pre)


def _all_identifiers(idents: tuple[str, ...] | list[str]) -> bool:
    return all(_IDENT.match(i) for i in idents)


def _normalized(text: str) -> str:
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            part = part.lstrip("0")
            if not part or not part[0].isdigit():
                part = "0" + part
            parts[i] = part
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise SemverError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)
