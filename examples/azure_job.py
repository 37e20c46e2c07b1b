"""A pandas job on Azure Blob with zero bytes copied: the block-list committer.

Runs against a local Azurite (``npm install --prefix .ci/node azurite@3``, as
``tests/install_servers.sh`` does for the tests); point ``storage_options`` at your own
account (e.g. ``{"account_name": "...", "credential": ...}``, adlfs's options) to use it
for real.
"""

import pathlib
import tempfile

import adlfs
import pandas as pd

import magicfs
from magicfs.integrations.azurite import LocalAzurite

with tempfile.TemporaryDirectory() as workdir, LocalAzurite(pathlib.Path(workdir)) as azurite:
    opts = azurite.storage_options
    reader = adlfs.AzureBlobFileSystem(skip_instance_cache=True, **opts)
    reader.mkdir("sales")

    with magicfs.write_job("abfs://sales/2025", storage_options=opts) as job:
        for task_id, region in enumerate(["north", "south"]):
            frame = pd.DataFrame({"amount": [1.5, 2.5, 3.5]})
            with job.task(task_id) as task:
                frame.to_parquet(
                    task.url(f"region={region}/part-{task_id:05d}.parquet"),
                    storage_options=job.storage_options,
                    index=False,
                )
        reader.invalidate_cache()
        visible = [p for p in reader.find("sales/2025") if "__magic" not in p]
        print("visible before job commit:", visible)  # the blocks are staged, unpublished
        before = len(azurite.operations())
    print("committer:", job.committer.name)
    copies = [op for op, _ in azurite.operations()[before:] if "Copy" in op]
    print("server-side copies at job commit:", len(copies))
    sales = pd.read_parquet("abfs://sales/2025", storage_options=opts)
    print(sales.groupby("region", observed=True).size().to_dict())
