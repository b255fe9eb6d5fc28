"""The served modifiers on a GPU against the CPU (docs/performance.md, "On a GPU").

A ``KIND_GPU`` Triton instance (``mass export --gpu-variant``) runs the adapter's one line,
``model(x.to(cuda), seeds.to(cuda)).cpu()`` (:mod:`mass.serving.adapters.modifier`). This
checks what that changes, in two steps:

``prepare DIR`` (any machine, the project's venv): fits one modifier of each kind the product
serves on the demo's features (``data/features/train``, 128-d; ``make demo`` writes them) with
the methods' own fit code, copies the demo's calibrated model, and writes each modifier's
``modifier.pt``, the rows (train + held-out features), their public row seeds and the outputs
this machine's CPU gives (the reference) into DIR.

``check DIR --out OUT`` (the GPU machine; needs only torch, numpy, pandas, pyarrow): loads
each modifier with the weights-only loader and compares, against the reference, its output on
that machine's CPU and on ``cuda``:

- ``max_abs``: the largest coordinate difference; ``rows_equal``: the share of rows equal bit
  for bit; for a cell release ``foreign_vectors`` (released vectors that are none of the
  reference's: a vector that names no cell would void the certificate) and ``moved_rows``
  (rows released as another cell's vector than on the CPU);
- for a noisy modifier, ``noise_max_abs``: the release noise on cuda against the noise the
  audit's key-compromised judge recomputes on the CPU (:func:`mass.noise.release_noise`);
- ``script``: whether ``torch.jit.script`` takes the modifier (the plan's TorchScript export);
- rows/s at several batch sizes: on cuda with pageable host arrays as the adapter sends them,
  on cuda with the rows already on the device (the compute alone), and on the CPU with one
  thread (the served default) and with all of them; plus MaSS's G at 512 and 1,024 dims.

One JSON document to ``OUT/device_check.json``; nothing is asserted, the numbers are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from functools import partial
from pathlib import Path

if __package__ in (None, ""):  # `python bench/device_check.py`: import bench/ and mass/ from here
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from bench import entry

# name -> (method, params); each a kind the product serves (mass.modifiers)
FITS: dict[str, tuple[str, dict]] = {
    "leace": ("leace", {}),
    "gaussian": ("gaussian", {"sigma": 0.5}),
    "mass_adaptive": (
        "mass",
        {"mode": "adaptive", "epochs": 2, "branch_epochs": 2, "agnostic_epochs": 2},
    ),  # fmt: skip
    "ot_repair": ("ot_repair", {}),
    "ot_cells_by_r": ("ot_repair", {"cell_rows": 10, "cells_by_preserved": True}),
}
DEMO_MODEL = "runs/modifier/modifier.pt"  # the demo's calibrated choice (rank cells within R)
FEATURES = ("data/features/train", "data/heldout/val", "data/heldout/test")
BATCHES = (1024, 8192, 65536)


def _rows(root: Path) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mass.embeddings import embedding_matrix

    tables = [pq.read_table(root / p) for p in FEATURES if (root / p).exists()]
    table = pa.concat_tables(tables, promote_options="default")
    x = embedding_matrix(table, "emb", source="features")
    labels = {c: table.column(c).to_numpy() for c in ("digit", "colour", "thickness")}
    return x, table.column("id").to_numpy(), labels


def prepare(out: Path, root: Path) -> dict:
    """Fit, save, and record the CPU reference (this machine) in ``out``."""
    from mass.io import load_embeddings
    from mass.methods import get_method
    from mass.modifiers import load_modifier, save_modifier
    from mass.noise import row_seeds

    out.mkdir(parents=True, exist_ok=True)
    x, ids, _ = _rows(root)
    seeds = row_seeds(ids)
    np.save(out / "x.npy", x)
    np.save(out / "seeds.npy", seeds)
    train = load_embeddings(str(root / FEATURES[0]), label_cols=["digit", "colour", "thickness"])
    made = {}
    for name, (method, params) in FITS.items():
        t0 = time.process_time()
        fit = get_method(method).fit(train, suppress=["digit"], preserve=["colour"],
                                     params=params, seed=0, progress=False)  # fmt: skip
        save_modifier(fit.modifier, str(out / f"{name}.pt"))
        made[name] = {"method": method, "params": params,
                      "fit_cpu_s": round(time.process_time() - t0, 1)}  # fmt: skip
    if (root / DEMO_MODEL).exists():
        shutil.copyfile(root / DEMO_MODEL, out / "demo_calibrated.pt")
        made["demo_calibrated"] = {"method": "calibrated (make demo)", "params": {}}
    for name in made:
        model = load_modifier(str(out / f"{name}.pt"))
        made[name]["kind"] = model.kind
        with torch.inference_mode():
            np.save(out / f"{name}.ref.npy", _apply(model, x, seeds, torch.device("cpu")))
    doc = {"rows": len(x), "dim": int(x.shape[1]), "torch": torch.__version__,
           "machine": platform.platform(), "models": made}  # fmt: skip
    (out / "prepared.json").write_text(json.dumps(doc, indent=1))
    return doc


def _apply(model, x: np.ndarray, seeds: np.ndarray, device: torch.device) -> np.ndarray:
    """What the adapter does: host arrays -> device -> model -> host (float32)."""
    xt = torch.from_numpy(np.ascontiguousarray(x)).to(device)
    st = torch.from_numpy(np.ascontiguousarray(seeds)).to(device)
    return model(xt, st).cpu().numpy()


def compare(y: np.ndarray, ref: np.ndarray, cells: bool) -> dict:
    """How far ``y`` lies from the reference ``ref`` (see the module docstring)."""
    d = np.abs(y.astype(np.float64) - ref.astype(np.float64))
    out = {"max_abs": float(d.max()), "rows_equal": float((d.max(axis=1) == 0).mean())}
    if cells:
        known = {r.tobytes() for r in np.unique(ref, axis=0)}
        out["distinct"] = int(len(np.unique(y, axis=0)))
        out["distinct_ref"] = len(known)
        out["foreign_vectors"] = int(sum(r.tobytes() not in known for r in np.unique(y, axis=0)))
        out["moved_rows"] = float((d.max(axis=1) > 1e-6).mean())
    return out


def _noise_check(model, seeds: np.ndarray, device: torch.device) -> float | None:
    """The release noise made on ``device`` against the audit's CPU recomputation."""
    from mass.modifiers.mass import OUTPUT_NOISE_OFFSET
    from mass.noise import release_noise, row_noise

    meta = {"kind": model.kind, "spec": model.spec.to_dict()}
    a_cpu = release_noise(seeds, meta)
    if a_cpu is None:
        return None
    s = torch.from_numpy(seeds).to(device)
    spec = meta["spec"]
    if model.kind == "mass":
        z = row_noise(s + OUTPUT_NOISE_OFFSET, int(spec["dim"])).cpu().numpy().astype(np.float64)
        a_dev = float(spec["output_noise"]) * z / int(spec["dim"]) ** 0.5
    else:
        a_dev = float(spec["sigma"]) * row_noise(s, int(spec["dim"])).cpu().numpy()
    return float(np.abs(a_dev - a_cpu).max())


