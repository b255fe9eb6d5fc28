"""Great Expectations audit of a release; exit 1 when any expectation fails.

Reads the release (Parquet parts), joins the held-out labels by id, measures every
suppressed/preserved attribute (frozen branch models from --run-dir, scikit-learn attackers
retrained on the release and its allow-listed columns with k-fold CV, judged on 95 % upper
bounds of accuracy and balanced accuracy, re-mapped, with learning curves; with the owner's
noise key also on the release with its noise removed) and validates schema, rows and attributes with GX.
--watch attributes (neither suppressed nor preserved) and label-free structure are measured
too: what the release keeps beyond the named R (docs/audit.md).
Writes REPORT/audit.json, REPORT/data_docs/ and REPORT/privacy_utility.png.
"""

from __future__ import annotations

import argparse

from mass.names import add_column_arguments, split_names

HELP = "Great Expectations audit of a release; non-zero exit when it fails"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--release", required=True, help="release directory/file/glob (Parquet)")
    parser.add_argument(
        "--labels",
        required=True,
        help="held-out labels Parquet: id, label columns (+ original emb)",
    )
    parser.add_argument("--suppress", required=True, type=split_names, help="attributes, a[,b]")
    parser.add_argument("--preserve", default=(), type=split_names, help="attributes, r[,...]")
    parser.add_argument("--watch", default=(), type=split_names,
                        help="attributes neither suppressed nor preserved whose retention is "
                        "reported (and gated by audit.watch_min_kept), w[,...] (default: the "
                        "policy's audit.watch)")  # fmt: skip
    parser.add_argument(
        "--report",
        required=True,
        help="report directory (local, or an object-store prefix: uploaded)",
    )
    parser.add_argument("--run-dir", help="training run (branches.pt, encodings.json)")
    parser.add_argument("--params", help="params.yaml or policy file holding the audit: policy "
                        "(default: ./params.yaml when present, else the built-in policy; the "
                        "anonymize gate's default too)")  # fmt: skip
    add_column_arguments(parser)
    parser.add_argument("--input", help="original embeddings Parquet (ids must match)")
    parser.add_argument(
        "--allow-columns",
        default=(),
        type=split_names,
        help="columns the release may carry besides id/emb (adds to policy)",
    )
    parser.add_argument("--no-chart", action="store_true", help="skip privacy_utility.png")
    parser.add_argument(
        "--noise-key-file",
        help="owner's noise key (default $MASS_NOISE_KEY_FILE): also retrain the attackers on "
        "the release with its noise removed (the key-compromised figure)",
    )


def run(args: argparse.Namespace) -> int:
    from mass.audit import AuditRequest
    from mass.audit.into import audit_into
    from mass.audit.policy import resolve_policy
    from mass.audit.report import format_table
    from mass.errors import ConfigError

    if not args.suppress:
        raise ConfigError("--suppress: name at least one attribute")
    # the gate's default: --params, else ./params.yaml when present, else built-in
    policy, source = resolve_policy(args.params, flag="--params")
    print(f"audit: {args.release}: policy from {source}", flush=True)
    req = AuditRequest(
        release=args.release, labels=args.labels, suppress=args.suppress,
        preserve=args.preserve, watch=args.watch, policy=policy, report_dir=args.report,
        run_dir=args.run_dir, input=args.input, id_col=args.id_col, emb_col=args.emb_col,
        allow=args.allow_columns, noise_key_file=args.noise_key_file,
    )  # fmt: skip
    result, _ = audit_into(req, args.report, chart=not args.no_chart)  # local or a store
    print(format_table(result))
    return 0 if result.success else 1
