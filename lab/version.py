"""The lab's version, recorded in every hand-in's ``submission.json``."""
__version__ = "0.1.0"
