"""The mistakes one check charges and a later check names without charging again: one mistake, one charge.

A ``Mistake`` is data: the rubric check that charges it (its price is that check's in ``rubric.toml``; the share it
takes is the lesson module's per-rule cost) and its words. A check charges one with ``Context.charge`` and a later
check asks ``Context.charged``; each ``Group`` declares the mistakes it charges and reads, and ``grader.core`` refuses
an order of groups where one is read before the group that charges it runs.
"""
from __future__ import annotations

from dataclasses import dataclass

from grader.rubric import charged_under


@dataclass(frozen=True)
class Mistake:
    """One mistake a check charges: the rubric (part, check) that takes its points, and what it is."""

    key: str        # unique in ``MISTAKES``; never written into feedback
    part: str       # the rubric part of the charging check, "reader"
    check: str      # the charging check, "contract"
    wording: str    # the mistake, as feedback names it where it is not charged again

    def charged_under(self) -> str:
        """'not charged here: charged once, under <part title>: <what the check asks>' (``grader.rubric``)."""
        return charged_under(self.part, self.check)


READER_SIZES = Mistake("reader_sizes", "reader", "contract", "the reader's batch sizes")
SUMMARY_PERCENTAGE = Mistake("summary_percentage", "acceptance", "summarize_code",
                             "summarize() returns the accuracy as a percentage")
SUMMARY_TRANSPOSED = Mistake("summary_transposed", "acceptance", "summarize_code",
                             "summarize() returns the confusion transposed")

MISTAKES: tuple[Mistake, ...] = (READER_SIZES, SUMMARY_PERCENTAGE, SUMMARY_TRANSPOSED)
