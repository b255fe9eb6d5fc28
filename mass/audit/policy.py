"""The data owner's audit policy: thresholds live in params.yaml under ``audit:``.

```yaml
audit:
  frozen_margin: 0.05     # allowed margin above max(majority, floor) for the frozen models
  attacker_margin:        # ... for each retrained attacker family (or one number for all)
    logreg: 0.05
    mlp: 0.05
    gboost: 0.05
    knn: 0.05
  min_utility_fraction: 0.9   # fraction of original accuracy a preserved attribute keeps
  suppress:               # optional per-attribute overrides, per judge ("frozen" or family)
    colour: {frozen: 0.05, logreg: 0.03}
  preserve:               # optional per-attribute overrides of min_utility_fraction
    digit: 0.95
  families: [logreg, mlp, gboost, knn]
  folds: 10              # stratified k-fold: each attacker trains on (k-1)/k of the rows
  seed: 0
  max_rows: 20000         # subsample for the retrained attackers (null = all rows)
  norm_tol: 1.0e-4        # |norm - 1| allowed for released embeddings
  allow_columns: []       # columns the release may carry besides id and embedding
  confidence: 0.95        # judges are held to the upper end of this two-sided interval
  curve: true             # learning curve (25/50/100 % of the attack training set)
  curve_tol: 0.02         # a curve gaining more than this (and 1 SE) in its last step climbs
  max_cosine: 0.9999      # a released row this close to its original is unmodified
  max_levels: 32          # released columns with <= this many values are one-hot encoded
  gate_key_compromised: true  # also judge attackers on the release with its noise removed
  force_vacuous: false    # run a policy under which nothing can fail (recorded in reports)
  watch: []               # labelled attributes neither suppressed nor preserved whose
                          # retention every audit and calibration reports (--watch overrides)
  watch_min_kept: null    # e.g. 0.8: every learnable watch attribute keeps this normalised
                          # information, (release - majority) / (original - majority)
  watch_repeats: 3        # fold orders the watch attributes are read over (mean and range)
  gate_certificate: false # also hold a cell release's certified bound (any attacker) to the
                          # strictest judge's limits; a release without one then fails
```
The rules are documented in docs/audit.md.
When ``audit.allow_columns`` is absent, ``anonymize.allow_columns`` (if any) is used.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from mass.errors import ConfigError
from mass.metrics import ATTACKER_FAMILIES, FROZEN
from mass.names import parse_names

KEYS = {"frozen_margin", "attacker_margin", "min_utility_fraction", "suppress", "preserve",
        "families", "folds", "seed", "max_rows", "norm_tol", "allow_columns", "confidence",
        "curve", "curve_tol", "max_cosine", "max_levels", "gate_key_compromised",
        "force_vacuous", "watch", "watch_min_kept", "watch_repeats", "gate_certificate"}  # fmt: skip


@dataclass(frozen=True)
class AuditPolicy:
    """Validated thresholds and attacker settings (see the module docstring)."""

    frozen_margin: float = 0.05
    attacker_margin: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(ATTACKER_FAMILIES, 0.05)
    )
    min_utility_fraction: float = 0.9
    suppress: dict[str, dict[str, float]] = field(default_factory=dict)
    preserve: dict[str, float] = field(default_factory=dict)
    families: tuple[str, ...] = ATTACKER_FAMILIES
    folds: int = 10
    seed: int = 0
    max_rows: int | None = 20000  # attackers subsample beyond this (runtime bound)
    norm_tol: float = 1e-4
    allow_columns: tuple[str, ...] = ()
    confidence: float = 0.95
    curve: bool = True
    curve_tol: float = 0.02
    max_cosine: float = 0.9999
    max_levels: int = 32
    gate_key_compromised: bool = True  # a stolen key must not undo a release (docs/audit.md)
    force_vacuous: bool = False  # a vacuous policy runs, recorded as forced, instead of refused
    watch: tuple[str, ...] = ()  # reported by every audit (docs/audit.md); --watch overrides
    watch_min_kept: float | None = None  # None: watch attributes are reported, not gated
    watch_repeats: int = 3  # repeated CV of the watch readings: one fold draw moves them
    gate_certificate: bool = False  # the certificate is reported; true: judged (docs/audit.md)

    def to_dict(self) -> dict:
        """The resolved policy as plain JSON values (audit.json ``policy``)."""
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    def margins(self, attr: str) -> dict[str, float]:
        """Margin per judge ("frozen" and each family) for a suppressed attribute."""
        over = self.suppress.get(attr, {})
        base = {FROZEN: self.frozen_margin, **self.attacker_margin}
        return {j: float(over.get(j, base.get(j, 0.05))) for j in (FROZEN, *self.families)}

    def fraction(self, attr: str) -> float:
        return float(self.preserve.get(attr, self.min_utility_fraction))


def _number(key: str, value: Any, *, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"audit.{key}: expected a number, got {value!r}")
    if not lo <= value <= hi:
        raise ConfigError(f"audit.{key}: {value} is outside [{lo}, {hi}]")
    return float(value)


def _int(key: str, value: Any, *, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (
            hi is not None and value > hi):  # fmt: skip
        within = f">= {lo}" if hi is None else f"from {lo} to {hi}"
        raise ConfigError(f"audit.{key}: expected an integer {within}, got {value!r}")
    return int(value)


def policy_from_dict(section: Mapping[str, Any] | None) -> AuditPolicy:
    """Build and validate the policy from the ``audit:`` mapping (None -> defaults)."""
    sec = dict(section or {})
    unknown = sorted(set(sec) - KEYS)
    if unknown:
        raise ConfigError(f"audit.{unknown[0]}: unknown key; known keys: {sorted(KEYS)}")
    kw: dict[str, Any] = {}
    if "frozen_margin" in sec:
        kw["frozen_margin"] = _number("frozen_margin", sec["frozen_margin"], lo=0.0, hi=1.0)
    if "min_utility_fraction" in sec:
        kw["min_utility_fraction"] = _number(
            "min_utility_fraction", sec["min_utility_fraction"], lo=0.0, hi=2.0
        )
    if "families" in sec:
        fams = parse_names(sec["families"], where="audit.families")
        bad = [f for f in fams if f not in ATTACKER_FAMILIES]
        if bad or not fams:
            raise ConfigError(
                f"audit.families: {bad or fams!r} invalid; choose from {list(ATTACKER_FAMILIES)}"
            )
        kw["families"] = fams
    judges = (FROZEN, *kw.get("families", ATTACKER_FAMILIES))
    if "attacker_margin" in sec:
        am = sec["attacker_margin"]
        if not isinstance(am, Mapping):
            am = dict.fromkeys(ATTACKER_FAMILIES, am)
        for fam in am:
            if fam not in ATTACKER_FAMILIES:
                raise ConfigError(
                    f"audit.attacker_margin.{fam}: unknown family; use {list(ATTACKER_FAMILIES)}"
                )
        kw["attacker_margin"] = {
            **dict.fromkeys(ATTACKER_FAMILIES, 0.05),
            **{f: _number(f"attacker_margin.{f}", m, lo=0.0, hi=1.0) for f, m in am.items()},
        }
    suppress: dict[str, dict[str, float]] = {}
    overrides = sec.get("suppress") or {}
    if not isinstance(overrides, Mapping):
        raise ConfigError("audit.suppress: expected {attribute: margin or {judge: margin}}, "
                          f"got {overrides!r}")  # fmt: skip
    for attr, per in overrides.items():
        if isinstance(per, int | float) and not isinstance(per, bool):
            per = dict.fromkeys(judges, per)
        if not isinstance(per, Mapping):
            raise ConfigError(f"audit.suppress.{attr}: expected a number or {{judge: margin}}")
        for judge in per:
            if judge not in judges:
                raise ConfigError(f"audit.suppress.{attr}.{judge}: unknown judge; use {judges}")
        suppress[str(attr)] = {
            j: _number(f"suppress.{attr}.{j}", m, lo=0.0, hi=1.0) for j, m in per.items()
        }
    kw["suppress"] = suppress
    preserve = sec.get("preserve") or {}
    if not isinstance(preserve, Mapping):
        raise ConfigError("audit.preserve: expected {attribute: min_fraction}")
    kw["preserve"] = {
        str(a): _number(f"preserve.{a}", f, lo=0.0, hi=2.0) for a, f in preserve.items()
    }
    if "folds" in sec:
        kw["folds"] = _int("folds", sec["folds"], lo=2, hi=100)  # more is leave-one-out
    if "seed" in sec:
        kw["seed"] = _int("seed", sec["seed"], lo=0, hi=2**32 - 1)  # numpy's seed range
    if "max_rows" in sec:  # explicit null = every row
        m = sec["max_rows"]
        kw["max_rows"] = None if m is None else _int("max_rows", m, lo=10)
    if "norm_tol" in sec:
        kw["norm_tol"] = _number("norm_tol", sec["norm_tol"], lo=0.0, hi=1.0)
    if "allow_columns" in sec:
        kw["allow_columns"] = parse_names(sec["allow_columns"], where="audit.allow_columns")
    if "confidence" in sec:
        kw["confidence"] = _number("confidence", sec["confidence"], lo=0.5, hi=0.9999)
    if "curve_tol" in sec:
        kw["curve_tol"] = _number("curve_tol", sec["curve_tol"], lo=0.0, hi=1.0)
    if "max_cosine" in sec:
        kw["max_cosine"] = _number("max_cosine", sec["max_cosine"], lo=0.0, hi=1.0)
    if "watch" in sec:
        kw["watch"] = parse_names(sec["watch"], where="audit.watch")
    if sec.get("watch_min_kept") is not None:
        kw["watch_min_kept"] = _number("watch_min_kept", sec["watch_min_kept"], lo=0.0, hi=2.0)
    if "watch_repeats" in sec:
        kw["watch_repeats"] = _int("watch_repeats", sec["watch_repeats"], lo=1)
    if "max_levels" in sec:
        kw["max_levels"] = _int("max_levels", sec["max_levels"], lo=2)
    for key in ("curve", "gate_key_compromised", "force_vacuous", "gate_certificate"):
        if key in sec:
            if not isinstance(sec[key], bool):
                raise ConfigError(f"audit.{key}: expected true or false, got {sec[key]!r}")
            kw[key] = sec[key]
    return AuditPolicy(**kw)


def _near(keys, name: str = "audit") -> list[str]:
    """Top-level keys that look like a misspelt ``name`` (``audti``, ``Audit``)."""
    import difflib

    others = [str(k) for k in keys if k != name]
    return [k for k in others if k.lower() == name
            or difflib.SequenceMatcher(None, k.lower(), name).ratio() >= 0.75]  # fmt: skip


def load_policy(params_path: str | None, *, flag: str = "--policy") -> AuditPolicy:
    """Read ``audit:`` from a params.yaml or policy file (None -> the built-in defaults).

    The file must hold an ``audit:`` mapping: one without it (or with a misspelt ``audti:``)
    is refused naming the file and the key, never read as the defaults; a duplicated key is
    refused by :func:`mass.config.read_yaml`."""
    if params_path is None:
        return AuditPolicy()
    from mass.config import read_yaml

    params = read_yaml(params_path, flag=flag, missing=ConfigError, what="policy file")
    section = params.get("audit")
    if section is None:
        near = _near(params)
        hint = f" (is {near[0]!r} meant to be 'audit'?)" if near else ""
        raise ConfigError(
            f"{params_path}: no 'audit:' mapping{hint}; top-level keys "
            f"{sorted(map(str, params))}: a {flag} file holds the audit policy under audit: "
            "(docs/audit.md); nothing was read"
        )
    if not isinstance(section, Mapping):
        raise ConfigError(f"{params_path}: audit: expected a mapping of thresholds")
    section = dict(section)
    anonymize = params.get("anonymize")
    if "allow_columns" not in section and isinstance(anonymize, Mapping):
        if anonymize.get("allow_columns") is not None:
            section["allow_columns"] = anonymize["allow_columns"]
    return policy_from_dict(section)


DEFAULT_PARAMS = "params.yaml"  # read from the working directory when no file is named


def resolve_policy(path: str | None, *, flag: str = "--policy") -> tuple[AuditPolicy, str]:
    """(policy, where it came from), the one default of `mass anonymize`'s gate and of `mass
    audit`: the named file's ``audit:``, else ./params.yaml's ``audit:`` when that file is
    present (one without ``audit:`` gives the built-in defaults, said so in the source; a
    misspelt ``audti:`` is refused), else the built-in defaults."""
    import os

    if path is not None:
        return load_policy(path, flag=flag), f"{path} (audit:)"
    if not os.path.isfile(DEFAULT_PARAMS):
        return AuditPolicy(), f"built-in defaults (no {flag}, no ./{DEFAULT_PARAMS})"
    from mass.config import read_yaml

    doc = read_yaml(DEFAULT_PARAMS, flag=flag, missing=ConfigError, what="params file")
    if "audit" in doc or _near(doc):
        return load_policy(DEFAULT_PARAMS, flag=flag), f"{DEFAULT_PARAMS} (audit:)"
    return AuditPolicy(), f"built-in defaults (no {flag}; ./{DEFAULT_PARAMS} has no audit:)"


def check_overrides(policy: AuditPolicy, suppress, preserve) -> None:
    """Refuse ``audit.suppress``/``audit.preserve`` overrides for attributes this audit
    does not judge in that role (a misspelt name would silently never apply)."""
    bad = [f"audit.suppress.{a}" for a in policy.suppress if a not in suppress]
    bad += [f"audit.preserve.{a}" for a in policy.preserve if a not in preserve]
    if bad:
        raise ConfigError(
            f"{', '.join(bad)}: override(s) for attribute(s) this audit does not judge in that "
            f"role (suppressed {list(suppress)}, preserved {list(preserve)}); fix the name or "
            "drop the override; nothing was published"
        )
