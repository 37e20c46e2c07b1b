"""The layouts layer: where each committer puts task attempts and their records.

A layout maps a task path (``__magic_job-<id>/...``) to the attempt's directory and its
final destination; the filesystems are handed a layout, they never derive one.
"""
