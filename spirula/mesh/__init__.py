"""``spirula mesh``: from trained splats to a textured triangle mesh (docs/mesh.md).

fuse.py / cameras.py render depth and fuse it into a TSDF volume on the GPU;
surface.py extracts and cleans the surface; colour.py colours or textures
it; export.py writes GLB / OBJ / PLY; pipeline.py runs the stages in order.
"""
