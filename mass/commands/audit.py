"""Great Expectations audit of a release; exit 1 when any expectation fails.

Reads the release (Parquet parts), joins the held-out labels by id, measures every
suppressed/preserved attribute (frozen branch models from --run-dir, scikit-learn attackers
retrained on the release and its allow-listed columns with k-fold CV, judged on 95 % upper
bounds of accuracy and balanced accuracy, re-mapped, with learning curves; with the owner's
noise key also on the release with its noise removed) and validates schema, rows and attributes with GX.
--watch attributes (neither suppressed nor preserved) and label-free structure are measured
too: what the release keeps beyond the named R (docs/audit.md).
Writes REPORT/audit.json, REPORT/data_docs/ and REPORT/privacy_utility.png.

A release whose ids are keyed pseudonyms (`mass anonymize --pseudonymize-ids`) is joined to the
owner's labels (and --input) by pseudonymizing their ids under the owner key (--noise-key-file,
$MASS_NOISE_KEY_FILE or .mass/local.yaml, as for the job), in a private copy (mass.scratch) removed afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

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
        help="owner's noise key (default $MASS_NOISE_KEY_FILE, else .mass/local.yaml): also "
        "retrain the attackers on the release with its noise removed (the key-compromised "
        "figure); joins a pseudonymous release's ids to the labels",
    )
    parser.add_argument("--model", help="the signed export that made the release (in "
                        "--repository): every row at or above the policy's max_cosine is "
                        "recomputed with it, and those that are its own output pass the bypass "
                        "check, as in `mass anonymize`'s gate (needs the originals: --input or "
                        "the labels' embeddings)")  # fmt: skip
    parser.add_argument(
        "--repository",
        help="model repository holding --model (default: triton_models)",
    )
    parser.add_argument("--model-version", help="--model's version (default: the newest)")
    parser.add_argument("--signing-key-file", help="the owner key --model's export was signed "
                        "with (default $MASS_SIGNING_KEY_FILE, else .mass/local.yaml)")  # fmt: skip


def _release_meta(release: str) -> dict[str, str]:
    """The key-value metadata of ``release``'s first part (``mass.*``: how it was made)."""
    from mass.io import expand_paths, schema_of

    return {k.decode(): v.decode(errors="replace")
            for k, v in (schema_of(expand_paths(release)[0]).metadata or {}).items()}  # fmt: skip


def _pseudonym_label(release: str) -> tuple[str, str] | None:
    """The pseudonym scope label of ``release``'s ids (:mod:`mass.pseudonym`; "" = stable) and
    the fingerprint of the key that made them, or None when its ids are released verbatim.
    Read from the first part's ``mass.ids`` and ``mass.noise_key_fingerprint``."""
    from mass.errors import ConfigError
    from mass.pseudonym import DESCRIPTION

    meta = _release_meta(release)
    ids = meta.get("mass.ids", "")
    if not ids.startswith("pseudonymous"):
        return None
    made_by = meta.get("mass.noise_key_fingerprint", "")
    if ids == DESCRIPTION:
        return "", made_by
    if ids.startswith("pseudonymous per model") and meta.get("mass.model"):
        return f"model:{meta['mass.model']}", made_by
    raise ConfigError(
        f"--release {release}: its ids are pseudonyms of this release only ({ids}); join your "
        "--labels to the owner's map named there (columns id, pseudonym) and pass the joined file"
    )


