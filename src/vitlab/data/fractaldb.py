"""FractalDB: a labelled pre-training set drawn from formulas, with no download and no licence
(Kataoka et al., ACCV 2020; used for ViT by Nakashima et al., AAAI 2022).

A category is an iterated function system (IFS) of 2-7 affine maps
    w_i(x) = [[a, b], [c, d]] x + [e, f],   a..f ~ U(-1, 1),   p_i = |ad - bc| / sum_j |det_j|,
kept when its attractor, drawn as 100k points on a 512 x 512 canvas, covers at least 20% of the
pixels (the filling rate). Instances of a category scale one coefficient of every map by 0.8,
0.9, 1.1 or 1.2 (25 variants, the papers' weights_0.1), are drawn with a random 3x3 binary patch
per point ("patch" rendering) and flipped four ways: 25 x 4 = 100 distinct instances, repeated
with fresh patches beyond that.

Everything is vectorised with numpy: the chaos game runs many chains at once, for every candidate
or instance of a batch together. The chains first run BURN_IN steps, so the filling rate measures
the attractor itself (the papers' single chain also kept its first steps away from the origin). Each category's images come from their own seeded generator, so
the output is the same for a seed whatever the number of worker processes.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from PIL import Image

logger = logging.getLogger("vitlab")

MAX_MAPS = 7
SEARCH_SIZE = 512  # the papers' category search canvas and point count
SEARCH_POINTS = 100_000
FILLING_RATE = 0.2
POINT_DENSITY = SEARCH_POINTS / SEARCH_SIZE**2  # points per canvas pixel, kept when rendering instances
BURN_IN = 20  # chaos-game steps discarded while the chains fall onto the attractor
PATCH = 3
MIN_SIZE = 8  # the output side: a 3x3 patch on a canvas of twice that
CATEGORY_BYTES = 4096  # one category's maps and their record, held for the whole run


def jitter_table() -> np.ndarray:
    """(25, 6) multipliers of (a, b, c, d, e, f): the identity, then one coefficient at a time x 0.8..1.2."""
    rows = [np.ones(6)]
    for coefficient in range(6):
        for factor in (0.8, 0.9, 1.1, 1.2):
            row = np.ones(6)
            row[coefficient] = factor
            rows.append(row)
    return np.stack(rows)


JITTER = jitter_table()
FLIPS = 4  # none, vertical, horizontal, both


@dataclass(frozen=True)
class FractalCategory:
    maps: np.ndarray  # (n, 6): a, b, c, d, e, f of each affine map
    probabilities: np.ndarray  # (n,), proportional to |det|
    filling_rate: float

    def to_json(self) -> dict:
        return {
            "maps": self.maps.tolist(),
            "probabilities": self.probabilities.tolist(),
            "filling_rate": self.filling_rate,
        }


# -- the chaos game ------------------------------------------------------------------------------
def chaos_game(maps: np.ndarray, probabilities: np.ndarray, points: int, rng: np.random.Generator) -> np.ndarray:
    """Points on the attractors of B systems at once.

    maps (B, 7, 6), probabilities (B, 7) (unused maps have probability 0) -> (B, points, 2).
    Many chains start at the origin, run BURN_IN steps, then each step adds one point per chain.
    """
    batch = maps.shape[0]
    chains = min(1000, max(32, math.isqrt(points) * 2))
    steps = math.ceil(points / chains)
    cumulative = np.cumsum(probabilities, axis=1)
    cumulative /= cumulative[:, -1:]
    rows = np.arange(batch)[:, None]
    xy = np.zeros((batch, chains, 2))
    out = np.empty((steps, batch, chains, 2))
    with np.errstate(over="ignore", invalid="ignore"):
        for step in range(BURN_IN + steps):
            chosen = (rng.random((batch, chains, 1)) > cumulative[:, None, :]).sum(-1)  # (B, chains)
            w = maps[rows, np.minimum(chosen, MAX_MAPS - 1)]  # (B, chains, 6)
            x, y = xy[..., 0], xy[..., 1]
            xy = np.stack([w[..., 0] * x + w[..., 1] * y + w[..., 4], w[..., 2] * x + w[..., 3] * y + w[..., 5]], -1)
            if step >= BURN_IN:
                out[step - BURN_IN] = xy
    return out.transpose(1, 0, 2, 3).reshape(batch, steps * chains, 2)[:, :points]


def to_pixels(points: np.ndarray, size: int, pad: int) -> np.ndarray:
    """Scale each system's points, per axis, onto [pad, size - 1 - pad] (as the papers' renderer)."""
    low = points.min(axis=1, keepdims=True)
    span = np.maximum(points.max(axis=1, keepdims=True) - low, 1e-12)
    return ((points - low) / span * (size - 1 - 2 * pad) + pad).astype(np.int64)


def filling_rate(points: np.ndarray, size: int = SEARCH_SIZE) -> np.ndarray:
    """(B, P, 2) attractor points -> (B,) fraction of the size x size canvas they hit; 0 if they diverged."""
    rates = np.zeros(points.shape[0])
    finite = np.isfinite(points).all(axis=(1, 2)) & (np.abs(points).max(axis=(1, 2), initial=0) < 1e6)
    if not finite.any():
        return rates
    pixels = to_pixels(points[finite], size, pad=6)
    for row, (xs, ys) in zip(np.flatnonzero(finite), pixels.transpose(0, 2, 1)):
        rates[row] = np.count_nonzero(np.bincount(ys * size + xs, minlength=size * size)) / size**2
    return rates


def random_systems(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """count candidate IFS: maps (count, 7, 6) and probabilities (count, 7), padded with p = 0."""
    sizes = rng.integers(2, MAX_MAPS + 1, size=count)
    maps = rng.uniform(-1.0, 1.0, size=(count, MAX_MAPS, 6))
    used = np.arange(MAX_MAPS)[None, :] < sizes[:, None]
    maps *= used[..., None]
    determinant = np.abs(maps[..., 0] * maps[..., 3] - maps[..., 1] * maps[..., 2])
    probabilities = determinant / determinant.sum(axis=1, keepdims=True)
    return maps, probabilities


# Cheap screens before the papers' test: the filling rate at 64 and 128 px with the same point
# density. Their thresholds lie below 0.2 by a margin that, on 3,200 random systems, let through
# every system that passes at 512 px, and they reject about 92% of the rest.
SCREENS = ((64, 1_563, 0.15), (128, 6_250, 0.17))


def search_batch(seed: int, batch_index: int, batch: int = 256) -> list[FractalCategory]:
    """The categories among one seeded batch of random systems, in the order drawn."""
    rng = np.random.default_rng([seed, 0, batch_index])
    maps, probabilities = random_systems(batch, rng)
    keep = np.arange(batch)
    rates = np.zeros(0)
    for size, points, threshold in SCREENS + ((SEARCH_SIZE, SEARCH_POINTS, FILLING_RATE),):
        rates = filling_rate(chaos_game(maps[keep], probabilities[keep], points, rng), size)
        keep, rates = keep[rates >= threshold], rates[rates >= threshold]
    return [
        FractalCategory(maps[i][probabilities[i] > 0], probabilities[i][probabilities[i] > 0], float(rate))
        for i, rate in zip(keep, rates)
    ]


def search_categories(num_classes: int, seed: int, workers: int = 1, mapper: Callable = map) -> list[FractalCategory]:
    """Draw batches of random systems until num_classes reach the filling rate. Batches are seeded
    by their index and taken in order, so the result depends on the seed only; `mapper` (a process
    pool's map) searches `workers` batches at a time."""
    categories: list[FractalCategory] = []
    batch_index = 0
    while len(categories) < num_classes:
        for found in mapper(search_batch, [seed] * workers, range(batch_index, batch_index + workers)):
            categories.extend(found)
        batch_index += workers
        if batch_index >= 1000 and not categories:
            raise RuntimeError(f"no IFS out of {batch_index} batches reached filling rate {FILLING_RATE}")
    logger.debug("fractaldb: %d categories from %d batches of random systems", len(categories), batch_index)
    return categories[:num_classes]


# -- rendering instances -------------------------------------------------------------------------
def render_category(category: FractalCategory, count: int, size: int, seed: int, index: int) -> np.ndarray:
    """count grey instances of one category, (count, size, size) uint8.

    Drawn at twice the output size (a 3x3 patch then spans 1.5 output pixels, as 3 px at 512 did
    at the papers' 224) and averaged down, with the search's point density.
    """
    rng = np.random.default_rng([seed, 1, index])
    canvas_size = 2 * size
    instance = np.arange(count)
    n = len(category.maps)
    maps = np.zeros((count, MAX_MAPS, 6))
    maps[:, :n] = category.maps[None] * JITTER[instance % len(JITTER)][:, None, :]
    probabilities = np.zeros((count, MAX_MAPS))
    probabilities[:, :n] = category.probabilities
    points = chaos_game(maps, probabilities, max(64, round(POINT_DENSITY * canvas_size**2)), rng)
    points = np.nan_to_num(points, posinf=0.0, neginf=0.0)  # a jittered system may diverge: keep its image
    pixels = to_pixels(points, canvas_size - PATCH + 1, pad=1)  # top-left corner of each patch

    # Each point stamps a 3x3 patch with a random non-empty binary mask (1..511).
    masks = rng.integers(1, 512, size=pixels.shape[:2])
    canvas = np.zeros(count * canvas_size**2, dtype=np.float32)
    base = instance[:, None] * canvas_size**2 + pixels[..., 1] * canvas_size + pixels[..., 0]
    for bit in range(PATCH * PATCH):
        on = (masks >> bit) & 1 == 1
        canvas[(base + (bit // PATCH) * canvas_size + bit % PATCH)[on]] = 1.0
    images = canvas.reshape(count, size, 2, size, 2).mean(axis=(2, 4))
    flips = (instance // len(JITTER)) % FLIPS
    images[flips % 2 == 1] = images[flips % 2 == 1, ::-1, :]
    images[flips >= 2] = images[flips >= 2, :, ::-1]
    return np.round(images * 255).astype(np.uint8)


# The arrays render_category holds at its peak, per instance and canvas pixel: chaos-game points
# and their pixel coordinates, the patch masks and indices, the float32 canvas (29 bytes measured
# by tracemalloc at 16 to 128 px; this bounds it from above).
RENDER_BYTES_PER_CANVAS_PIXEL = 32


def render_bytes(count: int, size: int) -> int:
    """Memory render_category(count instances of size px) takes at its peak."""
    return count * (2 * size) ** 2 * RENDER_BYTES_PER_CANVAS_PIXEL


# -- writing -------------------------------------------------------------------------------------
Format = Literal["folder", "wds"]


@dataclass(frozen=True)
class FractalDBSpec:
    classes: int
    per_class: int
    size: int
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("classes", "per_class", "size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"fractaldb --{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.size < MIN_SIZE:
            raise ValueError(
                f"fractaldb --size must be at least {MIN_SIZE} px (a 3x3 patch per point), got {self.size}"
            )

    def check_memory(self, limit: int, workers: int) -> None:
        """Refuse, before anything is allocated, a spec whose categories (each rendered whole in one of
        `workers` processes) would take more than `limit` bytes."""
        needed = workers * render_bytes(self.per_class, self.size) + self.classes * CATEGORY_BYTES
        if needed > limit:
            raise ValueError(
                f"fractaldb --classes {self.classes} --per-class {self.per_class} --size {self.size} with "
                f"{workers} worker(s) would take {needed / 2**30:,.3g} GiB of memory at once, above the limit of "
                f"{limit / 2**30:.3g} GiB: lower --per-class, --size or --workers"
            )

    @property
    def class_names(self) -> list[str]:
        return [f"{i:05d}" for i in range(self.classes)]


def png_bytes(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image, mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


def _render_job(job: tuple[FractalCategory, FractalDBSpec, int]) -> np.ndarray:
    category, spec, index = job
    return render_category(category, spec.per_class, spec.size, spec.seed, index)


def generate_fractaldb(
    spec: FractalDBSpec, out: str | Path, format: Format = "folder", workers: int = 1, memory_limit: int | None = None
) -> dict:
    """Search the categories, render every instance and write them under `out`.

    folder: out/<class>/<class>_<i>.png (an ImageFolder); wds: out/fractaldb-NNNNNN.tar shards of
    <key>.png + <key>.cls with out/classes.txt. Both get out/fractaldb.json: the spec and every
    category's maps, so a dataset can be regenerated or inspected. Returns that document. The
    images depend on the seed only, not on the number of worker processes. With `memory_limit`
    (bytes), a spec that would take more is refused before `out` is touched.
    """
    if format not in ("folder", "wds"):
        raise ValueError(f"unknown fractaldb format {format!r}; choose folder or wds")
    if memory_limit is not None:
        spec.check_memory(memory_limit, workers)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"fractaldb output folder {str(out)!r} is not empty; give a new or empty --out")
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with ProcessPoolExecutor(workers) if workers > 1 else contextlib.nullcontext() as pool:
        mapper = pool.map if pool is not None else map
        categories = search_categories(spec.classes, spec.seed, workers, mapper)
        jobs = [(category, spec, index) for index, category in enumerate(categories)]
        write_images(mapper(_render_job, jobs), spec, out, format)
    document = {
        "format": "fractaldb",
        "classes": spec.classes,
        "per_class": spec.per_class,
        "size": spec.size,
        "seed": spec.seed,
        "filling_rate_threshold": FILLING_RATE,
        "categories": [category.to_json() for category in categories],
    }
    (out / "fractaldb.json").write_text(json.dumps(document, indent=1) + "\n")
    logger.info(
        "fractaldb: %d classes x %d images of %d px in %.1f s -> %s (%s)",
        spec.classes,
        spec.per_class,
        spec.size,
        time.perf_counter() - start,
        out,
        format,
    )
    return document


def write_images(rendered, spec: FractalDBSpec, out: Path, format: Format) -> None:
    names = spec.class_names
    if format == "folder":
        for name, images in zip(names, rendered):
            (out / name).mkdir()
            for i, image in enumerate(images):
                (out / name / f"{name}_{i:05d}.png").write_bytes(png_bytes(image))
        return
    import webdataset

    (out / "classes.txt").write_text("\n".join(names) + "\n")
    # A fixed member time makes the shards byte-for-byte repeatable, like the PNG folder.
    with webdataset.ShardWriter(str(out / "fractaldb-%06d.tar"), maxcount=10_000, verbose=0, mtime=0.0) as sink:
        for label, (name, images) in enumerate(zip(names, rendered)):
            for i, image in enumerate(images):
                sink.write({"__key__": f"{name}_{i:05d}", "png": png_bytes(image), "cls": label})
