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
# needed. pip byte-compiles what it installs, but the python image ships its standard
# library (and pip) without any .pyc, and PYTHONDONTWRITEBYTECODE keeps it so: every
# `nri-sla` start, and the hook `nri-sla host-hook` copies to the node from here, would
# compile what it imports each time. So everything is compiled here, by the image's
# interpreter (-I: no PYTHON* variable changes it; timestamp-checked, as Debian does;
# test dirs, which the image has dropped, left out in case a base image keeps them).
RUN pip install --no-cache-dir --disable-pip-version-check . \
    && python -I -m compileall -q --invalidation-mode timestamp -x '/tests?/' \
        "$(python -I -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')" \
        "$(python -I -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    && rm -rf /src
WORKDIR /

# The metrics, /healthz and /readyz port (DaemonSet: --metrics-address :9810).
EXPOSE 9810
ENTRYPOINT ["nri-sla", "run"]
CMD ["--config", "/etc/nri-sla/config.yaml"]
