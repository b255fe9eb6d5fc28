"""Training configuration: frozen dataclasses built once from params.yaml / CLI and validated.

Defaults follow Table 7's Adience row (batch 64, lr 0.00125, w_rec=1, w^s=5, h^s=1,
w^{r*}=40, w^r=1) and App. B (AdamW wd 0.05, cosine sim for S, KL for R). ``mode`` picks
"faithful" (the paper) or "adaptive" (beyond the paper: online adversaries, stochastic
modifier, distribution matching; each toggled in :class:`AdaptiveConfig`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np

from mass.errors import ConfigError, MissingInputError
from mass.names import parse_names, split_names
from mass.rows import entropy_bits, joint_codes

log = logging.getLogger(__name__)
MODES = ("faithful", "adaptive")
# every method `mass train --method` accepts (mass.methods registers them; a test checks the
# two agree). Here, torch-free, so that `mass --help` lists them without importing torch.
METHOD_NAMES = ("mass", "leace", "leace_iterated", "leace_project", "leace_quadratic", "inlp",
                "gaussian", "gaussian_budget", "genfilter", "unlearning", "end", "ot_repair")  # fmt: skip
SIM_TYPES = ("cos", "kl", "ce")  # the similarity measures of eq. 2 (mass.losses.similarity)
ADVERSARY_FAMILIES = ("linear", "mlp")
PRE_ERASERS = ("none", "leace", "quadratic")
MATCH_KINDS = ("none", "mmd", "mean")


@dataclass(frozen=True)
class AdaptiveConfig:
    """Ingredients of adaptive mode; ignored (all off) in faithful mode."""

    adversaries: tuple[str, ...] = ("linear", "mlp")  # () turns online adversaries off
    # Defaults = the mix that brought every retrained attacker to chance on coloured MNIST
    # (README "Measured privacy"; bench/adaptive_study.py). Strong, never re-initialised
    # adversaries; G may outweigh x (residual_scale); seeded output noise does the rest.
    adv_weight: float = 50.0  # weight of KL(prior || adversary posterior) in G's loss
    adv_lr: float = 0.01
    adv_steps: int = 5  # adversary updates per generator step
    adv_reinit_every: int = 0  # epochs; 0 = never re-initialise
    adv_hidden: int = 256
    # online utility learners: MLPs retrained on x' for each preserved attribute; G minimises
    # their CE, so R stays decodable by the kind of classifier the audit retrains (0 = off;
    # measured: no gain over the frozen-judge KL term on coloured MNIST)
    utility_weight: float = 0.0
    noise_dim: int = 16  # stochastic modifier: noise inputs per row (0 = deterministic)
    noise_scale: float = 1.0
    residual_scale: float = 4.0  # x' = n(x + a n(MLP)); a > 1 lets G outweigh x
    output_noise: float = 0.2  # norm of seeded release-time noise on x' (0 = off)
    match: str = "mmd"  # distribution matching of x' across values of s
    match_weight: float = 500.0
    match_within_preserved: bool = True  # compare groups of s within strata of R
    # closed-form concept erasure fitted first on the training rows; G is trained on (and
    # applied after) its output: "none", "leace" (linear) or "quadratic" (LEACE's quadratic
    # variant: class-conditional means and covariances transported to their barycenter)
    pre_erase: str = "none"


@dataclass(frozen=True)
class MassConfig:
    """Everything `mass train` needs for method "mass"; see the module docstring."""

    suppress: tuple[str, ...]
    preserve: tuple[str, ...] = ()
    method: str = "mass"
    mode: str = "faithful"
    w_rec: float = 1.0
    w_s: dict[str, float] = field(default_factory=dict)  # per attribute; else w_s_default
    h_s: dict[str, float] = field(default_factory=dict)
    w_r: dict[str, float] = field(default_factory=dict)
    w_s_default: float = 5.0
    h_s_default: float = 1.0
    w_r_default: float = 1.0
    w_rstar: float = 40.0  # 0 turns the attribute-agnostic term off
    sim_s: str = "cos"
    sim_r: str = "kl"
    hidden: tuple[int, ...] = (256, 128, 256)
    epochs: int = 30
    batch_size: int = 64
    lr: float = 0.00125
    weight_decay: float = 0.05
    seed: int = 0
    tau: float = 0.07
    branch_epochs: int = 30
    agnostic_epochs: int = 30
    aug_noise_std: float = 0.05
    aug_drop_prob: float = 0.2
    adaptive: AdaptiveConfig = field(default_factory=AdaptiveConfig)

    def weight_s(self, attr: str) -> float:
        return float(self.w_s.get(attr, self.w_s_default))

    def entropy_weight(self, attr: str) -> float:
        return float(self.h_s.get(attr, self.h_s_default))

    def weight_r(self, attr: str) -> float:
        return float(self.w_r.get(attr, self.w_r_default))

    @property
    def adaptive_on(self) -> bool:
        return self.mode == "adaptive"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["suppress"], d["preserve"], d["hidden"] = (
            list(self.suppress), list(self.preserve), list(self.hidden),
        )  # fmt: skip
        d["adaptive"]["adversaries"] = list(self.adaptive.adversaries)
        return d

    def config_hash(self) -> str:
        """sha256 of the canonical JSON of the resolved config."""
        return config_hash(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict[str, Any], **overrides: Any) -> MassConfig:
        """Build from a params.yaml ``train:`` section (flat keys; ``weights``, ``sim``,
        ``modifier`` and ``adaptive`` may be nested); ``overrides`` (e.g. CLI) win."""
        flat = dict(d or {})
        for key in ("weights", "sim", "modifier"):
            nested = flat.pop(key, None) or {}
            if not isinstance(nested, dict):
                raise ConfigError(f"{key}: expected a mapping, got {nested!r}")
            for k, v in nested.items():
                name = {"suppress": "sim_s", "preserve": "sim_r"}.get(k, k) if key == "sim" else k
                flat[str(name)] = v
        flat.update({k: v for k, v in overrides.items() if v is not None})
        for wkey in ("w_s", "h_s", "w_r"):  # a scalar weight is the per-attribute default
            if wkey in flat and not isinstance(flat[wkey], dict):
                flat[f"{wkey}_default"] = flat.pop(wkey)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(flat) - known)
        if unknown:
            raise ConfigError(f"train: unknown parameter(s) {unknown}; known: {sorted(known)}")
        ad = flat.pop("adaptive", None) or {}
        if isinstance(ad, AdaptiveConfig):
            adaptive = ad
        else:
            aknown = {f.name for f in fields(AdaptiveConfig)}
            bad = sorted(set(ad) - aknown)
            if bad:
                raise ConfigError(f"adaptive: unknown parameter(s) {bad}; known: {sorted(aknown)}")
            if "adversaries" in ad:
                ad = {**ad, "adversaries": parse_names(ad["adversaries"],
                                                       where="adaptive.adversaries")}  # fmt: skip
            adaptive = AdaptiveConfig(**ad)
        for key in ("suppress", "preserve"):
            flat[key] = parse_names(flat.get(key, ()), where=key)
        if "hidden" in flat:
            flat["hidden"] = _sizes(flat["hidden"])
        cfg = cls(**flat, adaptive=adaptive)
        cfg.check_values()
        return cfg

    def check_values(self) -> None:
        """Value checks that need no data; each error names the parameter."""
        check_attribute_names(self.suppress, self.preserve)
        if self.mode not in MODES:
            raise ConfigError(f"mode: {self.mode!r} is not one of {MODES}")
        for name in ("sim_s", "sim_r"):
            if getattr(self, name) not in SIM_TYPES:
                raise ConfigError(f"{name}: {getattr(self, name)!r} is not one of {SIM_TYPES}")
        for name in ("epochs", "batch_size", "branch_epochs", "agnostic_epochs"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.batch_size < 2:
            raise ConfigError("batch_size: NT-Xent and BatchNorm need at least 2 rows")
        if self.lr <= 0:
            raise ConfigError(f"lr: must be > 0, got {self.lr}")
        bad = [f for f in self.adaptive.adversaries if f not in ADVERSARY_FAMILIES]
        if bad:
            raise ConfigError(f"adaptive.adversaries: {bad} not among {ADVERSARY_FAMILIES}")
        if self.adaptive.match not in MATCH_KINDS:
            raise ConfigError(f"adaptive.match: {self.adaptive.match!r} not in {MATCH_KINDS}")
        if self.adaptive.pre_erase not in PRE_ERASERS:
            raise ConfigError(
                f"adaptive.pre_erase: {self.adaptive.pre_erase!r} not in {PRE_ERASERS}"
            )

    def validate(self, labels: dict[str, np.ndarray], *, source: str = "data") -> None:
        """Data checks up front (see :func:`validate_attributes`)."""
        validate_attributes(self.suppress, self.preserve, labels, source=source)

    def with_(self, **changes: Any) -> MassConfig:
        return replace(self, **changes)


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int, first: int):
        super().__init__(key)
        self.key, self.line, self.first = key, line, first


def _unique_key_loader():
    """yaml.SafeLoader refusing a key that appears twice in one mapping (merge keys ``<<``
    keep their meaning: an explicit key overrides a merged one)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: dict[Any, int] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    line = key_node.start_mark.line + 1
                    try:
                        if key in seen:
                            raise _DuplicateKey(key, line, seen[key])
                    except TypeError:  # an unhashable key: the base loader names it
                        continue
                    seen[key] = line
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def read_yaml(path: str, *, flag: str = "--config", missing: type[Exception] = MissingInputError,
              what: str = "config file") -> dict[str, Any]:  # fmt: skip
    """The top-level mapping of a YAML file (the one loader of params.yaml and policy files).

    A missing file raises ``missing`` naming ``flag``; bad YAML or a non-mapping, ConfigError.
    """
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.load(f, Loader=_unique_key_loader())  # noqa: S506 (a SafeLoader)
    except FileNotFoundError as e:
        raise missing(f"{path}: no such {what}; check {flag}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{path}: not UTF-8 (byte {e.start}: {e.object[e.start : e.start + 1]!r}); "
            f"save the {what} as UTF-8 ({flag})"
        ) from e
    except IsADirectoryError as e:
        raise ConfigError(f"{path}: is a directory, not a {what}; check {flag}") from e
    except _DuplicateKey as e:
        raise ConfigError(
            f"{path}: duplicate key {e.key!r} (line {e.line}, first at line {e.first}); YAML "
            "would silently keep only the last one: keep one of them"
        ) from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e})") from e
    doc = {} if doc is None else doc
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a mapping at top level")
    return doc


