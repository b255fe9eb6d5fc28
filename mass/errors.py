"""One exception hierarchy for MaSS-ETL.

Every message names the offending file, column, row or parameter and says what to do.
Callers catch :class:`MassError` to handle any product failure; the CLI maps it to exit 2.
"""

from __future__ import annotations


def first_null(arr) -> int:
    """The first null row of an Arrow array or chunked array that has one (the row a refusal
    names)."""
    import numpy as np

    return int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])


class MassError(Exception):
    """Base class of every error this product raises on purpose."""


class ConfigError(MassError):
    """A configuration value is invalid or infeasible (names the parameter)."""


class UnknownFlagError(ConfigError):
    """A command-line flag the command does not have (a typo, or a Beam option Beam does not
    register); raised before any work, exit code 2."""


class ProxyColumnError(ConfigError):
    """An --allow-columns column predicts a suppressed attribute on its own above the audit
    policy (names column, attribute, measured accuracy and limit); raised before any work."""


class VacuousPolicyError(ConfigError):
    """An audit policy under which nothing can fail (limits >= 1 or above the original's own
    best attacker, or a preserved attribute that nearly determines a suppressed one)."""


class InputError(MassError):
    """Input data violates the data contract (names file, column and, where it applies, row)."""


class MissingInputError(InputError):
    """A named input file, directory or glob does not exist or matches nothing."""


class UnreadableInputError(InputError):
    """A file exists but is not readable Parquet (truncated, corrupt, wrong format)."""

    @classmethod
    def parquet(cls, path: str, cause: BaseException) -> UnreadableInputError:
        """The one refusal of a file that does not read as Parquet, at its footer or pages."""
        return cls(
            f"{path}: not readable as Parquet ({cause}); the file is truncated, corrupt "
            "or not Parquet: re-export it or remove it from the input"
        )


class SchemaError(InputError):
    """A required column is missing or has the wrong type or dimension."""


class InvalidValueError(InputError):
    """A value is NaN/Inf, ragged, duplicated, null or otherwise unusable."""


class LabelError(InputError):
    """A label column is unusable: a single class, or classes unseen at training time."""


class RareClassError(LabelError):
    """A class too rare to judge even under the rare-class rule (mass.metrics.strata): the
    message names the attribute and the class."""


class CalibrationError(MassError):
    """`mass train` found no configuration that meets the audit policy on validation data;
    the message carries the measured frontier and the leakage floor."""


class ServingError(MassError):
    """The inference server is unreachable, the model is missing, or it answered wrongly."""


class ChecksumMismatchError(ServingError):
    """The served model's files differ from the checksum recorded at export."""


class UnsignedModelError(ChecksumMismatchError):
    """A model the job asked to serve is no signed export (or has no such version)."""


class ModelRollbackError(ServingError):
    """The newest version on disk is older than the newest signed export (mass.serving.newest)."""


class ResponseShapeError(ServingError):
    """The server returned a tensor with the wrong shape or dtype."""


class ReleaseError(MassError):
    """A release failed its invariants or could not be published atomically."""


class QuarantineThresholdError(ReleaseError):
    """More rows were quarantined than the configured threshold allows."""


class AuditFailedError(MassError):
    """At least one audit expectation failed; the release must not be published."""


class OutputPathError(ConfigError):
    """--output/--quarantine/--report names a path the job must not replace or write into:
    not a directory this product wrote (no marker), the input or a parent/child of it, the
    other output, a file, a symbolic link or a mount point. Raised before any work."""


class TransductiveRowsError(ConfigError):
    """A modifier fitted on exactly the rows it releases (a transductive ``ot_repair``) was
    asked to release other rows: its privacy holds only on the rows it was fitted on, so
    the job refuses before any row is read; the message names the model and the input."""
