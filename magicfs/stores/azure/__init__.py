"""Azure Blob storage through block lists: deferred writes with zero bytes copied.

A block blob is made of blocks. **Put Block** stages a block against a blob's name; staged
("uncommitted") blocks are invisible (a read answers ``BlobNotFound``, listings skip the
name) until **Put Block List** names them, which publishes the blob in one request and
discards every staged block it does not name. That is S3's multipart upload: a task
stages its file's blocks against the *final* name, and job commit publishes each file
with one request — no copy, no rename (:mod:`.blocks`, :mod:`.writer`).
"""
