"""Instructor-only tools, never in the student kit: ``kit`` builds the kit; ``workbook`` runs every lesson, then
hands the workspace in and grades it (the one place the lab and the grader are composed)."""
