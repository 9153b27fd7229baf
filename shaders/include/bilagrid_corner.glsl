// bilagrid_coords(...) and bilagrid_corner(...): where pixel i of the view samples its
// bilateral grid, and the node, weight and d weight / d gz of one of the 8 corners. A body
// include (dialect.glsl) of bilagrid_fwd and bilagrid_bwd: included after the push-constant
// block, having declared pc.width, pc.height, pc.grid_w, pc.grid_h, pc.grid_l.

// The lower node and fractions of pixel i with colour rgb; returns whether gz lies strictly
// inside the grid (the luminance's gradient passes)
FN bool bilagrid_coords(uint i, vec3 rgb, OUT(uint) x0, OUT(uint) y0, OUT(uint) z0, OUT(float) fx, OUT(float) fy,
                        OUT(float) fz) {
    float gx = (float(i % pc.width) + 0.5f) / float(pc.width) * float(pc.grid_w - 1u);
    float gy = (float(i / pc.width) + 0.5f) / float(pc.height) * float(pc.grid_h - 1u);
    float gz = (LUMA_R * rgb.x + LUMA_G * rgb.y + LUMA_B * rgb.z) * float(pc.grid_l - 1u);
    bilagrid_axis(gx, pc.grid_w, x0, fx);
    bilagrid_axis(gy, pc.grid_h, y0, fy);
    return bilagrid_axis(gz, pc.grid_l, z0, fz);
}

// Corner c (bit 0: x + 1, bit 1: y + 1, bit 2: z + 1) of grid g: its first coefficient's
// index, its trilinear weight w and dw/dgz
FN uint bilagrid_corner(uint g, uint c, uint x0, uint y0, uint z0, float fx, float fy, float fz, OUT(float) w,
                        OUT(float) dwz) {
    bool bx = (c & 1u) != 0u, by = (c & 2u) != 0u, bz = (c & 4u) != 0u;
    uint x = min(x0 + (bx ? 1u : 0u), pc.grid_w - 1u);
    uint y = min(y0 + (by ? 1u : 0u), pc.grid_h - 1u);
    uint z = min(z0 + (bz ? 1u : 0u), pc.grid_l - 1u);
    float wxy = (bx ? fx : 1.0f - fx) * (by ? fy : 1.0f - fy);
    w = wxy * (bz ? fz : 1.0f - fz);
    dwz = bz ? wxy : -wxy;
    return 12u * (((g * pc.grid_l + z) * pc.grid_h + y) * pc.grid_w + x);
}
