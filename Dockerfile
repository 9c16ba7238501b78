# topo-scheduler's image: the scheduler (`run`), `simulate` and the node agent (`agent`).
#
#   docker build -t topo-scheduler:0.1.0 .
#
# Stage 1 builds the wheel and installs it, with its dependencies (binary wheels only, so no
# compiler is ever needed), into a virtual environment at /opt/topo-scheduler. Stage 2 is the
# same slim Python with only that environment copied in, running as a non-root numeric user
# (65532, as the manifests in deploy/ expect; numeric so runAsNonRoot can verify it).
# tests/unit/test_dockerfile.py checks this contract, and tests/integration/test_wheel.py
# builds and installs the wheel the way stage 1 does and runs it.
ARG PYTHON_IMAGE=python:3.12.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# The optional dependencies installed with the wheel: nvml for the agent's GPU discovery.
ARG EXTRAS=nvml
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY pyproject.toml README.md ./
COPY scheduler/ scheduler/
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/topo-scheduler \
 && /opt/topo-scheduler/bin/python -m pip install --only-binary=:all: \
      "$(echo /wheels/topo_scheduler-*.whl)[${EXTRAS}]" \
 && /opt/topo-scheduler/bin/python -m pip uninstall --yes pip \
 && /opt/topo-scheduler/bin/topo-scheduler --help >/dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="topo-scheduler" \
      org.opencontainers.image.description="A topology-aware secondary Kubernetes scheduler for GPU clusters" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/topo-scheduler /opt/topo-scheduler
ENV PATH=/opt/topo-scheduler/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["topo-scheduler"]
CMD ["--help"]
