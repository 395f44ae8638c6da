"""Image decoding and preprocessing (#53, first part) against the reference's own path: transformers'
load_image on the same data URI, then CLIP's image processor with its PIL backend (CLIPImageProcessorPil),
pixel_values within 1e-5 on every listed form (JPEG with an EXIF rotation, PNG, WebP, an animated GIF's
first frame, grayscale, RGBA, palette with transparency, 16-bit, an image smaller than the crop, odd
aspect ratios); and each hostile input refused with an InputError naming its row, before decoding where
it could cost."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest

from embtrt_backend import InputError
from embtrt_backend.images import ImageLimits, ProcessorConfig, decode, from_data_uri, pixel_values
from tiny_images import FORMS, encoded_form, pattern, png_header_only


@pytest.mark.parametrize("kind", FORMS)
def test_pixel_values_equal_load_image_and_the_pil_image_processor(kind):
    from transformers.image_utils import load_image
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    data = encoded_form(kind)
    uri = "data:image/png;base64," + base64.b64encode(data).decode()
    want = CLIPImageProcessorPil()(images=[load_image(uri)], return_tensors="np")["pixel_values"][0]
    got = pixel_values(decode(from_data_uri(uri, 0)), ProcessorConfig())
    assert got.shape == want.shape == (3, 224, 224) and got.dtype == np.float32
    assert float(np.abs(got - want).max()) <= 1e-5
    assert float(got.std()) > 0.1   # the image's content, not a constant


def test_the_processor_config_is_read_from_preprocessor_config():
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    proc = CLIPImageProcessorPil(size={"shortest_edge": 64}, crop_size={"height": 48, "width": 56},
                                 image_mean=[0.5, 0.4, 0.3], image_std=[0.2, 0.25, 0.3])
    cfg = ProcessorConfig.from_dict(proc.to_dict())
    img = decode(encoded_form("tall"))
    want = proc(images=[img], return_tensors="np")["pixel_values"][0]
    got = pixel_values(img, cfg)
    assert got.shape == (3, 48, 56) and float(np.abs(got - want).max()) <= 1e-5


@pytest.mark.parametrize("kind", FORMS)
def test_a_fixed_size_resize_equals_siglips_pil_processor(kind):
    """A page-image retriever's preprocessing (#70): SigLIP's PIL processor resizes every image to one height and
    width (the aspect ratio not kept, no crop) and normalizes by 0.5 / 0.5; its settings read from to_dict()."""
    from transformers.image_utils import load_image
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    proc = SiglipImageProcessorPil(size={"height": 48, "width": 40})
    cfg = ProcessorConfig.from_dict(proc.to_dict())
    assert cfg.fixed == (48, 40) and not cfg.do_center_crop
    uri = "data:image/png;base64," + base64.b64encode(encoded_form(kind)).decode()
    want = proc(images=[load_image(uri)], return_tensors="np")["pixel_values"][0]
    got = pixel_values(decode(from_data_uri(uri, 0)), cfg)
    assert got.shape == want.shape == (3, 48, 40) and float(np.abs(got - want).max()) <= 1e-5
    assert float(got.std()) > 0.1
    # a crop after the fixed resize is the processor's too; a fixed size without resizing is refused (pages of any size)
    cropped = SiglipImageProcessorPil(size={"height": 64, "width": 64}, do_center_crop=True,
                                      crop_size={"height": 48, "width": 40})
    want = cropped(images=[load_image(uri)], return_tensors="np")["pixel_values"][0]
    got = pixel_values(decode(from_data_uri(uri, 0)), ProcessorConfig.from_dict(cropped.to_dict()))
    assert got.shape == want.shape == (3, 48, 40) and float(np.abs(got - want).max()) <= 1e-5
    with pytest.raises(ValueError, match="without do_resize"):
        ProcessorConfig.from_dict({**proc.to_dict(), "do_resize": False})


def test_hostile_inputs_are_refused_naming_their_row():
    from PIL import Image

    cases = {
        "not an image": b"this is text, not an image",
        "truncated": encoded_form("png")[:400],
        "over the limit": png_header_only(50_000, 50_000),   # refused from the header: nothing decoded
    }
    tiff = io.BytesIO()
    Image.fromarray(pattern(20, 20, 1)).save(tiff, "TIFF")
    cases["is not decoded"] = tiff.getvalue()
    for needle, data in cases.items():
        with pytest.raises(InputError, match=f"row 3: .*{needle}") as e:
            decode(data, ImageLimits(), row=3)
        assert e.value.row == 3
    thin = io.BytesIO()
    Image.fromarray(pattern(20000, 1, 2)).save(thin, "PNG")   # tiny to send; its resize would be 224 x 4.5M
    with pytest.raises(InputError, match="row 5: .*resized to 224 on its short side it would be 4480000 x 224"):
        pixel_values(decode(thin.getvalue(), row=5), ProcessorConfig(), row=5)
    with pytest.raises(InputError, match="bytes, over the limit"):
        decode(encoded_form("png"), ImageLimits(max_bytes=1000), row=0)
    with pytest.raises(InputError, match="not fetched"):
        from_data_uri("https://example.com/cat.png", 1)
    with pytest.raises(InputError, match="not valid base64"):
        from_data_uri("data:image/png;base64,@@@", 2)
    with pytest.raises(InputError, match="data:image/<type>;base64"):
        from_data_uri("data:text/plain,hello", 0)


def test_a_corrupt_exif_block_is_the_rows_error_never_another_exception():
    """Bits flipped in a JPEG's EXIF block (orientation 6): Pillow's exif_transpose may raise struct.error or
    TypeError on them (load_image fails too); each such file is that row's InputError, never an exception that
    would fail the front door's whole batch."""
    import random
    import warnings

    from PIL import Image

    exif = Image.Exif()
    exif[0x0112], exif[0x010F], exif[0x011A] = 6, "embtrt", 72.0
    buf = io.BytesIO()
    Image.fromarray(pattern(40, 30, 3)).save(buf, "JPEG", exif=exif.tobytes())
    base = buf.getvalue()
    start = base.index(b"Exif\x00\x00") + 6
    refused = decoded = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in range(400):
            r, x = random.Random(seed), bytearray(base)
            for _ in range(3):
                x[start + r.randrange(60)] ^= 1 << r.randrange(8)
            try:
                decode(bytes(x), row=2)
                decoded += 1
            except InputError as exc:
                assert exc.row == 2 and str(exc).startswith("row 2: ")
                refused += 1
    assert refused > 0 and decoded > 0


def test_line_wrapped_base64_is_read_as_the_reference_reads_it():
    data = encoded_form("png")
    wrapped = "data:image/png;base64," + base64.encodebytes(data).decode()   # 76-column lines
    assert "\n" in wrapped and from_data_uri(wrapped, 0) == data


def test_a_request_whose_images_hold_too_many_pixels_is_refused_before_decoding():
    from embtrt_backend.image_core import ImageCore
    from embtrt_backend.options import RequestOptions

    core = ImageCore(ProcessorConfig(), ImageLimits(max_request_pixels=3 * 317 * 211 - 1), 8)
    files = [encoded_form("png")] * 3   # 317 x 211 each
    with pytest.raises(InputError, match="the request's 3 images hold 200661 pixels, over the limit of 200660"):
        core.prepare(files, RequestOptions())
    assert core.prepare(files[:2], RequestOptions()).pixels.shape == (2, 3, 224, 224)
