// The camera record (docs/design.md §2.1): its floats and the lens models' ids, read by the
// host (spirula/contract/constants.py) and by every kernel that reads a camera.
#ifndef SPIRULA_CAMERA_GLSL
#define SPIRULA_CAMERA_GLSL

// cameras buffer: [C, 32] f32, one record per camera: the viewmat (4x4 row-major) whose
// last row (0 0 0 1, never read) holds the camera model (12, CAMERA_PINHOLE...) and its
// valid limit (13, LOAD_LENS), then fx, fy, cx, cy (16..19), then the lens's distortion
// k1..k6, p1, p2, s1..s4 (20..31; 0 where the model has none). spirula/render/raster_buffers.py
// pack_cameras writes it; the host reads CAMERA_FLOATS and the model ids from here.
#define CAMERA_FLOATS 32u
#define CAMERA_PINHOLE 0u
#define CAMERA_OPENCV 1u           // radial-tangential (+ rational k4..k6, thin prism s1..s4)
#define CAMERA_OPENCV_FISHEYE 2u   // Kannala-Brandt, equidistant: theta_d = theta (1 + k1 theta^2 + ...)
#define CAMERA_EQUIRECTANGULAR 3u  // longitude, latitude: u = fx lon + cx, v = fy lat + cy
#endif
