"""The anonymize and extract jobs' steps on Arrow record batches, without Beam.

The Beam wrappers (DoFns, PTransforms, model handlers) live in :mod:`transforms`; this package
holds what they call: Parquet reading by row groups (:mod:`.parquet`), the external sort's
spills and merge (:mod:`.spill`), the input id index (:mod:`.id_index`), validation
(:mod:`.validate`, :mod:`.quarantine`), the in-process reference check (:mod:`.reference`),
the allow-list judge (:mod:`.allow_check`) and the pseudonymized input copy
(:mod:`.pseudonymize`).
"""
