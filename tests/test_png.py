"""dpviz.widgets.png: the bytes a slider's Image widget shows decode to exactly its pixels."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from dpviz.widgets.png import encode_rgba


def _decoded(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data))


def test_opaque_pixels_are_sent_as_rgb_and_decode_to_the_same_pixels():
    rng = np.random.default_rng(0)
    rgba = rng.integers(0, 256, size=(37, 53, 4), dtype=np.uint8)   # odd sizes, every value
    rgba[..., 3] = 255
    image = _decoded(encode_rgba(rgba))
    assert image.mode == "RGB" and image.size == (53, 37)
    assert np.array_equal(np.asarray(image), rgba[..., :3])


def test_pixels_with_any_transparency_keep_their_alpha():
    rgba = np.random.default_rng(1).integers(0, 256, size=(5, 7, 4), dtype=np.uint8)
    rgba[..., 3] = 255
    rgba[2, 3, 3] = 254
    image = _decoded(encode_rgba(rgba))
    assert image.mode == "RGBA" and np.array_equal(np.asarray(image), rgba)


def test_a_strided_view_is_encoded_as_its_values():
    big = np.random.default_rng(2).integers(0, 256, size=(9, 12, 4), dtype=np.uint8)
    view = big[::2, ::3]
    assert np.array_equal(np.asarray(_decoded(encode_rgba(view)).convert("RGBA")), view)


@pytest.mark.parametrize("bad", [np.zeros((4, 4, 4), np.float32), np.zeros((4, 4), np.uint8),
                                 np.zeros((4, 4, 3), np.uint8)])
def test_pixels_it_cannot_encode_are_refused(bad):
    with pytest.raises(ValueError, match="uint8 RGBA"):
        encode_rgba(bad)


def test_without_isal_zlib_deflates_the_same_pixels():
    """isal is optional: without it the PNG is deflated by zlib and decodes the same."""
    import subprocess
    import sys

    code = """
import importlib.abc, sys
class NoIsal(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "isal" or name.startswith("isal."):
            raise ImportError("isal is blocked")
sys.meta_path.insert(0, NoIsal())
import io, zlib
import numpy as np
from PIL import Image
from dpviz.widgets import png
assert png._deflater is zlib
rgba = np.random.default_rng(1).integers(0, 256, size=(20, 30, 4), dtype=np.uint8)
rgba[..., 3] = 255
assert (np.asarray(Image.open(io.BytesIO(png.encode_rgba(rgba)))) == rgba[..., :3]).all()
print("zlib ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "zlib ok" in done.stdout, done.stderr[-2000:]
