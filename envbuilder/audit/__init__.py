"""Known vulnerabilities of a lock's packages, in OSV terms (`envbuilder audit LOCKDIR`).

Sits above `lock/` (it reads a lock directory through `LockRecord` and `read_uv_lock`) and below
`image/` (whose SBOM carries the findings as CycloneDX `vulnerabilities`), `report/` and `nightly/`.
The database client (`database.py`) is the only part that touches the network.
"""

from __future__ import annotations

from envbuilder.audit.database import AdvisorySource, OfflineDatabase, OsvService
from envbuilder.audit.pipeline import AuditOptions, run_audit
from envbuilder.audit.report import REPORT_NAME, AuditReport, Finding
from envbuilder.audit.severity import Severity, Threshold

__all__ = ["REPORT_NAME", "AdvisorySource", "AuditOptions", "AuditReport", "Finding", "OfflineDatabase",
           "OsvService", "Severity", "Threshold", "run_audit"]
