"""Prometheus metrics of the audit log (registered on the default registry)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECORDS = Counter("xinserve_audit_records_total", "Audit records durably appended.")
APPEND_FAILURES = Counter(
    "xinserve_audit_append_failures_total", "Audit records that could not be stored when appended."
)
RECORDS_LOST = Counter("xinserve_audit_records_lost_total", "Records dropped by the log_and_continue backlog overflow.")
HEALTHY = Gauge("xinserve_audit_healthy", "1 when the audit store accepts writes, 0 otherwise.")
COMMIT_SECONDS = Histogram(
    "xinserve_audit_commit_duration_seconds",
    "Duration of one group-commit transaction.",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
DISK_USED_RATIO = Gauge("xinserve_audit_disk_used_ratio", "Used fraction of the audit store's filesystem.")
CHECKPOINTS = Counter("xinserve_audit_checkpoints_total", "Signed checkpoints written.")
ANCHORS_SENT = Counter("xinserve_audit_anchors_sent_total", "Anchor messages written to the syslog collector.")
ANCHORS_LOST = Counter(
    "xinserve_audit_anchors_lost_total", "Anchor messages dropped because the buffer for the collector was full."
)
ANCHORS_BUFFERED = Gauge("xinserve_audit_anchors_buffered", "Anchor messages waiting for the syslog collector.")
COLLECTOR_UP = Gauge("xinserve_audit_collector_up", "1 while the syslog collector is connected, 0 otherwise.")
TIMESTAMP_FAILURES = Counter(
    "xinserve_audit_timestamp_failures_total", "Checkpoints shipped without an RFC 3161 time-stamp (TSA failed)."
)
