"""``ot_repair``: label-conditional "total repair" by iterated sliced optimal transport.

Each class of the suppressed label is transported to one common distribution, the barycenter
of the classes (Gordaliza et al. ICML'19; Chzhen et al. NeurIPS'20: "total repair"), by the
sliced iterative scheme (Pitie et al. 2007): K times, a seeded random rotation shared by all
classes, then in every rotated coordinate each class's empirical quantile function is mapped
onto the class-weighted mean quantile function (the 1-D Wasserstein barycenter). As K grows
the repaired classes share one distribution, so no retrained attacker, linear or not, reads
the label from the release - without release noise, hence without resting on the owner key.
The map is deterministic and moves each row about as little as matching the classes allows,
so what the label does not explain (the structure nobody named) is kept.

Serving without the label: the served function must not take the sensitive label from the
release path, so the fitted modifier carries a class predictor p(s | x) trained here on the
training rows (linear, or one hidden layer: ``hidden``), and the transport is fitted and
applied on the *predicted* classes - the training rows' output is exactly the served output.
Rows the predictor gets wrong are moved with another class's map; what they leak is what a
further pass (``passes`` > 1: a new predictor on the repaired rows, a new repair) and the
audit's retrained attackers measure. ``FitResult.extra['predictor_accuracy']`` records each
pass's training accuracy (near chance at the last pass means little is left to read).
Several suppressed attributes are repaired jointly on their joint label.

``transductive``: fitted on exactly the rows it will release (`mass train --transductive`),
where the transport is exact; the modifier records those rows (:mod:`mass.fitrows`) and the
anonymize job refuses any other input. Exact matching leaves the audit's held-out folds
anti-learnable (docs/calibration.md, "transductive repair").

``cell_rows``: a repair fitted on a finite sample matches the classes at a coarse scale only;
out of sample, a row's nearest released neighbours still share its class (docs/calibration.md,
"Cells: what a finite-sample repair leaves"). With ``cell_rows`` the release is the nearest
of a few k-means centres of the repaired fit rows (:mod:`mass.modifiers.cells`), so what
is finer than a cell is not released. ``cells_by_preserved``:
the centres are fitted within each class of the preserved attributes' joint label and a
linear predictor on the repaired row picks the class at release time, so coarse cells no
longer average a preserved attribute away (docs/calibration.md, "Cells by R").

``cell_axes`` (rank cells), ``cell_edges``, ``cell_basis``, ``cell_count`` and
``cell_balance``: :mod:`mass.methods.ot_repair.cells` and :mod:`mass.methods.ot_repair.balance`.

The package: :mod:`~mass.methods.ot_repair.params` (the knobs and every cross-field rule,
:func:`~mass.methods.ot_repair.params.check_knobs`), :mod:`~mass.methods.ot_repair.predictors`,
:mod:`~mass.methods.ot_repair.transport`, :mod:`~mass.methods.ot_repair.cells`,
:mod:`~mass.methods.ot_repair.balance` (pure fit steps: tensors and params in, fitted values
out) and :mod:`~mass.methods.ot_repair.method` (the Method that composes them and builds the
modifiers from the fitted values).
"""

from __future__ import annotations

from mass.methods.ot_repair.method import OtRepair  # noqa: F401  (importing it registers it)
