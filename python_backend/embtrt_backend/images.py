"""Images as a CLIP-style model's reference reads them (#53, first part): an encoded file (or a data URI)
-> decoded, upright and RGB as transformers' `load_image` makes it (sentence-transformers' path for an
image given as a path or data URI) -> `pixel_values` [3, H, W] float32 as the model's image processor
computes them with its PIL backend (CLIPImageProcessorPil: resize the shortest edge with the processor's
resample, center crop (zero-padded where the image is smaller), rescale, normalize, channels first).
The torchvision backend resizes differently; the gate pins the PIL one.

Hostile input is refused before it costs: the encoded bytes and the pixel count (read from the header,
before decoding) are bounded, and so is the resized image (a thin image's shortest-edge resize); only the
listed formats decode, a truncated or corrupt file is that item's InputError, and an http(s) URL is never
fetched. Pillow + numpy only; the front door and the gateway use it.
"""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass

import numpy as np

from . import InputError

# an 8 x 8 seeded PNG: a text-and-image model's warm-up image and the readiness probes'
# image (a constant: the gateway and `embtrt probe` decode nothing and need no Pillow)
PROBE_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAgAAAAICAIAAABLbSncAAAA00lEQVR42gHIADf/AEtwnMH9N9kCPR+irVKHCrhoVlPPaMDEVAOY3eLFhbMw5tS/"
    "7tSaLaJO6RkweesEKUUB32qR4awP+rtAdINRPzPZROHAGVX+fNM3AhAYkA1s3xXzWe0Kd/Osq5kFapQ+DcmTTgQoulsTrdplsHD9+Gs5rxMInTwk"
    "akK9fRcDDOEgKTPuaWcF3oWmc8YKIEgdO/f2y9F2BPVYJOOhla5M/rs3TxTwANH9AMuOABWrqwM6BxYOyiRc50f2pSvkY+dW6HANMqwHmXB4HF1y"
    "3kHrCQAAAABJRU5ErkJggg==")

FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "MPO")   # MPO: a camera JPEG with a multi-picture header


@dataclass(frozen=True)
class ImageLimits:
    max_bytes: int = 8 << 20          # an encoded file: 8 MiB (base64 makes it 10.7 MiB of a 16 MiB JSON body)
    max_pixels: int = 36_000_000      # width x height from the header, before decoding (6000 x 6000)
    # every image of one request together, from their headers: what one request may cost in decoding (about 3 s
    # of a core: seven 36-megapixel images, or 21 12-megapixel phone photos)
    max_request_pixels: int = 256_000_000

    @classmethod
    def from_parameters(cls, p: dict[str, str]) -> "ImageLimits":
        """A front door's limits (its `image_max_*` parameters; absent: the defaults)."""
        return cls(int(p.get("image_max_bytes", cls.max_bytes)), int(p.get("image_max_pixels", cls.max_pixels)),
                   int(p.get("image_max_request_pixels", cls.max_request_pixels)))


def from_data_uri(value: str, row: int) -> bytes:
    """A data URI (`data:image/<type>;base64,...`) or bare base64 -> the encoded file's bytes. An http(s) URL
    is refused: images are never fetched by the server."""
    if value.startswith(("http://", "https://")):
        raise InputError(f"row {row}: image URLs are not fetched; send the image as a data URI "
                         "(data:image/png;base64,...)", "input", row)
    payload = value
    if value.startswith("data:"):
        head, sep, payload = value.partition(",")
        if not sep or not head.startswith("data:image/") or not head.endswith(";base64"):
            raise InputError(f"row {row}: a data URI must be data:image/<type>;base64,<data>", "input", row)
    try:   # line breaks (base64's 76-column output) are whitespace, as the reference's decodebytes reads them
        return base64.b64decode("".join(payload.split()), validate=True)
    except (binascii.Error, ValueError):
        raise InputError(f"row {row}: the image is not valid base64", "input", row) from None


def decode(data: bytes, limits: ImageLimits = ImageLimits(), row: int = 0):
    """An encoded file -> a PIL image, upright (its EXIF orientation applied) and RGB, as transformers'
    load_image returns it; an InputError naming the row for anything else."""
    return load(opened(data, limits, row), row)


