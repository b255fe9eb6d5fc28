"""The publication gate: privacy/utility measurement + Great Expectations validation.

:func:`run_audit` reads a release and its held-out labels, measures every attribute with
:mod:`mass.metrics`, validates schema, rows and attributes with the GX suites of
:mod:`mass.audit.suite` and returns an :class:`AuditResult`; :mod:`mass.audit.report`
and :mod:`mass.audit.chart` write audit.json and privacy_utility.png.
"""

from mass.audit.policy import AuditPolicy, load_policy, policy_from_dict
from mass.audit.runner import AuditRequest, AuditResult, run_audit

__all__ = ["AuditPolicy", "AuditRequest", "AuditResult", "load_policy", "policy_from_dict",
           "run_audit"]  # fmt: skip
