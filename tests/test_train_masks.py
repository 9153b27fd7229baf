"""Loss masks end to end (issue #13 item 4): a COLMAP dataset's ``masks/``
folder is found, checked and downscaled by the loader, and training ignores
what the masks drop: ground truth with garbage under the mask is not learned."""

import json
from pathlib import Path

import numpy as np
import pytest
from data_fixtures import make_truth, write_blender, write_colmap, write_nerfstudio
from PIL import Image
from train_cases import bright_image, random_init

from spirula.data import load_dataset
from spirula.errors import DatasetError
from spirula.train.config import TrainConfig
from spirula.train.trainer import Trainer

H, W = 48, 64
BLOCK = (slice(14, 34), slice(20, 44))  # the garbage region of every image


def _write(root: Path, garbage=True, masks=True, mask_names="{stem}.png") -> Path:
    """The tiny COLMAP scene with pure red garbage in BLOCK of every image
    (the scene itself is bright grey-ish: R - G within +-0.26), masked out."""
    truth = make_truth()
    images = []
    for k in range(len(truth.names)):
        im = bright_image(k)
        if garbage:
            im[BLOCK] = (255, 0, 0)
        images.append(im)
    root = write_colmap(Path(root), truth, binary=True, images=images)
    if masks:
        (root / "masks").mkdir()
        for name in truth.names:
            m = np.full((H, W), 255, np.uint8)
            m[BLOCK] = 0
            Image.fromarray(m).save(root / "masks" / mask_names.format(stem=Path(name).stem, name=name))
    return root


@pytest.mark.parametrize("pattern", ["{stem}.png", "{name}.png"])
def test_loader_finds_masks_beside_the_images(tmp_path, pattern):
    scene = load_dataset(_write(tmp_path / "d", mask_names=pattern))
    m = scene.load_mask(0)
    assert m.dtype == bool and m.shape == (H, W)
    assert not m[BLOCK].any() and m.sum() == H * W - 20 * 24


def test_no_masks_folder_means_no_mask(tmp_path):
    scene = load_dataset(_write(tmp_path / "d", masks=False))
    assert scene.load_mask(0) is None