def opened(data: bytes, limits: ImageLimits = ImageLimits(), row: int = 0):
    """An encoded file's header read (nothing decoded): a lazy PIL image of a listed format within the byte and
    pixel limits, or the InputError naming the row."""
    from PIL import Image, UnidentifiedImageError

    if len(data) > limits.max_bytes:
        raise InputError(f"row {row}: the image file is {len(data)} bytes, over the limit of {limits.max_bytes}",
                         "input", row)
    try:
        img = Image.open(io.BytesIO(data))   # the header only
    except UnidentifiedImageError:
        raise InputError(f"row {row}: not an image ({', '.join(FORMATS)} are decoded)", "input", row) from None
    except Image.DecompressionBombError:   # Pillow's own guard, at twice its MAX_IMAGE_PIXELS: far over ours
        raise InputError(f"row {row}: the image's header claims more pixels than Pillow opens, over the limit of "
                         f"{limits.max_pixels} pixels", "input", row) from None
    except Exception as exc:  # noqa: BLE001 (OSError, ValueError, and what other plugins' header parsers raise:
        # a DDS header with unknown pixel-format flags raises NotImplementedError): this image's fault
        raise InputError(f"row {row}: not a decodable image ({type(exc).__name__}: {exc})", "input", row) from None
    if img.format not in FORMATS:
        raise InputError(f"row {row}: image format {img.format} is not decoded ({', '.join(FORMATS)} are)", "input", row)
    w, h = img.size
    if w * h > limits.max_pixels:
        raise InputError(f"row {row}: the image is {w} x {h} pixels, over the limit of {limits.max_pixels}", "input", row)
    return img


def load(img, row: int = 0):
    """An opened image decoded, upright and RGB; anything it raises (a truncated file, a corrupt EXIF block that
    Pillow's exif_transpose trips on with struct.error or TypeError) is the InputError naming the row."""
    from PIL import ImageOps

    try:
        img.load()
        # as load_image (exif_transpose, then convert RGB), without a copy of the full image at either step: a
        # 36-megapixel image is 108 MB of RGB, and a decode holds one buffer at a time
        ImageOps.exif_transpose(img, in_place=True)
        return img if img.mode == "RGB" else img.convert("RGB")
    except Exception as exc:  # noqa: BLE001 (any decoder failure is this image's fault)
        raise InputError(f"row {row}: the image file is truncated or corrupt ({type(exc).__name__}: {exc})",
                         "input", row) from None


@dataclass(frozen=True)
class ProcessorConfig:
    """An image processor's settings (its preprocessor_config.json), as its PIL backend applies them: a CLIP-style
    shortest-edge resize and center crop, or (`fixed`) a resize to one height and width, the aspect ratio not kept
    (SigLIP's, as ColPali's processor uses it)."""

    shortest_edge: int = 224
    crop: tuple[int, int] = (224, 224)          # (height, width)
    resample: int = 3                           # PIL's BICUBIC
    rescale_factor: float = 1 / 255
    mean: tuple[float, ...] = (0.48145466, 0.4578275, 0.40821073)
    std: tuple[float, ...] = (0.26862954, 0.26130258, 0.27577711)
    do_resize: bool = True
    do_center_crop: bool = True
    do_rescale: bool = True
    do_normalize: bool = True
    fixed: tuple[int, int] | None = None        # (height, width): every image resized to it

    @classmethod
    def from_dict(cls, d: dict) -> "ProcessorConfig":
        size, crop = d.get("size", {}), d.get("crop_size", {})
        if isinstance(size, dict) and "height" in size and "width" in size and "shortest_edge" not in size:
            fixed = (int(size["height"]), int(size["width"]))
            if not d.get("do_resize", True):   # every image must come out one size: the model's
                raise ValueError(f"image processor size {size!r} without do_resize: images of any size are not served")
            crop = (int(crop["height"]), int(crop["width"])) if isinstance(crop, dict) and crop else fixed
            return cls(min(fixed), crop, int(d.get("resample", 3)), float(d.get("rescale_factor", 1 / 255)),
                       tuple(d.get("image_mean", cls.mean)), tuple(d.get("image_std", cls.std)), True,
                       bool(d.get("do_center_crop", False)), bool(d.get("do_rescale", True)),
                       bool(d.get("do_normalize", True)), fixed)
        if not isinstance(size, dict) or "shortest_edge" not in size:
            raise ValueError(f"image processor size {size!r}: a shortest_edge or a height and width resize is served")
        crop = (int(crop["height"]), int(crop["width"])) if isinstance(crop, dict) else (int(crop), int(crop))
        return cls(int(size["shortest_edge"]), crop, int(d.get("resample", 3)), float(d.get("rescale_factor", 1 / 255)),
                   tuple(d.get("image_mean", cls.mean)), tuple(d.get("image_std", cls.std)), bool(d.get("do_resize", True)),
                   bool(d.get("do_center_crop", True)), bool(d.get("do_rescale", True)), bool(d.get("do_normalize", True)))


