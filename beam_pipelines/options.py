"""Flags shared by the Beam jobs, and the one route by which Beam pipeline options reach Beam:
a flag the job does not have must be one Beam registers (its ``PipelineOptions`` subclasses,
those of the chosen ``--runner`` included), given as it is or after a literal ``--``; anything
else is refused before any work (:func:`beam_flags`). Beam itself would only log
"Discarding unparseable args" and run.

The default runner is FnApiRunner (the stock DirectRunner tries to download Prism); any
``--runner`` (DaskRunner, DataflowRunner, ...) with its own flags works unchanged.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from mass.errors import ConfigError, UnknownFlagError
from mass.flags import BEAM_ROUTE, option_strings, split_tail, unknown_flag
from mass.progress import RateLog

log = logging.getLogger("mass.beam")


RUNNER_ALIASES = {"DaskRunner": "apache_beam.runners.dask.dask_runner.DaskRunner"}


def parse_job_argv(
    parser: argparse.ArgumentParser, argv: list[str] | None
) -> tuple[argparse.Namespace, list[str]]:
    """(the job's flags, its checked Beam options) from a job's ``argv`` (see :func:`beam_flags`)."""
    import sys

    head, tail = split_tail(sys.argv[1:] if argv is None else list(argv))
    args, extra = parser.parse_known_args(head)
    return args, beam_flags(extra, tail, option_strings(parser))


def beam_flags(extra: list[str], tail: list[str], ours: list[str]) -> list[str]:
    """``extra`` (what the job's parser left over) then ``tail`` (after ``--``), once Beam's own
    parser knows every flag in them; else :class:`UnknownFlagError` naming the first unknown
    one and the nearest flag of the job (``ours``) or of Beam. A flag after ``--`` that names
    one of the job's own flags (``-- --labels FILE``: Dataflow's job labels to Beam, the audit's
    labels file to the user) is refused: the job would silently not see it."""
    _refuse_shadowing(tail, ours)
    beam = _beam_parser(extra + tail)
    for chunk in (extra, tail):
        try:
            _, unknown = beam.parse_known_args(chunk)
        except argparse.ArgumentError as e:
            raise UnknownFlagError(f"Beam pipeline option {e}; nothing was run") from e
        if unknown:
            raise unknown_flag(unknown, [*ours, *option_strings(beam)], BEAM_ROUTE)
    return [*extra, *tail]


def _refuse_shadowing(tail: list[str], ours: list[str]) -> None:
    mine = {s.replace("_", "-") for s in ours}
    for token in tail:
        name = token.split("=", 1)[0]
        if name.startswith("--") and name.replace("_", "-") in mine:
            raise UnknownFlagError(
                f"-- {name}: a flag of this job given after `--`, where only Beam reads it "
                f"(as its own option of that name, if it has one); the job would not see it. "
                f"Put {name} before the `--`; nothing was run"
            )


def _beam_parser(flags: list[str]) -> argparse.ArgumentParser:
    """Beam's own parser (as ``PipelineOptions.get_all_options`` builds it from every
    ``PipelineOptions`` subclass), after importing the module of a ``--runner`` named by its
    dotted path so that the runner's options class is registered too."""
    only_runner = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    only_runner.add_argument("--runner", default="")
    probe = only_runner.parse_known_args(flags)[0].runner
    runner = RUNNER_ALIASES.get(probe, probe)
    if "." in runner:
        try:
            importlib.import_module(runner.rsplit(".", 1)[0])
        except ImportError as e:
            raise ConfigError(f"--runner {probe}: cannot import {runner} ({e})") from e
    parsers: list[argparse.ArgumentParser] = []
    PipelineOptions([]).get_all_options(add_extra_args_fn=parsers.append)
    parser = parsers[0]
    parser.exit_on_error = False  # a bad value is our UnknownFlagError, not Beam's usage dump
    return parser


def add_serving_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("serving")
    g.add_argument(
        "--repository",
        default="triton_models",
        help="Triton model repository (local server is started on it unless "
        "--triton-url is given; export.json provenance is read from it)",
    )
    g.add_argument(
        "--triton-url",
        default=None,
        help="gRPC HOST:PORT of a running Triton; default: start a local one",
    )
    g.add_argument(
        "--signing-key-file",
        default=None,
        metavar="FILE",
        help="owner key the repository's exports were signed with (`mass export "
        "--signing-key-file`), to verify them before serving; default: $MASS_SIGNING_KEY_FILE, "
        "else .mass/local.yaml",
    )
    g.add_argument("--model-version", default="", help="model version (default: latest)")
    g.add_argument("--timeout-s", type=float, default=60.0, help="per-request timeout")
    g.add_argument(
        "--max-retries",
        type=int,
        default=5,
        help="retries on UNAVAILABLE/DEADLINE_EXCEEDED (exponential backoff)",
    )
    g.add_argument(
        "--triton-shm",
        choices=("auto", "on", "off"),
        default="auto",
        help="send tensors through system shared memory (auto: when the server is on "
        "127.0.0.1/localhost; off: gRPC payloads)",
    )
    g.add_argument("--batch-rows", type=int, default=4096, help="rows per Arrow batch/request")
    g.add_argument("--shards", type=int, default=1, help="output files (fixed for DVC)")
    g.add_argument(
        "--progress-every",
        type=int,
        default=20,
        help="log a rows/s line every N batches per worker",
    )


