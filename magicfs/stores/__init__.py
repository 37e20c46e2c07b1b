"""The stores layer: what each object store can do, and every request magicfs sends it.

* :mod:`.capabilities` — a store's declared capabilities, probed in one place;
* :mod:`.s3` — every S3 operation (uploads, records, listings, batched deletes) with
  one retry, rate and cache policy;
* :mod:`.rename` — the rename stores' operations (local, memory, Azure, GCS);
* :mod:`.local` — the local disk as an fsspec filesystem with a ``local://`` protocol.
"""
