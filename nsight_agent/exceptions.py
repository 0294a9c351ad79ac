"""nsight-python's exception names, for scripts ported with ``import nsight_agent as nsight``.

Each name is one of our own classes (``errors.py``), so ``except exceptions.ProfilerException``
catches everything nsight-agent raises on purpose, and our errors keep their message and hint.

- ``ProfilerException`` is ``NsightAgentError``, the base of all of ours (our bad-argument
  errors are also ``ValueError``s).
- ``NCUNotAvailableError`` is ``NcuNotFoundError``; missing counter permission is the separate
  ``CounterPermissionError`` (still a ``ProfilerException``).
- ``ThermalControlError`` and ``CoolingTimeoutError`` are both our ``CoolingTimeoutError``, the
  only thermal failure we raise.
"""

from __future__ import annotations

from nsight_agent.errors import CoolingTimeoutError, NcuNotFoundError, NsightAgentError

ProfilerException = NsightAgentError
NCUNotAvailableError = NcuNotFoundError
ThermalControlError = CoolingTimeoutError

__all__ = [
    "CoolingTimeoutError",
    "NCUNotAvailableError",
    "ProfilerException",
    "ThermalControlError",
]
