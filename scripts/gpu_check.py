"""`make gpu-check`: dpviz's CUDA paths end to end where torch sees a GPU, their CPU equivalents
elsewhere (CI runs it so); writes gpu-check.json and gpu-check.txt (see dpviz/app/gpu_check/live.py).

    python scripts/gpu_check.py [--out out/gpu-check]

Exit status 0 when every check passed; the time is reported beside its budget (8 min with
CUDA, 2 without).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # this checkout's dpviz, installed or not

from dpviz.app.gpu_check.live import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
