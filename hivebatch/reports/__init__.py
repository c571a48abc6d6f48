"""Reports for administrators: who used what, who waited, which deadlines held, where GPUs are free.

Computations take plain rows (``hivebatch.reports.rows``) and return dataclasses, so they are tested
on hand-made data; ``source`` reads the controller's ledger into rows; ``render``, ``html`` and
``mapview`` turn results into tables, CSV/JSON, an HTML page and the terminal GPU map.
"""

from hivebatch.reports.rows import EventRow, JobRow, RunSegment, VCInfo, VCNow
from hivebatch.reports.usage import ClassRate, ClusterTotals, QuotaReport, VCReport, quota_report
from hivebatch.reports.users import UserReport, users_report

__all__ = [
    "ClassRate",
    "ClusterTotals",
    "EventRow",
    "JobRow",
    "QuotaReport",
    "RunSegment",
    "UserReport",
    "VCInfo",
    "VCNow",
    "VCReport",
    "quota_report",
    "users_report",
]
