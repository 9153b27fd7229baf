"""Rendered frames out to files: a video (PyAV) or numbered PNGs.

Frames are [H,W,3] float32 linear 0..1 (a render); each is clamped and
quantized once, ``rint(255 x)``, as ``spirula render`` writes PNGs. Videos
use H.264 (``libx264``) where the PyAV wheel's FFmpeg has it, else MPEG-4
part 2, in yuv420p (what every player decodes), which needs even sizes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from spirula.errors import UsageError

VIDEO_CODECS = ("libx264", "mpeg4")  # the first the FFmpeg build can encode
CRF = 18  # libx264 quality: visually lossless for renders (the docs' 17-18)
MPEG4_BITS_PER_PIXEL = 0.5  # mpeg4's bit rate per pixel per frame: few visible blocks on renders


def to_uint8(image) -> np.ndarray:
    """[H,W,3] float 0..1 -> uint8, clamped, rounded to nearest."""
    return np.rint(np.clip(np.asarray(image, np.float32), 0, 1) * 255).astype(np.uint8)


def check_writable(path: Path, what: str, folder: bool = False) -> Path:
    """``path`` (a file, or a folder with ``folder``) can be written: its folder
    exists or can be made, and is writable; else a one-line UsageError."""
    path = Path(path)
    target = path if folder else path.parent
    try:
        target.mkdir(parents=True, exist_ok=True)
        if folder and not path.is_dir():
            raise NotADirectoryError("not a folder")
        probe = target / (".spirula-write-test-%d" % id(path))
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UsageError("%s %s: cannot write there (%s)" % (what, path, exc.strerror or exc)) from None
    if not folder and path.is_dir():
        raise UsageError("%s %s: is a folder, expected a file name" % (what, path))
    return path


def pick_codec() -> str:
    import av

    for name in VIDEO_CODECS:
        try:
            av.codec.Codec(name, "w")
            return name
        except Exception:  # av.codec.codec.UnknownCodecError and kin
            continue
    raise UsageError("this PyAV build encodes none of %s" % ", ".join(VIDEO_CODECS))


class VideoWriter:
    """An MP4 (or whatever the suffix says FFmpeg writes) of ``width`` x
    ``height`` frames at ``fps``; sizes must be even (yuv420p)."""

    def __init__(self, path, width: int, height: int, fps: float, codec: str | None = None):
        import av

        if width % 2 or height % 2:
            raise UsageError("--video needs even sizes (yuv420p), got %dx%d" % (width, height))
        self.path = Path(path)
        self.codec = codec or pick_codec()
        try:
            self.container = av.open(str(self.path), mode="w")
        except (av.FFmpegError, ValueError) as exc:
            raise UsageError("--video %s: cannot write a video there (%s)" % (path, exc)) from None
        from fractions import Fraction

        self.stream = self.container.add_stream(self.codec, rate=Fraction(fps).limit_denominator(1000))
        self.stream.width, self.stream.height, self.stream.pix_fmt = width, height, "yuv420p"
        if self.codec == "libx264":
            self.stream.options = {"crf": str(CRF)}
        else:
            self.stream.bit_rate = int(MPEG4_BITS_PER_PIXEL * width * height * fps)
        self.frames = 0

    def write(self, image):
        import av

        frame = av.VideoFrame.from_ndarray(to_uint8(image), format="rgb24")
        for packet in self.stream.encode(frame):
            self.container.mux(packet)
        self.frames += 1

    def close(self):
        for packet in self.stream.encode():
            self.container.mux(packet)
        self.container.close()


class ImageWriter:
    """``folder/00000.png``, ``00001.png``, ...: one PNG per frame."""

    def __init__(self, folder, digits: int = 5):
        self.folder = Path(folder)
        self.digits = digits
        self.frames = 0

    def write(self, image) -> Path:
        from PIL import Image

        path = self.folder / ("%0*d.png" % (self.digits, self.frames))
        Image.fromarray(to_uint8(image)).save(path)
        self.frames += 1
        return path

    def close(self):
        pass
