#!/usr/bin/env bash
# Build dist/nri-sla_<version>_<arch>.deb with dpkg-deb (no debhelper).
#
# Layout: the Python code and its dependencies are installed with `pip --target` into
# /usr/lib/nri-sla/site (a private, self-contained tree: no virtualenv whose absolute
# paths would break when moved); /usr/bin/nri-sla is a small launcher that runs Debian's
# /usr/bin/python3 in isolated mode (-I: no PYTHON* variables, no user site, no cwd)
# without the site module (-S: no /usr/lib/python3/dist-packages, so no clash with
# Debian's python3-yaml or python3-protobuf, and a faster start for the OCI hook).
# The bundled wheels are built for this Python's minor version, hence
#   Depends: python3 (>= X.Y), python3 (<< X.Y+1).
#
# Environment:
#   PYTHON      interpreter that runs pip and whose version the package targets
#               (default: python3; must match the nodes' /usr/bin/python3 minor version)
#   OUT_DIR     where the .deb goes (default: <repo>/dist)
#   WHEELHOUSE  cache of dependency wheels (default: <repo>/dist/wheelhouse). Filled from
#               PyPI with `pip download` on first use; later builds run offline.
#   DEB_COMPRESS  dpkg-deb compressor: xz (default), gzip, zstd, none
# Prints the path of the built package on the last line of stdout.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTHON=${PYTHON:-python3}
OUT_DIR=${OUT_DIR:-$REPO/dist}
WHEELHOUSE=${WHEELHOUSE:-$REPO/dist/wheelhouse}
DEB_COMPRESS=${DEB_COMPRESS:-xz}
PKG=nri-sla
LIBDIR=/usr/lib/nri-sla
SITE=$LIBDIR/site

die() { echo "build.sh: $*" >&2; exit 1; }
command -v dpkg-deb >/dev/null || die "dpkg-deb not found (apt-get install dpkg-dev)"
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "$PYTHON has no pip"

VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$REPO/nri_plugin/__init__.py")
[ -n "$VERSION" ] || die "no __version__ in nri_plugin/__init__.py"
ARCH=$(dpkg --print-architecture)
PYVER=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
PYNEXT=$("$PYTHON" -c 'import sys; print("%d.%d" % (sys.version_info[0], sys.version_info[1] + 1))')

WORK=$(mktemp -d "${TMPDIR:-/tmp}/nri-sla-deb.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
STAGE=$WORK/root
mkdir -p "$STAGE/DEBIAN" "$OUT_DIR" "$WHEELHOUSE"

# --- 1. the project wheel, built from a copy so the working tree gets no build/ dir ----
mkdir -p "$WORK/src"
cp "$REPO/pyproject.toml" "$REPO/README.md" "$WORK/src/"
(cd "$REPO" && tar --exclude=__pycache__ --exclude='*.pyc' -cf - nri_plugin) | tar -xf - -C "$WORK/src"
# With setuptools >= 77 (pyproject's build requirement) at hand, build offline with it;
# else let pip fetch the build backend into an isolated environment.
isolation=--no-build-isolation
"$PYTHON" -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 77)' \
    2>/dev/null || isolation=
"$PYTHON" -m pip wheel -q --disable-pip-version-check --no-deps $isolation \
    -w "$WORK/wheel" "$WORK/src" >&2
PROJECT_WHEEL=$(ls "$WORK"/wheel/nri_sla-*.whl)

# --- 2. project + dependencies into the private site dir: offline first ----------------
pip_target() {
    "$PYTHON" -m pip install -q --disable-pip-version-check --no-compile \
        --no-warn-script-location --only-binary=:all: --no-index \
        --find-links "$WHEELHOUSE" --target "$STAGE$SITE" "$PROJECT_WHEEL" >&2
}
if ! pip_target 2>/dev/null; then
    echo "build.sh: filling the wheelhouse $WHEELHOUSE from PyPI" >&2
    # `pip wheel`, not `pip download --only-binary`: cgroupspy is published as an sdist
    # only, and is built into a (pure Python) wheel here.
    "$PYTHON" -m pip wheel -q --disable-pip-version-check -w "$WHEELHOUSE" \
        "$PROJECT_WHEEL" >&2 || die "could not fetch dependency wheels"
    rm -f "$WHEELHOUSE"/nri_sla-*.whl  # the project wheel is rebuilt every time
    rm -rf "${STAGE:?}$SITE"
    pip_target
