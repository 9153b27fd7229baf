"""Seeing the splats: an interactive camera, the viewers' one render path
and headless render session, the native window, the web viewer and the live
training views (docs/viewer.md)."""
