"""Prometheus metrics of one app (its own ``CollectorRegistry``, so several apps in one process, as in
tests, never share or clash): request latency per endpoint, each copilot turn's model and tool calls,
tokens, limit cuts and tool errors, stream timeouts, index job durations and the queue's depth."""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

log = logging.getLogger("repoctx.service.metrics")

LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
CALL_BUCKETS = (0, 1, 2, 3, 4, 6, 8, 12, 16)
JOB_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class _JobsCollector:
    """Queue depth and jobs by status, read from the job table when scraped."""

    def __init__(self, counts: Callable[[], dict[str, int]]):
        self.counts = counts

    def collect(self):
        depth = GaugeMetricFamily("repoctx_index_queue_depth", "Index jobs waiting to be claimed")
        by_status = GaugeMetricFamily("repoctx_index_jobs", "Index jobs by status", labels=["status"])
        try:
            counts = self.counts()
        except Exception as e:  # noqa: BLE001 - a scrape never fails because the database blinked
            log.warning("metrics: job counts unavailable: %s", type(e).__name__)
            return
        depth.add_metric([], counts.get("queued", 0))
        for status in ("queued", "running", "done", "failed", "superseded"):
            by_status.add_metric([status], counts.get(status, 0))
        yield depth
        yield by_status


class ServiceMetrics:
    def __init__(self, job_counts: Callable[[], dict[str, int]] | None = None):
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Histogram(
            "repoctx_http_request_seconds",
            "HTTP request latency (to the last byte)",
            ["endpoint", "method", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge("repoctx_http_requests_in_flight", "Requests being served", registry=r)
        self.turns = Counter("repoctx_chat_turns_total", "Copilot turns", ["outcome"], registry=r)
        self.turn_seconds = Histogram(
            "repoctx_chat_turn_seconds", "Copilot turn latency", buckets=LATENCY_BUCKETS, registry=r
        )
        self.turn_model_calls = Histogram(
            "repoctx_chat_model_calls_per_turn", "Model calls in one turn", buckets=CALL_BUCKETS, registry=r
        )
        self.turn_tool_calls = Histogram(
            "repoctx_chat_tool_calls_per_turn", "Tool calls in one turn", buckets=CALL_BUCKETS, registry=r
        )
        self.tokens = Counter("repoctx_chat_tokens_total", "Model tokens", ["direction"], registry=r)
        self.limit_cuts = Counter("repoctx_chat_limit_cuts_total", "Turns cut by a limit", ["limit"], registry=r)
        self.tool_errors = Counter("repoctx_chat_tool_errors_total", "Tool calls that returned an error", registry=r)
        self.tool_calls = Counter("repoctx_chat_tool_calls_total", "Tool calls by tool", ["tool"], registry=r)
        self.stream_errors = Counter(
            "repoctx_stream_errors_total", "Streams ended by an error event", ["endpoint", "error"], registry=r
        )
        self.disconnects = Counter(
            "repoctx_stream_disconnects_total", "Streams the client left", ["endpoint"], registry=r
        )
        self.job_seconds = Histogram(
            "repoctx_index_job_seconds",
            "Index job duration (jobs run in this process)",
            ["outcome"],
            buckets=JOB_BUCKETS,
            registry=r,
        )
        self.auth_failures = Counter(
            "repoctx_auth_failures_total", "Requests refused for a missing or bad key", registry=r
        )
        if job_counts is not None:
            r.register(_JobsCollector(job_counts))

    def record_turn(self, m) -> None:
        """A copilot ``MetricsSink``: one ``TurnMetrics`` per turn."""
        self.turns.labels("error" if m.error else "ok").inc()
        self.turn_seconds.observe(m.latency_s or 0.0)
        self.turn_model_calls.observe(m.model_calls)
        self.turn_tool_calls.observe(m.tool_calls)
        if m.tokens_in:
            self.tokens.labels("in").inc(m.tokens_in)
        if m.tokens_out:
            self.tokens.labels("out").inc(m.tokens_out)
        if m.limit_cut:
            self.limit_cuts.labels(m.limit_cut).inc()
        if m.tool_errors:
            self.tool_errors.inc(m.tool_errors)

    record = record_turn  # the MetricsSink protocol

    def record_job(self, job, outcome: str, seconds: float) -> None:
        self.job_seconds.labels(outcome.split(":")[0]).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
