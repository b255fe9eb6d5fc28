"""The publication gate: privacy/utility measurement + Great Expectations validation.

:func:`run_audit` reads a release and its held-out labels, measures every attribute with
:mod:`mass.metrics`, validates schema, rows and attributes with the GX suites of
:mod:`mass.audit.suite` and returns an :class:`AuditResult`; :mod:`mass.audit.report`
and :mod:`mass.audit.chart` write audit.json and privacy_utility.png.
"""

import logging

# GX logs its decorator bookkeeping at INFO while importing (about 200 lines under the CLI's
# INFO logging, on every command that imports the audit): quietened here, in the package every
# GX import goes through, before any of its modules imports GX.
logging.getLogger("great_expectations").setLevel(logging.WARNING)

from mass.audit.policy import AuditPolicy, load_policy, policy_from_dict  # noqa: E402
from mass.audit.runner import AuditRequest, AuditResult, run_audit  # noqa: E402

__all__ = ["AuditPolicy", "AuditRequest", "AuditResult", "load_policy", "policy_from_dict",
           "run_audit"]  # fmt: skip
