"""Which CPU this is: its name, and the vendor's family and model numbers that tell apart CPUs of one
name (/proc/cpuinfo), the ATen kernels it dispatches to, and one core's L2 cache (sysfs). The
model's kernel choices (kernels.py) are keyed and sized by these; every benchmark records them.
"""

from __future__ import annotations

import logging
import platform
from pathlib import Path

import torch

log = logging.getLogger("vitlab")

CPUINFO = Path("/proc/cpuinfo")


def cpuinfo_fields(path: Path | None = None) -> dict[str, str]:
    """The first processor's fields in Linux's /proc/cpuinfo ("model name", "cpu family", ...); empty
    where there is none."""
    fields: dict[str, str] = {}
    try:
        with open(path or CPUINFO) as info:
            for line in info:
                if not line.strip():
                    break  # the end of the first processor's block
                name, _, value = line.partition(":")
                fields.setdefault(name.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_name() -> str:
    """The CPU's marketing name ("AMD EPYC"), which CPUs of different generations may share."""
    return cpuinfo_fields().get("model name") or platform.processor() or platform.machine()


def cpu_model() -> str:
    """Vendor, family and model numbers ("AuthenticAMD family 25 model 17"): what tells apart two CPUs
    of one name (AMD EPYCs of different generations share "AMD EPYC"; docs/benchmarks.md records two
    whose bf16 GEMM peaks differ about twofold). Where Linux does not say, what the platform module does."""
    fields = cpuinfo_fields()
    if "cpu family" in fields and "model" in fields:
        return f"{fields.get('vendor_id', 'vendor not reported')} family {fields['cpu family']} model {fields['model']}"
    if "CPU implementer" in fields and "CPU part" in fields:  # Arm
        return f"implementer {fields['CPU implementer']} part {fields['CPU part']}"
    return platform.processor() or platform.machine()


L2_ASSUMED = 2**20  # bytes of L2 per core where the system does not say (the AMD EPYC of docs/benchmarks.md's)
CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
_l2: list[int] = []


def l2_cache_bytes() -> int:
    """One core's L2 cache, as Linux reports it; L2_ASSUMED, logged once, where it does not."""
    if not _l2:
        size = reported_l2_bytes(CPU_CACHES)
        if size is None:
            log.info("no L2 cache size reported here: attention blocks sized for %d KiB per core", L2_ASSUMED // 1024)
        _l2.append(size or L2_ASSUMED)
    return _l2[0]


def reported_l2_bytes(caches: Path) -> int | None:
    """The level-2 data (or unified) cache's size in a sysfs cache folder (index0, index1, ...)."""
    for index in sorted(caches.glob("index*")):
        try:
            level, kind = ((index / name).read_text().strip() for name in ("level", "type"))
            if level == "2" and kind != "Instruction":
                return parse_cache_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
    return None


def parse_cache_size(text: str) -> int:
    """sysfs' cache size ("1024K", "2M", "512") in bytes."""
    text = text.strip().upper()
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


def cpu_capability() -> str:
    """The ATen kernels dispatched to: AVX2, AVX512, ... (ATEN_CPU_CAPABILITY lowers it)."""
    return torch.backends.cpu.get_cpu_capability()


def reset() -> None:
    """Forget the L2 size read (tests fake sysfs, then ask again)."""
    _l2.clear()
