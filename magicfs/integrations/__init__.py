"""The integrations layer: ``write_job``, Dask, Ray, PySpark and the command line.

Their public names are ``magicfs.write_job``, ``magicfs.dask``, ``magicfs.ray``,
``magicfs.spark`` and the ``magicfs`` command (docs/api.md, docs/cli.md); those
top-level modules only re-export what is here.
"""