@contextlib.contextmanager
def _owner_ids(args: argparse.Namespace) -> Iterator[argparse.Namespace]:
    """``args`` as they audit ``--release``: for a pseudonymous release, --labels and --input
    replaced by private copies whose ids are pseudonymized under the owner key, the way the job
    pseudonymized its input; the copies are removed however the audit ends."""
    from mass.batches.pseudonymize import pseudonymized_copy, unmask
    from mass.errors import ConfigError, InputError
    from mass.keys import NOISE_KEY_ENV, looked_for, resolve_key
    from mass.scratch import PrivateDir

    scope = _pseudonym_label(args.release)
    if scope is None:
        yield args
        return
    label, made_by = scope
    key = resolve_key(args.noise_key_file, NOISE_KEY_ENV)
    if key is None:
        raise ConfigError(
            f"--release {args.release}: its ids are keyed pseudonyms (--pseudonymize-ids); the "
            "labels' ids are matched to them under the owner key: pass --noise-key-file FILE "
            f"(looked in {looked_for(NOISE_KEY_ENV)})"
        )
    if made_by and made_by != key.fingerprint:
        raise ConfigError(
            f"--release {args.release}: its ids were pseudonymized under key {made_by}, not "
            f"under {key.source} ({key.fingerprint}): pass the release's key to --noise-key-file"
        )
    with PrivateDir("mass-audit-ids-") as private:  # 0700; SIGTERM unwinds, SIGKILL swept
        kw = dict(id_col=args.id_col, key=key, label=label)
        labels, names = pseudonymized_copy(args.labels, str(private), tag="labels", **kw)
        names[labels] = args.labels
        inp = None
        if args.input:
            inp, more = pseudonymized_copy(args.input, str(private), tag="input", **kw)
            names.update({**more, inp: args.input})
        print(
            f"audit: {args.release}: ids are keyed pseudonyms; --labels"
            f"{' and --input' if inp else ''} matched under key {key.fingerprint}",
            flush=True,
        )
        try:
            yield argparse.Namespace(**{**vars(args), "labels": labels, "input": inp})
        except (InputError, ConfigError) as e:  # name the user's files, not the private copies
            raise type(e)(unmask(str(e), names, args.id_col)) from e


def _near(args: argparse.Namespace):
    """--model: the signed export that recomputes the release's near rows
    (:mod:`mass.audit.recompute`); None without it."""
    if not args.model:
        given = [f for f, v in (("--repository", args.repository),
                                ("--model-version", args.model_version),
                                ("--signing-key-file", args.signing_key_file)) if v]  # fmt: skip
        if given:
            from mass.errors import ConfigError

            raise ConfigError(f"{', '.join(given)}: only with --model (the signed export that "
                              "recomputes the release's near rows); pass --model NAME or drop "
                              "them")  # fmt: skip
        return None
    from mass.audit.recompute import near_recompute
    from mass.keys import NOISE_KEY_ENV, SIGNING_KEY_ENV, resolve_key
    from mass.serving.manifest import signing_key

    meta = _release_meta(args.release)
    key = signing_key(resolve_key(args.signing_key_file, SIGNING_KEY_ENV),
                      flag="--signing-key-file")  # fmt: skip
    return near_recompute(args.repository or "triton_models", args.model, args.model_version,
                          signing_key=key,
                          noise_key=resolve_key(args.noise_key_file, NOISE_KEY_ENV),
                          release_meta=meta, release=args.release)  # fmt: skip


def _check_report_outside(report: str, release: str) -> None:
    """The report names the suppressed attributes' verdicts and per-class figures: written
    inside the release it would be published to the release's readers; refused up front."""
    from mass.errors import OutputPathError
    from mass.release.ownership import input_roots, lies_inside

    if not report.strip():
        raise OutputPathError(f"--report '{report}': empty; name the report directory to write "
                              "(nothing was written)")  # fmt: skip
    for root in input_roots(release):
        if lies_inside(report, root):
            raise OutputPathError(f"--report {report}: lies inside --release {release}; the "
                                  "report would reach the release's readers: pass a directory "
                                  "outside it (nothing was written)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from mass.audit import AuditRequest
    from mass.audit.into import audit_into
    from mass.audit.policy import resolve_policy
    from mass.audit.report import format_table
    from mass.errors import ConfigError

    if not args.suppress:
        raise ConfigError("--suppress: name at least one attribute")
    _check_report_outside(args.report, args.release)
    # the gate's default: --params, else ./params.yaml when present, else built-in
    policy, source = resolve_policy(args.params, flag="--params")
    print(f"audit: {args.release}: policy from {source}", flush=True)
    with _owner_ids(args) as a:
        req = AuditRequest(
            release=a.release, labels=a.labels, suppress=a.suppress,
            preserve=a.preserve, watch=a.watch, policy=policy, report_dir=a.report,
            run_dir=a.run_dir, input=a.input, id_col=a.id_col, emb_col=a.emb_col,
            allow=a.allow_columns, noise_key_file=a.noise_key_file, near=_near(a),
        )  # fmt: skip
        result, _ = audit_into(req, a.report, chart=not a.no_chart)  # local or a store
    print(format_table(result))
    return 0 if result.success else 1
