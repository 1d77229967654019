"""The front: the `dpviz` command (`cli`, one module per command in `commands/`, their shared
arguments in `args`), the tour and the course site (`notebooks`, `book`), manim scenes' base and
their export (`scene`, `animate`, `export`), the trace report page and the GPU check."""
