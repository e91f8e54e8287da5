"""The grader's version: every result records it, and ``--resume`` re-grades what another version graded.

Its own module so that ``grader.core`` and the tools can read it without importing the ``grader`` package's
``__init__``, which imports ``grader.core`` (``grader.grade``).
"""
__version__ = "1.0.0"
