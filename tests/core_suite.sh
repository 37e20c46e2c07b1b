#!/usr/bin/env bash
# The core suite: the committers' contract and task-path table on the in-process store and
# (magic, S3's default committer) on moto, the commit records, the `magicfs` command and
# the S3 direct request path: about 260 tests. It needs only the `test-core` extra (no
# Java, Spark, Dask, Ray, Azure, GCS or Ceph), so it is what runs on the newest Python and at the lowest versions (tests/environments.sh,
# tox -e py313-core, tox -e lowest). PYTHON: the interpreter (default: python on PATH);
# extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python}" -m pytest -p no:cacheprovider -n 2 --dist loadfile \
    -m "not rgw and not seaweed and not slow" \
    -k "not dask and not azure and not directory and not partitioned and not file-v1 and not file-v2 and not InMemory" \
    tests/test_contract_mem_deferred.py tests/test_contract_s3.py tests/test_records.py \
    tests/test_cli.py tests/test_direct_requests.py "$@"