def resized_size(height: int, width: int, shortest: int) -> tuple[int, int]:
    """The (height, width) a shortest-edge resize gives: the short side to `shortest`, the long side scaled and
    truncated to an int (transformers' get_resize_output_image_size with default_to_square False)."""
    short, long = (width, height) if width <= height else (height, width)
    new_long = int(shortest * long / short)
    return (new_long, shortest) if width <= height else (shortest, new_long)


def center_crop(chw: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """[C, H, W] -> [C, *size]: the center (top/left offset floor((H - h) / 2)); zero-padded around where the
    image is smaller, as transformers' center_crop."""
    c, height, width = chw.shape
    ch, cw = size
    top, left = (height - ch) // 2, (width - cw) // 2
    if top >= 0 and left >= 0:
        return chw[:, top:top + ch, left:left + cw]
    nh, nw = max(ch, height), max(cw, width)
    out = np.zeros((c, nh, nw), dtype=chw.dtype)
    tp, lp = -(-(nh - height) // 2), -(-(nw - width) // 2)   # ceil
    out[:, tp:tp + height, lp:lp + width] = chw
    top, left = top + tp, left + lp
    return out[:, max(0, top):min(nh, top + ch), max(0, left):min(nw, left + cw)]


def pixel_values(img, cfg: ProcessorConfig, limits: ImageLimits = ImageLimits(), row: int = 0) -> np.ndarray:
    """A decoded RGB PIL image -> [3, H, W] float32, as the image processor's PIL backend computes it (its
    convert_to_rgb first: an image whose info still names a transparent colour (a palette PNG's, after
    load_image's RGB conversion) is composited onto white)."""
    if img.info.get("transparency") is not None or "A" in img.getbands():
        from PIL import Image

        rgba = img.convert("RGBA")
        img = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")
    if cfg.do_resize and cfg.fixed is not None:   # the limits bound its size: it is the model's own
        img = img.resize((cfg.fixed[1], cfg.fixed[0]), resample=cfg.resample)
    elif cfg.do_resize:
        h, w = resized_size(img.height, img.width, cfg.shortest_edge)
        if h * w > limits.max_pixels:   # a thin image's resize would (1 x 20000 -> 224 x 4.5M: 3 GB)
            raise InputError(f"row {row}: the image is {img.width} x {img.height} pixels: resized to "
                             f"{cfg.shortest_edge} on its short side it would be {w} x {h}, over the limit of "
                             f"{limits.max_pixels} pixels", "input", row)
        img = img.resize((w, h), resample=cfg.resample)
    chw = np.moveaxis(np.asarray(img), -1, 0)
    if cfg.do_center_crop:
        chw = center_crop(chw, cfg.crop)
    x = chw.astype(np.float64) * cfg.rescale_factor if cfg.do_rescale else chw
    x = x.astype(np.float32)
    if cfg.do_normalize:
        mean, std = np.asarray(cfg.mean, np.float32), np.asarray(cfg.std, np.float32)
        x = ((x.T - mean) / std).T
    return np.ascontiguousarray(x, dtype=np.float32)
