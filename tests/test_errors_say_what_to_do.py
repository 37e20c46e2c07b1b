"""Errors a new user meets first say what to do (issue 35, item 7).

Each test makes the mistake a user makes, through the public call, and checks the
error's words (the option or path named, the fix offered) and that nothing was written:

* a misspelt option (``conflict_mod=``) of ``write_job``/``committer_for``: a
  ``ValueError`` naming it, the likely fix and every valid option, per committer;
* store options typed as text (Spark's ``.option``, the CLI's ``-o``) that look like JSON
  and are not, or are not an object where the option needs one: the option and the
  parse error named, the value never echoed;
* ``task.path("")`` (what ``pyarrow.dataset.write_dataset`` users try first): points
  to ``task.work_path``, and following that advice commits the dataset;
* the CLI's "access denied" keeps the store's code and message (Ceph RGW refusing a
  wrong secret: moto accepts any credentials).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.dataset as pads
import pytest
from helpers import visible_keys
from helpers.cli import run_cli

import magicfs
from magicfs.committers import COMMITTERS, accepted_options
from magicfs.integrations.option_values import decode_option
from magicfs.integrations.spark.options import storage_options


def test_a_misspelt_option_names_itself_the_fix_and_the_valid_ones(s3_options, s3, bucket):
    with pytest.raises(ValueError) as refused:
        magicfs.write_job(f"s3://{bucket}/out", storage_options=s3_options, conflict_mod="replace")
    message = str(refused.value)
    assert "unknown option 'conflict_mod' for the magic committer" in message
    assert "did you mean 'conflict_mode'?" in message
    for valid in ("conflict_mode", "threads", "in_memory", "success_file", "cleanup"):
        assert valid in message
    assert s3.find(bucket) == []  # refused before anything was set up


@pytest.mark.parametrize("name", sorted(COMMITTERS))
def test_every_committer_refuses_an_option_it_does_not_take(name):
    with pytest.raises(ValueError, match=rf"unknown option 'treads' for the {name} committer"):
        magicfs.committer_for("memory://errors/out", committer=name, treads=4)
    accepted = accepted_options(name)
    assert {"conflict_mode", "threads", "job_id", "storage_options", "fs"} <= set(accepted)
    # What the name fixes is not the user's to set (file-v1/v2's algorithm).
    assert "algorithm" not in accepted and "partitioned" not in accepted


def test_options_of_another_committer_are_refused_not_dropped():
    """``in_memory`` is the magic committer's: the manifest committer says so, not ignores it."""
    with pytest.raises(ValueError, match="unknown option 'in_memory' for the manifest"):
        magicfs.committer_for("memory://errors/out", in_memory=True)


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("storage_options.client_kwargs", "{'region_name': 'x'}", "is not valid JSON"),
        ("storage_options.config_kwargs", "retries", "is not valid JSON"),
        ("storage_options.client_kwargs", "[1, 2]", "must be a JSON object"),
        ("storage_options.anything", '{"a": 1,}', "is not valid JSON"),
    ],
)
def test_spark_store_options_that_are_not_json_name_the_option(name, text, words):
    with pytest.raises(ValueError) as refused:
        storage_options({name: text})
    message = str(refused.value)
    assert f"option {name} {words}" in message
    assert "line 1 column" in message or "JSON object" in message  # the parse error
    assert text not in message  # never echoed: it may be a secret


def test_plain_text_and_json_store_options_still_decode():
    options = storage_options(
        {
            "storage_options.endpoint_url": "http://127.0.0.1:9000",
            "storage_options.anon": "true",
            "storage_options.client_kwargs": '{"region_name": "eu-west-1"}',
            "storage_options.config_kwargs.retries": '{"mode": "standard"}',
            "format": "csv",
        }
    )
    assert options == {
        "endpoint_url": "http://127.0.0.1:9000",
        "anon": True,
        "client_kwargs": {"region_name": "eu-west-1"},
        "config_kwargs": {"retries": {"mode": "standard"}},
    }
    assert decode_option("key", "AKIA{not-json") == "AKIA{not-json"  # starts otherwise


def test_the_cli_names_a_store_option_that_is_not_json():
    result = run_cli("uploads", "list", "s3://bkt/", "-o", "client_kwargs={'region_name': 'x'}")
    assert result.code == 2  # argparse: a usage error, before any request
    assert "option client_kwargs is not valid JSON" in result.stderr
    assert "region_name': 'x'" not in result.stderr


@pytest.mark.parametrize("relative", ["", "/"])
def test_an_empty_task_path_points_to_work_path(relative, s3_options, s3_client, bucket):
    job = magicfs.write_job(f"s3://{bucket}/out", storage_options=s3_options)
    with job, job.task(0) as task:
        with pytest.raises(ValueError) as refused:
            task.path(relative)
        assert "task.work_path" in str(refused.value)
        assert "write_dataset" in str(refused.value)
        with pytest.raises(ValueError, match=r"task\.work_url"):
            task.url(relative)
        # The advice works: a directory writer given task.work_path.
        table = pa.table({"year": [2024, 2025, 2025], "amount": [1.0, 2.0, 3.0]})
        pads.write_dataset(
            table,
            base_dir=task.work_path,
            filesystem=job.fs,
            format="parquet",
            partitioning=["year"],
            partitioning_flavor="hive",
            basename_template="part-0-{i}.parquet",
        )
    assert visible_keys(s3_client, bucket, "out/") == [
        "out/_SUCCESS",
        "out/year=2024/part-0-0.parquet",
        "out/year=2025/part-0-0.parquet",
    ]


def test_the_cli_keeps_the_stores_code_and_message_when_access_is_denied(rgw_server, rgw_bucket):
    secret = "not-the-secret-0123456789"
    result = run_cli(
        "uploads",
        "list",
        f"s3://{rgw_bucket}/",
        "--endpoint-url",
        rgw_server.endpoint_url,
        "-o",
        f"key={rgw_server.storage_options['key']}",
        "-o",
        f"secret={secret}",
    )
    assert result.code == 1, result.output
    assert f"s3://{rgw_bucket}/: access denied: HTTP 403 SignatureDoesNotMatch" in result.stderr
    assert "check the credentials" in result.stderr
    assert secret not in result.output