fi
rm -rf "${STAGE:?}$SITE/bin"  # console scripts of dependencies: unused, wrong paths
# Extension modules as wheels ship them may carry debug info (uvloop's: 13.6 MB of 14):
# stripped, as Debian strips what it packages. Needs binutils' strip.
command -v strip >/dev/null || die "strip not found (apt-get install binutils)"
find "$STAGE$SITE" -name '*.so' -type f -exec strip --strip-unneeded {} +
# No byte-code in the package (Debian policy: it is made on the node): postinst
# compiles the site dir, prerm deletes what was compiled.
find "$STAGE$SITE" -name __pycache__ -type d -prune -exec rm -rf {} +
# Some wheels ship their modules and metadata executable: only the launcher is.
find "$STAGE$SITE" -type f -perm /111 ! -name '*.so' -exec chmod 0644 {} +
# The extension modules' newest glibc symbol: the libc6 the package needs.
GLIBC=$(find "$STAGE$SITE" -name '*.so' -type f -exec objdump -T {} + 2>/dev/null \
    | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n1)
[ -n "$GLIBC" ] || die "no glibc version in the bundled extension modules (objdump?)"

# --- 3. launcher -----------------------------------------------------------------------
install -d "$STAGE/usr/bin"
cat > "$STAGE/usr/bin/nri-sla" <<'EOF'
#!/usr/bin/python3 -IS
"""nri-sla launcher (Debian package): runs the copy in /usr/lib/nri-sla/site."""
import os
import sys

# Relative to this file, so an unpacked package (dpkg -x DIR) runs from DIR too.
_usr = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
sys.path.insert(0, os.path.join(_usr, "lib", "nri-sla", "site"))
from nri_plugin.cli import main  # noqa: E402

sys.exit(main())
EOF
chmod 0755 "$STAGE/usr/bin/nri-sla"

# --- 4. system integration files --------------------------------------------------------
for unit in nri-sla.service nri-sla-device-plugin.service; do
    install -D -m 0644 "$REPO/packaging/systemd/$unit" "$STAGE/lib/systemd/system/$unit"
done
install -D -m 0755 "$REPO/packaging/nri/50-nri-sla" "$STAGE/usr/share/nri-sla/nri-plugin/50-nri-sla"
install -D -m 0644 "$REPO/packaging/nri/50-nri-sla.conf" \
    "$STAGE/usr/share/nri-sla/nri-plugin/50-nri-sla.conf"
install -D -m 0644 "$REPO/config.toml.example" \
    "$STAGE/usr/share/nri-sla/containerd/config.toml.example"
install -D -m 0644 "$REPO/packaging/containerd/config-1.7.toml.example" \
    "$STAGE/usr/share/nri-sla/containerd/config-1.7.toml.example"
# CRI-O drop-ins: shipped, not enabled (the operator copies them to /etc/crio/crio.conf.d).
for dropin in 50-nri-sla.conf 51-nri-sla-fail-closed.conf; do
    install -D -m 0644 "$REPO/packaging/crio/$dropin" "$STAGE/usr/share/nri-sla/crio/$dropin"
done
# The service and the pre-launch wrapper pass --config /etc/nri-sla/config.yaml, which
# must exist: ship the example, or a file of comments only (= all defaults).
conffiles=(/etc/nri-sla/config.yaml)
if [ -f "$REPO/examples/config.yaml" ]; then
    install -D -m 0644 "$REPO/examples/config.yaml" "$STAGE/etc/nri-sla/config.yaml"
else
    install -d "$STAGE/etc/nri-sla"
    cat > "$STAGE/etc/nri-sla/config.yaml" <<'EOF'
# nri-sla node configuration. Every setting is optional; this file holds none, so the
# defaults apply. The settings: /usr/share/doc/nri-sla/config.md
EOF
fi
# `nri-sla demo` reads its pods, node policy and inventory from <site>/examples.
install -d "$STAGE/usr/share/nri-sla/examples"
cp -r "$REPO/examples/." "$STAGE/usr/share/nri-sla/examples/"
find "$STAGE/usr/share/nri-sla/examples" -type d -exec chmod 0755 {} + \
    -o -type f -exec chmod 0644 {} +
ln -s ../../../share/nri-sla/examples "$STAGE$SITE/examples"
if [ -f "$REPO/hooks/nri-sla-hook.json" ]; then
    # CRI-O and podman read OCI hook files from here (containerd: base_runtime_spec).
    install -D -m 0644 "$REPO/hooks/nri-sla-hook.json" \
        "$STAGE/usr/share/containers/oci/hooks.d/nri-sla-hook.json"
fi
# nri-sla(1) and the bash completion, from the staged code's own parsers
install -d "$STAGE/usr/share/man/man1" "$STAGE/usr/share/bash-completion/completions"
PYTHONPATH="$STAGE$SITE" "$PYTHON" -S "$REPO/packaging/deb/cli_docs.py" man "$SITE" \
    | gzip -9n > "$STAGE/usr/share/man/man1/nri-sla.1.gz"
PYTHONPATH="$STAGE$SITE" "$PYTHON" -S "$REPO/packaging/deb/cli_docs.py" bash \
    > "$STAGE/usr/share/bash-completion/completions/nri-sla"
