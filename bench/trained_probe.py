"""One trained calibration candidate on one benchmark dataset, judged as the search judges it
(docs/calibration.md, run 5, "What 5 epochs of MaSS do on names"): the 30 % stratified holdout
of the training rows (``TRAINED_HOLDOUT``), the validation audit with the gate's folds, one fit,
the held rows' release at the given noise levels.

    python bench/generalize.py --out reports/generalize --only names   # writes train.parquet
    python bench/trained_probe.py reports/generalize/names/train.parquet gender region \
        --candidate mass+quadratic --epochs 5 --levels 0,0.5,1.2
"""

from __future__ import annotations

import argparse
import time


def main(argv: list[str] | None = None) -> int:
    from mass.audit.policy import load_policy
    from mass.calibrate.judge import ValidationAudit
    from mass.calibrate.noise import apply, with_output_noise
    from mass.calibrate.sampling import stratified_split
    from mass.calibrate.space import SEARCH_SPACE
    from mass.calibrate.validation import TRAINED_HOLDOUT
    from mass.config import CalibrationConfig
    from mass.io import load_embeddings
    from mass.methods import get_method
    from mass.methods._common import subset
    from mass.rows import joint_codes

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data")
    ap.add_argument("suppress")
    ap.add_argument("preserve")
    ap.add_argument("--candidate", default="mass+quadratic")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--levels", default="0,0.5,1.2")
    args = ap.parse_args(argv)
    s, r = args.suppress.split(","), args.preserve.split(",")
    pol, cfg = load_policy("params.yaml"), CalibrationConfig()
    t0 = time.perf_counter()
    ds = load_embeddings(args.data, id_col="id", emb_col="emb", label_cols=[*s, *r])
    rest, held = stratified_split(joint_codes(ds.labels, [*s, *r]), TRAINED_HOLDOUT, cfg.seed)
    audit = ValidationAudit(subset(ds, held), s, r, pol, cfg, folds=pol.folds)
    print(f"baselines {time.perf_counter() - t0:.0f}s original {audit.base.original} "
          f"floor {audit.base.floor}", flush=True)  # fmt: skip
    c = {c.name: c for c in SEARCH_SPACE}[args.candidate]
    t = time.perf_counter()
    fit = get_method(c.method).fit(subset(ds, rest), suppress=s, preserve=r,
                                   params={**c.params, "epochs": args.epochs, "seed": cfg.seed},
                                   seed=cfg.seed, progress=False)  # fmt: skip
    print(f"fit {args.epochs} epochs {time.perf_counter() - t:.0f}s", flush=True)
    for lv in (float(v) for v in args.levels.split(",")):
        t = time.perf_counter()
        m = audit.measure(apply(with_output_noise(fit.modifier, lv), audit.x, audit.seeds))
        judges = {a: {j: (v["accuracy"], v["ci_high"]) for j, v in d.items()}
                  for a, d in m["privacy"].items()}  # fmt: skip
        print(f"noise {lv} excess {m['excess']:+.3f} kept {m['fraction']:.3f} "
              f"privacy_ok {m['privacy_ok']} passed {m['passed']} {judges} "
              f"{time.perf_counter() - t:.0f}s", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
