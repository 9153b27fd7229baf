"""Meshing a trained splat: depth fusion into a TSDF volume (tsdf, cameras, fuse),
then the surface (marching cubes, cleanup, colour, export). Modules are imported
where used; nothing here is imported eagerly."""
