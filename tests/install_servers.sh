#!/usr/bin/env bash
# Installs the servers the tests run against, from the repository root (README, .ci/run):
#   * Azurite, the Azure Blob emulator, from npm into .ci/node (no root needed);
#   * Ceph's RADOS Gateway (a production S3 implementation) and the Ceph daemons it runs
#     on, from the system's apt packages (Debian 12: Ceph 16.2), as root or through sudo.
# Quiet when it works; exits 1 with what to do when it cannot install something.
set -euo pipefail
cd "$(dirname "$0")/.."

npm install --prefix .ci/node --no-save --silent azurite@3
if [ ! -x .ci/node/node_modules/.bin/azurite-blob ]; then
    echo "install_servers.sh: npm installed azurite@3 without .ci/node/node_modules/.bin/azurite-blob" >&2
    exit 1
fi

ceph_packages=(radosgw ceph-mon ceph-osd ceph-common)
ceph_programs=(radosgw radosgw-admin ceph-mon ceph-osd ceph ceph-authtool monmaptool)

installed=yes
for program in "${ceph_programs[@]}"; do
    command -v "$program" >/dev/null 2>&1 || installed=no
done
if [ "$installed" = yes ]; then
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
else
    echo "install_servers.sh: Ceph RGW is not installed and this user can neither run as" >&2
    echo "root nor use sudo without a password. As root, run:" >&2
    echo "  apt-get update && apt-get install -y --no-install-recommends ${ceph_packages[*]}" >&2
    echo "(without it the RGW tests are skipped locally and fail under CI=true)" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_servers.sh: Ceph RGW is not installed and there is no apt-get here." >&2
    echo "Install Ceph's radosgw, ceph-mon, ceph-osd and ceph-common (16.2 or later)" >&2
    echo "with this system's package manager." >&2
    exit 1
fi
apt=("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get)
"${apt[@]}" update -qq
"${apt[@]}" install -y -qq --no-install-recommends "${ceph_packages[@]}" >/dev/null

# Installed is not the same as usable: check every program again, so that a package that
# installed without its program fails here, by name, not as a skipped or failing test.
missing=()
for program in "${ceph_programs[@]}"; do
    command -v "$program" >/dev/null 2>&1 || missing+=("$program")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "install_servers.sh: installed ${ceph_packages[*]}, but these programs are still" >&2
    echo "missing: ${missing[*]}. Check the package names for this system's Ceph release." >&2
    exit 1
fi
