"""``ampfl data fetch NAME [NAME ...]`` and ``ampfl data info NAME``: the dataset cache.

``fetch`` obtains each dataset (cache, local offline source, user path / ``$AMPFL_DATA``, canonical URL),
verifies its SHA-256 checksums and caches the parsed arrays; it prints where each landed or a one-line
reason it could not, and exits with code 1 if any failed. ``info`` prints shapes, classes and source.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ampfl.commands import CommandFailed, Registry

#: Same as ``ampfl.fl.data.FETCHABLE`` (a test checks it); not imported here so start-up stays light.
_FETCHABLE = ("adult", "fmnist", "digits", "shakespeare")


def register(registry: Registry) -> None:
    parser = registry.command(None, "data", _missing_action, help="fetch and inspect datasets")
    actions = parser.add_subparsers(dest="data_action", metavar="ACTION", parser_class=type(parser))
    actions.required = True

    fetch = actions.add_parser(
        "fetch",
        help="fetch, verify and cache datasets",
        description="fetch, verify (SHA-256) and cache datasets",
    )
    fetch.add_argument(
        "names", nargs="+", choices=_FETCHABLE, metavar="NAME", help="adult, fmnist, digits, shakespeare"
    )
    fetch.add_argument(
        "--cache", type=Path, default=None, help="cache folder (default $AMPFL_DATA or ~/.cache/ampfl)"
    )
    fetch.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON object")
    fetch.set_defaults(handler=_fetch)

    info = actions.add_parser(
        "info",
        help="shapes, classes and source of a dataset",
        description="shapes, classes and source of a dataset",
    )
    info.add_argument(
        "name", metavar="NAME", help="synthetic, digits, adult, adult-complete, fmnist, cifar10, ..."
    )
    info.add_argument("--path", default=None, help="folder of a user-path dataset (cifar10, emnist, idx)")
    info.add_argument(
        "--cache", type=Path, default=None, help="cache folder (default $AMPFL_DATA or ~/.cache/ampfl)"
    )
    info.add_argument("--seed", type=int, default=0, help="seed of synthetic / the digits split (default 0)")
    info.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON object")
    info.set_defaults(handler=_info)


def _missing_action(
    args: argparse.Namespace,
) -> dict[str, Any]:  # pragma: no cover - argparse requires ACTION
    raise ValueError("data needs an action: fetch or info.")


def _fetch(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.fl.data import DataUnavailableError, data_dir, fetch_one

    cache = args.cache if args.cache is not None else data_dir()
    fetched: dict[str, str] = {}
    failed: dict[str, str] = {}
    for name in dict.fromkeys(args.names):
        try:
            fetched[name] = str(fetch_one(name, cache_dir=cache))
        except DataUnavailableError as exc:
            failed[name] = str(exc)
    result: dict[str, Any] = {"cache": str(cache), "fetched": fetched, "failed": failed}
    if failed:
        raise CommandFailed(
            [f"could not fetch {name}: {reason}" for name, reason in failed.items()], result=result
        )
    return result


def _info(args: argparse.Namespace) -> dict[str, Any]:
    from ampfl.fl.data import DataUnavailableError, data_dir, load_dataset

    cache = args.cache if args.cache is not None else data_dir()
    try:
        dataset = load_dataset(args.name, path=args.path, seed=args.seed, cache_dir=cache)
    except DataUnavailableError as exc:
        raise CommandFailed([str(exc)], result={"name": args.name, "failed": str(exc)}) from None
    return dataset.summary()