install -d "$STAGE/usr/share/doc/$PKG"
install -m 0644 "$REPO"/docs/*.md "$STAGE/usr/share/doc/$PKG/"
# a native package (no Debian revision): changelog.gz, not changelog.Debian.gz
gzip -9n < "$REPO/packaging/deb/changelog" > "$STAGE/usr/share/doc/$PKG/changelog.gz"
# Machine-readable (DEP-5). The bundled distributions' licence texts are shipped in
# their dist-info dirs; the copyright file names each.
{
    echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
    echo "Upstream-Name: nri-sla"
    echo
    echo "Files: *"
    echo "Copyright: 2026 the nri-sla developers"
    echo "License: Apache-2.0"
    echo " On Debian systems the full text of the Apache License 2.0 is in"
    echo " /usr/share/common-licenses/Apache-2.0."
    for meta in "$STAGE$SITE"/*.dist-info/METADATA; do
        dist=$(dirname "$meta")
        awk -F': ' -v dir="${dist#"$STAGE"}" '
            /^Name: /{n=$2} /^Version: /{v=$2}
            /^License(-Expression)?: /{if (!l) l=$2}
            END{printf "\nFiles: %s/*\nCopyright: the %s authors\nLicense: %s\n", dir, n,
                       (l ? l : "see-METADATA")
                printf " %s %s: the licence text is shipped in %s/.\n", n, v, dir}' "$meta"
    done
} > "$STAGE/usr/share/doc/$PKG/copyright"
# lintian: what stays, and why (docs/install.md "The Debian package" lists the same)
install -D -m 0644 "$REPO/packaging/deb/lintian-overrides" \
    "$STAGE/usr/share/lintian/overrides/$PKG"

# --- 5. maintainer scripts -------------------------------------------------------------
# $DPKG_ROOT is set when dpkg installs into another root (dpkg --root, tests): never
# touch the running system's systemd then.
cat > "$STAGE/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    # Byte-code for every module, made here by the interpreter that runs them (the
    # launcher's and the OCI hook's /usr/bin/python3), as Debian's py3compile does: the
    # hook is exec'd for every container and would otherwise compile what it imports on
    # each start (a cold run costs twice as much). -I: no PYTHON* variable moves or
    # changes it; timestamp-checked (a hash-checked .pyc, what SOURCE_DATE_EPOCH would
    # ask for, hashes the source on every import). prerm deletes it.
    /usr/bin/python3 -I -m compileall -q --invalidation-mode timestamp \
        "$DPKG_ROOT/usr/lib/nri-sla/site" >&2 \
        || echo "nri-sla: byte-compiling /usr/lib/nri-sla/site failed: nri-sla runs," \
                "its starts are slower" >&2
fi
if [ "$1" = configure ] && [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
    # Not enabled or started on first install: containerd needs NRI configured first
    # (see /usr/share/doc/nri-sla/install.md); the device plugin only on nodes without
    # another GPU device plugin. On upgrade, restart the running services.
    if [ -n "$2" ]; then
        systemctl try-restart nri-sla.service nri-sla-device-plugin.service || true
    fi
fi
exit 0
EOF
# Removal must leave containerd able to create containers, and its config as it was:
# prerm runs `nri-sla containerd-config --remove` while the binary is still there (takes
# out its drop-in, puts back a main config it patched, deletes the base spec no config
# names). If that drop-in made containerd fail closed (required_plugins), containerd is
# restarted at once: it would refuse every new container without nri-sla. Otherwise the
# next containerd restart drops it; meanwhile the base spec's hook exits 0 once
# /usr/bin/nri-sla is gone (nri_plugin/hookspec.py).
cat > "$STAGE/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
DROPIN=/etc/containerd/conf.d/nri-sla.toml
MARKER='# Written by `nri-sla containerd-config`'
case "$1" in
    remove|deconfigure)
        if [ -f "$DPKG_ROOT$DROPIN" ] \
                && [ "$(head -c ${#MARKER} "$DPKG_ROOT$DROPIN")" = "$MARKER" ] \
                && grep -q '^ *required_plugins' "$DPKG_ROOT$DROPIN"; then
            fail_closed=yes
        fi
        "$DPKG_ROOT/usr/bin/nri-sla" containerd-config --remove \
            --main-config "$DPKG_ROOT/etc/containerd/config.toml" --write "$DPKG_ROOT$DROPIN" \
            --base-runtime-spec "$DPKG_ROOT/etc/nri-sla/base-runtime-spec.json" \
            --root "${DPKG_ROOT:-/}" >&2 \
            || echo "nri-sla: containerd's config left as it is (the line above says why)" >&2
        if [ -n "$fail_closed" ] && [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ]; then
            echo "nri-sla: restarting containerd: it required nri-sla (fail closed)" >&2
            systemctl try-restart containerd.service || true
        elif [ -n "$fail_closed" ]; then
            echo "nri-sla: restart containerd now: it requires nri-sla (fail closed)" >&2
        fi
        if grep -rqs 'required_plugins.*nri-sla' "$DPKG_ROOT/etc/containerd"; then
            echo "nri-sla: /etc/containerd still requires nri-sla (required_plugins): take" \
                 "it out and restart containerd, or no container starts" >&2
        fi
        if [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ]; then
            systemctl stop nri-sla.service nri-sla-device-plugin.service || true
        fi
        ;;
esac
# The byte-code postinst compiled (and any a process wrote beside it), on every action
# as Debian's py3clean: an upgrade's postinst compiles the new modules afresh, and no
# directory dpkg removes is kept by a __pycache__ it does not know.
find "$DPKG_ROOT/usr/lib/nri-sla" -name __pycache__ -type d -prune \
    -exec rm -rf {} + 2>/dev/null || true
exit 0
EOF
cat > "$STAGE/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
case "$1" in
    remove|purge)
        # byte-code written after prerm (a hook run between prerm and the removal of the
        # files) keeps directories dpkg could not remove: they go too
        if [ -d "$DPKG_ROOT/usr/lib/nri-sla" ]; then
            find "$DPKG_ROOT/usr/lib/nri-sla" -name __pycache__ -type d -prune \
                -exec rm -rf {} + 2>/dev/null || true
            find "$DPKG_ROOT/usr/lib/nri-sla" -depth -type d -empty -delete 2>/dev/null || true
        fi
        # `systemctl enable nri-sla` linked it into containerd's wants
        rm -f "$DPKG_ROOT/etc/systemd/system/containerd.service.wants/nri-sla.service"
        rmdir "$DPKG_ROOT/etc/systemd/system/containerd.service.wants" 2>/dev/null || true
        # `systemctl enable nri-sla-device-plugin` linked it into multi-user.target's
        rm -f "$DPKG_ROOT/etc/systemd/system/multi-user.target.wants/nri-sla-device-plugin.service"
        if [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ]; then
            systemctl daemon-reload || true
        fi
        ;;
esac
if [ "$1" = purge ]; then
    # A base spec containerd's config still names stays: containerd does not start its
    # CRI plugin when base_runtime_spec is missing.
    SPEC=/etc/nri-sla/base-runtime-spec.json
    if [ -f "$DPKG_ROOT$SPEC" ] && grep -rqsF "$SPEC" "$DPKG_ROOT/etc/containerd"; then
        find "$DPKG_ROOT/etc/nri-sla" -mindepth 1 ! -path "$DPKG_ROOT$SPEC" -delete
        echo "nri-sla: kept $SPEC: containerd's config still names it" \
             "(base_runtime_spec); take that out, restart containerd, then delete it" >&2
    else
        rm -rf "$DPKG_ROOT/etc/nri-sla"
    fi
    rm -rf "$DPKG_ROOT/var/lib/nri-sla"
fi
exit 0
EOF
chmod 0755 "$STAGE/DEBIAN/postinst" "$STAGE/DEBIAN/prerm" "$STAGE/DEBIAN/postrm"
if [ ${#conffiles[@]} -gt 0 ]; then
    printf '%s\n' "${conffiles[@]}" > "$STAGE/DEBIAN/conffiles"
fi

# --- 6. control, checksums, build -------------------------------------------------------
SIZE=$(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
cat > "$STAGE/DEBIAN/control" <<EOF
Package: $PKG
Version: $VERSION
Architecture: $ARCH
Maintainer: nri-sla developers <nri-sla-maintainers@lists.nri-sla.org>
Installed-Size: $SIZE
Depends: python3 (>= $PYVER), python3 (<< $PYNEXT), libc6 (>= $GLIBC), procps
Recommends: containerd | containerd.io
Section: admin
Priority: optional
Description: pod resource SLAs enforced on Kubernetes/containerd nodes
 nri-sla turns SLA annotations of Kubernetes pods into exact kernel settings
 before their containers start: NUMA binding, CPU quota and real-time budget,
 memory.high/max, io.weight/io.max and NUMA-aligned GPU selection. It runs as
 a containerd NRI plugin (systemd service nri-sla.service, or pre-launched by
 containerd) with an OCI hook fallback.
EOF
(cd "$STAGE" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z \
    | xargs -0 md5sum) > "$STAGE/DEBIAN/md5sums"

DEB=$OUT_DIR/${PKG}_${VERSION}_${ARCH}.deb
dpkg-deb --root-owner-group -Z"$DEB_COMPRESS" --build "$STAGE" "$DEB" >&2
echo "$DEB"
