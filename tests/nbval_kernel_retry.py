"""A pytest plugin for `make test-notebooks`: a notebook's kernel that dies before its first
reply is started again (at most `TRIES` starts) instead of failing every cell of that notebook.

nbval starts one kernel per notebook and has no retry. On a loaded 2-core CI machine one kernel
died that way ("Kernel died before replying to kernel_info", notebook 02b, all 9 cells errored at
set-up) while the other streams started ranks. A cause that fits, not measured (nbval sends the
kernel's stderr to /dev/null): jupyter_client picks the kernel's five TCP ports by binding and
releasing them, and the kernel binds them again only after its imports, seconds later under load;
gloo and the rendezvous store open ephemeral ports on 127.0.0.1 all the while, and a port taken
in between kills the kernel at start-up. A new start picks new ports. A kernel that fails every
start still fails, with nbval's own error."""
from __future__ import annotations

import warnings

import nbval.plugin
from nbval.kernel import RunningKernel

TRIES = 3


class RetryingKernel(RunningKernel):
    """nbval's kernel, started again when a start fails; a kernel that started but never
    answered on IOPub is stopped first (nbval shuts down one that died itself)."""

    def __init__(self, *args, **kwargs):
        for attempt in range(1, TRIES + 1):
            try:
                super().__init__(*args, **kwargs)
                return
            except RuntimeError as err:
                if hasattr(self, "km"):   # started, but IOPub never answered
                    self.stop()
                if attempt == TRIES:
                    raise
                warnings.warn(f"kernel start {attempt} of {TRIES} failed ({err}); starting it again")


nbval.plugin.RunningKernel = RetryingKernel
