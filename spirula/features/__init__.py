"""Image features on the GPU: SIFT and its matching as COLMAP's CPU extractor and matcher compute them (docs/sfm.md)."""

from spirula.features.match import DescriptorMatcher, MatchOptions, match_features
from spirula.features.sift import SiftExtractor, SiftOptions, extract_features

__all__ = ["DescriptorMatcher", "MatchOptions", "SiftExtractor", "SiftOptions", "extract_features", "match_features"]
