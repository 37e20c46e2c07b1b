"""S3: deferred multipart uploads (the magic write path) and the S3 store operations."""
