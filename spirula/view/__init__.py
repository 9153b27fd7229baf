"""Seeing the splats: an interactive camera, a headless render session, the
native window and the live training view (docs/viewer.md)."""
