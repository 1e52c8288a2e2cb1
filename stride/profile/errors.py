"""The analyzer's one error type: a trace that cannot be read names the file and what is wrong."""

from __future__ import annotations


class TraceError(ValueError):
    """A trace file is missing, truncated, malformed or not a profiler trace; the message names the file."""


class NotATrace(TraceError):
    """A whole, valid JSON object with no `traceEvents`: another tool's file (a trace directory skips it)."""
