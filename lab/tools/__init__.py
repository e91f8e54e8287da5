"""The student's command-line tools: ``run`` (every lesson headlessly), ``submit`` (hand in), ``summary``."""
