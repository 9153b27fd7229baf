// ppisp_load(...): the view's frame and camera and their PPISP parameters, in the kernel's
// own buffers. A body include (dialect.glsl) of ppisp_fwd and ppisp_bwd: included after the
// push-constant block, having declared uint arrays step and image_cameras, the float array
// ppisp and pc.view, pc.n_frames, pc.n_cameras (the layout: reference ppisp_layout).
FN void ppisp_load(OUT(bool) frame_on, OUT(bool) camera_on, OUT(float) e, INOUT_ARRAY(float) h[9],
                   INOUT_ARRAY(float) v[15], INOUT_ARRAY(float) p[12]) {
    uint frame = step[STEP_IMAGE_INDEX_WORD + pc.view];
    frame_on = frame < pc.n_frames;
    uint camera = frame_on ? image_cameras[frame] : 0xFFFFFFFFu;
    camera_on = camera < pc.n_cameras;
    e = 0.0f;
    float c[8];
    UNROLL
    for (uint k = 0u; k < 8u; k++) {
        c[k] = frame_on ? ppisp[pc.n_frames + 8u * frame + k] : 0.0f;
    }
    if (frame_on) {
        e = ppisp[frame];
    }
    ppisp_homography(c, h);
    uint vig = 9u * pc.n_frames + 15u * camera, crf = 9u * pc.n_frames + 15u * pc.n_cameras + 12u * camera;
    UNROLL
    for (uint k = 0u; k < 15u; k++) {
        v[k] = camera_on ? ppisp[vig + k] : 0.0f;
    }
    UNROLL
    for (uint k = 0u; k < 12u; k++) {
        p[k] = camera_on ? ppisp[crf + k] : 0.0f;
    }
}