@dataclass(frozen=True)
class Serving:
    """The flags of :func:`add_serving_arguments`, checked (one field per flag)."""

    repository: str
    triton_url: str | None
    model_version: str  # "" = the latest
    timeout_s: float
    max_retries: int
    shared_memory: str | bool  # "auto", True or False (--triton-shm auto/on/off)
    batch_rows: int
    shards: int
    progress_every: int
    signing_key_file: str | None = None  # --signing-key-file (else the env / local config)

    def signing_key(self):
        """The owner key that verifies the repository's exports; a clear error naming
        --signing-key-file (and where else it looked) when there is none."""
        from mass.keys import SIGNING_KEY_ENV, resolve_key
        from mass.serving.manifest import signing_key

        return signing_key(resolve_key(self.signing_key_file, SIGNING_KEY_ENV),
                           flag="--signing-key-file")  # fmt: skip


def plan_serving(args: argparse.Namespace) -> Serving:
    """:class:`Serving` from the parsed flags; :class:`ConfigError` for a bad value."""
    from mass.batches.parquet import MAX_SHARDS

    for name in ("batch_rows", "shards"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.shards > MAX_SHARDS:
        raise ConfigError(
            f"--shards must be <= {MAX_SHARDS}, got {args.shards}: every shard is a file, a "
            "merge and an id-index file; pick fewer, larger shards"
        )
    return Serving(
        repository=args.repository,
        triton_url=args.triton_url,
        model_version=args.model_version,
        timeout_s=args.timeout_s,
        max_retries=args.max_retries,
        shared_memory={"auto": "auto", "on": True, "off": False}[args.triton_shm],
        batch_rows=args.batch_rows,
        shards=args.shards,
        progress_every=args.progress_every,
        signing_key_file=args.signing_key_file,
    )


def temp_location(beam_args: list[str] | tuple[str, ...]) -> str | None:
    """Beam's ``--temp_location``, as Beam itself parses it (None when not given)."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions

    return PipelineOptions(list(beam_args)).view_as(GoogleCloudOptions).temp_location or None


def names_runner(beam_args) -> bool:
    """Whether ``--runner`` is given (otherwise the job runs on the in-process FnApiRunner,
    whose workers share this machine and its files)."""
    return any(a == "--runner" or a.startswith("--runner=") for a in beam_args)


def pipeline_for(extra, test_pipeline: beam.Pipeline | None) -> beam.Pipeline:
    if test_pipeline is not None:
        return test_pipeline
    extra = list(extra)
    # Beam does not register the Dask runner's short name; accept it like the others.
    extra = [RUNNER_ALIASES.get(a, a) for a in extra]
    extra = [f"--runner={RUNNER_ALIASES[a[9:]]}" if a[9:] in RUNNER_ALIASES else a for a in extra]
    dask = any(a.endswith("DaskRunner") for a in extra)
    if dask and not any(
        a.startswith(("--dask_npartitions", "--dask_partition_size")) for a in extra
    ):
        # Our Creates hold one work item per row group: one Dask partition each, so the
        # workers share them (Dask's default packs up to 128 items into one partition).
        extra = [*extra, "--dask_partition_size=1"]
    options = PipelineOptions(extra)
    if names_runner(extra):
        return beam.Pipeline(options=options)
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    return beam.Pipeline(runner=FnApiRunner(), options=options)


def run_to_completion(p: beam.Pipeline):
    """Run and wait; close the Dask client the DaskRunner opened (it would try to reconnect)."""
    result = p.run()
    try:
        result.wait_until_finish()
    finally:
        client = getattr(result, "client", None)
        if client is not None:
            client.close()
    return result


@contextlib.contextmanager
def triton_endpoint(serving: Serving, *, model: str, expected_sha256: str | None = None):
    """Yield the gRPC URL to use: ``--triton-url`` checked, or a local server for the job.

    ``expected_sha256`` (from the repository's export.json) must match what the server says
    it serves, else :class:`mass.errors.ChecksumMismatchError` before any data is sent.
    """
    from mass.serving import TritonServer, check_server

    version = serving.model_version or None
    kw = dict(model=model, version=version, expected_sha256=expected_sha256)
    if serving.triton_url:
        check_server(serving.triton_url, **kw)
        yield serving.triton_url
        return
    # The job's server stages and serves this one model (version) only (mass.serving.staging).
    with TritonServer(serving.repository, models={model: version},
                      signing_key_file=serving.signing_key_file) as server:  # fmt: skip
        check_server(server.grpc_url, **kw)
        yield server.grpc_url


class LogProgress(beam.DoFn):
    """Pass-through that logs rows/s seen by this worker every ``every`` batches."""

    def __init__(self, every: int, what: str) -> None:
        self._every, self._what = every, what

    def setup(self):
        self._rate = RateLog(log, self._what, self._every)

    def process(self, batch):
        self._rate.add(batch.num_rows)
        yield batch


def counter(result, name: str) -> int | None:
    """A ``mass`` counter from a finished pipeline, or None where the runner has no metrics."""
    from apache_beam.metrics.metric import MetricsFilter

    try:
        res = result.metrics().query(MetricsFilter().with_namespace("mass").with_name(name))
    except Exception:  # DaskRunner: "collecting metrics will come later"
        return None
    return int(sum(c.committed or 0 for c in res["counters"])) if res["counters"] else 0
