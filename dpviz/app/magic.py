"""The `%ranks` / `%%ranks` magic: warm ranks for a notebook, and cells run on all of them.

    %load_ext dpviz
    %ranks 2                  start (or resize to) 2 ranks; `%ranks stop` stops them
    %%ranks [--rank 0,1] [--timeout 5] [--record [NAME]]
    t = torch.ones(3) * (rank + 1)
    dist.all_reduce(t)
    t.tolist()

Each rank's output comes back prefixed `[rank]`. A failure is raised in the kernel with the
rank and the cell's own failing line, a hang ends at `--timeout` naming who waited where;
`--record` draws the cell's timeline and keeps its record in `_` (or NAME). The cell body is
plain Python (no IPython syntax): it runs on the ranks, not in the kernel.
"""
from __future__ import annotations

import sys

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from dpviz.lessons.cells.records import DEFAULT_TIMEOUT_S


@magics_class
class RanksMagics(Magics):
    """`%ranks N | stop` and `%%ranks` cells, on one set of warm ranks per kernel."""

    def __init__(self, shell):
        from dpviz.engine.launch import prewarm_forkserver

        super().__init__(shell)
        self.cells = None   # a cells.live.CellRanks once `%ranks N` started some
        prewarm_forkserver()   # torch imported out of the kernel while the learner reads on

    @magic_arguments()
    @argument("size", nargs="?", help="line: N to start or resize to N ranks, 'stop' to stop them")
    @argument("--rank", help="cell: run on these ranks only (e.g. 1 or 0,2)")
    @argument("--timeout", default=str(DEFAULT_TIMEOUT_S),
              help=f"cell: seconds before a hang is stopped (default {DEFAULT_TIMEOUT_S:g})")
    @argument("--record", nargs="?", const="_", metavar="NAME",
              help="cell: profile it, draw its timeline, keep its record in _ or NAME")
    @line_cell_magic
    def ranks(self, line: str, cell: str | None = None):
        """Warm ranks (`%ranks N`, `%ranks stop`) and cells run on them (`%%ranks`)."""
        args = parse_argstring(self.ranks, line)
        if cell is None:
            return self._line(args)
        if args.size is not None:
            raise UsageError("%%ranks takes options only; start ranks first with %ranks N")
        return self._cell(args, cell)

    def _line(self, args) -> None:
        if args.size is None:
            up = f"{self.cells.world_size} ranks, pids {self.cells.cluster.pids()}" if self.cells else "no ranks"
            print(f"%ranks: {up}")
        elif args.size == "stop":
            self.stop()
        else:
            self.start(size_of(args.size))

    def start(self, size: int) -> None:
        """Start `size` ranks, replacing ranks of another size."""
        from dpviz.lessons.cells.live import CellRanks

        if self.cells is not None and self.cells.world_size == size:
            print(f"%ranks: {size} ranks already up")
            return
        self.stop()
        ranks = CellRanks(size)
        seconds = ranks.start()
        self.cells = ranks
        print(f"%ranks: {size} ranks up in {seconds:.1f} s (gloo on 127.0.0.1)")

    def stop(self) -> None:
        """Stop the ranks, if any are up."""
        cells, self.cells = self.cells, None
        if cells is not None:
            cells.close()

    def _cell(self, args, cell: str) -> None:
        from dpviz.lessons.cells.live import check_ranks, check_timeout

        if self.cells is None:
            raise UsageError("no ranks are up: start them with %ranks N (e.g. %ranks 2)")
        try:
            ranks = check_ranks(rank_list(args.rank), self.cells.world_size) if args.rank else None
            timeout_s = check_timeout(number(args.timeout, "--timeout"))
        except ValueError as err:
            raise UsageError(str(err)) from None
        if args.record is not None and not args.record.isidentifier():
            raise UsageError(f"--record NAME must be a Python name, got {args.record!r}")
        record = self.cells.run(cell, ranks, timeout_s, record=args.record is not None)
        show(record)
        if args.record is not None:
            self.shell.user_ns[args.record] = record
            draw(record)
        if record.failures:
            from dpviz.lessons.cells.records import CellError

            raise CellError(record.failures)


def size_of(text: str) -> int:
    """`%ranks N`'s N, checked for this machine before anything starts."""
    from dpviz.core.config import validate_world_size

    try:
        return validate_world_size(int(text) if text.lstrip("-").isdigit() else text)
    except ValueError as err:
        raise UsageError(f"%ranks N: {err}; or %ranks stop") from None


def rank_list(text: str) -> list[int]:
    """'0,2' → [0, 2]; a word that is no rank number is a clear error."""
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"--rank takes rank numbers separated by commas (e.g. 0,1), got {text!r}") from None


def number(text: str, option: str) -> float:
    """An option's number of seconds (`check_timeout` says which are allowed)."""
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{option} must be a number of seconds, got {text!r}") from None


def show(record) -> None:
    """Each rank's output, then its last expression's value, every line prefixed `[rank]`."""
    for rank in record.ranks:
        text = record.outputs[rank] + (record.values[rank] + "\n" if rank in record.values else "")
        for line in text.splitlines():
            print(f"[{rank}] {line}")
    sys.stdout.flush()


def draw(record) -> None:
    """The recorded cell's timeline, shown now (and closed, so pyplot does not show it twice)."""
    import matplotlib.pyplot as plt
    from IPython.display import display

    from dpviz.lessons.cells.plots import plot_cell
    from dpviz.lessons.cells.records import describe_cell

    print(describe_cell(record))
    if record.spans:
        ax = plot_cell(record)
        display(ax.figure)
        plt.close(ax.figure)
