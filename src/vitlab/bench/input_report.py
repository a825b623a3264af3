"""The training input pipeline benchmark (input_pipeline.py) as a Markdown section."""

from __future__ import annotations

from .machine import cpu_text


def markdown(results: dict) -> str:
    config, machine, augment = results["config"], results["machine"], results["augment"]
    per_core = results["images_per_s_per_core"]
    workers = config["workers"]
    where = f"in {workers} worker process{'es' if workers > 1 else ''}" if workers else "in one process on one thread"
    lines = [
        "### Training input pipeline per core: vitlab against timm",
        "",
        f"{config['images']} JPEG files of 500 x 375 pixels ({results['file_kb']:.0f} KB on average) -> decode, "
        f"the `{config['recipe']}` recipe's augmentation at {config['image_size']} px (crop area "
        f"{augment['crop_scale']}, flip {augment['hflip']}, RandAugment {augment['randaugment']}, "
        f"Mixup {augment['mixup']}, CutMix {augment['cutmix']}) -> normalised float batches of {config['batch']}, "
        f"{where}; {config['rounds']} interleaved rounds of {config['batches_per_round']} batches, median.",
        "",
        f"Machine: {cpu_text(machine)}, {machine['cpu_count']} cores, CPU capability {machine['cpu_capability']}, "
        f"torch {machine['torch']}; load average at start {machine['load_average']}, "
        f"at end {results['load_average_end']} (a shared machine: the ratio, from one interleaved run, is the figure).",
        "",
        "| pipeline | loader images/s per core | vitlab / timm | with the batch mixing on the CPU too | vitlab / timm |",
        "|---|---:|---:|---:|---:|",
        f"| vitlab | {per_core['vitlab']:.1f} | {results['vitlab_over_timm']:.2f}x "
        f"| {per_core['vitlab with mixing']:.1f} | {results['vitlab_over_timm_with_mixing']:.2f}x |",
        f"| timm | {per_core['timm']:.1f} | | {per_core['timm with mixing']:.1f} | |",
        "",
        "The loader's batches are what its workers deliver; both vitlab's trainer and timm's train.py mix "
        "batches on the training device, so the mixing column adds a cost a GPU run does not pay on the CPU.",
        "",
        "Where the time goes (milliseconds per image, one image at a time over "
        f"{config['profile_images']} images, the fastest of 3 passes per stage; batching and mixing not included):",
        "",
        "| vitlab stage | ms | timm stage | ms |",
        "|---|---:|---|---:|",
    ]
    lines += profile_rows(results) + randaugment_rows(results)
    lines += [
        "",
        "The same augmentation on both sides:",
        "",
        "| vitlab | timm |",
        "|---|---|",
        *[f"| {mine_setting} | {their_setting} |" for mine_setting, their_setting in results["settings"]],
        "",
        results["gpu_feed"],
    ]
    return "\n".join(lines) + "\n"


def profile_rows(results: dict) -> list[str]:
    """The rows of the per-stage table: vitlab's stages beside timm's, the shorter list padded."""
    lines = []
    mine, theirs = (
        list(results["profile_ms_per_image"]["vitlab"].items()),
        list(results["profile_ms_per_image"]["timm"].items()),
    )
    for index in range(max(len(mine), len(theirs))):
        left = mine[index] if index < len(mine) else ("", None)
        right = theirs[index] if index < len(theirs) else ("", None)
        cells = [f"{name} | {'' if ms is None else f'{ms:.3f}'}" for name, ms in (left, right)]
        lines.append(f"| {cells[0]} | {cells[1]} |")
    return lines


def randaugment_rows(results: dict) -> list[str]:
    """The table of each RandAugment operation's time on both sides, where it was measured."""
    config = results["config"]
    if not results.get("randaugment_ms_per_op"):
        return []
    return [
        "",
        f"Each RandAugment operation on one {config['image_size']} px crop (always applied, the fastest of 15 calls):",
        "",
        "| operation | vitlab ms | timm ms |",
        "|---|---:|---:|",
        *[
            f"| {name} | {ms['vitlab']:.3f} | {ms['timm']:.3f} |"
            for name, ms in results["randaugment_ms_per_op"].items()
        ],
    ]
