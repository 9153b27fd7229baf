"""From a video or a folder of photos to a dataset: frames (frames.py), ..."""
