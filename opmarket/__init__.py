"""opmarket: op/kernel plugins, their run time, compatibility checks and marketplace."""

__version__ = "0.1.0"
