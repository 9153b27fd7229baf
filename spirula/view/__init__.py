"""Seeing the splats: viewers (a window, a web page) and their render sessions."""
