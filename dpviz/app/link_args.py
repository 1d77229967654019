"""The emulated link's options, shared by the commands that run DDP over it."""
from __future__ import annotations


def add_link_arguments(p, default: str | None = None) -> None:
    """--link/--link-gbps/--link-latency-us: an emulated wire for the all-reduces (dpviz.core.link)."""
    from dpviz.core.link import PRESETS

    p.add_argument("--link", default=default, metavar="PRESET",
                   help=f"emulated link for the all-reduces: {', '.join(f'{k} ({g:g} Gb/s, {a:g} us)' for k, (g, a) in PRESETS.items())}, "
                        f"or off for raw loopback (default %(default)s)")
    p.add_argument("--link-gbps", type=float, default=None, metavar="G",
                   help="emulated link bandwidth in Gb/s (overrides the preset's)")
    p.add_argument("--link-latency-us", type=float, default=None, metavar="L",
                   help="emulated link latency per transfer in microseconds (overrides the preset's)")


def link_of(args):
    """The link the --link options describe (a ValueError, hence exit 2, if they are bad)."""
    from dpviz.core.link import link_from_options

    return link_from_options(args.link, args.link_gbps, args.link_latency_us)
