"""Image features on the GPU: SIFT and its matching as COLMAP's CPU extractor and matcher compute them (docs/sfm.md)."""

from spirula.features import match as _match
from spirula.features import sift as _sift
from spirula.features.match import DescriptorMatcher, MatchOptions, match_features
from spirula.features.sift import SiftExtractor, SiftOptions, extract_features


def release(device) -> None:
    """Free the buffers of the extractors and matchers kept for ``device`` (after the last image)."""
    _sift.release(device)
    _match.release(device)


__all__ = [
    "DescriptorMatcher",
    "MatchOptions",
    "SiftExtractor",
    "SiftOptions",
    "extract_features",
    "match_features",
    "release",
]
