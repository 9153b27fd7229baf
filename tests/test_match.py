"""Descriptor matching on the GPU (spirula/features/match.py, shaders/match_*.comp): each
kernel against spirula/reference/match.py, on each backend (the ``backend`` fixture: the
CUDA run is the parity check of the generated entry points, skipped without CUDA).

Float error: ``match_top2`` is exact (integer sums below 2^24), so its rows, dots and
ties equal the reference's. ``match_mutual`` turns the dots into angles: the dot over
512^2 is exact in float32 (a dot is below 2^24, the scale a power of two), then acos
(within 1e-5 rad where the driver is LLVM's or CUDA's, see tests/test_sift.py) and one
product with max_ratio (u = 2^-24 relative). A decision can then differ from the float64
reference only where the reference's margin is below 2e-5 rad: such rows are counted
(there are none in these cases, but a driver may put one there) and left out."""

import numpy as np
import pytest
from kernel_cases import run_kernel

from spirula.features.match import DescriptorMatcher, match_features
from spirula.reference import match as ref
from spirula.runtime.sequence import Threads

MARGIN = 2e-5  # rad: acos's error (1e-5) twice


def descriptors(rng, n):
    """``n`` SIFT-like uint8 descriptors: non-negative unit vectors times 512, rounded, clamped."""
    v = rng.gamma(0.6, size=(n, 128)) ** 2
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return np.minimum(np.round(512 * v), 255).astype(np.uint8)


def pair(seed=0, n_a=300, n_common=200, n_extra=70):
    """Two sets sharing ``n_common`` rows (b's copies perturbed by noise of many levels, so
    some pass the ratio test and some fail it), shuffled, with extras, exact duplicates
    (ties) and an all-zero row."""
    rng = np.random.default_rng(seed)
    a = descriptors(rng, n_a)
    a[5] = a[4]  # a tie in b -> a
    a[7] = 0  # no best at all
    common = rng.choice(n_a, n_common, replace=False)
    noise = rng.uniform(0, 40, n_common)[:, None] * rng.standard_normal((n_common, 128))
    b_common = np.clip(np.round(a[common].astype(np.float64) + noise), 0, 255).astype(np.uint8)
    b = np.concatenate([b_common, descriptors(rng, n_extra)])
    b[-1] = b[-2]  # a tie in a -> b
    order = rng.permutation(len(b))
    return a, b[order]


def margin_rows(t):
    """Rows of a top2 table whose distance or ratio test is within MARGIN of its threshold."""
    d1, d2 = ref.distance(t[:, 1]), ref.distance(t[:, 2])
    return (np.abs(d1 - ref.MAX_DISTANCE) < MARGIN) | (np.abs(d1 - ref.MAX_RATIO * d2) < MARGIN)


def run_top2(backend, a, b, capacity, direction):
    words = np.zeros((2 * capacity, 32), np.uint32)
    words[: len(a)] = a.view(np.uint32)
    words[capacity : capacity + len(b)] = b.view(np.uint32)
    return run_kernel(
        backend,
        "match_top2",
        Threads(capacity),
        dict(descriptors=words, sizes=np.array([len(a), len(b)], np.uint32)),
        {"top2": ((capacity, 4), np.uint32)},
        push=dict(capacity=capacity, direction=direction),
    )["top2"]


def test_top2_is_exact(backend):
    a, b = pair()
    cap = 320
    for direction, (q, t) in enumerate(((a, b), (b, a))):
        got = run_top2(backend, a, b, cap, direction)[: len(q)]
        want = ref.top2(q, t)
        assert (got[:, :3].astype(np.int64) == want).all(), np.flatnonzero((got[:, :3] != want).any(1))


def test_top2_ties_and_empty_rows():
    a, b = pair()
    t = ref.top2(a, b)
    assert t[7, 0] == ref.NONE and t[7, 1] == 0 and t[7, 2] == 0
    back = ref.top2(b, a)
    assert (back[:, 0] != 5).all()  # a's row 5 duplicates row 4: the first row wins
    assert (back[back[:, 0] == 4, 1] == back[back[:, 0] == 4, 2]).all()  # and the second best is its twin


def test_mutual_against_the_reference(backend):
    a, b = pair(seed=1)
    cap = 320
    fwd, bwd = ref.top2(a, b), ref.top2(b, a)

    def words(t):
        w = np.zeros((cap, 4), np.uint32)
        w[: len(t), :3] = t
        return w

    got = run_kernel(
        backend,
        "match_mutual",
        Threads(cap),
        dict(forward=words(fwd), backward=words(bwd), sizes=np.array([len(a), len(b)], np.uint32)),
        {"matches": ((cap,), np.uint32)},
        push=dict(capacity=cap, max_ratio=ref.MAX_RATIO, max_distance=ref.MAX_DISTANCE),
    )["matches"][: len(a)]
    want = ref.mutual(fwd, bwd)
    unsure = margin_rows(fwd)
    unsure[fwd[:, 0] != ref.NONE] |= margin_rows(bwd)[fwd[fwd[:, 0] != ref.NONE, 0]]
    assert unsure.sum() <= 2
    keep = ~unsure
    assert (got[keep].astype(np.int64) == np.where(want < 0, ref.NONE, want)[keep]).all()
    assert 50 < (want >= 0).sum() < 190  # the cases cover both outcomes of the tests


def test_match_features_equals_the_reference(device):
    a, b = pair(seed=2)
    want = ref.match(a, b)
    got = match_features(device, a, b)
    assert got.dtype == np.int32 and got.shape[1] == 2
    assert {tuple(r) for r in got} == {tuple(r) for r in want}
    back = match_features(device, b, a)  # the cross check is symmetric
    assert {tuple(r) for r in back[:, ::-1]} == {tuple(r) for r in want}


def test_matcher_grows_past_its_capacity_and_handles_empty_sets(device):
    a, b = pair(seed=3, n_a=150, n_common=100, n_extra=20)
    m = DescriptorMatcher(device, capacity=64)
    try:
        got = m.match(a, b)
        assert m.capacity >= 150
        assert {tuple(r) for r in got} == {tuple(r) for r in ref.match(a, b)}
        small = m.match(a[:10], b[:3])  # smaller sets after a larger one: the sizes, not stale rows
        assert {tuple(r) for r in small} == {tuple(r) for r in ref.match(a[:10], b[:3])}
        assert m.match(a[:0], b).shape == (0, 2)
    finally:
        m.close()


def test_bad_descriptors_are_one_line(device):
    from spirula.errors import UsageError

    with pytest.raises(UsageError, match="uint8"):
        match_features(device, np.zeros((4, 128), np.float32), np.zeros((4, 128), np.uint8))
