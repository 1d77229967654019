"""dpviz.widgets.png: the bytes a slider's Image widget shows decode to exactly its pixels."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from dpviz.widgets.png import encode


@pytest.mark.parametrize("channels, mode", [(3, "RGB"), (4, "RGBA")])
def test_encoded_pixels_decode_to_the_same_pixels(channels, mode):
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(37, 53, channels), dtype=np.uint8)   # odd sizes, every value
    decoded = Image.open(io.BytesIO(encode(pixels)))
    assert decoded.mode == mode and decoded.size == (53, 37)
    assert np.array_equal(np.asarray(decoded), pixels)


def test_a_strided_view_is_encoded_as_its_values():
    rgba = np.arange(6 * 5 * 4, dtype=np.uint8).reshape(6, 5, 4)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(encode(rgba[..., :3])))), rgba[..., :3])


@pytest.mark.parametrize("bad", [np.zeros((4, 4, 3), np.float32), np.zeros((4, 4), np.uint8),
                                 np.zeros((4, 4, 2), np.uint8)])
def test_pixels_it_cannot_encode_are_refused(bad):
    with pytest.raises(ValueError, match="uint8"):
        encode(bad)
