"""An emulated wire for live runs: communication gets its own resource, as on a cluster.

On a CPU, gloo's all-reduce is computed by the same cores that run backward: communication
*steals* compute instead of running beside it, and timing pictures come out reversed. On GPUs
the interconnect (NVLink, a NIC, DMA engines) is a separate resource. `Link` gives each rank
such a resource: every bucket passes a FIFO link model first — its transfer starts when the
link is free and the bucket is ready, and takes α + wire_bytes/β of *waiting that burns no
CPU* (a thread that sleeps) — and only then the real gloo all-reduce runs, so the data and
the synchronisation stay real. The record holds both spans (kinds "link" and "allreduce").

wire_bytes is what a ring all-reduce puts on each rank's link: 2(N−1)/N of the bucket.
Emulation is approximate on one point: each rank's link starts when its own bucket is ready,
not when every rank's is (the real all-reduce after it still waits for every rank).

A fixed preset cannot suit every CPU: overlap hides at most one backward of transfer time,
so what the lessons show depends on the link's time against *this machine's* backward.
`sized_link` sets the link from a measured backward: all gradients cross it in `ratio` × the
backward, and each transfer pays α = `alpha_fraction` × the backward (small, so only many
tiny buckets pay visibly). A slower CPU gets a slower link in the same ratio, so the pictures
are the same everywhere. `dpviz.engine.link_sizing.size_link` measures the backward on live ranks, in
runs like the lesson's own, and returns such a link;
`describe_sizing_check` says whether a section's runs still have the proportion it was sized for.

No torch here: records and renderers read links without it. The rank side, the thread that
plays the wire during a run, is `dpviz.engine.link_thread`.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

# Preset links: (Gb/s, one-transfer latency µs). Round numbers of the right order, quoted for
# teaching, not measured here. "classroom" is scaled to dpviz's small demo models (a few MiB
# of gradients): its transfers dwarf the CPU's own reduction work, and notebook 04's tiny
# micro-steps. Against a fixed backward it is not: 6 MiB take about a tenth of a second on it,
# many times notebook 03's backward on a small CPU, more than overlap can hide — which is
# why notebooks 01 and 03 size their link to the measured backward instead (`sized_link`).
PRESETS: dict[str, tuple[float, float]] = {
    "classroom": (0.5, 2000.0),    # 0.5 Gb/s, 2 ms per transfer: notebook 04's link
    "1GbE": (1.0, 50.0),
    "10GbE": (10.0, 20.0),
    "100GbE": (100.0, 5.0),        # RDMA-class NIC
    "PCIe": (256.0, 2.0),          # PCIe 4.0 x16, ~32 GB/s
    "NVLink-ish": (1200.0, 2.0),   # ~150 GB/s, the order of V100/A100 NVLink busBW
}
OFF = ("off", "none", "loopback")

# `sized_link`'s defaults: a teaching setting chosen to make overlap visible, not the proportion
# of any cluster (there it depends on the model, the batch and the interconnect). Against the
# backward of the lesson's own runs (size_link), all gradients cross in 1.5 such backwards: with
# notebook 03's 6 buckets of 1 MiB overlap can then hide ≈ (5/6 − 5a)/(1.5 + a) ≈ 38 % of what one
# bucket exposes (sized_link), with a margin both ways: a backward 1.5× longer or shorter than
# the one sized to keeps buckets ahead of one bucket and short of hiding everything (below
# ≈ 0.53 backwards 6 buckets hide it all). α at 5 %: 24 tiny buckets pay 1.2 backwards of it, 6 pay 0.3.
RATIO = 1.5
ALPHA_FRACTION = 0.05


@dataclass(frozen=True)
class Link:
    """One rank's emulated interconnect: α = latency_us per transfer, β = 1 / gbps."""

    gbps: float            # gigabits per second (1e9 bit/s)
    latency_us: float      # fixed cost of each transfer
    name: str = ""         # the preset it came from, if any
    # the measured backward (ms) `sized_link` sized it to; None for presets and typed numbers
    # (records from before sizing existed load with None)
    sized_to_ms: float | None = None

    def wire_bytes(self, nbytes: int, world_size: int) -> float:
        """Bytes a ring all-reduce of `nbytes` puts on each rank's link."""
        return 2 * (world_size - 1) / world_size * nbytes if world_size > 1 else 0.0

    def transfer_ms(self, nbytes: int, world_size: int) -> float:
        """α + wire_bytes/β for one bucket (ms)."""
        return self.latency_us / 1e3 + self.wire_bytes(nbytes, world_size) * 8 / (self.gbps * 1e9) * 1e3

    def label(self) -> str:
        """How figures name it: 'emulated link classroom: 0.5 Gb/s, α 2000 µs', or for a sized
        one 'emulated link: 3.96 Gb/s, α 620 µs, sized to a measured 12.4 ms backward'."""
        name = f" {self.name}" if self.name else ""
        sized = (f", sized to a measured {self.sized_to_ms:g} ms backward"
                 if self.sized_to_ms is not None else "")
        return f"emulated link{name}: {self.gbps:g} Gb/s, α {self.latency_us:g} µs{sized}"

    def model(self, world_size: int) -> "LinkModel":
        """The link's own alpha-beta model for buckets all-reduced by `world_size` ranks."""
        return LinkModel(self, world_size)

    def with_gbps(self, gbps: float) -> "Link":
        """Same latency, another bandwidth (the notebooks' bandwidth slider): no longer the
        preset, nor sized to the backward."""
        return check_link(dataclasses.replace(self, gbps=float(gbps), name="", sized_to_ms=None))


