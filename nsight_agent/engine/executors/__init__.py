"""Executors: where jobs run (the interface, the local GPU slots; ray/ for a Ray pool)."""
