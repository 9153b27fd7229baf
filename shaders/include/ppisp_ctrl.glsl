// PPISP's controller (docs/design.md §2.8; reference spirula/reference/ppisp_ctrl.py): the
// layout of one camera's weights and of the activations, and what the three kernels
// ppisp_ctrl_fwd, ppisp_ctrl_mlp and ppisp_ctrl_bwd share. A body include (dialect.glsl):
// included after the push-constant block, having declared the uint arrays step and
// image_cameras and pc.view, pc.n_frames.
// One camera's weights, CTRL_SIZE floats: each layer [out, in] row-major, then its bias [out]
#define CTRL_W1 0u         // conv1 [16, 3], bias at 48
#define CTRL_W2 64u        // conv2 [32, 16], bias at 576
#define CTRL_W3 608u       // conv3 [64, 32], bias at 2656
#define CTRL_FC1 2720u     // fc1 [128, 1601], bias at 207648
#define CTRL_FC2 207776u   // fc2 [128, 128]
#define CTRL_FC3 224288u   // fc3 [128, 128]
#define CTRL_HEAD 240800u  // head [9, 128]: exposure, colour[8]
#define CTRL_SIZE 241961u
#define CTRL_CONV 2720u  // the convolutions' weights and biases: ppisp_ctrl_bwd's partial rows
#define CTRL_N_IN 1601u  // the pooled features [64, 5, 5] channel-major, then the prior exposure
#define CTRL_HIDDEN 128u
// the activations act [CTRL_ACT]: x0 [1601], h1, h2, h3 [128], out [9]
#define CTRL_X0 0u
#define CTRL_H1 1601u
#define CTRL_H2 1729u
#define CTRL_H3 1857u
#define CTRL_OUT 1985u
#define CTRL_ACT 1994u
// cells [CTRL_CELL_ROWS, n_cells] channel-major: feat (64), a2 (32), a1 (16)
#define CTRL_FEAT 0u
#define CTRL_A2 64u
#define CTRL_A1 96u
#define CTRL_CELL_ROWS 112u

// the view's frame and the camera whose network runs on it (camera 0 for a frame >= n_frames)
FN uint ctrl_frame() { return step[STEP_IMAGE_INDEX_WORD + pc.view]; }

FN uint ctrl_camera() {
    uint frame = ctrl_frame();
    return frame < pc.n_frames ? image_cameras[frame] : 0u;
}

// torch's adaptive average pool: bin i of n rows into 5 holds rows floor(i n / 5) to
// ceil((i + 1) n / 5) - 1
FN uint ctrl_bin_start(uint i, uint n) { return (i * n) / 5u; }

FN uint ctrl_bin_end(uint i, uint n) { return ((i + 1u) * n + 4u) / 5u; }
