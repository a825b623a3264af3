"""Fetching catalogue files into a local cache, with checksums, a mirror and an offline mode.

    cache:   $VITLAB_CACHE, else ~/.cache/vitlab; a file from https://HOST/PATH is kept at
             CACHE/weights/HOST/PATH, beside HOST/PATH.sha256 (its digest)
    mirror:  $VITLAB_WEIGHTS_MIRROR, a base URL (file:// or http://) laid out as HOST/PATH; it
             replaces every download's scheme and host
    offline: $VITLAB_OFFLINE=1 (or HF_HUB_OFFLINE=1) never touches the network
    Hub:     an entry whose Hub repository is in the HF cache is read from there instead
             (pretrained.py); the errors below say how to put it there

A file whose checksum the catalogue knows is verified against it. Google publishes none for its
vit_models files: their first download is trusted ("trust on first use"), must load as a
checkpoint, and its sha256 is recorded; every later use re-hashes the cached file against that
record, so a truncated or altered cache is caught instead of silently loaded.
"""

from __future__ import annotations

import hashlib
import logging
import os
import urllib.request
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from tqdm.auto import tqdm

from vitlab.errors import CheckpointError

from .catalogue import Download, Pretrained

log = logging.getLogger("vitlab")

CACHE_ENV = "VITLAB_CACHE"
MIRROR_ENV = "VITLAB_WEIGHTS_MIRROR"
OFFLINE_ENVS = ("VITLAB_OFFLINE", "HF_HUB_OFFLINE")
DIGEST_SUFFIX = ".sha256"
CHUNK = 1 << 20
TIMEOUT_S = 60


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "vitlab")


def is_offline() -> bool:
    return any(os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on") for name in OFFLINE_ENVS)


def cache_path(url: str) -> Path:
    """Where the file of `url` is cached: CACHE/weights/HOST/PATH."""
    parts = urlsplit(url)
    return cache_dir() / "weights" / parts.netloc / parts.path.lstrip("/")


def mirrored(url: str) -> str:
    """`url` on the mirror, if one is set: https://HOST/PATH -> MIRROR/HOST/PATH."""
    mirror = os.environ.get(MIRROR_ENV, "").strip()
    if not mirror:
        return url
    parts = urlsplit(url)
    return f"{mirror.rstrip('/')}/{parts.netloc}{parts.path}"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def matches(digest: str, expected: str) -> bool:
    """A full digest, or a prefix of one (torch.hub's file-name convention)."""
    return digest.startswith(expected.lower())


def _download(url: str, target: Path) -> str:
    """Stream `url` into `target`; returns its sha256."""
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response, target.open("wb") as out:
        total = int(response.headers.get("Content-Length") or 0) or None
        with tqdm(total=total, unit="B", unit_scale=True, desc=target.name, disable=None) as bar:
            while chunk := response.read(CHUNK):
                out.write(chunk)
                digest.update(chunk)
                bar.update(len(chunk))
    return digest.hexdigest()


def _verified_cache(download: Download, name: str) -> Path | None:
    """The cached file if it is there and its digest matches the catalogue's or the recorded one."""
    path = cache_path(download.url)
    if not path.is_file():
        return None
    record = path.with_name(path.name + DIGEST_SUFFIX)
    expected = download.sha256 or (record.read_text().strip() if record.is_file() else None)
    if expected is None:
        raise CheckpointError(f"{name}: {path} has no recorded sha256 ({record.name}); delete it to download it again")
    digest = sha256_of(path)
    if not matches(digest, expected):
        raise CheckpointError(
            f"{name}: cached file {path} has sha256 {digest[:16]}..., expected {expected[:16]}...; "
            f"it is damaged or was replaced; delete it to download it again"
        )
    return path


def _fetch(download: Download, name: str, check: Callable[[Path], object]) -> Path:
    """Download one source, verify or record its digest, check it loads, then move it into the cache.

    The file is written beside its final place under a name that keeps its suffix (the loaders go
    by it) and renamed only once it passed, after its digest record: a reader of the cache sees
    either nothing or a verified file with its record.
    """
    url = mirrored(download.url)
    path = cache_path(download.url)
    partial = path.with_name(f"{path.stem}.partial{path.suffix}")
    path.parent.mkdir(parents=True, exist_ok=True)
    log.info("%s: downloading %s", name, url)
    try:
        digest = _download(url, partial)
        if download.sha256 is not None and not matches(digest, download.sha256):
            raise CheckpointError(f"{name}: {url} has sha256 {digest[:16]}..., expected {download.sha256}...; not kept")
        check(partial)
    except BaseException:  # interrupted, wrong checksum, or not the checkpoint it should be
        partial.unlink(missing_ok=True)
        raise
    if download.sha256 is None:
        log.info("%s: no published checksum; recorded sha256 %s (trust on first use)", name, digest)
    path.with_name(path.name + DIGEST_SUFFIX).write_text(digest + "\n")
    partial.replace(path)
    return path


def hub_hint(entry: Pretrained) -> str:
    """How to put the entry's first Hub repository into the HF cache, which is read first; empty without one."""
    if not entry.hub_repos:
        return ""
    repo = entry.hub_repos[0]
    files = " model.safetensors" if repo == entry.timm_id else ""  # transformers' repositories: the whole folder
    return f"; or, online, `hf download {repo}{files}` puts its Hub copy in the HF cache"


def fetch(entry: Pretrained, check: Callable[[Path], object]) -> Path:
    """A verified local copy of `entry`'s file: from the cache, else from its first reachable source.

    `check(path)` must raise if the file is not a usable checkpoint (it is then deleted).
    """
    for download in entry.downloads:
        cached = _verified_cache(download, entry.name)
        if cached is not None:
            return cached
    if is_offline():
        hub = f" nor in the HF cache ({', '.join(entry.hub_repos)})" if entry.hub_repos else ""
        raise CheckpointError(
            f"{entry.name}: not in the cache ({cache_path(entry.downloads[0].url)}){hub} and offline "
            f"({' / '.join(OFFLINE_ENVS)} set){hub_hint(entry)}"
        )
    failures = []
    for download in entry.downloads:
        try:
            return _fetch(download, entry.name, check)
        except OSError as error:  # URLError and HTTPError too: unreachable, 404, disk full
            failures.append(f"{mirrored(download.url)} ({getattr(error, 'reason', None) or error})")
        except ValueError as error:  # a bad URL, a wrong checksum, a file that does not load
            failures.append(str(error).removeprefix(f"{entry.name}: "))
    raise CheckpointError(
        f"{entry.name}: could not download the weights: {'; '.join(failures)}. Set {MIRROR_ENV} to a "
        f"mirror, or put the file at {cache_path(entry.downloads[0].url)} with its sha256 in a "
        f"{DIGEST_SUFFIX} file beside it{hub_hint(entry)}"
    )
