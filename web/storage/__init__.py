"""Where files live: the storage interface, the local content-addressed store and S3."""
