"""One module per lesson group, named after the lesson's notebook (``lesson05_qdq_vs_qoperator`` grades
``notebooks/05_qdq_vs_qoperator.ipynb``), plus ``predictions`` (the predictions of lessons 01, 03, 04, 05, 07)."""
