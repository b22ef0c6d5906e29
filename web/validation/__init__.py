"""Validation of an uploaded wheel: the pipeline and its steps, what runs in the sandbox, what comes
back from it, and the job that records the verdict."""
