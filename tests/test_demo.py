"""The generated demo scene (spirula/data/demo.py): the COLMAP model it writes
holds the poses its images were ray-traced from."""

import numpy as np

from spirula.data.demo import _qvec, cameras
from spirula.data.scene import qvec_to_rotmat


def test_every_camera_rotation_survives_the_quaternion():
    """Views whose rotation is a half-turn (trace -1: view 12 looks along -y
    with the floor's "down" axis) are where w = 0 and the w-based formula
    divides by ~0."""
    viewmats, _ = cameras()
    wrong = [
        v for v, vm in enumerate(viewmats) if not np.allclose(qvec_to_rotmat(_qvec(vm[:3, :3])), vm[:3, :3], atol=1e-9)
    ]
    assert wrong == []


def test_half_turns_give_their_quaternion():
    half_turns = [
        np.diag([1.0, -1, -1]),
        np.diag([-1.0, 1, -1]),
        np.diag([-1.0, -1, 1]),
        np.array([[0.0, 1, 0], [1, 0, 0], [0, 0, -1]]),
    ]
    wrong = [R.tolist() for R in half_turns if not np.allclose(qvec_to_rotmat(_qvec(R)), R, atol=1e-9)]
    assert wrong == []


def test_loaded_demo_cameras_are_the_rendered_ones():
    from spirula.data import load_dataset
    from spirula.data.demo import ensure_demo_scene

    scene = load_dataset(ensure_demo_scene())
    viewmats, K = cameras()
    wrong = [f.name for f in scene.frames if not np.allclose(f.viewmat, viewmats[int(f.name[:4])], atol=1e-6)]
    assert wrong == []
    for f in scene.frames:
        np.testing.assert_allclose(f.K, K, atol=1e-9)
