# gpusched: the operator (`gpusched run`, the entrypoint) and the node agent (`gpusched agent`,
# the chart's DaemonSet overrides the command). Build from the repository root:
#   docker build -t gpusched:dev .
# Two stages: the first builds a virtual environment with gpusched and its dependencies, the
# second copies only that environment onto a clean base, so no pip cache, compiler or source
# tree ends up in the image. The build runs `gpusched simulate` on the sample the package
# ships, away from the source tree, so an image that cannot run it is never built.

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/gpusched
WORKDIR /src
# Dependencies first, in their own layer: they change less often than the code.
COPY pyproject.toml README.md ./
COPY operator/ operator/
RUN /opt/gpusched/bin/pip install . \
    && /opt/gpusched/bin/gpusched --help >/dev/null \
    && (cd / && /opt/gpusched/bin/gpusched simulate >/dev/null) \
    && /opt/gpusched/bin/python -m pip uninstall -y -q pip setuptools \
    && /opt/gpusched/bin/python -m compileall -q /opt/gpusched/lib

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="gpusched" \
      org.opencontainers.image.description="Topology-aware GPU gang scheduler for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
# No pip, setuptools or wheel at run time: nothing installs anything in a running scheduler.
RUN python -m pip uninstall -y -q pip setuptools wheel 2>/dev/null || true \
    && groupadd --system --gid 65532 gpusched \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin gpusched
COPY --from=build /opt/gpusched /opt/gpusched
ENV PATH=/opt/gpusched/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Numeric, so that Kubernetes' runAsNonRoot can check it without reading /etc/passwd.
USER 65532:65532
WORKDIR /tmp
EXPOSE 9402 8080
ENTRYPOINT ["gpusched", "run"]
