# syntax=docker/dockerfile:1
# podium's image: a builder stage makes wheels of podium and of every dependency; the final stage
# installs them with no index and no compiler, and runs as an unprivileged user.
#
#   docker build -t podium:0.1.0 .
#   docker run --rm -v "$PWD/certs:/certs:ro" -p 8443:8443 podium:0.1.0 \
#       serve --cert-file /certs/tls.crt --key-file /certs/tls.key

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Dependencies first, from pyproject.toml alone, so that editing the code reuses this layer.
COPY pyproject.toml ./
RUN python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'], sep='\n')" > requirements.txt \
 && pip wheel --wheel-dir /wheels --requirement requirements.txt
COPY README.md ./
COPY webhook ./webhook
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="podium" \
      org.opencontainers.image.description="Admission webhook that keeps a training job's pods in one zone and opens Cilium only between them" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --gid 65532 podium \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin podium
# Wheels only, from the builder, never from an index; the wheels themselves stay out of the image.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --no-cache-dir --find-links=/wheels /wheels/podium-*.whl
USER 65532:65532
EXPOSE 8443
# Kubernetes uses the Deployment's probes; this is for plain `docker run`. Verification is off
# because the certificate names the Service, not 127.0.0.1.
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import ssl, urllib.request; ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE; urllib.request.urlopen('https://127.0.0.1:8443/healthz', timeout=3, context=ctx)"]
ENTRYPOINT ["podium"]
CMD ["serve"]
