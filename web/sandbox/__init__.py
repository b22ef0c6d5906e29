"""The validation sandbox: bubblewrap, its seccomp filter and a control group per job."""
