"""The run store: run folders, their status records, retention."""