@dataclass(frozen=True)
class LinkModel:
    """t(bytes) = α + wire_bytes/β of one link: what `plot_bucket_timeline` outlines."""

    link: Link
    world_size: int

    def time_ms(self, nbytes: float) -> float:
        return self.link.transfer_ms(nbytes, self.world_size)


def preset(name: str) -> Link:
    """A named link, or a ValueError listing the names."""
    for key, (gbps, latency) in PRESETS.items():
        if key.lower() == str(name).lower():
            return Link(gbps, latency, key)
    raise ValueError(f"unknown link preset {name!r}; choose one of {', '.join(PRESETS)} "
                     f"or 'off' (raw loopback)")


def _finite(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def check_link(link: Link) -> Link:
    """Reject non-finite or non-positive numbers with a message; returns the link."""
    for field, low in (("gbps", 0.0), ("latency_us", -1.0)):
        value = getattr(link, field)
        if not _finite(value) or not value > low or (field == "gbps" and value > 1e5) or value > 1e7:
            bound = "a number > 0 and <= 100000" if field == "gbps" else "a number >= 0 and <= 1e7"
            raise ValueError(f"link {field} must be {bound}, got {value!r}")
    if link.sized_to_ms is not None and not (_finite(link.sized_to_ms) and link.sized_to_ms > 0):
        raise ValueError(f"link sized_to_ms must be None or a number > 0, got {link.sized_to_ms!r}")
    return link


def sized_link(backward_ms: float, gradient_bytes: int, world_size: int, ratio: float = RATIO,
               alpha_fraction: float = ALPHA_FRACTION) -> Link:
    """A link on which all `gradient_bytes` take `ratio` × `backward_ms` to cross (β part,
    ring bytes of `world_size` ranks), and every transfer pays α = `alpha_fraction` ×
    `backward_ms`. The backward is kept to 3 significant digits, and the link is computed
    from that, rounded to 3 significant Gb/s and whole µs, so labels stay short: all
    gradients then take ratio × the (rounded) backward within 0.5 %.

    With B the backward in the run and n buckets ready through it, the link busy past the end
    of backward: one bucket exposes ≈ (ratio + a)·B, n buckets ≈ (ratio + n·a − (n−1)/n)·B.
    So 6 buckets beat one by ≈ (5/6 − 5a)·B and 24 buckets lose ≈ (18a − 1/8)·B to 6: the
    U, on a fast CPU or a slow one alike. Below ratio ≈ 0.53 (of the run's backward) 6 buckets
    hide all of it and their lead over one bucket shrinks to (ratio + a)·B.
    """
    for name, value, low in (("backward_ms", backward_ms, 0.0), ("ratio", ratio, 0.0)):
        if not _finite(value) or not value > low:
            raise ValueError(f"{name} must be a number > 0, got {value!r}")
    if not _finite(alpha_fraction) or not 0 <= alpha_fraction <= 10:
        raise ValueError(f"alpha_fraction must be a number in [0, 10], got {alpha_fraction!r}")
    for name, value, low in (("gradient_bytes", gradient_bytes, 1), ("world_size", world_size, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be a whole number >= {low} (a link carries an all-reduce "
                             f"between ranks), got {value!r}")
    backward_ms = float(f"{backward_ms:.3g}")
    wire_bits = Link(1.0, 0.0).wire_bytes(gradient_bytes, world_size) * 8
    gbps = wire_bits / (ratio * backward_ms / 1e3) / 1e9
    return check_link(Link(float(f"{gbps:.3g}"), float(round(alpha_fraction * backward_ms * 1e3)),
                           "", backward_ms))


def as_link(value) -> Link | None:
    """RunConfig's `link` from what a user or a JSON record gives: None/'off', a preset name,
    a Link, or a dict of its fields."""
    if value is None or (isinstance(value, str) and value.lower() in OFF):
        return None
    if isinstance(value, Link):
        return check_link(value)
    if isinstance(value, str):
        return preset(value)
    if isinstance(value, dict):
        try:
            return check_link(Link(**value))
        except TypeError:
            raise ValueError(f"a link needs gbps and latency_us, got {sorted(value)}") from None
    raise ValueError(f"link must be None, 'off', a preset name ({', '.join(PRESETS)}) or a Link, "
                     f"got {value!r}")


def link_from_options(name: str | None, gbps: float | None, latency_us: float | None) -> Link | None:
    """The command line's `--link NAME --link-gbps G --link-latency-us L` as one link:
    a preset, with either number overriding its own; numbers alone need the bandwidth."""
    base = as_link(name) if name is not None else None
    if name is not None and base is None:
        if gbps is not None or latency_us is not None:
            raise ValueError(f"--link {name} is the raw loopback: drop --link-gbps/--link-latency-us")
        return None
    if base is None:
        if gbps is None:
            if latency_us is not None:
                raise ValueError("--link-latency-us needs --link-gbps or a --link preset")
            return None
        base = Link(gbps, 0.0)
    return check_link(Link(gbps if gbps is not None else base.gbps,
                           latency_us if latency_us is not None else base.latency_us,
                           base.name if gbps is None and latency_us is None else ""))


def describe_link(link: Link | dict | None) -> str:
    """One line for figures and notebooks: what carried the all-reduces."""
    link = as_link(link)
    return "raw loopback (gloo on the same CPU cores: no separate link)" if link is None else link.label()


def describe_sizing(link: Link, gradient_bytes: int, world_size: int) -> str:
    """What a link costs against the backward it was sized to (the notebooks print it)."""
    alpha_ms = link.latency_us / 1e3
    carry_ms = link.transfer_ms(gradient_bytes, world_size) - alpha_ms
    line = f"{link.label()}\nall {gradient_bytes / 2**20:.2f} MiB of gradients take {carry_ms:.1f} ms on it"
    if link.sized_to_ms is None:
        return f"{line}, plus α {alpha_ms:.2f} ms per transfer"
    return (f"{line} ({carry_ms / link.sized_to_ms:.2f}× the backward), plus α {alpha_ms:.2f} ms per "
            f"transfer ({alpha_ms / link.sized_to_ms:.0%} of the backward)")


# A target cluster's reduction: inside a ring all-reduce each rank reduces (N−1)/N of the
# bucket, reading two chunks and writing one, so 3(N−1)/N·S bytes of memory traffic; a GPU does
# it inside the collective's kernel at its memory bandwidth. Bandwidths are the vendors' quoted
# peak figures, not measured here; "none" leaves the reduction uncosted and says so.
REDUCTIONS: dict[str, tuple[float | None, str]] = {
    "A100": (1555.0, "NVIDIA A100 40GB datasheet: HBM2 memory bandwidth 1,555 GB/s (quoted)"),
    "A100-80GB": (2039.0, "NVIDIA A100 80GB SXM datasheet: HBM2e memory bandwidth 2,039 GB/s (quoted)"),
    "H100": (3350.0, "NVIDIA H100 SXM datasheet: HBM3 memory bandwidth 3.35 TB/s (quoted)"),
    "none": (None, "no reduction cost: the reduction is not costed (the wire alone)"),
}


@dataclass(frozen=True)
class Reduction:
    """A target device's reduction throughput inside the collective (None: not costed)."""

    gbytes_per_s: float | None
    name: str
    source: str

    def ms(self, nbytes: float, world_size: int) -> float:
        """3(N−1)/N·S bytes of memory traffic at the device's bandwidth (0 when not costed)."""
        if self.gbytes_per_s is None or world_size < 2:
            return 0.0
        return 3 * (world_size - 1) / world_size * nbytes / (self.gbytes_per_s * 1e9) * 1e3

    def label(self) -> str:
        return self.source if self.gbytes_per_s is None else f"{self.name} reduces at {self.gbytes_per_s:g} GB/s ({self.source})"


def as_reduction(value) -> Reduction:
    """A preset name (`REDUCTIONS`), a `Reduction`, or a dict of its fields."""
    if isinstance(value, Reduction):
        found = value
    elif isinstance(value, dict):
        try:
            found = Reduction(**value)
        except TypeError:
            raise ValueError(f"a reduction needs gbytes_per_s, name and source, got {sorted(value)}") from None
    else:
        key = next((k for k in REDUCTIONS if k.lower() == str(value).lower()), None)
        if key is None:
            raise ValueError(f"unknown reduction {value!r}; choose one of {', '.join(REDUCTIONS)} or a Reduction")
        found = Reduction(REDUCTIONS[key][0], key, REDUCTIONS[key][1])
    if found.gbytes_per_s is not None and not (_finite(found.gbytes_per_s) and found.gbytes_per_s > 0):
        raise ValueError(f"reduction gbytes_per_s must be a number > 0 or None, got {found.gbytes_per_s!r}")
    return found


SIZING_TOLERANCE = 1.5   # a run's backward this far from the one a link was sized to: re-size


def sizing_factor(link: Link, backward_ms: float) -> float | None:
    """A run's backward ÷ the backward `link` was sized to (None: not a sized link)."""
    return None if link.sized_to_ms is None else backward_ms / link.sized_to_ms


def describe_sizing_check(link: Link, backward_ms: float, what: str = "these runs") -> str:
    """Whether a sized link still has the proportion it was sized for, against the backward a
    section measured: within SIZING_TOLERANCE either way it holds; beyond, the line says so
    and what all gradients now take in backwards of `what`."""
    factor = sizing_factor(link, backward_ms)
    if factor is None:
        return (f"the link was not sized to a backward (a preset or typed numbers); the backward of "
                f"{what}: {backward_ms:.1f} ms (median)")
    head = (f"the backward of {what}, {backward_ms:.1f} ms (median), is {factor:.2f}× the "
            f"{link.sized_to_ms:g} ms the link was sized to")
    if 1 / SIZING_TOLERANCE <= factor <= SIZING_TOLERANCE:
        return f"{head}: within {SIZING_TOLERANCE:g}×, the sizing holds"
    return (f"{head}: beyond {SIZING_TOLERANCE:g}×, so the link no longer has the proportion to backward "
            "it was sized for and this section's overlap differs from the lesson's; the machine's load "
            "changed since sizing: re-size it (dpviz.size_link) and run again")


# what a bandwidth slider offers, as multiples of the run's own link: slower ones leave more
# than backward can cover, faster ones little to hide
SLIDER_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0, 10.0)


def slider_gbps(link: Link | None, gbps: Sequence[float] | None = None,
                value: float | None = None) -> tuple[tuple[float, ...], float]:
    """The bandwidths a link slider offers and the one it starts at: by default the link's
    own × SLIDER_FACTORS (3 significant digits: a sized link's bandwidth is no round number),
    starting at the link's own. A clear error for a run with no emulated link."""
    if link is None:
        raise ValueError("cfg has no emulated link: pass cfg.replace(link=dpviz.size_link(cfg, cluster=...)) "
                         "or a preset such as 'classroom'")
    values = tuple(gbps) if gbps is not None else tuple(float(f"{link.gbps * f:.3g}") for f in SLIDER_FACTORS)
    return values, (link.gbps if value is None else value)


def link_note(config: dict) -> str:
    """What carried a record's all-reduces, from its config; '' for records that do not say
    (a loaded trace: dpviz cannot know its interconnect)."""
    return describe_link(config["link"]) if "link" in config else ""
