"""spirula/view/camera.py: the interactive camera's controls keep what they
promise, and its matrices follow the project's conventions (OpenCV
world->camera, pixel centres at +0.5)."""

import numpy as np
import pytest

from spirula.view.camera import Camera, CameraPath, look_rotation, scene_up

# the camera's maths is float64 on O(1) numbers: a few ulps per operation
EPS = 1e-9


def cam():
    c = Camera.fit(np.random.default_rng(1).normal(0, 1, (500, 3)) + [3, -2, 1], up=(0, 0, 1))
    c.orbit(0.3, 0.2)
    return c


def is_rotation(R):
    return np.allclose(R.T @ R, np.eye(3), atol=EPS) and np.isclose(np.linalg.det(R), 1.0, atol=EPS)


def test_viewmat_maps_the_eye_to_the_origin_and_the_target_straight_ahead():
    c = cam()
    vm = c.viewmat()
    assert is_rotation(vm[:3, :3]) and np.allclose(vm[3], [0, 0, 0, 1])
    assert np.allclose(vm @ np.append(c.eye, 1), [0, 0, 0, 1], atol=EPS)
    # OpenCV: the target lies on +z at the orbit distance
    assert np.allclose(vm @ np.append(c.target, 1), [0, 0, c.distance, 1], atol=1e-8)


def test_K_puts_the_principal_point_at_the_image_centre():
    c = cam()
    K = c.K(640, 360)
    assert (K[0, 2], K[1, 2]) == (320.0, 180.0)  # pixel centres at +0.5: W/2 is the middle
    assert K[0, 0] == K[1, 1]
    # the top edge of the image is fov_y/2 above the axis
    assert np.isclose(np.degrees(2 * np.arctan(180 / K[1, 1])), c.fov_y)


def test_orbit_keeps_the_distance_to_the_target():
    c = cam()
    target, d = c.target.copy(), np.linalg.norm(c.eye - c.target)
    for yaw, pitch in [(0.5, 0.0), (0.0, -0.4), (2.0, 1.0), (-1.3, 0.2)]:
        c.orbit(yaw, pitch)
        assert np.allclose(c.target, target)
        assert np.isclose(np.linalg.norm(c.eye - c.target), d, rtol=EPS)
        assert is_rotation(c.rotation)


def test_orbit_yaw_turns_about_the_world_up():
    c = cam()
    height = c.eye @ c.up
    c.orbit(1.0, 0.0)
    assert np.isclose(c.eye @ c.up, height, atol=1e-8)


def test_pan_moves_target_and_eye_together():
    c = cam()
    eye, target, R = c.eye.copy(), c.target.copy(), c.rotation.copy()
    c.pan(0.1, -0.05)
    moved = c.eye - eye
    assert np.allclose(c.target - target, moved, atol=EPS)
    assert np.linalg.norm(moved) > 0
    assert np.isclose(moved @ R[:, 2], 0, atol=1e-8)  # sideways only: no dolly
    assert np.array_equal(c.rotation, R)


def test_dolly_moves_the_eye_along_the_view_axis_only():
    c = cam()
    eye, target = c.eye.copy(), c.target.copy()
    c.dolly(0.5)
    assert np.allclose(c.target, target)
    step = c.eye - eye
    assert np.allclose(np.cross(step, c.rotation[:, 2]), 0, atol=1e-8)
    assert np.isclose(np.linalg.norm(c.eye - c.target), 0.5 * np.linalg.norm(eye - target))
    c.dolly(1e-12)
    assert c.distance > 0  # never through the target


def test_fly_forward_moves_along_the_view_direction():
    c = cam()
    eye = c.eye.copy()
    c.fly(0, 0, 1.0)
    assert np.allclose(c.eye - eye, c.scale * c.rotation[:, 2], atol=1e-8)


def test_look_turns_in_place():
    c = cam()
    eye = c.eye.copy()
    c.look(0.4, -0.3)
    assert np.allclose(c.eye, eye, atol=1e-8)


def test_zoom_changes_the_field_of_view_within_bounds():
    c = cam()
    c.zoom(0.5)
    assert np.isclose(c.fov_y, 25.0)
    c.zoom(1e-3)
    assert c.fov_y == 5.0
    c.zoom(1e6)
    assert c.fov_y == 150.0


def test_fit_sees_the_splats_in_front():
    pts = np.random.default_rng(2).normal(0, 1, (1000, 3)) + [10, 0, 0]
    c = Camera.fit(pts, up=(0, 0, 1))
    cam_pts = (c.viewmat() @ np.c_[pts, np.ones(len(pts))].T).T
    assert (cam_pts[:, 2] > 0).mean() > 0.99
    K = c.K(800, 600)
    uv = cam_pts[:, :2] / cam_pts[:, 2:3] * K[0, 0] + K[:2, 2]
    inside = ((uv >= 0) & (uv <= [800, 600])).all(1)
    assert inside.mean() > 0.85
    assert c.eye[2] > 0  # from above


@pytest.mark.parametrize("seed", [0, 1])
def test_a_dataset_view_is_reproduced_exactly(seed):
    rng = np.random.default_rng(seed)
    R = look_rotation(rng.normal(0, 1, 3), (0, 0, 1))
    vm = np.eye(4)
    vm[:3, :3] = R.T
    vm[:3, 3] = -R.T @ rng.normal(0, 3, 3)
    K = np.array([[300.0, 0, 160], [0, 300.0, 120], [0, 0, 1]])
    c = Camera.from_view(vm, K, 240, up=(0, 0, 1), distance=2.0)
    assert np.allclose(c.viewmat(), vm, atol=1e-9)
    assert np.allclose(c.K(320, 240), K)


def test_camera_path_steps_through_the_views_and_finds_up():
    vms = []
    for a in np.linspace(0, 2 * np.pi, 8, endpoint=False):
        eye = np.array([3 * np.cos(a), 3 * np.sin(a), 1.0])
        R = look_rotation(-eye, (0, 0, 1))
        vm = np.eye(4)
        vm[:3, :3], vm[:3, 3] = R.T, -R.T @ eye
        vms.append(vm)
    K = np.array([[100.0, 0, 80], [0, 100.0, 60], [0, 0, 1]])
    path = CameraPath(vms, [K] * 8, [120] * 8)
    assert np.allclose(scene_up(vms), [0, 0, 1], atol=1e-9)  # each tilts ~18 degrees; around the circle they cancel
    assert np.allclose(path.camera().viewmat(), vms[0])
    assert np.allclose(path.step(1).viewmat(), vms[1])
    assert np.allclose(path.step(-2).viewmat(), vms[7])  # wraps around
    assert np.isclose(path.scale, 3.0)
