"""Regenerate the protobuf modules of the kubelet APIs from our .proto files.

    .venv/bin/python -m scheduler.agent.plugin.protos.generate

Writes ``<name>_pb2.py`` and a typed ``<name>_pb2.pyi`` beside each .proto (grpcio-tools' own
``--pyi_out``, so mypy --strict checks every use of the messages). No ``_pb2_grpc`` modules: they
are untyped, so the services are bound by hand, typed, in ``plugin/rpc.py`` (a few method paths).

The files are compiled relative to the repository root so that their names in protobuf's global
descriptor pool are ``scheduler/agent/plugin/protos/*.proto``: generic names like ``api.proto``
would clash with any other library in the process that registers the kubelet's protos. Generated
files get a ``# ruff: noqa`` header (the stubs also turn off mypy's ``type-arg``: protoc writes bare
``Mapping``) and are run through ``ruff format``, so ``make lint types`` pass on them without
per-path settings.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]
PROTOS = ("deviceplugin.proto", "podresources.proto")
HEADER = "# ruff: noqa\n"
# protoc's stubs write bare ``Mapping`` in message constructors; everything else type-checks.
PYI_HEADER = HEADER + '# mypy: disable-error-code="type-arg"\n'


def main() -> int:
    # Imported here: grpcio-tools is a dev tool, and the installed package must import without it.
    from grpc_tools import protoc  # type: ignore[import-untyped]

    rel = HERE.relative_to(ROOT)
    for name in PROTOS:
        args = [
            "grpc_tools.protoc",
            f"-I{ROOT}",
            f"--python_out={ROOT}",
            f"--pyi_out={ROOT}",
            str(rel / name),
        ]
        if protoc.main(args) != 0:
            print(f"protoc failed on {name}", file=sys.stderr)
            return 1
    generated = sorted(HERE.glob("*_pb2.py")) + sorted(HERE.glob("*_pb2.pyi"))
    for path in generated:
        header = PYI_HEADER if path.suffix == ".pyi" else HEADER
        path.write_text(header + path.read_text())
    ruff = Path(sys.executable).parent / "ruff"
    subprocess.run([str(ruff), "format", "-q", *map(str, generated)], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
