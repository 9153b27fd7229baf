// three.js's own reader of KHR_gaussian_splatting (GLTFLoader with its
// GLTFGaussianSplatLoaderExtension, three 0.187.0) on a .glb Spirula wrote:
// prints, as JSON, what three.js builds to draw it: the splats' centres,
// covariances (xx, xy, xz, yy, yz, zz), RGBA bytes and packed SH bands.
// Usage: node read_gltf_three.mjs FILE.glb   (tests/test_export_web.py)
import { readFileSync } from 'node:fs';
import { GLTFLoader } from 'three/addons/loaders/GLTFLoader.js';
import { GLTFGaussianSplatLoaderExtension } from 'three/addons/loaders/GLTFGaussianSplatLoaderExtension.js';

const bytes = readFileSync(process.argv[2]);
const loader = new GLTFLoader();
loader.register((parser) => new GLTFGaussianSplatLoaderExtension(parser));
loader.parse(
    bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength),
    '',
    (gltf) => {
        const splats = [];
        gltf.scene.traverse((o) => {
            if (o.isGaussianSplat) splats.push(o);
        });
        if (splats.length !== 1) throw new Error('expected one GaussianSplat, found ' + splats.length);
        const g = splats[0].splatGeometry; // what its GPU buffers are made from
        const out = { type: splats[0].type, matrix: Array.from(splats[0].matrixWorld.elements) };
        for (const name of ['position', 'covariance', 'color', 'sphericalHarmonics1', 'sphericalHarmonics2',
                            'sphericalHarmonics3']) {
            const a = g.getAttribute(name);
            if (a) out[name] = { itemSize: a.itemSize, array: Array.from(a.array) };
        }
        process.stdout.write(JSON.stringify(out));
    },
    (err) => {
        console.error(String(err && err.stack ? err.stack : err));
        process.exit(1);
    },
);