def test_downscale_downscales_the_masks_alike(tmp_path):
    root = _write(tmp_path / "d")
    m = np.array(Image.open(root / "masks" / "0003.png"))
    m[0, 0] = 0  # one dropped pixel drops the whole 2x2 box it falls in
    Image.fromarray(m).save(root / "masks" / "0003.png")
    scene = load_dataset(root, downscale=2)
    i = [f.name for f in scene.frames].index("0003.png")
    small = scene.load_mask(i)
    assert small.shape == (H // 2, W // 2) == scene.load_image(i).shape[:2]
    want = np.ones((H // 2, W // 2), bool)
    want[7:17, 10:22] = False
    want[0, 0] = False
    np.testing.assert_array_equal(small, want)


def _block_mask(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    m = np.full((H, W), 255, np.uint8)
    m[BLOCK] = 0
    Image.fromarray(m).save(path)


def test_nerfstudio_frames_name_their_masks(tmp_path):
    """nerfstudio's per-frame ``mask_path`` (relative to transforms.json), for the frames that have one."""
    truth = make_truth()
    root = write_nerfstudio(tmp_path / "ns", truth)
    meta = json.loads((root / "transforms.json").read_text())
    meta["frames"][1]["mask_path"] = "my_masks/%s.png" % Path(truth.names[1]).stem
    _block_mask(root / meta["frames"][1]["mask_path"])
    (root / "transforms.json").write_text(json.dumps(meta))
    scene = load_dataset(root)
    names = [f.name for f in scene.frames]
    m = scene.load_mask(names.index(truth.names[1]))
    assert not m[BLOCK].any() and m.sum() == H * W - 20 * 24
    assert scene.load_mask(names.index(truth.names[0])) is None


def test_nerfstudio_mask_path_that_is_missing_is_one_clear_line(tmp_path):
    root = write_nerfstudio(tmp_path / "ns", make_truth())
    meta = json.loads((root / "transforms.json").read_text())
    meta["frames"][2]["mask_path"] = "masks/nope.png"
    (root / "transforms.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError) as e:
        load_dataset(root)
    msg = str(e.value)
    assert "\n" not in msg and "masks/nope.png" in msg and "mask_path" in msg and "transforms.json" in msg


def test_nerfstudio_masks_folder_beside_the_images(tmp_path):
    truth = make_truth()
    root = write_nerfstudio(tmp_path / "ns", truth)
    _block_mask(root / "masks" / truth.names[3])
    scene = load_dataset(root)
    m = scene.load_mask([f.name for f in scene.frames].index(truth.names[3]))
    assert not m[BLOCK].any() and m.sum() == H * W - 20 * 24


def test_blender_masks_folder_in_the_scene(tmp_path):
    """``masks/train/r_001.png`` in a Blender scene's folder: the image's path below the scene."""
    root = write_blender(tmp_path / "bl", make_truth())
    _block_mask(root / "masks" / "train" / "r_001.png")
    scene = load_dataset(root)
    names = [f.name for f in scene.frames]
    m = scene.load_mask(names.index("train/r_001.png"))
    assert not m[BLOCK].any() and m.sum() == H * W - 20 * 24
    assert scene.load_mask(names.index("train/r_002.png")) is None


def test_a_mask_of_the_wrong_size_is_one_clear_line(tmp_path):
    root = _write(tmp_path / "d")
    Image.fromarray(np.zeros((H, W + 1), np.uint8)).save(root / "masks" / "0005.png")
    with pytest.raises(DatasetError) as e:
        load_dataset(root)
    msg = str(e.value)
    assert "\n" not in msg and "masks/0005.png" in msg and "65x48" in msg and "64x48" in msg


def _redness(trainer, scene, views):
    """Mean R - G of the renders inside BLOCK."""
    out = []
    for i in views:
        f = scene.frames[i]
        img = trainer.render(f.viewmat, f.K, size=(f.width, f.height))
        out.append((img[BLOCK][..., 0] - img[BLOCK][..., 1]).mean())
    return float(np.mean(out))


def test_masked_garbage_is_not_learned(device, tmp_path):
    """Without the masks the splats learn the red block (the renders there turn
    red); with them the block's ground truth is ignored and the renders there
    keep the scene's colours (R - G near 0, as the scene around it)."""
    masked = load_dataset(_write(tmp_path / "m"))
    unmasked = load_dataset(_write(tmp_path / "u", masks=False))
    cfg = TrainConfig.from_settings(iterations=150, cap_max=600, sh_degree=1)
    red = {}
    for key, scene in (("masked", masked), ("unmasked", unmasked)):
        trainer = Trainer(scene, cfg, device, init=random_init(300, 1, seed=5))
        for _ in range(150):
            out = trainer.train_step()
            assert np.isfinite(out["loss"])
        red[key] = _redness(trainer, scene, scene.train)
        if key == "masked":
            m = trainer.evaluate()
            assert np.isfinite(m["psnr"])
        trainer.free()
    # where the renders stand between the clean scene (0) and the garbage (1);
    # 150 steps move the unmasked run ~11% of the way (the block sits at
    # another place of the scene in every view, so no splats fit it fully),
    # the masked run stays at the scene (~ -5%: the splats there are fitted
    # by the other views, where that part of the scene is not masked)
    truth = np.mean(
        [(bright_image(k)[BLOCK][..., 0] / 255.0 - bright_image(k)[BLOCK][..., 1] / 255.0) for k in range(12)]
    )
    way = {k: (v - truth) / (1.0 - truth) for k, v in red.items()}
    assert way["unmasked"] > 0.07, way
    assert way["masked"] < 0.02, way


def test_a_mask_for_a_distorted_camera_is_refused(tmp_path):
    """Undistorting (``undistort=True``), the loader undistorts such images into a cache
    but not their masks: one line saying so (spirula sfm writes undistorted images and
    masks). Trained through its lens (the default) the mask matches its image: kept."""
    root = write_colmap(tmp_path / "d", make_truth(), model="OPENCV", params=[60.0, 60.0, 32.0, 24.0, 0.05, 0, 0, 0])
    (root / "masks").mkdir()
    Image.fromarray(np.full((H, W), 255, np.uint8)).save(root / "masks" / "0002.png")
    with pytest.raises(DatasetError) as e:
        load_dataset(root, undistort=True)
    msg = str(e.value)
    assert "\n" not in msg and "masks/0002.png" in msg and "distorted" in msg
    scene = load_dataset(root)
    assert scene.frames[2].model == "OPENCV" and scene.load_mask(2).all()
