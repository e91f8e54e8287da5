"""One check module per lesson group."""
