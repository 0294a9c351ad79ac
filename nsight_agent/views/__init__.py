"""Builders that shape the judge's decisions (and plain run data) into compact answer models
(paged), and the text and plot renderers; nothing here reads the engine."""
