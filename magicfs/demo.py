"""``magicfs demo``: the main job, end to end, against an embedded S3 server on 127.0.0.1."""

from __future__ import annotations

import time

from .embedded_s3 import EmbeddedS3Server
from .paths import final_destination


def run_demo(keep: bool = False) -> int:
    import s3fs

    started = time.monotonic()
    with EmbeddedS3Server() as server:
        print(f"embedded S3 server: {server.endpoint_url}")
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **server.storage_options)
        fs.mkdir("demo-bucket")
        for path in (
            "s3://demo-bucket/out/__magic_job-1/job-1/00/tasks/attempt_0/__base/year=2024/part-0.parquet",
            "s3://demo-bucket/out/__magic/job-1/task_01/part-1.csv",
        ):
            print(f"{path}\n  -> {final_destination(path)}")
        if keep:
            print("server kept running; press Ctrl-C to stop")
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    print(f"demo finished in {time.monotonic() - started:.1f}s")
    return 0
