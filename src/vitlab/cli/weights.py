"""`vitlab weights list | fetch`: the pretrained-weights catalogue and its local cache."""

from __future__ import annotations

import argparse

from vitlab.errors import InputError

from . import COMMANDS, with_examples

LIST_EXAMPLES = (  # the end of --help
    "vitlab weights list",
    "vitlab weights list --model B/16 --urls",
)
FETCH_EXAMPLES = (  # the end of --help
    "vitlab weights fetch B/16:augreg-in21k",
    "vitlab weights fetch Ti/16:augreg-in21k B/16:augreg-in21k",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "weights",
        help=COMMANDS["weights"].help,
        **with_examples(*LIST_EXAMPLES[:1], *FETCH_EXAMPLES[:1]),
    )
    commands = parser.add_subparsers(dest="weights_command", metavar="ACTION", required=True)

    listing = commands.add_parser("list", help="list catalogue entries", **with_examples(*LIST_EXAMPLES))
    listing.add_argument("--model", help="only this model, e.g. B/16")
    listing.add_argument("--urls", action="store_true", help="also print each entry's sources and checksums")
    listing.set_defaults(func=run_list)

    fetch = commands.add_parser(
        "fetch", help="download entries into the cache and verify them", **with_examples(*FETCH_EXAMPLES)
    )
    fetch.add_argument("names", nargs="+", metavar="MODEL:TAG", help="catalogue entries (vitlab weights list)")
    fetch.set_defaults(func=run_fetch)


def _checksum(entry) -> str:
    """How the first source is verified (a published digest or prefix, or trust on first use);
    "+alt" when a further source exists."""
    digest = entry.downloads[0].sha256
    kind = "tofu" if digest is None else "sha256" if len(digest) == 64 else "prefix"
    return kind + ("+alt" if len(entry.downloads) > 1 else "")


def run_list(args: argparse.Namespace) -> int:
    from vitlab.weights.catalogue import list_pretrained
    from vitlab.weights.fetch import cache_dir, cache_path
    from vitlab.weights.pretrained import hub_cache_copy

    entries = list_pretrained(args.model)
    if not entries:
        raise InputError(f"no catalogue entries for model {args.model!r}")
    print(f"{'name':<34} {'size':>4} {'classes':>7}  {'checksum':<9} {'cached':<6} {'licence':<10} dataset")
    for entry in entries:
        cached = (
            "yes"
            if any(cache_path(download.url).is_file() for download in entry.downloads)
            else "hf"
            if hub_cache_copy(entry) is not None
            else "-"
        )
        print(
            f"{entry.name:<34} {entry.image_size:>4} {entry.num_classes or 'feature':>7}  {_checksum(entry):<9} "
            f"{cached:<6} {entry.license:<10} {entry.dataset}"
        )
        if args.urls:
            for download in entry.downloads:
                print(f"    {download.url}  sha256 {download.sha256 or 'unpublished: recorded on first download'}")
            for label, hub_id in (("timm", entry.timm_id), ("transformers", entry.hf_id)):
                if hub_id:
                    print(f"    {label}: hf://{hub_id}")
    print(f"cache: {cache_dir()}")
    print(
        "tofu: no published checksum, the first download's sha256 is recorded; +alt: a second source, "
        "timm's conversion, whose name carries its sha256 prefix (see --urls); cached hf: its Hub repository "
        "is in the Hugging Face cache, which is read first"
    )
    if any(entry.zeroed_head for entry in entries):
        print(
            "feature: a feature extractor, the release's ImageNet-21k head is zeroed; it outputs the "
            "pre-logits (tanh) representation, no classes"
        )
    return 0


def run_fetch(args: argparse.Namespace) -> int:
    from vitlab.weights import load_pretrained

    for name in args.names:
        model = load_pretrained(name)
        params = sum(p.numel() for p in model.parameters())
        print(f"{name}: ok, {params / 1e6:.1f}M parameters, {model.config.num_classes} classes")
    return 0
