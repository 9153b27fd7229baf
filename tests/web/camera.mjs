// A three.js PerspectiveCamera placed as one of Spirula's cameras (tests/web/spark.html,
// tests/web/three_gltf.html). arg.camera: [16 numbers of the world-to-camera matrix (OpenCV:
// x right, y down, z forward; row-major), fx, fy, cx, cy, W, H]. THREE: the page's build.
export function spirulaCamera(THREE, arg) {
  const [fx, fy, cx, cy, W, H] = arg.camera.slice(16);
  // intrinsics: three.js's vertical fov from fy; the principal point through the view
  // offset, the window of a larger image centred on the optical axis, measured in units
  // of fy / fx pixels across (setViewOffset sets the aspect to fullWidth / fullHeight: so
  // the horizontal focal length is fx)
  const camera = new THREE.PerspectiveCamera((2 * Math.atan(H / (2 * fy)) * 180) / Math.PI, W / H, 0.01, 1000);
  const sx = fy / fx;
  camera.setViewOffset(W * sx, H, (W / 2 - cx) * sx, H / 2 - cy, W * sx, H);
  // extrinsics: a three.js camera looks down its -z with +y up, OpenCV's down +z with +y
  // down: its view matrix is diag(1, -1, -1) times Spirula's
  const view = new THREE.Matrix4().set(...arg.camera.slice(0, 16));
  view.premultiply(new THREE.Matrix4().makeScale(1, -1, -1));
  view.invert().decompose(camera.position, camera.quaternion, camera.scale);
  return camera;
}