def _rate(fn, rows: int, device: torch.device, repeat: int) -> float:
    """Rows/s of ``fn()`` (best of ``repeat`` after one warm-up)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return rows / best


def speeds(model, x: np.ndarray, seeds: np.ndarray, dev: torch.device,
           batches: tuple[int, ...] = BATCHES) -> dict:  # fmt: skip
    """Rows/s per batch size on ``dev`` (where ``model`` is): on cuda end to end and compute
    only; on the CPU (at the largest batch of at most 8,192 rows: the slow kinds serve about a
    thousand rows/s there) with one thread, the served default, and with all of them."""
    out: dict[str, dict[str, float]] = {}
    threads = torch.get_num_threads()
    cpu_batch = max([b for b in batches if b <= 8192] or [min(batches)])
    for b in batches:
        reps = -(-b // len(x))
        xb, sb = np.tile(x, (reps, 1))[:b], np.tile(seeds, reps)[:b]
        row: dict[str, float] = {}
        if dev.type == "cuda":
            row["cuda_end_to_end"] = _rate(partial(_apply, model, xb, sb, dev), b, dev, 5)
            xt, st = torch.from_numpy(xb).to(dev), torch.from_numpy(sb).to(dev)
            row["cuda_compute"] = _rate(partial(model, xt, st), b, dev, 10)
        elif b == cpu_batch:
            for n in (1, threads):
                torch.set_num_threads(n)
                row[f"cpu_{n}_threads"] = _rate(partial(_apply, model, xb, sb, dev), b, dev, 1)
            torch.set_num_threads(threads)
        if row:
            out[str(b)] = {k: round(v) for k, v in row.items()}
    return out


def _scripted(model, x: np.ndarray, seeds: np.ndarray, ref: np.ndarray) -> dict:
    """Whether ``torch.jit.script`` takes the modifier, and its output against the reference."""
    try:
        scripted = torch.jit.script(model)
    except Exception as exc:  # noqa: BLE001 - reported, not raised: it is what is measured
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        return {"ok": False, "error": f"{type(exc).__name__}: {' | '.join(lines[:3])[:300]}"}
    with torch.inference_mode():
        y = _apply(scripted, x, seeds, torch.device("cpu"))
    return {"ok": True, "max_abs": float(np.abs(y.astype(np.float64) - ref).max())}


def _synthetic_g(dim: int):
    """MaSS's adaptive G (noise inputs and output noise) at ``dim``, random weights: speed only."""
    from mass.modifiers import DataModifier, ModifierSpec

    torch.manual_seed(0)
    spec = ModifierSpec(dim=dim, noise_dim=16, residual_scale=2.0, output_noise=0.2)
    return DataModifier(spec).eval()


