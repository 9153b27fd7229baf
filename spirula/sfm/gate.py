"""The quality gate on a COLMAP reconstruction, before anything trains on it.

A mapper can "succeed" with poses that are wrong (global mapping registered
every image of a small test with badly wrong poses, issue #13), and training
on them wastes the run. The kept model must pass every threshold below; the
reasons are in docs/sfm.md ("The quality gate").
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_REGISTERED = 3  # fewest images a model can have (two views are a pair, not a scene)
MIN_REGISTERED_FRACTION = 0.5  # of the input images, in the kept model
MAX_REPROJECTION_PX = 2.0  # mean reprojection error of the kept model's points
MIN_TRACK_LENGTH = 2.5  # mean number of images that see each 3D point

# what to try when too few images register, unless the caller knows better
# (spirula/sfm/photos.py, registration_advice: from how the cameras were assigned)
_TRY = "more overlap between images, or --matcher exhaustive"


@dataclass
class Quality:
    """The numbers the gate looks at, of the kept (largest) model."""

    n_images: int  # input images
    n_registered: int  # images with a pose in the kept model
    n_models: int  # models the mapper made
    n_points: int  # 3D points of the kept model
    reprojection_px: float  # mean reprojection error
    track_length: float  # mean track length

    @property
    def registered_fraction(self) -> float:
        return self.n_registered / max(self.n_images, 1)

    def line(self) -> str:
        return "%d/%d images registered (%.0f%%), %d model%s, %s points, reprojection %.2f px, track length %.2f" % (
            self.n_registered,
            self.n_images,
            100 * self.registered_fraction,
            self.n_models,
            "" if self.n_models == 1 else "s",
            format(self.n_points, ","),
            self.reprojection_px,
            self.track_length,
        )

    def failure(self, advice: str | None = None) -> str | None:
        """None when the model passes, else one line: the number that failed and
        what to try (``advice`` for too few images registered or short tracks)."""
        advice = advice or _TRY
        if self.n_registered < MIN_REGISTERED:
            return "only %d of %d images registered (need at least %d); try %s" % (
                self.n_registered,
                self.n_images,
                MIN_REGISTERED,
                advice,
            )
        if self.registered_fraction < MIN_REGISTERED_FRACTION:
            split = " (the images fell into %d separate models)" % self.n_models if self.n_models > 1 else ""
            return "only %d of %d images (%.0f%%) registered in the largest model, need %.0f%%%s; try %s" % (
                self.n_registered,
                self.n_images,
                100 * self.registered_fraction,
                100 * MIN_REGISTERED_FRACTION,
                split,
                advice,
            )
        if not self.reprojection_px <= MAX_REPROJECTION_PX:
            return "mean reprojection error %.2f px is above %.1f px (poses or intrinsics are off); try %s" % (
                self.reprojection_px,
                MAX_REPROJECTION_PX,
                "--camera-model OPENCV (lens distortion), or sharper frames",
            )
        if not self.track_length >= MIN_TRACK_LENGTH:
            return "mean track length %.2f is below %.1f (points seen by too few images); try %s" % (
                self.track_length,
                MIN_TRACK_LENGTH,
                advice,
            )
        return None


def measure(reconstruction, n_images: int, n_models: int) -> Quality:
    """The :class:`Quality` of a pycolmap Reconstruction (None: nothing registered)."""
    if reconstruction is None:
        return Quality(n_images, 0, n_models, 0, float("nan"), float("nan"))
    n_points = reconstruction.num_points3D()
    return Quality(
        n_images=n_images,
        n_registered=reconstruction.num_reg_images(),
        n_models=n_models,
        n_points=n_points,
        reprojection_px=float(reconstruction.compute_mean_reprojection_error()) if n_points else float("nan"),
        track_length=float(reconstruction.compute_mean_track_length()) if n_points else 0.0,
    )
