#!/usr/bin/env bash
# The core suite (tests/core_suite.sh) in the two other environments CI checks, each in a
# fresh venv of its own under .ci/ (remade every run):
#   * newest: the newest Python (3.13) with the newest release of every requirement;
#   * lowest: Python 3.11 with the minimum release of every requirement that
#     pyproject.toml claims (.ci/lowest.txt, as pip constraints);
# then magicfs installed beside an older awscli and boto3 (pip check, and one job on moto).
# The interpreters are found on PATH, else under pyenv's versions; MAGICFS_NEWEST_PYTHON and
# MAGICFS_LOWEST_PYTHON name others. Prints each run's install and test times.
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {
    local name=$1 found candidate
    found=$(command -v "$name" 2>/dev/null || true)
    # pyenv's shim answers for every version it knows but runs only the selected ones
    if [ -n "$found" ] && ! "$found" --version >/dev/null 2>&1; then
        found=""
    fi
    if [ -z "$found" ]; then
        for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/bin/"$name"; do
            if [ -x "$candidate" ]; then found=$candidate; fi
        done
    fi
    if [ -z "$found" ]; then
        echo "environments.sh: no $name on PATH or under ${PYENV_ROOT:-$HOME/.pyenv}/versions:" >&2
        echo "install that Python, or name an interpreter in MAGICFS_NEWEST_PYTHON / MAGICFS_LOWEST_PYTHON" >&2
        exit 1
    fi
    echo "$found"
}

run() {
    local name=$1 python=$2 venv=.ci/venv-$1 started
    shift 2
    started=$SECONDS
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q -U pip
    "$venv/bin/python" -m pip install -q "$@" -e '.[test-core]'
    local installed=$((SECONDS - started))
    PYTHON="$venv/bin/python" bash tests/core_suite.sh -q
    echo "environments.sh: $name ($("$venv/bin/python" --version)): installed in ${installed} s," \
        "core suite in $((SECONDS - started - installed)) s"
}

# One magic job from $1's python against `magicfs server` run by $2's (moto: the `demo`
# extra, which $1 lacks), its bytes read back. The server's first line names its endpoint
# (read as it comes, through the coprocess's pipe); it is stopped by its PID.
round_trip() {
    local python=$1 server=$2 line endpoint
    coproc SERVER { exec "$server" server --bucket bkt; }
    read -r line <&"${SERVER[0]}"
    endpoint=$(grep -o 'http://127\.0\.0\.1:[0-9]*' <<<"$line")
    "$python" - "$endpoint" <<'PY' || { kill "$SERVER_PID"; return 1; }
import sys

import fsspec

import magicfs

opts = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": sys.argv[1]}}
with magicfs.write_job("s3://bkt/out", storage_options=opts) as job:
    with job.task(0) as task, job.fs.open(task.path("a.txt"), "wb") as f:
        f.write(b"written beside awscli")
s3 = fsspec.filesystem("s3", skip_instance_cache=True, **opts)
assert s3.cat("bkt/out/a.txt") == b"written beside awscli", s3.ls("bkt/out")
assert s3.exists("bkt/out/_SUCCESS") and job.summary.files == 1
print("environments.sh: one magic job on moto from the preinstalled environment: ok")
PY
    kill "$SERVER_PID"
    wait "$SERVER_PID" || true
}

# An environment that already has awscli and boto3 (botocore 1.37.3, in aiobotocore
# 2.22's window): magicfs installed with the environment as constraints keeps them, pip
# finds nothing broken, and a job runs (docs/getting-started.md, docs/development.md).
preinstalled() {
    local venv=.ci/venv-preinstalled started=$SECONDS
    rm -rf "$venv"
    "$1" -m venv "$venv"
    "$venv/bin/python" -m pip install -q -U pip
    "$venv/bin/python" -m pip install -q awscli==1.38.3 boto3==1.37.3
    "$venv/bin/python" -m pip freeze > "$venv/installed.txt"
    "$venv/bin/python" -m pip install -q -c "$venv/installed.txt" -e .
    "$venv/bin/python" -m pip check
    "$venv/bin/python" -c 'import botocore, magicfs; assert botocore.__version__ == "1.37.3"'
    round_trip "$venv/bin/python" .ci/venv-lowest/bin/magicfs
    echo "environments.sh: preinstalled awscli and boto3 kept, in $((SECONDS - started)) s"
}

run newest "$(find_python "${MAGICFS_NEWEST_PYTHON:-python3.13}")"
run lowest "$(find_python "${MAGICFS_LOWEST_PYTHON:-python3.11}")" -c .ci/lowest.txt
preinstalled "$(find_python "${MAGICFS_LOWEST_PYTHON:-python3.11}")"
