# nri-sla container image for the DaemonSet (packaging/kubernetes/).
#   docker build -t nri-sla:0.1.0 .
# Runs as root on purpose: it writes cgroup files and talks to containerd's NRI socket
# (the DaemonSet runs it privileged; see packaging/kubernetes/daemonset.yaml).
FROM python:3.11-slim

# No stray .pyc written at run time; unbuffered output for `kubectl logs`.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY nri_plugin ./nri_plugin
# protobuf and PyYAML come as binary wheels and cgroupspy is pure Python: no compiler
# needed. pip byte-compiles what it installs.
RUN pip install --no-cache-dir --disable-pip-version-check . \
    && rm -rf /src
WORKDIR /

# The metrics, /healthz and /readyz port (DaemonSet: --metrics-address :9810).
EXPOSE 9810
ENTRYPOINT ["nri-sla", "run"]
CMD ["--config", "/etc/nri-sla/config.yaml"]