def read_section(path: str | None, section: str = "train", *, flag: str = "--config") -> dict:
    """The ``section`` of a params.yaml (or the whole file when it has no such section);
    None: no file. An empty path is refused (it would silently mean no config)."""
    if path is None:
        return {}
    if not str(path).strip():
        raise ConfigError(f"{flag} '{path}': empty; name a params.yaml or drop {flag}")
    doc = read_yaml(path, flag=flag)
    sub = doc.get(section, doc)
    if not isinstance(sub, dict):
        raise ConfigError(f"{path}: section '{section}' is not a mapping")
    return dict(sub)


def _sizes(v: Any) -> tuple[int, ...]:
    """``hidden``: layer widths as a list or "64,32" (the names' comma rule)."""
    items = split_names(v) if v is None or isinstance(v, str) else v
    if not isinstance(items, list | tuple):
        raise ConfigError(f"hidden: expected a list or comma-separated string, got {v!r}")
    return tuple(int(h) for h in items)


def config_hash(d: dict[str, Any]) -> str:
    blob = json.dumps(d, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def conditional_entropy(r: np.ndarray, s: np.ndarray) -> tuple[float, float]:
    """(H(r | s), H(r)) in bits from joint label counts: H(r | s) = H(r, s) - H(s)."""
    joint = joint_codes({"r": np.asarray(r), "s": np.asarray(s)})
    h_rs = entropy_bits(joint) - entropy_bits(s)
    return max(h_rs, 0.0) + 0.0, entropy_bits(r) + 0.0


def check_attribute_names(suppress, preserve, known=None, *, source: str = "data",
                          what: str = "labels") -> None:  # fmt: skip
    """ConfigError for an empty S, an attribute both suppressed and preserved and, given
    ``known`` (the label columns of ``source``), an attribute that is not among them."""
    if not suppress:
        raise ConfigError("suppress: empty; name at least one attribute to suppress")
    both = sorted(set(suppress) & set(preserve))
    if both:
        raise ConfigError(f"suppress/preserve: {both} appear in both; an attribute is one")
    if known is None:
        return
    for param, attrs in (("suppress", suppress), ("preserve", preserve)):
        for a in attrs:
            if a not in known:
                raise ConfigError(
                    f"{param}: attribute '{a}' is not a label column of {source} "
                    f"({what}: {sorted(known)})"
                )


def validate_attributes(
    suppress: tuple[str, ...] | list[str],
    preserve: tuple[str, ...] | list[str],
    labels: dict[str, np.ndarray],
    *,
    source: str = "data",
    dependency_threshold: float = 0.05,
) -> None:
    """ConfigError for unknown attributes, single-class attributes, overlap and empty S;
    a warning when a preserved attribute is (almost) a function of the suppressed ones."""
    check_attribute_names(suppress, preserve, labels, source=source)
    for param, attrs in (("suppress", suppress), ("preserve", preserve)):
        for a in attrs:
            if np.unique(labels[a]).size < 2:
                raise ConfigError(
                    f"{param}: attribute '{a}' has a single class in {source}; "
                    "it cannot be suppressed or preserved"
                )
    if not preserve:
        return
    joint_s = joint_codes(labels, list(suppress))
    for r in preserve:
        h_rs, h_r = conditional_entropy(labels[r], joint_s)
        if h_r > 0 and h_rs <= dependency_threshold * h_r:
            log.warning(
                "preserve: '%s' is (almost) a function of suppressed %s in %s: "
                "H(%s|S) = %.3f bits of H(%s) = %.3f bits; suppressing S will also remove it",
                r, list(suppress), source, r, h_rs, r, h_r,
            )  # fmt: skip


BUDGET_CLOCKS = ("cpu", "wall")


@dataclass(frozen=True)
class CalibrationConfig:
    """Bounds of `mass train`'s calibration (docs/calibration.md)."""

    budget_minutes: float = 10.0  # bound of the whole search, in minutes of ``budget_clock``
    # "cpu": CPU time of the calibrating process (every thread), so waiting on a loaded
    # machine does not spend it (torch's fits still cost more CPU there: search.budget_clock);
    # "wall": elapsed time
    budget_clock: str = "cpu"
    max_rows: int = 200_000  # above this, train on a seeded stratified sample (streaming)
    val_fraction: float = 0.25  # held out for the validation audit when --val is not given
    seed: int = 0
    attacker_rows: int = 4000  # validation rows the attackers see (seeded cap, 5-fold CV)
    room: float = 0.05  # stop early once utility beats the policy by this much
    # rows of the release the gate will audit (None: as many as validated); sizes the
    # validation margin (mass.calibrate.judge.validation_z)
    release_rows: int | None = None
    # --transductive: the training rows ARE the release (mass.fitrows): every candidate is
    # fitted on them and judged on its own release of them, as the gate will judge it
    transductive: bool = False

    def __post_init__(self) -> None:
        if self.budget_minutes <= 0:
            raise ConfigError(f"--budget-minutes {self.budget_minutes}: must be > 0")
        if self.budget_clock not in BUDGET_CLOCKS:
            raise ConfigError(f"--budget-clock {self.budget_clock!r}: choose from "
                              f"{list(BUDGET_CLOCKS)}")  # fmt: skip
        if self.max_rows < 100:
            raise ConfigError(f"--max-rows {self.max_rows}: must be >= 100")
        if self.release_rows is not None and self.release_rows < 20:
            raise ConfigError(f"--release-rows {self.release_rows}: must be >= 20")
        if not 0.05 <= self.val_fraction <= 0.5:
            raise ConfigError(f"val_fraction {self.val_fraction}: must be in [0.05, 0.5]")
