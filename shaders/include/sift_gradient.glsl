// sift_gradient(base, w, h, x, y): VLFeat's gradient of the scale-space level
// gauss[base .. base + w h) at pixel (x, y): central differences / 2 inside, one-sided
// (not halved) on the border; returns (magnitude, angle in [0, 2 pi)). A body include
// (dialect.glsl): a single-source kernel includes it after its push-constant block,
// having declared the float array gauss[] (reference spirula/reference/sift.py gradient).
FN vec2 sift_gradient(uint base, int w, int h, int x, int y) {
    uint row = base + uint(y) * uint(w);
    float gx, gy;
    if (x == 0) {
        gx = gauss[row + 1u] - gauss[row];
    } else if (x == w - 1) {
        gx = gauss[row + uint(x)] - gauss[row + uint(x) - 1u];
    } else {
        gx = 0.5f * (gauss[row + uint(x) + 1u] - gauss[row + uint(x) - 1u]);
    }
    if (y == 0) {
        gy = gauss[row + uint(w) + uint(x)] - gauss[row + uint(x)];
    } else if (y == h - 1) {
        gy = gauss[row + uint(x)] - gauss[row - uint(w) + uint(x)];
    } else {
        gy = 0.5f * (gauss[row + uint(w) + uint(x)] - gauss[row - uint(w) + uint(x)]);
    }
    float angle = atan(gy, gx);
    if (angle < 0.0f) {
        angle += 6.2831853f;
    }
    if (angle >= 6.2831853f) {
        angle = 0.0f;
    }
    return vec2(sqrt(gx * gx + gy * gy), angle);
}
