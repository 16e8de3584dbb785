# SPDX-License-Identifier: MIT
"""Images decoded in the daemon: Loader(decode={"data": Image(...)}).

batchd decodes a bytes field (JPEG, PNG or WebP) on its own threads and
hands the trainer a uint8 tensor: the transforms are torchvision's, so a
recipe carries over unchanged (docs/images.md):

    Image(224)                                  RandomResizedCrop(224) +
                                                RandomHorizontalFlip(0.5)
    Image(224, crop="center", resize=256)       Resize(256) + CenterCrop(224)

Every random choice is a function of (seed, epoch, sample id): the same
sample gets the same crop in every run, on every rank and after a resume.
Normalisation stays the trainer's, on the GPU:

    x = batch.torch("data").cuda().float().div_(255).sub_(mean).div_(std)
"""
import dataclasses

CROPS = {"random-resized": 1, "center": 2}
LAYOUTS = ("NCHW", "NHWC")


@dataclasses.dataclass(frozen=True)
class Image:
    """What the daemon makes of an image field.

    size: the output's side (an int) or (height, width).
    crop: "random-resized" (torchvision's RandomResizedCrop(size, scale,
        ratio)) or "center" (Resize(resize) then CenterCrop(size)).
    resize: "center" only: the short side before the crop (default: the
        crop's larger side).
    flip: probability of a horizontal flip (default 0.5 for random-resized,
        0 for center).
    scale, ratio: RandomResizedCrop's (area fraction, aspect ratio) ranges.
    layout: "NCHW" ([B, 3, H, W], default) or "NHWC" ([B, H, W, 3]).
    on_error: "fail" (default): a bad image (corrupt, truncated, too
        large, not an image) fails its batch, raising BatchError naming the
        sample; "skip": it is left out of its batch, which comes smaller,
        with its id in batch.skipped (and the daemon counts it).
    """

    size: object = 224
    crop: str = "random-resized"
    resize: int = None
    flip: float = None
    scale: tuple = (0.08, 1.0)
    ratio: tuple = (3.0 / 4.0, 4.0 / 3.0)
    layout: str = "NCHW"
    on_error: str = "fail"

    def __post_init__(self):
        h, w = (self.size, self.size) if isinstance(self.size, int) else tuple(self.size)
        for v in (h, w):
            if not isinstance(v, int) or not 1 <= v <= 8192:
                raise ValueError(f"Image size {self.size!r}: each side must be an int in 1 .. 8192")
        if self.crop not in CROPS:
            raise ValueError(f"Image crop {self.crop!r}: use one of {sorted(CROPS)}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"Image layout {self.layout!r}: use 'NCHW' or 'NHWC'")
        if self.on_error not in ("fail", "skip"):
            raise ValueError(f"Image on_error {self.on_error!r}: use 'fail' or 'skip'")
        if self.resize is not None and self.crop != "center":
            raise ValueError("Image resize applies to crop='center' only")
        if self.resize is not None and not (isinstance(self.resize, int)
                                            and max(h, w) <= self.resize <= 65535):
            raise ValueError(f"Image resize {self.resize!r} must be an int from the crop's "
                             f"larger side ({max(h, w)}) to 65535")
        flip = self.flip if self.flip is not None else (0.5 if self.crop != "center" else 0.0)
        if not 0.0 <= flip <= 1.0:
            raise ValueError(f"Image flip {self.flip!r} is not a probability")
        s0, s1 = self.scale
        r0, r1 = self.ratio
        if not 0 < s0 <= s1 <= 1:
            raise ValueError(f"Image scale {self.scale!r} must be 0 < min <= max <= 1")
        if not 0 < r0 <= r1 <= 100:
            raise ValueError(f"Image ratio {self.ratio!r} must be 0 < min <= max <= 100")
        object.__setattr__(self, "_hw", (h, w))
        object.__setattr__(self, "_flip", flip)

    @property
    def shape(self):
        """One sample's tensor shape: (3, H, W) or (H, W, 3)."""
        h, w = self._hw
        return (3, h, w) if self.layout == "NCHW" else (h, w, 3)

    @property
    def nbytes(self):
        """Bytes of one sample's tensor."""
        return 3 * self._hw[0] * self._hw[1]

    def fill(self, field, d):
        """Write this spec for field into d, a _lib.DecodeOpts."""
        d.field = field.encode()
        d.height, d.width = self._hw
        d.crop = CROPS[self.crop]
        d.resize = self.resize or 0
        d.scale_min, d.scale_max = (float(v) for v in self.scale)
        d.ratio_min, d.ratio_max = (float(v) for v in self.ratio)
        d.flip = float(self._flip)
        d.nhwc = self.layout == "NHWC"
        d.skip_bad = self.on_error == "skip"


def parse(decode):
    """Loader(decode=...) as (field, Image) or None; ValueError saying why."""
    if decode is None:
        return None
    if not isinstance(decode, dict) or len(decode) != 1:
        raise ValueError("decode must be a dict of one field name to a batchclient.Image "
                         "(one image field a session)")
    (field, spec), = decode.items()
    if not isinstance(field, str) or not isinstance(spec, Image):
        raise ValueError(f"decode={{{field!r}: {spec!r}}}: a field name to a batchclient.Image")
    return field, spec
