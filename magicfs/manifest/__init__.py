"""The manifest committer's parts: layout, store operations, task commit and job-commit stages.

Hadoop's manifest committer protocol for stores with atomic (or at least per-file)
rename and consistent listings: Azure, GCS, local disks. Tasks write into their own
working directory; task commit saves a manifest listing every file; job commit loads
the manifests and renames every file into place, in parallel, in stages.
"""
