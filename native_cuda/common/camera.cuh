// The camera record's layout and the lens models' ids: shaders/include/camera.glsl,
// compiled for CUDA (#defines only).
#ifndef SPIRULA_CAMERA_CUH
#define SPIRULA_CAMERA_CUH

#include "camera.glsl"

#endif
