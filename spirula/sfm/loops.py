"""Loop candidates for video frames, without a downloaded vocabulary.

Sequential matching pairs each frame with its next few (spirula/sfm/colmap.py);
a video that comes back to where it started (an orbit, a walk around a
room) then never matches its end with its start, and the model drifts or
splits. COLMAP's own loop detection needs a vocabulary tree file that is
not shipped, so the candidates are found here, from the SIFT descriptors
already in the database:

- a **global descriptor** per image: VLAD (the residuals of the image's
  RootSIFT descriptors to their nearest of :data:`WORDS` centres, summed per
  centre, power- and intra-normalised), the centres clustered (k-means) from
  this very capture's descriptors, so nothing is downloaded;
- for each image, its :data:`PER_IMAGE` most similar images (cosine) among
  those more than ``gap`` frames away: the sequential window already matched
  the near ones.

Geometric verification then keeps the true pairs and drops the rest; the
cost is ``PER_IMAGE`` pairs an image, against the 10-16 of sequential
matching. :func:`loop_pairs` returns the pairs; colmap.py matches them.

The same descriptor picks the pairs of a photo set too large for exhaustive
matching (:func:`retrieval_pairs`: each photo's :data:`RETRIEVAL_PER_IMAGE`
most similar, whatever their order), where COLMAP would use its vocabulary tree.
"""

from __future__ import annotations

import numpy as np

WORDS = 64  # VLAD centres: 64 x 128 = 8,192 numbers an image
PER_IMAGE = 3  # loop candidates an image proposes (the pairs are the union, both ways)
# retrieval for photo sets past exhaustive matching's size (colmap.MAX_EXHAUSTIVE): the images
# an image is matched with. hloc's retrieval pipelines match 20-50 a photo with NetVLAD; this
# VLAD of the capture's own SIFT is a weaker descriptor, so the upper end
RETRIEVAL_PER_IMAGE = 40
SAMPLE = 800  # descriptors an image contributes (a random subset: the descriptor is statistical)
KMEANS_SAMPLE = 20_000  # descriptors the centres are clustered from
KMEANS_ITERATIONS = 12
SEED = 0


def root_sift(d: np.ndarray) -> np.ndarray:
    """RootSIFT (Arandjelovic & Zisserman 2012): L1-normalised, square-rooted
    SIFT descriptors, whose Euclidean distance is the Hellinger kernel."""
    d = np.asarray(d, np.float32)
    return np.sqrt(d / np.maximum(d.sum(1, keepdims=True), 1e-6))


def kmeans(x: np.ndarray, k: int, iterations: int = KMEANS_ITERATIONS, seed: int = SEED) -> np.ndarray:
    """``[k, D]`` centres of the rows of ``x`` (Lloyd's algorithm from ``k``
    random rows; an emptied centre is moved to a random row)."""
    rng = np.random.default_rng(seed)
    k = min(k, len(x))
    c = x[rng.choice(len(x), k, replace=False)].copy()
    for _ in range(iterations):
        a = nearest(x, c)
        for j in range(k):
            members = x[a == j]
            c[j] = members.mean(0) if len(members) else x[rng.integers(len(x))]
    return c


def nearest(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Index of the nearest row of ``c`` for each row of ``x``."""
    return np.argmin((c * c).sum(1)[None, :] - 2.0 * x @ c.T, axis=1)


def vlad(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The VLAD vector (``[k * D]``, unit length) of descriptors ``x`` for centres ``c``."""
    k, dim = c.shape
    v = np.zeros((k, dim), np.float32)
    if len(x):
        np.add.at(v, nearest(x, c), x - c[nearest(x, c)])
    v = np.sign(v) * np.sqrt(np.abs(v))  # power normalisation: bursts of one pattern count less
    v /= np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)  # intra-normalisation
    v = v.ravel()
    return v / max(float(np.linalg.norm(v)), 1e-12)


def global_descriptors(descriptors: list, seed: int = SEED) -> np.ndarray:
    """``[n, WORDS * 128]`` unit VLAD vectors of the images whose SIFT
    descriptors (uint8 ``[N_i, 128]``) are given, the centres clustered from them."""
    rng = np.random.default_rng(seed)
    subsets = []
    for d in descriptors:
        d = np.asarray(d)
        if len(d) > SAMPLE:
            d = d[np.sort(rng.choice(len(d), SAMPLE, replace=False))]
        subsets.append(root_sift(d.reshape(-1, 128)))
    pool = np.concatenate(subsets) if subsets else np.zeros((0, 128), np.float32)
    if len(pool) < WORDS:
        return np.zeros((len(descriptors), WORDS * 128), np.float32)
    if len(pool) > KMEANS_SAMPLE:
        pool = pool[rng.choice(len(pool), KMEANS_SAMPLE, replace=False)]
    centres = kmeans(pool, WORDS, seed=seed)
    return np.stack([vlad(d, centres) for d in subsets])


def candidates(g: np.ndarray, gap: int, per_image: int = PER_IMAGE) -> list:
    """Pairs ``(i, j)``, i < j, of the images (rows of ``g``, in capture
    order) most similar to each other among those more than ``gap`` apart:
    each image's ``per_image`` best, the union."""
    n = len(g)
    s = g @ g.T
    idx = np.arange(n)
    s[np.abs(idx[:, None] - idx[None, :]) <= gap] = -np.inf
    pairs = set()
    for i in range(n):
        order = np.argsort(-s[i])[:per_image]
        pairs.update((min(i, int(j)), max(i, int(j))) for j in order if np.isfinite(s[i, j]))
    return sorted(pairs)


def loop_pairs(database, names, gap: int, per_image: int = PER_IMAGE) -> list:
    """Loop candidate pairs ``(name_a, name_b)`` of the images ``names``
    (in capture order) from the SIFT descriptors in the COLMAP ``database``."""
    if len(names) <= gap + 1:
        return []
    return similar_pairs(database, names, gap, per_image)


def retrieval_pairs(database, names, per_image: int | None = None) -> list:
    """The pairs a photo set too large for exhaustive matching is matched on:
    each image's ``per_image`` most similar images by global descriptor, in
    any order (no gap: a photo folder's order says nothing), the union.
    At most ``n * per_image`` pairs against exhaustive matching's n (n - 1) / 2
    (``per_image`` default :data:`RETRIEVAL_PER_IMAGE`)."""
    return similar_pairs(database, names, 0, RETRIEVAL_PER_IMAGE if per_image is None else per_image)


def similar_pairs(database, names, gap: int, per_image: int) -> list:
    """Pairs ``(name_a, name_b)`` of the images ``names`` most similar by
    global descriptor (:func:`candidates`), from the SIFT descriptors in the
    COLMAP ``database``."""
    import pycolmap

    db = pycolmap.Database.open(str(database))
    try:
        ids = {im.name: im.image_id for im in db.read_all_images()}
        descriptors = [np.asarray(db.read_descriptors(ids[name]).data) for name in names]
    finally:
        db.close()
    g = global_descriptors(descriptors)
    return [(names[i], names[j]) for i, j in candidates(g, gap, per_image)]
