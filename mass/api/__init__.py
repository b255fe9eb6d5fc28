"""The public Python API of MaSS-ETL (docs/api.md): what a notebook or a user's own code calls.

    from mass.api import Suppressor, audit_release
    sup = Suppressor(suppress="gender", preserve="age").fit(X, labels)   # `mass train`
    Xp = sup.transform(X_new, ids=ids)                                 # `mass anonymize`'s rows
    report = audit_release(Xp_table, labels, suppress="gender", preserve="age", model=sup)
    sup.export("triton_models", "mine")                                # `mass export`

- :class:`~mass.api.suppressor.Suppressor`: a scikit-learn transformer (``fit`` / ``transform``
  / ``get_params`` / ``clone`` / ``Pipeline``) over numpy, pandas and Arrow;
- :func:`~mass.api.report.audit_release` -> :class:`~mass.api.report.AuditReport` (renders as
  report.html in a notebook; ``passed``, ``table``, ``figures``).

Not ``mass`` itself: every command and DVC stage imports the ``mass`` package, so a hook there
would tie each of them (and the audit) to the training stack (tests/layout). Importing this
package loads scikit-learn, numpy and pyarrow, not torch or Great Expectations (they load when
``fit``, ``transform`` or the audit runs). The Beam transforms are in :mod:`transforms.api`.
"""

from mass.api.report import AuditReport, audit_release
from mass.api.suppressor import Suppressor

__all__ = ["AuditReport", "Suppressor", "audit_release"]
