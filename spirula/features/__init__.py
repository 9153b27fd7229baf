"""Image features on the GPU: SIFT as COLMAP's CPU extractor computes it (docs/sfm.md)."""

from spirula.features.sift import SiftExtractor, SiftOptions, extract_features

__all__ = ["SiftExtractor", "SiftOptions", "extract_features"]