def check(
    src: Path, out: Path, batches: tuple[int, ...] = BATCHES, only: tuple[str, ...] = ()
) -> dict:
    """Every prepared modifier on this machine's CPU and cuda against the reference."""
    from mass.modifiers import load_modifier

    prepared = json.loads((src / "prepared.json").read_text())
    x, seeds = np.load(src / "x.npy"), np.load(src / "seeds.npy")
    cuda = torch.cuda.is_available()
    devices = [torch.device("cpu")] + ([torch.device("cuda")] if cuda else [])
    doc: dict = {"machine": platform.platform(), "torch": torch.__version__,
                 "cpu_threads": torch.get_num_threads(), "cuda": cuda,
                 "gpu": torch.cuda.get_device_name(0) if cuda else None,
                 "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                 "reference": {k: prepared[k] for k in ("torch", "machine", "rows", "dim")},
                 "models": {}}  # fmt: skip
    for name, info in prepared["models"].items():
        if only and name not in only:
            continue
        model = load_modifier(str(src / f"{name}.pt"))
        ref = np.load(src / f"{name}.ref.npy")
        distinct = len(np.unique(ref, axis=0))
        cells = info["kind"] in ("cells", "codebook", "chain") or distinct < len(ref)
        row: dict = {"kind": info["kind"], "method": info["method"], "cells": cells}
        with torch.inference_mode():
            for dev in devices:
                m = model.to(dev)
                row[dev.type] = compare(_apply(m, x, seeds, dev), ref, cells)
                if getattr(model, "stochastic", False):
                    row[dev.type]["noise_max_abs"] = _noise_check(m, seeds, dev)
            model = model.to("cpu")
            row["script"] = _scripted(model, x, seeds, ref.astype(np.float64))
            row["rows_per_s"] = speeds_all(model, x, seeds, devices, batches)
        doc["models"][name] = row
        print(name, json.dumps(row), flush=True)
        _write(out, doc)
    rng = np.random.default_rng(0)
    for dim in (512, 1024):
        if only and f"mass_g_{dim}d_synthetic" not in only:
            continue
        xs = rng.standard_normal((8192, dim)).astype(np.float32)
        xs /= np.linalg.norm(xs, axis=1, keepdims=True)
        with torch.inference_mode():
            doc["models"][f"mass_g_{dim}d_synthetic"] = {
                "kind": "mass", "rows_per_s": speeds_all(_synthetic_g(dim), xs,
                                                         np.arange(len(xs)), devices, batches)}  # fmt: skip
        _write(out, doc)
    return doc


def _write(out: Path, doc: dict) -> None:
    """After every model, so a run stopped at its time limit still leaves what it measured."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "device_check.json").write_text(json.dumps(doc, indent=1))


def speeds_all(model, x: np.ndarray, seeds: np.ndarray, devices: list[torch.device],
               batches: tuple[int, ...] = BATCHES) -> dict:  # fmt: skip
    """:func:`speeds` with the model moved to each device in turn (CPU last, where it lives)."""
    result: dict = {}
    for dev in sorted(devices, key=lambda d: d.type != "cuda"):
        part = speeds(model.to(dev), x, seeds, dev, batches)
        for b, row in part.items():
            result.setdefault(b, {}).update(row)
    model.to("cpu")
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("step", choices=("prepare", "check"))
    parser.add_argument("dir", type=Path, help="the prepared folder (written by prepare)")
    parser.add_argument("--out", type=Path, default=None, help="check: where the JSON goes")
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)),
                        help="check: batch sizes (rows) timed, comma-separated")  # fmt: skip
    parser.add_argument("--only", default="", help="check: these models alone, comma-separated")
    parser.add_argument("--root", type=Path, default=Path("."), help="prepare: the demo's repo")


def run(args: argparse.Namespace) -> int:
    if args.step == "prepare":
        print(json.dumps(prepare(args.dir, args.root), indent=1))
    else:
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        batches = tuple(int(b) for b in args.batches.split(","))
        check(args.dir, args.out or args.dir, batches, tuple(filter(None, args.only.split(","))))
    return 0


if __name__ == "__main__":
    raise SystemExit(entry.main(__file__, __doc__, add_arguments, run))
