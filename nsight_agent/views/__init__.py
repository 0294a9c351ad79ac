"""Builders that turn data into compact answer models (paged), and the text/plot renderers."""
