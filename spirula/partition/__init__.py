"""Partitioned training of large scenes (docs/partition.md): split a dataset
into spatial blocks with overlap (:mod:`.blocks`), write each as a dataset
(:mod:`.write`), train the blocks as Ray tasks (:mod:`.ray_run`), keep each
block's core splats, merge and fine-tune (:mod:`.merge`); :mod:`.pipeline`
runs the stages in order."""
