"""Seeing a run: the HTML report, OpenTelemetry traces, following a live run, comparing two
runs. Each part loads only when it is used."""

from interpreters.observe._report import render_report, report_data

__all__ = ["render_report", "report_data"]
