"""Write a Ray Dataset as one committed job with ``magicfs.ray.CommittedDatasink``.

Starts a local Ray (2 CPUs) and an embedded S3 server, both on 127.0.0.1 only; point
``storage_options`` at your own store and drop the local-Ray set-up to use it for real.
"""

import os
import tempfile

# A local Ray that contacts nothing but 127.0.0.1 (see README, "Ray Data"): no usage
# stats, the loopback address as its node address, and a HOME with a
# ray_bootstrap_config.yaml so that its dashboard does not probe cloud metadata.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ray_home = tempfile.mkdtemp(prefix="ray-home-")
with open(os.path.join(ray_home, "ray_bootstrap_config.yaml"), "w") as config:
    config.write("{}\n")

import pandas as pd  # noqa: E402
import ray  # noqa: E402
import ray.data  # noqa: E402

import magicfs.ray  # noqa: E402
from magicfs.integrations.embedded_s3 import EmbeddedS3Server  # noqa: E402

sales = pd.DataFrame(
    {
        "order": range(1_000),
        "year": [2023 + i % 3 for i in range(1_000)],
        "amount": [round(1.5 * i, 2) for i in range(1_000)],
    }
)

home, os.environ["HOME"] = os.environ.get("HOME", ""), ray_home
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
os.environ["HOME"] = home
ray.data.DataContext.get_current().enable_progress_bars = False
try:
    with EmbeddedS3Server() as server:
        server.boto3_client().create_bucket(Bucket="bkt")
        opts = server.storage_options
        ds = ray.data.from_pandas([sales.iloc[i : i + 250] for i in range(0, 1_000, 250)])

        sink = magicfs.ray.CommittedDatasink(
            "s3://bkt/sales", storage_options=opts, partition_cols=["year"]
        )
        ds.write_datasink(sink)
        print(sink.summary.files, "files from", sink.summary.tasks, "write tasks")
        back = pd.read_parquet("s3://bkt/sales", storage_options=opts)
        back = back.assign(year=back["year"].astype("int64")).sort_values("order")
        pd.testing.assert_frame_equal(back[sales.columns].reset_index(drop=True), sales)
        print("read back equals the source:", len(back), "rows")
finally:
    ray.shutdown()
